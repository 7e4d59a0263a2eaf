"""The markdown files: parse and render memories, safe names, atomic writes, archive moves."""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import stat
import tempfile
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol, TypedDict

import numpy as np
import numpy.typing as npt
import yaml  # type: ignore[import-untyped]
from frontmatter.default_handlers import YAMLHandler

from memvault.columns import pack_strings, unpack_strings
from memvault.errors import Conflict, InvalidArgument, InvalidName, LinkedFolder, NotFound

PRIORITIES = ("P0", "P1", "P2")
NO_META: Mapping[str, Any] = MappingProxyType({})
DEFAULT_PRIORITY = "P2"
ARCHIVE = "archive"
STATE_DIR = ".memvault"
MAX_NAME_CHARS = 255
MAX_ID_CHARS = 1024
SLUG_MAX = 80
# A hand-placed file larger than this is indexed on its first bytes only and never rewritten: a
# 300 MB log saved as a memory must not take the server's memory with it at every start.
MAX_INDEXED_BYTES = 8 * 1024 * 1024
SLUG_MAX_BYTES = 240  # leaves room for "-NNNN.md" under the usual 255-byte file name limit

# Keys the server owns; every other frontmatter key is kept verbatim on rewrite.
OWNED_KEYS = (
    "priority",
    "createdAt",
    "updatedAt",
    "lastAccessedAt",
    "tags",
    "importance",
    "supersedes",
    "supersededBy",
    "literalMarkers",  # see seal_markers
)
LITERAL_MARKERS = "literalMarkers"

_YAML = YAMLHandler()  # python-frontmatter, on PyYAML's C loader when built with libyaml
_FM_OPEN = re.compile(r"\A---[ \t]*\r?\n")
_FM_CLOSE = re.compile(r"^---[ \t]*\r?$", re.MULTILINE)
_FOOTER = re.compile(r"\n+---[ \t]*\n+\*Created: [^*\n]*\*[ \t]*\n*\Z")
_FOOTER_CREATED = re.compile(r"^\*Created: ([^*\n]+)\*[ \t]*$", re.MULTILINE)
_HEADING = re.compile(r"\A[ \t]*\n*# (.+?)[ \t]*(?:\n|\Z)")
# Our temp files: hidden (editors and git leave dot-files alone, the watcher skips them) and
# recognisable, so one left by a crash (SIGKILL mid-write) can be removed when the token loads.
TEMP_PREFIX, TEMP_SUFFIX = ".memvault-", ".tmp"
_OUR_TEMP = re.compile(r"\.memvault-[a-z0-9_]{8}\.tmp|\.[a-z0-9_]{8}\.tmp")  # and before 0.2's prefix
TEMP_MIN_AGE_SECONDS = 60.0
_CONFLICT_START = re.compile(r"^<<<<<<<(?: |$)", re.MULTILINE)
_CONFLICT_END = re.compile(r"^>>>>>>>(?: |$)", re.MULTILINE)
_CONFLICT_SEPARATOR = re.compile(r"^=======[ \t]*$", re.MULTILINE)
_SLUG_DROP = re.compile(r"[\W_]+")
# An owned key at the start of a frontmatter line: plain or quoted, then ":" and a space or the end.
_FM_KEY = re.compile(r"""^(["']?)([A-Za-z_]\w*)\1[ \t]*:(?:[ \t]|$)""")


def utcnow() -> datetime:
    return datetime.now(UTC)


def format_time(at: datetime) -> str:
    """UTC ISO-8601 with milliseconds and Z, as mem-mcp writes them."""
    at = at.astimezone(UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, str) and value.strip():
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return None
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    if isinstance(value, date):  # a hand-written `createdAt: 2026-01-15` (YAML date): midnight UTC
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    return None


