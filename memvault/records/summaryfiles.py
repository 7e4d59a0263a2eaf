"""The session file format: a readable markdown file per session and its append-only history.

``sessions/<name>.md`` holds the latest summary under frontmatter (sessionId, title, tags, version,
createdAt, updatedAt); ``sessions/<name>.history.jsonl`` holds every version, one JSON line each:
an upsert stores the whole text (``summary``), an append only what it added (``append``), a
metadata change the new title and tags of an existing version (``meta``). So the history grows
with the text written, not with its square, and so does what is read from it: versions are held as
the file holds them (:class:`Stored`), and a whole text is built only for the version asked for.
The history is canonical; the markdown file is what a person reads, and an edit of its body is
taken as a new version. A session is what its own files name: a file whose lines or frontmatter
name another session (a copy, a planted file) is no part of that session, nor of any other.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]

from memvault.clock import format_time, require_time
from memvault.disk import safe
from memvault.disk.files import NotRegularFile, atomic_write, fsync_dir
from memvault.disk.markdown import clean_tags, has_conflict_markers, load_yaml
from memvault.disk.names import SESSIONS_DIR, slugify
from memvault.errors import InvalidArgument, LinkedFile

HISTORY_SUFFIX = ".history.jsonl"
APPEND_SEPARATOR = "\n\n"  # append_summary: latest text, a blank line, the new content
_PLAIN = re.compile(r"[a-z0-9][a-z0-9_-]{0,79}")
_HASHED = re.compile(r".*-[0-9a-f]{12}")
# Characters str.splitlines (and some editors) take for line ends; JSON allows them raw in strings.
_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}
_FM = re.compile(r"\A---[ \t]*\r?\n(.*?)^---[ \t]*\r?\n?", re.DOTALL | re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Version:
    """One saved version of a session summary."""

    session_id: str
    version: int
    ts: str  # UTC ISO-8601 with milliseconds and Z
    title: str | None
    tags: tuple[str, ...]
    summary: str


@dataclass(frozen=True, slots=True)
class Stored:
    """One version as the history file stores it: the whole text, or (``delta``) only what it
    appended to the previous version's text; ``chars`` is the length of its whole text."""

    session_id: str
    version: int
    ts: str
    title: str | None
    tags: tuple[str, ...]
    text: str
    delta: bool
    chars: int


@dataclass(frozen=True, slots=True)
class SessionOnDisk:
    """What a session's files hold: its versions as stored, oldest first, and whether git left
    markers in them."""

    session_id: str | None
    versions: list[Stored]
    conflicted: bool
    history_versions: int  # the last version the history file itself holds (0: none)
    latest: Version | None = None  # the newest version's whole text
    unrecorded: tuple[Stored, ...] = ()  # a person's edit of the markdown file the history lacks
    retitled: bool = False  # a person changed the latest version's title or tags in the markdown file
    stale: bool = False  # the markdown file shows an older version than the history holds
    foreign: str | None = None  # the session another session's file here names (ignored)


@dataclass(frozen=True, slots=True)
class Foreign:
    """A file in sessions/ that names another session than its own name says (a copy of its file)."""

    session_id: str


