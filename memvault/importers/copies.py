"""Markdown files as memories: the copy an import writes, where it came from, and how it is written.

Every import is planned first (each source read and checked, nothing opened in the vault), then
applied in batches, each under the token's folder lock, so an agent's write waits for one batch at
most. A markdown source becomes a memory at a name derived from where it came from; the copy's
frontmatter says where (``source``), what the source was (``sourceHash``, its sha256), when
(``importedAt``) and what the import wrote (``copyHash``). Importing again compares: a source
unchanged is left alone; a changed one is brought in by ``refresh`` if the copy is as the import
wrote it (a read's ``lastAccessedAt`` does not count); a copy changed since is kept and reported,
never overwritten. A failed or interrupted import takes back what it wrote.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

import yaml  # type: ignore[import-untyped]

from memvault.clock import format_time
from memvault.disk.files import TEMP_PREFIX, TEMP_SUFFIX, atomic_write, fsync_dir
from memvault.disk.markdown import edit_frontmatter, parse_memory
from memvault.disk.names import check_id
from memvault.disk.safe import LinkRefused, read_file
from memvault.disk.vault import Vault, folder_lock
from memvault.errors import MemvaultError
from memvault.importers.base import ImportRefused

MAX_NOTE_BYTES = 8 * 1024 * 1024
# An import holds the folder lock for one batch at a time: at most BATCH files or BATCH_SECONDS,
# then lets it go for PAUSE_SECONDS, longer than a waiting writer's poll of the lock (filelock
# tries every 50 ms and is not fair), so an agent's write waits for one batch, not the import.
BATCH = 500
BATCH_SECONDS = 0.5
PAUSE_SECONDS = 0.07

# Frontmatter keys the import writes. An imported memory is one with ``sourceHash`` and
# ``importedAt``; ``source`` is left out when the note has a ``source`` of its own (a web clipping's).
SOURCE, SOURCE_HASH, IMPORTED_AT, COPY_HASH = "source", "sourceHash", "importedAt", "copyHash"
# Lines that do not make a copy "changed since the import": those the server writes on a read
# (access write-back) or on any write, and the import's own time and hash of itself.
_NOT_AN_EDIT = frozenset({"lastAccessedAt", "updatedAt", "literalMarkers", IMPORTED_AT, COPY_HASH})
_KEY = re.compile(r"""^(["']?)([A-Za-z_][\w-]*)\1[ \t]*:(?:[ \t]|$)""")
_HEX = re.compile(r"[0-9a-f]{64}")
_CLOSE = re.compile(r"^---[ \t]*$", re.M)


@dataclass(frozen=True, slots=True)
class Note:
    """One markdown file to become a memory: its name in the vault, its bytes and where it came from."""

    id: str
    data: bytes
    source: str  # as the user named it, for messages
    origin: str = ""  # what the copy's `source` says: the kind and a path relative to what was imported
    source_hash: str = ""  # sha256 of the source's bytes as read


# What a re-import does with one note.
NEW, REFRESH, SKIP, KEPT, CHANGED, ARCHIVED = "new", "refresh", "skip", "kept", "changed", "archived"
LINKED = "linked"  # a link stands at the copy's name: never read or written through, left alone
PRIORITY = "priority"  # an untouched copy given the priority asked for (its source unchanged)
WRITES = (NEW, REFRESH, PRIORITY)


@dataclass(frozen=True, slots=True)
class Step:
    note: Note
    action: str
    copy: bytes = b""  # what the import writes (new, refresh)
    present: bytes | None = None  # the copy in the vault as planned against
    priority: str | None = None  # the priority asked for


@dataclass(slots=True)
class NotesDone:
    steps: list[Step] = field(default_factory=list)

    def named(self, action: str) -> list[str]:
        return [step.note.id for step in self.steps if step.action == action]

    @property
    def added(self) -> list[str]:
        return self.named(NEW)

    @property
    def unchanged(self) -> list[str]:
        return self.named(SKIP)

    @property
    def kept(self) -> list[str]:
        return self.named(KEPT)


def read_note(path: Path, id: str, shown: str, origin: str = "") -> Note:
    """A markdown source checked: a regular file, at most MAX_NOTE_BYTES, UTF-8 text, a valid name."""
    try:
        if path.is_symlink() or not path.is_file():
            raise ImportRefused(f"{shown} is not a regular file")
        if path.stat().st_size > MAX_NOTE_BYTES:
            raise ImportRefused(f"{shown} is larger than {MAX_NOTE_BYTES // (1024 * 1024)} MiB")
        data = path.read_bytes()
    except OSError as exc:
        raise ImportRefused(f"cannot read {shown} ({exc.strerror or type(exc).__name__})") from None
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ImportRefused(f"{shown} is not UTF-8 text (byte {exc.start})") from None
    if b"\x00" in data:
        raise ImportRefused(f"{shown} holds NUL bytes; it is not a text file")
    try:
        id = check_id(id)
    except MemvaultError as exc:
        raise ImportRefused(f"{shown} cannot be a memory: {exc}") from None
    return Note(id, data, shown, origin, hashlib.sha256(data).hexdigest())


# ---------------------------------------------------------------------------- the copy and its provenance


@dataclass(frozen=True, slots=True)
class _Parts:
    fm: list[str] | None  # the frontmatter's lines, None without a block
    body: str
    crlf: bool
    bom: str


def _parts(data: bytes) -> _Parts:
    """A file split as the server reads it: line ends normalised, the frontmatter's lines, the body."""
    text = data.decode("utf-8", errors="replace")
    bom = "\ufeff" if text.startswith("\ufeff") else ""
    text = text[len(bom) :]
    crlf = "\r\n" in text
    text = text.replace("\r\n", "\n")
    first = text.find("\n")
    if first < 0 or text[:first].rstrip(" \t") != "---":
        return _Parts(None, text, crlf, bom)
    close = _CLOSE.search(text, first + 1)
    if close is None:
        return _Parts(None, text, crlf, bom)  # no closing fence: not a frontmatter block
    fm = text[first + 1 : close.start()].split("\n")[:-1] if close.start() > first + 1 else []
    return _Parts(fm, text[close.end() + 1 :], crlf, bom)


def _without(lines: list[str], keys: Iterable[str]) -> list[str]:
    """Frontmatter lines without the top-level keys named (and their continuation lines)."""
    drop = frozenset(keys)
    out: list[str] = []
    dropping = False
    for line in lines:
        match = _KEY.match(line)
        if match is not None:
            dropping = match.group(2) in drop
        elif dropping and not (line[:1] in (" ", "\t") or line.startswith("- ") or line.rstrip() == "-"):
            dropping = False
        if not dropping:
            out.append(line)
    return out


def copy_digest(data: bytes) -> str:
    """The sha256 of a copy as a person sees it: the lines the server writes on its own (a read's
    ``lastAccessedAt``, ``updatedAt``) and the import's time and own hash left out, line ends and
    the fences as the server writes them."""
    parts = _parts(data)
    body = parts.body.lstrip("\n")  # the server's rewrite drops a blank line after the fence
    if parts.fm is None:
        text = body
    else:
        text = "---\n" + "".join(f"{line}\n" for line in _without(parts.fm, _NOT_AN_EDIT)) + "---\n"
        text += body
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class Provenance:
    source_hash: str | None
    copy_hash: str | None


def provenance(data: bytes) -> Provenance:
    """The sourceHash and copyHash an import wrote into a copy (None where missing or not a hash)."""
    parts = _parts(data)
    found: dict[str, str] = {}
    for line in parts.fm or ():
        match = _KEY.match(line)
        if match is not None and match.group(2) in (SOURCE_HASH, COPY_HASH):
            value = line[match.end() :].strip().strip("'\"")
            if _HEX.fullmatch(value):
                found[match.group(2)] = value
    return Provenance(found.get(SOURCE_HASH), found.get(COPY_HASH))


def _scalar(value: str) -> str:
    dumped: str = yaml.safe_dump(value, default_flow_style=True, allow_unicode=True, width=10_000)
    return dumped.strip().removesuffix("...").strip()


def copy_of(note: Note, now: datetime, priority: str | None = None) -> bytes:
    """The bytes the import writes for a note: the source's, with where it came from in the
    frontmatter (a block of its own when the source has none) and ``priority`` if given."""
    parts = _parts(note.data)
    fm = list(parts.fm or ())
    own_source = any((m := _KEY.match(line)) is not None and m.group(2) == SOURCE for line in fm)
    fm = _without(fm, (SOURCE_HASH, IMPORTED_AT, COPY_HASH) + (() if own_source else (SOURCE,)))
    if priority is not None:
        fm = edit_frontmatter("\n".join(fm), {"priority": priority}).split("\n")
    tail = 0
    while tail < len(fm) and fm[len(fm) - 1 - tail] == "":
        tail += 1
    ours = [] if own_source else [f"{SOURCE}: {_scalar(note.origin or note.id)}"]
    ours += [f"{SOURCE_HASH}: {note.source_hash}", f"{IMPORTED_AT}: {format_time(now)}"]
    at = len(fm) - tail
    fm[at:at] = ours

    def text(lines: list[str]) -> str:
        return "---\n" + "".join(f"{line}\n" for line in lines) + "---\n" + parts.body

    digest = copy_digest(text(fm).encode("utf-8"))
    fm.insert(at + len(ours), f"{COPY_HASH}: {digest}")
    out = text(fm)
    if parts.crlf:
        out = out.replace("\n", "\r\n")
    return (parts.bom + out).encode("utf-8")


# ---------------------------------------------------------------------------- planning and writing


def _decide(note: Note, present: bytes, refresh: bool, priority: str | None) -> str:
    """What a re-import does with a note whose name is taken by ``present``."""
    stored = provenance(present)
    digest = copy_digest(present)
    if stored.copy_hash is None:
        # GraphImported before copies said where they came from, or a file of someone else's: the same
        # text (but for a read's access time) is this source's; anything else is kept.
        return SKIP if digest == copy_digest(note.data) else KEPT
    if digest != stored.copy_hash:
        return KEPT  # changed since the import, by hand or by an agent
    if stored.source_hash == note.source_hash:
        if priority is not None:
            memory = parse_memory(present, note.id)
            if memory.problem is None and memory.priority != priority:
                return PRIORITY
        return SKIP
    return REFRESH if refresh else CHANGED


def plan_notes(
    folder: Path,
    notes: Iterable[Note],
    *,
    refresh: bool = False,
    now: datetime | None = None,
    priority: str | None = None,
) -> NotesDone:
    """What importing ``notes`` would do, reading the vault only: each note's step and the bytes it
    would write."""
    from memvault.clock import utcnow

    at = now or utcnow()
    vault = Vault(folder)
    done = NotesDone()
    seen: dict[str, str] = {}
    for note in notes:
        if note.id in seen:
            raise ImportRefused(f"{note.source} and {seen[note.id]} would both become {note.id}")
        seen[note.id] = note.source
        linked = False
        try:
            present = _present(vault, vault.path_of(note.id))
            archived = present is None and vault.path_of(note.id, archived=True).is_file()
        except MemvaultError as exc:
            raise ImportRefused(f"{note.source} cannot be written as {note.id}: {exc}") from None
        except LinkRefused:
            present, archived, linked = None, False, True
        except OSError:
            present, archived = b"", False  # unreadable: treated as a different file, never overwritten
        if linked:
            action = LINKED
        elif present is None:
            action = ARCHIVED if archived else NEW
        else:
            action = _decide(note, present, refresh, priority)
        copy = copy_of(note, at, priority) if action in WRITES else b""
        done.steps.append(Step(note, action, copy, present, priority))
    return done


def _present(vault: Vault, path: Path) -> bytes | None:
    """The file at ``path`` in the vault, opened as every vault read is (disk.safe: a link, be it
    the file or a folder on the way, raises LinkRefused and is never read through); None when
    there is none."""
    try:
        return read_file(path, vault.dir)[0]
    except (FileNotFoundError, NotADirectoryError):
        return None


@dataclass(frozen=True, slots=True)
class _Written:
    path: Path
    before: bytes | None  # None: the file is new
    data: bytes


def write_notes(
    folder: Path,
    done: NotesDone,
    progress: Callable[[int], None],
    *,
    batch: int = BATCH,
) -> NotesDone:
    """Write what ``done`` plans in batches, each under the folder lock, each step checked again
    under the lock (a copy edited meanwhile is kept). If anything fails or the run is interrupted
    (Ctrl-C), what this call wrote is taken back: new files removed, refreshed ones restored, except
    a file changed since by someone else (other than a read's access time), which is left as it is."""
    vault = Vault(folder)
    vault.check_folder()
    folder.mkdir(parents=True, exist_ok=True)
    steps = list(done.steps)
    writes = [i for i, step in enumerate(steps) if step.action in WRITES]
    progress(len(steps) - len(writes))
    written: list[_Written] = []
    at = 0
    try:
        while at < len(writes):
            if at:
                time.sleep(PAUSE_SECONDS)  # a writer waiting for the lock takes it now
            folders: set[Path] = set()
            with folder_lock(folder):
                until = time.monotonic() + BATCH_SECONDS
                end = min(at + batch, len(writes))
                while at < end and (time.monotonic() < until or not folders):
                    steps[writes[at]] = _apply(vault, steps[writes[at]], written, folders)
                    at += 1
                    progress(1)
                for parent in folders:  # each file's folder entry made durable before the lock goes
                    fsync_dir(parent)
    except BaseException:
        _take_back(vault, written)
        raise
    return NotesDone(steps)


def _apply(vault: Vault, step: Step, written: list[_Written], folders: set[Path]) -> Step:
    if step.action not in WRITES:
        return step
    path = vault.path_of(step.note.id)
    folders.add(path.parent)
    if step.action == NEW:
        # Noted before the write: an interrupt between the file's link and the note would leave it.
        written.append(_Written(path, None, step.copy))
        try:
            atomic_write(path, step.copy, overwrite=False, sync_folder=False)
        except FileExistsError:
            written.pop()
            return replace(step, action=KEPT)  # written by someone else since the plan
        return step
    try:
        present = _present(vault, path)
    except LinkRefused:
        return replace(step, action=LINKED)  # a link put there since the plan: left alone
    if present is None:
        return replace(step, action=SKIP)  # deleted or archived since the plan: left so
    if present != step.present and _decide(step.note, present, True, step.priority) != step.action:
        return replace(step, action=KEPT)
    written.append(_Written(path, present, step.copy))
    atomic_write(path, step.copy, sync_folder=False)
    return step


def _take_back(vault: Vault, written: Sequence[_Written]) -> None:
    """Undo ``written``, newest first, under the folder lock; a file changed since it was written
    (other than by a read's access time) is left alone."""
    if not written:
        return
    with folder_lock(vault.dir):
        for item in reversed(written):
            try:
                present = _present(vault, item.path)
                if present is None or copy_digest(present) != copy_digest(item.data):
                    continue
                if item.before is None:
                    item.path.unlink()
                    _prune(vault.dir, item.path.parent)
                else:
                    atomic_write(item.path, item.before)
            except OSError:
                continue
        # An interrupt inside a write (between the temp file's creation and its rename) leaves the
        # temp file: under the folder lock, which every writer holds, any temp file is abandoned.
        for parent in {item.path.parent for item in written}:
            for temp in parent.glob(f"{TEMP_PREFIX}*{TEMP_SUFFIX}"):
                with contextlib.suppress(OSError):
                    if temp.is_file() and not temp.is_symlink():
                        temp.unlink()


def _prune(top: Path, folder: Path) -> None:
    """Remove the folders an import created and emptied again, up to the token's folder."""
    while folder != top and folder.is_relative_to(top):
        try:
            folder.rmdir()
        except OSError:
            return
        folder = folder.parent


def hot_count(folder: Path) -> int:
    """How many hot memories the vault holds: what counts against the capacity."""
    return sum(1 for _, archived in Vault(folder).list_files() if not archived)