def content_hash(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def file_change(st: os.stat_result) -> int:
    """A file's ctime and inode in one number. With mtime and size it tells whether a file is
    unchanged since it was read: a rename-over or `cp -p`/`rsync -a` keeps mtime and size, but a
    new file has a new inode and any write or utime moves the ctime, which user space cannot set."""
    return ((st.st_ctime_ns * 1_000_003) ^ st.st_ino) & 0x7FFF_FFFF_FFFF_FFFF


class Stamp(TypedDict):
    mtime_ns: int
    size: int
    change: int


def file_stamp(st: os.stat_result) -> Stamp:
    """What a Memory records of its file's stat (parse_memory's keyword arguments)."""
    return {"mtime_ns": st.st_mtime_ns, "size": st.st_size, "change": file_change(st)}


class Stamped(Protocol):
    """Anything that recorded a file's stat: a Memory, the sidecar's FileStat."""

    @property
    def mtime_ns(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def change(self) -> int: ...


def unchanged(seen: Stamped, st: os.stat_result) -> bool:
    """True if the file is the one ``seen`` was read from, as far as its stat can tell."""
    return (seen.mtime_ns, seen.size, seen.change) == (st.st_mtime_ns, st.st_size, file_change(st))


@dataclass(frozen=True, slots=True)
class Memory:
    """One memory as read from its file. ``id`` is relative to the hot or archive folder."""

    id: str
    title: str
    content: str
    priority: str = DEFAULT_PRIORITY
    created_at: datetime | None = None
    updated_at: datetime | None = None
    last_accessed_at: datetime | None = None
    tags: tuple[str, ...] = ()
    importance: float | None = None
    archived: bool = False
    # The parsed frontmatter. Shared and empty unless asked for: the store keeps every memory in memory.
    meta: Mapping[str, Any] = field(default_factory=lambda: NO_META)
    has_frontmatter: bool = True
    problem: str | None = None  # broken frontmatter, unreadable bytes, ...: reported, never fatal
    conflicted: bool = False
    mtime_ns: int = 0
    size: int = 0
    change: int = 0  # ctime and inode as read (see file_change)
    hash: str = ""

    @property
    def path_id(self) -> str:
        """Id relative to the token folder (archived ones under ``archive/``)."""
        return f"{ARCHIVE}/{self.id}" if self.archived else self.id

    @property
    def writable(self) -> bool:
        return not self.conflicted and self.problem is None


# ---------------------------------------------------------------------------- parsing


@dataclass(frozen=True, slots=True)
class _Split:
    fm_text: str | None  # YAML between the fences, None without a frontmatter block
    body: str
    broken: str | None  # why the frontmatter could not be used


def _split(text: str) -> _Split:
    if not _FM_OPEN.match(text):
        return _Split(None, text, None)
    start = _FM_OPEN.match(text)
    assert start is not None
    close = _FM_CLOSE.search(text, start.end() - 1)
    # The closing fence must come after the opening line.
    while close is not None and close.start() < start.end():
        close = _FM_CLOSE.search(text, close.end())
    if close is None:
        return _Split(None, text, "frontmatter has no closing '---' line")
    fm_text = text[start.end() : close.start()]
    body = text[close.end() :]
    if body.startswith("\n"):
        body = body[1:]
    return _Split(fm_text, body, None)


# Fast path for the frontmatter memvault and mem-mcp write: one `key: value` per line with plain
# values. Anything it is not sure of (quotes, block lists, YAML 1.1 booleans, anchors, comments)
# goes to the YAML loader, so both paths give the same result. PyYAML is ~70% of a parse otherwise.
_FAST_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_-]*): ([^\n]*)")
_FAST_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?Z")
_FAST_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?")
_FAST_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_FAST_LIST = re.compile(r"\[([A-Za-z][A-Za-z0-9_-]*(?:, [A-Za-z][A-Za-z0-9_-]*)*)?\]")
_YAML_SPECIAL = frozenset("y n yes no on off true false null nan inf".split())


def _fast_value(text: str) -> tuple[bool, Any]:
    if _FAST_TIME.fullmatch(text):
        value = parse_time(text)  # None for a non-date like 2026-02-30: YAML decides (a problem)
        return value is not None, value
    if _FAST_NUMBER.fullmatch(text):
        return True, float(text) if "." in text else int(text)
    if _FAST_WORD.fullmatch(text) and text.lower() not in _YAML_SPECIAL:
        return True, text
    match = _FAST_LIST.fullmatch(text)
    if match:
        items = match.group(1).split(", ") if match.group(1) else []
        if any(item.lower() in _YAML_SPECIAL for item in items):
            return False, None
        return True, items
    return False, None


def _load_frontmatter(fm_text: str) -> Any:
    meta: dict[str, Any] = {}
    for line in fm_text.split("\n"):
        if not line:
            continue  # blank lines, including the one the closing fence leaves, mean nothing to YAML
        match = _FAST_LINE.fullmatch(line)
        if match is None or match.group(1) in meta or match.group(1).lower() in _YAML_SPECIAL:
            return _YAML.load(fm_text)  # `on:` / `null:` keys are a bool / None to YAML
        ok, value = _fast_value(match.group(2))
        if not ok:
            return _YAML.load(fm_text)
        meta[match.group(1)] = value
    return meta