class TextBuilder:
    """A version's whole text from its stored rows, in linear time: each append is the text so
    far without its trailing whitespace, a blank line, then what was added."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.size = 0

    def apply(self, row: Stored) -> None:
        if not row.delta:
            self.parts, self.size = [row.text], len(row.text)
            return
        while self.parts and not self.parts[-1].rstrip():
            self.size -= len(self.parts.pop())
        if self.parts:
            last = self.parts[-1]
            trimmed = last.rstrip()
            self.size -= len(last) - len(trimmed)
            self.parts[-1] = trimmed
        self.parts += [APPEND_SEPARATOR, row.text]
        self.size += len(APPEND_SEPARATOR) + len(row.text)

    def text(self) -> str:
        joined = "".join(self.parts)
        self.parts = [joined] if joined else []
        return joined


def stored_as(new: Version, previous_text: str | None) -> Stored:
    """How a new version is stored: as what it appended when it is the previous text, a blank line
    and more (as append_summary makes it), else whole."""
    head = None if previous_text is None else previous_text.rstrip() + APPEND_SEPARATOR
    if head is not None and previous_text and new.summary.startswith(head):
        text, delta = new.summary[len(head) :], True
    else:
        text, delta = new.summary, False
    return Stored(new.session_id, new.version, new.ts, new.title, new.tags, text, delta, len(new.summary))


def whole(row: Stored, text: str) -> Version:
    return Version(row.session_id, row.version, row.ts, row.title, row.tags, text)


def json_line(row: Mapping[str, object]) -> str:
    """One JSON line: UTF-8 kept readable, every character a line splitter might break on escaped."""
    line = json.dumps(row, ensure_ascii=False)
    for char, escape in _LINE_BREAKS.items():
        line = line.replace(char, escape)
    return line


def file_stem(session_id: str) -> str:
    """The session's file name without suffix: the id itself when it is a plain lowercase name,
    else a slug of it and a hash of the exact id (no two ids share files, whatever the case rules)."""
    if _PLAIN.fullmatch(session_id) and not _HASHED.fullmatch(session_id):
        return session_id
    digest = hashlib.blake2b(session_id.encode("utf-8"), digest_size=6).hexdigest()
    return f"{slugify(session_id)[:60]}-{digest}"


def paths(folder: Path, session_id: str) -> tuple[Path, Path]:
    """(markdown file, history file) of a session in a token folder."""
    stem = file_stem(session_id)
    base = folder / SESSIONS_DIR
    return base / f"{stem}.md", base / f"{stem}{HISTORY_SUFFIX}"


def stem_of(name: str) -> str | None:
    """The session stem of a file name in sessions/, or None for a file that is not a session's."""
    if name.endswith(HISTORY_SUFFIX):
        return name[: -len(HISTORY_SUFFIX)] or None
    if name.endswith(".md") and not name.startswith("."):
        return name[:-3] or None
    return None


# ---------------------------------------------------------------------------- writing


def history_line(new: Stored, *, meta: bool = False) -> str:
    row: dict[str, Any] = {"session": new.session_id, "version": new.version}
    if not meta:
        row["ts"] = new.ts
    row["title"] = new.title
    row["tags"] = list(new.tags)
    if meta:
        row["meta"] = True
    elif new.delta:
        row["append"] = new.text
    else:
        row["summary"] = new.text
    return json_line(row)


def append_lines(path: Path, lines: Iterable[str]) -> None:
    """Append lines and fsync (the folder too when the file is new)."""
    data = "".join(line + "\n" for line in lines).encode("utf-8")
    if not data:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    new = not path.exists()
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # a link: never written through (it could lead out of the vault)
            raise LinkedFile(f"{SESSIONS_DIR}/{path.name}") from None
        raise
    try:
        if os.fstat(fd).st_size and not _ends_with_newline(fd):
            data = b"\n" + data  # a hand edit left the last line open
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    if new:
        fsync_dir(path.parent)