def _normalise(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    return text.replace("\r\n", "\n").replace("\r", "\n")


def has_conflict_markers(text: str) -> bool:
    """Git's markers at line starts, in git's order: <<<<<<<, then =======, then >>>>>>>."""
    start = _CONFLICT_START.search(text)
    if start is None:
        return False
    separator = _CONFLICT_SEPARATOR.search(text, start.end())
    return separator is not None and _CONFLICT_END.search(text, separator.end()) is not None


def body_seal(body: str) -> str:
    """A short hash of a memory's body (after the frontmatter), line endings normalised."""
    digest = hashlib.blake2b(body.replace("\r\n", "\n").encode("utf-8"), digest_size=8).hexdigest()
    return f"h{digest}"  # a letter first: YAML must not read it as a number


def seal_markers(text: str) -> str:
    """``text`` as the server writes it: when the body itself holds lines that look like git
    conflict markers (an agent wrote about merges), frontmatter ``literalMarkers`` records the
    body's hash, so the file is not taken for a real conflict, on any machine. A merge that adds
    markers changes the body and the hash no longer matches; markers in the frontmatter always
    count. Without such lines the key is dropped."""
    split = _split(text.replace("\r\n", "\n").removeprefix("\ufeff"))
    if split.fm_text is None:
        return text
    wanted = body_seal(split.body) if has_conflict_markers(split.body) else None
    if wanted is None and LITERAL_MARKERS not in split.fm_text:
        return text
    return rewrite(text, {LITERAL_MARKERS: wanted}, title=None, content=None)


def _title_and_content(body: str, meta: Mapping[str, Any], stem: str) -> tuple[str, str]:
    content = _FOOTER.sub("", body.rstrip() + "\n").strip("\n")
    heading = _HEADING.match(content)
    meta_title = meta.get("title")
    if heading:
        content = content[heading.end() :].lstrip("\n")
    if isinstance(meta_title, str) and meta_title.strip():
        title = meta_title.strip()
    elif heading:
        title = heading.group(1).strip()
    else:
        title = stem
    return title, content.rstrip()


def parse_memory(
    raw: bytes,
    id: str,
    *,
    archived: bool = False,
    mtime_ns: int = 0,
    size: int | None = None,
    change: int = 0,
    keep_meta: bool = True,
) -> Memory:
    """Parse a memory file tolerantly: never raises for bad content, records the problem instead.

    ``keep_meta=False`` leaves ``meta`` empty: the store holds every memory in memory and does not
    need the frontmatter mapping, which would cost about as much as the rest of the Memory."""
    text = _normalise(raw)
    stem = id.rsplit("/", 1)[-1]
    stem = stem[:-3] if stem.lower().endswith(".md") else stem
    split = _split(text)
    meta: dict[str, Any] = {}
    problem = split.broken
    if split.fm_text is not None:
        try:
            loaded = _load_frontmatter(split.fm_text) if split.fm_text.strip() else {}
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 2})" if mark is not None else ""
            problem = f"invalid YAML in frontmatter{where}"
            loaded = None
        except Exception as exc:
            # PyYAML lets constructor errors escape as ValueError etc. (`createdAt: 2026-02-30`,
            # `!!int abc`, very deep nesting); a hand edit must never make the file unreadable.
            problem = f"invalid value in frontmatter ({type(exc).__name__})"
            loaded = None
        if loaded is None:
            loaded = {}
        if isinstance(loaded, dict):
            meta = {str(k): v for k, v in loaded.items()}
        elif problem is None:
            problem = "frontmatter is not a mapping of keys to values"
    conflicted = has_conflict_markers(text) and not (
        split.fm_text is not None
        and problem is None
        and not has_conflict_markers(split.fm_text)
        and str(meta.get(LITERAL_MARKERS)) == body_seal(split.body)
    )
    body = split.body if split.fm_text is not None and problem is None else text
    title, content = _title_and_content(body, meta, stem)
    if problem is None and size is not None and size > len(raw) >= MAX_INDEXED_BYTES:  # read was cut
        problem = (
            f"file is over {MAX_INDEXED_BYTES // 2**20} MiB; only its start is indexed, and the server "
            "will not rewrite it"
        )
    if problem is None:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            # Read with replacement characters, but never written back: that would destroy the bytes.
            problem = "file is not valid UTF-8; the server will not rewrite it"
    created = parse_time(meta.get("createdAt"))
    if created is None:
        footer = _FOOTER_CREATED.search(text)
        created = parse_time(footer.group(1)) if footer else None
    mtime = datetime.fromtimestamp(mtime_ns / 1e9, UTC) if mtime_ns else None
    created = created or mtime
    priority = str(meta.get("priority", DEFAULT_PRIORITY)).strip().upper()
    if priority not in PRIORITIES:
        priority = DEFAULT_PRIORITY
    importance = meta.get("importance")
    try:
        importance_value = None if importance is None else min(1.0, max(0.0, float(importance)))
    except (TypeError, ValueError):
        importance_value = None
    return Memory(
        id=id,
        title=title,
        content=content,
        priority=priority,
        created_at=created,
        updated_at=parse_time(meta.get("updatedAt")) or created,
        last_accessed_at=parse_time(meta.get("lastAccessedAt")),
        tags=_tags(meta.get("tags")),
        importance=importance_value,
        archived=archived,
        meta=meta if keep_meta else NO_META,
        has_frontmatter=split.fm_text is not None or split.broken is not None,
        problem=problem,
        conflicted=conflicted,
        mtime_ns=mtime_ns,
        size=len(raw) if size is None else size,
        change=change,
        hash=content_hash(raw),
    )


def _tags(value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        items: list[Any] = [part for part in re.split(r"[,\s]+", value) if part]
    elif isinstance(value, list | tuple):
        items = list(value)
    else:
        return ()
    return tuple(dict.fromkeys(str(item).strip() for item in items if str(item).strip()))


def clean_tags(tags: Sequence[str] | None) -> tuple[str, ...]:
    if not tags:
        return ()
    cleaned = _tags(list(tags))
    for tag in cleaned:
        if len(tag) > 100 or "\n" in tag:
            raise InvalidArgument(f"Tag {tag[:40]!r} is too long or has a line break; use short words.")
    return cleaned


# ---------------------------------------------------------------------------- rendering


def _yaml_scalar(value: Any) -> str:
    if isinstance(value, datetime):
        return format_time(value)
    dumped: str = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000)
    return dumped.strip().removesuffix("...").strip()


def _owned_lines(fields: Mapping[str, Any]) -> dict[str, str]:
    lines: dict[str, str] = {}
    for key in OWNED_KEYS:
        if key not in fields:
            continue
        value = fields[key]
        if value is None or (key == "tags" and not value):
            lines[key] = ""
        else:
            lines[key] = f"{key}: {_yaml_scalar(list(value) if key == 'tags' else value)}"
    return lines


def render_new(title: str, content: str, fields: Mapping[str, Any]) -> str:
    """A new file in mem-mcp's layout: frontmatter, '# Title', content, created footer."""
    lines = [line for line in _owned_lines(fields).values() if line]
    created = fields.get("createdAt")
    footer = f"\n\n---\n*Created: {_yaml_scalar(created)}*\n" if created else "\n"
    return "---\n" + "\n".join(lines) + "\n---\n" + f"# {title}\n\n{content.strip()}" + footer


def edit_frontmatter(fm_text: str, fields: Mapping[str, Any]) -> str:
    """Change only the given owned keys in a frontmatter block; every other byte stays as it was.

    A key's value may span continuation lines (a block list of tags); those go with it.
    ``None`` (or empty tags) removes the key.
    """
    wanted = _owned_lines(fields)
    out: list[str] = []
    lines = fm_text.split("\n") if fm_text else []
    done: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        match = _FM_KEY.match(line)
        key = match.group(2) if match else None
        if key in wanted:
            i += 1
            while i < len(lines) and (
                lines[i][:1] in (" ", "\t") or lines[i].startswith("- ") or lines[i].rstrip() == "-"
            ):
                i += 1
            if wanted[key] and key not in done:
                out.append(wanted[key])
            done.add(key)
            continue
        out.append(line)
        i += 1
    missing = [wanted[k] for k in wanted if k not in done and wanted[k]]
    if missing:
        # Insert before trailing blank lines so the block keeps its shape.
        tail = 0
        while tail < len(out) and out[len(out) - 1 - tail] == "":
            tail += 1
        out[len(out) - tail : len(out) - tail] = missing
    return "\n".join(out)


def rewrite(raw_text: str, fields: Mapping[str, Any], *, title: str | None, content: str | None) -> str:
    """New text of an existing file with some owned fields and optionally title/content replaced.

    Unknown keys, key order, line endings (CRLF kept) and untouched body bytes are preserved.
    """
    bom = "\ufeff" if raw_text.startswith("\ufeff") else ""
    text = raw_text[len(bom) :]
    crlf = "\r\n" in text
    if crlf:
        text = text.replace("\r\n", "\n")
    split = _split(text)
    if split.fm_text is None:
        # Legacy file: the whole original text becomes the body, under a new frontmatter block.
        fm_text, body = "", text
    else:
        fm_text, body = split.fm_text, split.body
    new_fm = edit_frontmatter(fm_text, fields)
    if title is not None or content is not None:
        body = _replace_body(body, title, content)
    out = "---\n" + (new_fm + "\n" if new_fm and not new_fm.endswith("\n") else new_fm) + "---\n" + body
    if crlf:
        out = out.replace("\n", "\r\n")
    return bom + out


def _replace_body(body: str, title: str | None, content: str | None) -> str:
    footer_match = _FOOTER.search(body.rstrip() + "\n")
    footer = footer_match.group(0) if footer_match else "\n"
    main = body.rstrip() + "\n"
    if footer_match:
        main = main[: footer_match.start()]
    heading = _HEADING.match(main)
    old_title = heading.group(1).strip() if heading else None
    old_content = main[heading.end() :].strip("\n") if heading else main.strip("\n")
    new_title = title if title is not None else old_title
    new_content = content.strip() if content is not None else old_content
    head = f"# {new_title}\n\n" if new_title else ""
    return head + new_content + (footer if footer.strip() else "\n")


# ---------------------------------------------------------------------------- names


def slugify(title: str) -> str:
    """Readable filename stem: NFKC, lowercase, letters and digits kept, other runs to '-'."""
    text = unicodedata.normalize("NFKC", title).lower()
    slug = _SLUG_DROP.sub("-", text).strip("-")
    slug = slug[:SLUG_MAX]
    while len(slug.encode("utf-8")) > SLUG_MAX_BYTES:  # 4-byte letters (CJK extension B) x 80
        slug = slug[:-1]
    slug = slug.rstrip("-")
    return slug or "memory"