def _ends_with_newline(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return os.pread(fd, 1, size - 1) == b"\n"


def render_markdown(latest: Version, created: str) -> bytes:
    meta: dict[str, Any] = {"sessionId": latest.session_id}
    if latest.title:
        meta["title"] = latest.title
    meta["tags"] = list(latest.tags)
    meta["version"] = latest.version
    meta["createdAt"] = created
    meta["updatedAt"] = latest.ts
    head = yaml.safe_dump(meta, allow_unicode=True, sort_keys=False, width=10_000)
    return f"---\n{head}---\n\n{latest.summary.rstrip()}\n".encode()


def write_markdown(path: Path, latest: Version, created: str) -> None:
    atomic_write(path, render_markdown(latest, created))


# ---------------------------------------------------------------------------- reading


def token_folder(path: Path) -> Path:
    """The token folder of a session file (``<token>/sessions/<name>``) or of ``graph.jsonl``."""
    return path.parent.parent if path.parent.name == SESSIONS_DIR else path.parent


def read_text(path: Path) -> str:
    """A session or graph file's text; "" when it is missing, not a regular file, or a link, or a
    folder on its way is (the token folder, ``sessions/``): never followed, it could lead out of the
    vault (memvault.disk.safe)."""
    try:
        raw, _ = safe.read_file(path, token_folder(path))
    except (OSError, NotRegularFile):
        return ""
    return raw.decode("utf-8", errors="replace")


def check_folder(folder: Path) -> None:
    """Refuse to write through a ``sessions`` folder that is a link (it could lead out of the vault)
    or into one that is not a folder at all."""
    path = folder / SESSIONS_DIR
    if os.path.islink(path):
        raise InvalidArgument(
            f"'{SESSIONS_DIR}/' in this vault is a symbolic link, which memvault does not write through; "
            "ask the user to replace it with a real folder."
        )
    if os.path.lexists(path) and not os.path.isdir(path):
        raise InvalidArgument(
            f"'{SESSIONS_DIR}' in this vault is a file, not a folder, so no session can be saved; "
            "ask the user to rename or move that file (memvault keeps session summaries in "
            f"'{SESSIONS_DIR}/')."
        )


def read(md: Path, history: Path, *, mtime_ts: str, stem: str | None = None) -> SessionOnDisk:
    """A session's versions from its files. Lines that are not versions (git's markers, a damaged
    line) mark the session conflicted: it is served as far as it reads, and not written. With
    ``stem`` (the files' name), lines and frontmatter naming a session whose files have another
    name are left out: a copy of another session's file is no part of it."""
    versions: dict[int, Stored] = {}
    conflicted = False
    session_id: str | None = None
    foreign: str | None = None
    builder = TextBuilder()
    for line in read_text(history).split("\n"):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            sid = row["session"] if isinstance(row, dict) else None
            if isinstance(sid, str) and stem is not None and file_stem(sid) != stem:
                foreign = foreign or sid
                continue
            version = _apply(row, versions)
        except (ValueError, TypeError, KeyError, OverflowError, RecursionError, InvalidArgument):
            conflicted = True
            continue
        session_id = session_id or version.session_id
    history_versions = max(versions, default=0)
    ordered = [versions[n] for n in sorted(versions)]
    for row in ordered:
        builder.apply(row)
    latest = whole(ordered[-1], builder.text()) if ordered else None
    hand = _from_markdown(md, latest, session_id, mtime_ts, stem)
    unrecorded: tuple[Stored, ...] = ()
    retitled = stale = False
    if hand == "conflicted":
        conflicted = True
    elif hand == "stale":
        stale = True
    elif isinstance(hand, Foreign):
        foreign = foreign or hand.session_id
    elif hand is not None:
        session_id = session_id or hand.session_id
        if latest is not None and hand.version == latest.version:
            ordered[-1] = replace(ordered[-1], title=hand.title, tags=hand.tags)  # edited by hand
            retitled = True
        else:
            added = stored_as(hand, latest.summary if latest else None)
            ordered.append(added)
            unrecorded = (added,)
        latest = hand
    return SessionOnDisk(
        session_id, ordered, conflicted, history_versions, latest, unrecorded, retitled, stale, foreign
    )


def _apply(row: Any, versions: dict[int, Stored]) -> Stored:
    if not isinstance(row, dict):
        raise TypeError("not an object")
    session_id = row["session"]
    number = row["version"]
    if not isinstance(session_id, str) or not session_id.strip():
        raise TypeError("session")
    if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number < 2**62:
        raise TypeError("version")
    title = row.get("title")
    if title is not None and not isinstance(title, str):
        raise TypeError("title")
    tags = row.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise TypeError("tags")
    if row.get("meta"):
        old = versions[number]
        versions[number] = replace(old, title=title or None, tags=clean_tags(tags))
        return versions[number]
    ts = format_time(require_time(row["ts"]))
    if "append" in row:
        previous = versions[number - 1]
        text, delta = row["append"], True
        if not isinstance(text, str):
            raise TypeError("append")
        chars = _appended_length(previous, text, versions)
    else:
        text, delta = row["summary"], False
        if not isinstance(text, str):
            raise TypeError("summary")
        chars = len(text)
    versions[number] = Stored(session_id, number, ts, title or None, clean_tags(tags), text, delta, chars)
    return versions[number]


def _appended_length(previous: Stored, text: str, versions: Mapping[int, Stored]) -> int:
    """The whole length of ``previous``'s text + a blank line + ``text``, from the stored rows only:
    the previous text's trailing whitespace is found by walking back over appends that are blank."""
    trailing, row = 0, previous
    while True:
        stripped = row.text.rstrip()
        if stripped or not row.delta:
            trailing += len(row.text) - len(stripped)
            break
        # A blank append: it and its separator go, and the text before it loses its own trailing space.
        trailing += len(row.text) + len(APPEND_SEPARATOR)
        row = versions[row.version - 1]
    return previous.chars - min(trailing, previous.chars) + len(APPEND_SEPARATOR) + len(text)


def _from_markdown(
    md: Path, latest: Version | None, session_id: str | None, mtime_ts: str, stem: str | None
) -> Any:
    """The version a person's edit of the markdown file makes: None when it holds nothing new,
    "conflicted" when git left markers in it (and it is not simply our rendering of such a text),
    "stale" when it shows a version older than the history's latest (a crash between the two
    writes, not an edit), Foreign when it names a session whose files have another name."""
    text = read_text(md)
    if not text:
        return None
    match = _FM.match(text)
    meta: Any = None
    if match is not None:
        try:
            meta = load_yaml(match.group(1))  # no aliases: they could stand for millions of values
        except (yaml.YAMLError, ValueError, TypeError, RecursionError):
            meta = None
    body = (text[match.end() :] if match is not None else text).strip()
    if not isinstance(meta, dict):
        if has_conflict_markers(text):
            return "conflicted"
        meta = {}
    owner = meta.get("sessionId")
    if isinstance(owner, str) and owner.strip() and stem is not None and file_stem(owner) != stem:
        return Foreign(owner)
    if latest is not None and body == latest.summary.strip():
        title, tags = _title_and_tags(meta, latest)
        if (title, tags) == (latest.title, latest.tags):
            return None
        return replace(latest, title=title, tags=tags)
    if has_conflict_markers(text):
        return "conflicted"
    if not body:
        return None
    shown = meta.get("version")
    if (
        latest is not None
        and isinstance(shown, int)
        and not isinstance(shown, bool)
        and shown < latest.version
    ):
        return "stale"
    sid = owner if isinstance(owner, str) and owner.strip() else session_id
    if sid is None or (session_id is not None and sid != session_id):
        return None
    title, tags = _title_and_tags(meta, latest)
    number = (latest.version + 1) if latest is not None else 1
    return Version(sid, number, max(mtime_ts, latest.ts) if latest else mtime_ts, title, tags, body)


def _title_and_tags(meta: Mapping[str, Any], latest: Version | None) -> tuple[str | None, tuple[str, ...]]:
    title = meta.get("title", latest.title if latest else None)
    tags = meta.get("tags", list(latest.tags) if latest else [])
    title = title.strip() or None if isinstance(title, str) else (latest.title if latest else None)
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        tags = list(latest.tags) if latest else []
    return title, clean_tags(tags)


def last_history_version(history: Path) -> int:
    """The version of the history file's last line (0 if none): read from the end, not whole."""
    try:
        with open(safe.open_file(history, token_folder(history)), "rb") as handle:
            handle.seek(0, os.SEEK_END)
            end = handle.tell()
            chunk = 4096
            while True:
                start = max(0, end - chunk)
                handle.seek(start)
                data = handle.read(end - start)
                lines = [line for line in data.split(b"\n") if line.strip()]
                if len(lines) >= 2 or start == 0:
                    break
                chunk *= 4
    except (FileNotFoundError, NotADirectoryError, safe.LinkRefused):
        return 0
    for line in reversed(lines):
        try:
            number = json.loads(line)["version"]
        except (ValueError, TypeError, KeyError, RecursionError):
            continue
        if isinstance(number, int) and not isinstance(number, bool):
            return number
    return 0