def check_id(name: str) -> str:
    """Validate a memory name from a client and return its id (with '.md'). Raises InvalidName."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidName(str(name), "it is empty")
    value = name.strip()
    if "\x00" in value:
        raise InvalidName(value.replace("\x00", "\\0"), "it contains a NUL character")
    if "\\" in value:
        raise InvalidName(value, "backslashes are not allowed; use '/' between folders")
    if value.startswith("/") or re.match(r"^[A-Za-z]:", value) or value.startswith("~"):
        raise InvalidName(value, "it must be relative to your vault, not an absolute path")
    if len(value) > MAX_ID_CHARS:
        raise InvalidName(value, f"it is longer than {MAX_ID_CHARS} characters")
    if not value.lower().endswith(".md"):
        value += ".md"
    parts = value.split("/")
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidName(name, "empty, '.' or '..' path segments are not allowed")
        if part.startswith("."):
            raise InvalidName(name, "names starting with '.' are hidden files, not memories")
        if len(part.encode("utf-8")) > MAX_NAME_CHARS:
            raise InvalidName(name, f"a path segment is longer than {MAX_NAME_CHARS} bytes")
        if any(ord(ch) < 32 for ch in part):
            raise InvalidName(name, "control characters are not allowed")
    return value


def is_memory_path(rel_parts: Sequence[str]) -> bool:
    """A file (parts relative to the hot or archive folder) that counts as a memory."""
    return bool(rel_parts) and rel_parts[-1].endswith(".md") and not any(p.startswith(".") for p in rel_parts)


# ---------------------------------------------------------------------------- files


def _umask() -> int:
    current = os.umask(0o022)  # read it the only way there is, at import, before any thread runs
    os.umask(current)
    return current


_NEW_FILE_MODE = 0o666 & ~_umask()


def atomic_write(path: Path, data: bytes, *, overwrite: bool = True) -> None:
    """Temp file in the same folder, fsync, then replace (or link, to never overwrite), fsync folder.

    With ``overwrite=False`` an existing file raises FileExistsError and is left untouched.
    """
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = stat.S_IMODE(path.stat().st_mode) if overwrite else _NEW_FILE_MODE
    except FileNotFoundError:
        mode = _NEW_FILE_MODE
    fd, tmp = tempfile.mkstemp(dir=parent, prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX)
    try:
        os.fchmod(fd, mode)  # mkstemp makes 0600; keep the file's mode, or the umask's default
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if overwrite:
            os.replace(tmp, path)
        else:
            _link_no_overwrite(Path(tmp), path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(parent)


def _link_no_overwrite(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)  # atomic and refuses an existing name, even across processes
    except FileExistsError:
        raise
    except OSError:
        # File systems without hard links: we hold the token's file lock, so check-then-rename is safe.
        if dst.exists():
            raise FileExistsError(dst) from None
        os.replace(src, dst)


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def move_no_overwrite(src: Path, dst: Path) -> Path:
    """Move src to dst, adding -2, -3, ... to the stem if dst exists. Returns the final path."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    for candidate in _numbered(dst):
        try:
            _link_no_overwrite(src, candidate)
        except FileExistsError:
            continue
        with contextlib.suppress(FileNotFoundError):  # gone already if the fallback renamed it
            os.unlink(src)
        fsync_dir(candidate.parent)
        fsync_dir(src.parent)
        return candidate
    raise AssertionError("unreachable")  # pragma: no cover


def _numbered(path: Path) -> Iterator[Path]:
    yield path
    stem, suffix = path.name[: -len(path.suffix)] if path.suffix else path.name, path.suffix
    n = 2
    while True:
        yield path.with_name(f"{stem}-{n}{suffix}")
        n += 1


class Vault:
    """The files of one token. Synchronous: callers run it in a worker thread, under the token lock."""

    def __init__(self, token_dir: Path) -> None:
        self.dir = token_dir
        self.archive_dir = token_dir / ARCHIVE
        self.leftovers: list[Path] = []  # temp files of ours the last scan saw (see remove_leftovers)

    # ---- names and paths

    def area(self, archived: bool) -> Path:
        return self.archive_dir if archived else self.dir

    def path_of(self, id: str, *, archived: bool = False) -> Path:
        """The file for a validated id; refuses anything that resolves outside the token folder."""
        id = check_id(id)
        if not archived and id.split("/", 1)[0] == ARCHIVE:
            raise InvalidName(id, "that is an archived memory; call restore_memory to bring it back first")
        self.check_folder()
        path = self.area(archived) / id
        if self._through_link(path):
            raise InvalidName(id, "a folder on its way is a symbolic link, which memvault does not follow")
        root = self.dir.resolve()
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):
            raise InvalidName(id, "it cannot be resolved (a link loop?)") from None
        if not resolved.is_relative_to(root):
            raise InvalidName(id, "it points outside your vault")
        if not archived and resolved.is_relative_to(self.archive_dir.resolve()):
            raise InvalidName(id, "it points into the archive; call restore_memory first")
        return path

    def check_folder(self) -> None:
        """Refuse a token folder that is a link: to another token's folder or out of the root."""
        if self.dir.is_symlink():
            raise LinkedFolder()

    def _through_link(self, path: Path) -> bool:
        """True if a folder between the token folder and ``path`` is a link. Folder links are never
        followed: one may lead out of the vault, and `ln -s . a` would make every walk endless."""
        folder = path.parent
        while len(folder.parts) > len(self.dir.parts):
            if folder.is_symlink():
                return True
            folder = folder.parent
        return False

    def existing(self, id: str, *, archived: bool = False) -> Path:
        """The path of a memory that must exist; checked before anything creates the token folder."""
        path = self.path_of(id, archived=archived)
        if not path.is_file():
            raise NotFound(check_id(id), archived=archived)
        return path

    def scan(self) -> Iterator[tuple[str, bool, os.stat_result]]:
        """Every memory file: (id, archived, stat). Skips dot-files/folders, folder links (never followed:
        no loops, each file once) and file links that lead out of the token folder."""
        self.leftovers = []
        if self.dir.is_symlink() or not self.dir.is_dir():
            return
        root = self.dir.resolve()
        yield from self._walk(self.dir, (), False, root)

    def _walk(
        self, folder: Path, rel: tuple[str, ...], archived: bool, root: Path
    ) -> Iterator[tuple[str, bool, os.stat_result]]:
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for entry in entries:
            name = entry.name
            if name.startswith("."):
                if _OUR_TEMP.fullmatch(name):
                    self.leftovers.append(Path(entry.path))
                continue
            try:
                is_dir = entry.is_dir()
            except OSError:
                continue
            if is_dir:
                if entry.is_symlink():
                    continue
                if not rel and not archived and name == ARCHIVE:
                    yield from self._walk(Path(entry.path), (), True, root)
                else:
                    yield from self._walk(Path(entry.path), (*rel, name), archived, root)
            elif name.endswith(".md"):
                if entry.is_symlink() and not self._link_inside(Path(entry.path), root, archived):
                    continue
                try:
                    st = entry.stat()
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):  # not a FIFO, socket or device named *.md
                    yield "/".join((*rel, name)), archived, st

    def remove_leftovers(self, now: float) -> int:
        """Delete the temp files of ours the last scan saw that are older than a minute: left by a
        crash mid-write (they would sit in `git status`). Call under the token's file lock, which
        every writer of memory files holds, so no write in progress is touched."""
        removed = 0
        for path in self.leftovers:
            try:
                st = path.lstat()
                if stat.S_ISREG(st.st_mode) and now - st.st_mtime >= TEMP_MIN_AGE_SECONDS:
                    path.unlink()
                    removed += 1
            except OSError:
                continue
        self.leftovers = []
        return removed

    def _link_inside(self, link: Path, root: Path, archived: bool) -> bool:
        """A file link is followed only to a file inside the token folder: not into a dot-folder
        (``.memvault/``), and from the hot set not into ``archive/``."""
        try:
            target = link.resolve(strict=True)
        except (OSError, RuntimeError):
            return False  # dangling, or a loop of links
        if not target.is_relative_to(root):
            return False
        parts = target.relative_to(root).parts
        if any(part.startswith(".") for part in parts[:-1]):
            return False
        return archived or not parts or parts[0] != ARCHIVE

    # ---- reading

    def read(self, id: str, *, archived: bool = False) -> Memory:
        raw, st = self.read_raw(id, archived=archived)
        return parse_memory(raw, check_id(id), archived=archived, **file_stamp(st))

    def read_scanned(self, id: str, archived: bool) -> tuple[bytes, os.stat_result] | None:
        """Bytes and stat of a file ``scan`` listed (no name checks: the scan made them); None if
        it cannot be read now."""
        try:
            return read_regular(self.area(archived) / id, MAX_INDEXED_BYTES)
        except OSError:
            return None

    def read_raw(self, id: str, *, archived: bool = False) -> tuple[bytes, os.stat_result]:
        path = self.path_of(id, archived=archived)
        try:
            return read_regular(path)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, NotRegularFile):
            raise NotFound(check_id(id), archived=archived) from None

    # ---- writing (callers hold the token lock)

    def create(self, title: str, content: str, fields: Mapping[str, Any], *, folder: str = "") -> Memory:
        """Write a new memory named after its title; never overwrites (adds -2, -3, ...)."""
        stem = slugify(title)
        base = f"{folder.strip('/')}/{stem}.md" if folder else f"{stem}.md"
        data = seal_markers(render_new(title, content, fields)).encode("utf-8")
        target = self.dir / check_id(base)
        for candidate in _numbered(target):
            if candidate.is_symlink():
                continue  # a hand-made link holds this name (maybe pointing out of the vault): next one
            self.path_of(candidate.relative_to(self.dir).as_posix())  # still refuses folders leading out
            try:
                atomic_write(candidate, data, overwrite=False)
            except FileExistsError:
                continue
            id = candidate.relative_to(self.dir).as_posix()
            st = candidate.stat()
            return parse_memory(data, id, **file_stamp(st))
        raise AssertionError("unreachable")  # pragma: no cover

    def update(
        self,
        id: str,
        fields: Mapping[str, Any],
        *,
        title: str | None = None,
        content: str | None = None,
        archived: bool = False,
        expect_hash: str | None = None,
    ) -> Memory:
        """Rewrite owned fields (and title/content) in place, preserving everything else."""
        raw, _ = self.read_raw(id, archived=archived)
        id = check_id(id)
        if len(raw) > MAX_INDEXED_BYTES:
            raise InvalidArgument(
                f"'{id}' is over {MAX_INDEXED_BYTES // 2**20} MiB, so the server will not rewrite it. Ask "
                "the user to edit it by hand, or write a new memory."
            )
        current = parse_memory(raw, id, archived=archived)
        if current.conflicted:
            raise Conflict(id)
        if current.problem is not None:
            raise InvalidArgument(
                f"'{id}' has a problem ({current.problem}), so the server will not rewrite it. Ask the "
                "user to fix the file (the YAML between the '---' lines, or its encoding), or write a "
                "new memory."
            )
        if expect_hash is not None and current.hash != expect_hash:
            raise InvalidArgument(f"'{id}' changed on disk while being updated; read it again and retry.")
        text = rewrite(raw.decode("utf-8", errors="replace"), fields, title=title, content=content)
        data = seal_markers(text).encode("utf-8")
        path = self.path_of(id, archived=archived)
        atomic_write(path, data)
        st = path.stat()
        return parse_memory(data, id, archived=archived, **file_stamp(st))

    def delete(self, id: str, *, archived: bool = False) -> None:
        path = self.path_of(id, archived=archived)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise NotFound(check_id(id), archived=archived) from None
        fsync_dir(path.parent)
        self._prune_empty(path.parent)

    def check_archive(self) -> None:
        """Refuse to archive into an ``archive`` that is not a folder (a file of that name)."""
        if self.archive_dir.exists() and not self.archive_dir.is_dir():
            raise InvalidArgument(
                "'archive' in this vault is a file, not a folder, so nothing can be archived. Ask the user "
                "to rename that file; the memories stay where they are meanwhile."
            )

    def move(self, id: str, *, to_archive: bool) -> str:
        """Move a memory between hot and archive; returns the new id (suffixed on collision)."""
        if to_archive:
            self.check_archive()
        src = self.path_of(id, archived=not to_archive)
        if not src.is_file():
            raise NotFound(check_id(id), archived=not to_archive)
        dst = self.path_of(id, archived=to_archive)  # refuses an `archive` that is a link
        final = move_no_overwrite(src, dst)
        self._prune_empty(src.parent)
        return final.relative_to(self.area(to_archive)).as_posix()

    def _prune_empty(self, folder: Path) -> None:
        """Remove folders the server emptied, up to (not including) the hot or archive root."""
        stops = {self.dir.resolve(), self.archive_dir.resolve()}
        while folder.resolve() not in stops and folder.resolve().is_relative_to(self.dir.resolve()):
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent


# ---------------------------------------------------------------------------- tokens

TOKEN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class NotRegularFile(OSError):
    """A name ending in .md that is a FIFO, socket or device: never opened for reading."""


def read_regular(path: Path, limit: int | None = None) -> tuple[bytes, os.stat_result]:
    """A regular file's bytes (its first ``limit`` bytes, if given) and stat. Opened without
    blocking, so a FIFO named like a memory cannot hang a load; anything but a regular file
    raises NotRegularFile."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as handle:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"not a regular file: {path.name}")
        return (handle.read() if limit is None else handle.read(limit)), st


def valid_token(token: str) -> bool:
    """Tokens name a folder: a strict pattern, never only dots, checked before any file access."""
    return bool(TOKEN_RE.fullmatch(token)) and token.strip(".") != "" and token != STATE_DIR


# ---------------------------------------------------------------------------- parse cache


# Bump when parse_memory's result for the same bytes changes: older cache entries are parsed again.
PARSER_VERSION = 4


def memory_row(memory: Memory) -> list[Any]:
    """A parsed memory as a JSON-able row (times as POSIX seconds); meta is not kept."""

    def stamp(at: datetime | None) -> float | None:
        return at.timestamp() if at is not None else None

    m = memory
    return [
        m.id, m.title, m.content, m.priority,
        stamp(m.created_at), stamp(m.updated_at), stamp(m.last_accessed_at),
        list(m.tags), m.importance, m.has_frontmatter, m.problem, m.conflicted,
        m.mtime_ns, m.size, m.hash, m.change,
    ]  # fmt: skip


def memory_from_row(row: Sequence[Any], *, archived: bool) -> Memory:
    """Inverse of memory_row; raises ValueError or TypeError on a malformed row."""

    def when(stamp: float | None) -> datetime | None:
        return datetime.fromtimestamp(stamp, UTC) if stamp is not None else None

    (id, title, content, priority, created, updated, accessed, tags, importance, has_fm, problem, conflicted,
     mtime_ns, size, hash, change) = row  # fmt: skip
    return _stored(
        archived, id, title, content, priority, when(created), when(updated), when(accessed), tuple(tags),
        importance, has_fm, problem, conflicted, mtime_ns, size, hash, change,
    )  # fmt: skip


def _stored(
    archived: bool, id: str, title: str, content: str, priority: str, created: datetime | None,
    updated: datetime | None, accessed: datetime | None, tags: tuple[str, ...], importance: float | None,
    has_frontmatter: bool, problem: str | None, conflicted: bool, mtime_ns: int, size: int, hash: str,
    change: int,
) -> Memory:  # fmt: skip
    """A Memory from the stored form's fields (parse cache and snapshot), meta left out."""
    return Memory(
        id=id,
        title=title,
        content=content,
        priority=priority,
        created_at=created,
        updated_at=updated,
        last_accessed_at=accessed,
        tags=tags,
        importance=importance,
        archived=archived,
        meta=NO_META,
        has_frontmatter=has_frontmatter,
        problem=problem,
        conflicted=conflicted,
        mtime_ns=mtime_ns,
        size=size,
        change=change,
        hash=hash,
    )


def to_cache(memory: Memory) -> str:
    """The parsed form of a file as JSON, for the sidecar's file-stat cache."""
    return json.dumps([PARSER_VERSION, *memory_row(memory)], ensure_ascii=False)


def from_cache(
    data: str, id: str, *, archived: bool, mtime_ns: int, size: int, hash: str, change: int = 0
) -> Memory | None:
    """Inverse of to_cache for the file as it is now; None if unusable (then the file is parsed again)."""
    try:
        version, *row = json.loads(data)
        if version != PARSER_VERSION:
            return None
        memory = memory_from_row(row, archived=archived)
    except (ValueError, TypeError):
        return None
    return dataclasses.replace(memory, id=id, mtime_ns=mtime_ns, size=size, change=change, hash=hash)


_STRINGS = ("id", "title", "content", "priority", "hash", "problem", "tags")
_TIME_COLUMNS = ("created", "updated", "accessed")
_NUMBER_COLUMNS = ("importance", "mtime_ns", "size", "change", "flags")
_HAS_FRONTMATTER, _CONFLICTED, _HAS_PROBLEM = 1, 2, 4


def memories_to_columns(memories: Sequence[Memory]) -> dict[str, npt.NDArray[Any]]:
    """Memories as numpy columns (strings packed, times as POSIX seconds, NaN for none), for the
    index snapshot; meta is not kept. Inverse: memories_from_columns."""
    ms = memories
    out: dict[str, npt.NDArray[Any]] = {"version": np.array([PARSER_VERSION], dtype=np.int64)}
    strings = {
        "id": [m.id for m in ms],
        "title": [m.title for m in ms],
        "content": [m.content for m in ms],
        "priority": [m.priority for m in ms],
        "hash": [m.hash for m in ms],
        "problem": [m.problem or "" for m in ms],
        "tags": [json.dumps(m.tags, ensure_ascii=False) if m.tags else "" for m in ms],
    }
    for name, values in strings.items():
        out[f"{name}.blob"], out[f"{name}.len"] = pack_strings(values)
    for name, attr in zip(_TIME_COLUMNS, ("created_at", "updated_at", "last_accessed_at"), strict=True):
        stamps = (getattr(m, attr) for m in ms)
        out[name] = np.fromiter((t.timestamp() if t else np.nan for t in stamps), np.float64, len(ms))
    importance = (np.nan if m.importance is None else m.importance for m in ms)
    out["importance"] = np.fromiter(importance, np.float64, len(ms))
    out["mtime_ns"] = np.fromiter((m.mtime_ns for m in ms), np.int64, len(ms))
    out["size"] = np.fromiter((m.size for m in ms), np.int64, len(ms))
    out["change"] = np.fromiter((m.change for m in ms), np.int64, len(ms))
    out["flags"] = np.fromiter(
        (
            (_HAS_FRONTMATTER if m.has_frontmatter else 0)
            | (_CONFLICTED if m.conflicted else 0)
            | (_HAS_PROBLEM if m.problem is not None else 0)
            for m in ms
        ),
        np.uint8,
        len(ms),
    )
    return out


def memories_from_columns(columns: Mapping[str, npt.NDArray[Any]], *, archived: bool) -> list[Memory]:
    """Inverse of memories_to_columns. Raises ValueError (or KeyError) on data that do not fit,
    including data from another parser version."""
    if columns["version"].tolist() != [PARSER_VERSION]:
        raise ValueError("snapshot from another parser version")
    strings = {name: unpack_strings(columns[f"{name}.blob"], columns[f"{name}.len"]) for name in _STRINGS}
    n = len(strings["id"])
    numbers = {name: columns[name].tolist() for name in (*_TIME_COLUMNS, *_NUMBER_COLUMNS)}
    if any(len(values) != n for values in (*strings.values(), *numbers.values())):
        raise ValueError("snapshot columns differ in length")
    when = {
        name: [None if t != t else datetime.fromtimestamp(t, UTC) for t in numbers[name]]  # NaN: no time
        for name in _TIME_COLUMNS
    }
    rows = zip(
        strings["id"], strings["title"], strings["content"], strings["priority"], strings["hash"],
        strings["problem"], strings["tags"], when["created"], when["updated"], when["accessed"],
        numbers["importance"], numbers["mtime_ns"], numbers["size"], numbers["change"], numbers["flags"],
        strict=True,
    )  # fmt: skip
    return [
        _stored(
            archived,
            id,
            title,
            content,
            priority,
            created,
            updated,
            accessed,
            tuple(json.loads(tags)) if tags else (),
            None if importance != importance else importance,
            bool(flags & _HAS_FRONTMATTER),
            problem if flags & _HAS_PROBLEM else None,
            bool(flags & _CONFLICTED),
            mtime_ns,
            size,
            hash,
            change,
        )
        for id, title, content, priority, hash, problem, tags, created, updated, accessed, importance, mtime_ns, size, change, flags in rows  # noqa: E501
    ]
