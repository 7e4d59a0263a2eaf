"""Bringing other tools' memories into a vault: markdown files as memories, a memory.jsonl as graph.

Every import is planned first (each source read and checked, nothing opened in the vault), then
applied under the token's folder lock. A markdown source becomes a memory at a name derived from
where it came from, so importing it again finds it there: the same bytes are left alone, other
bytes (the source or the memory changed since) are kept as they are and reported, never
overwritten. The graph is merged as ``memvault import`` merges: what is there already stays.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from memvault.disk.files import atomic_write
from memvault.disk.names import check_id
from memvault.disk.vault import Vault, folder_lock
from memvault.errors import MemvaultError
from memvault.records import sync
from memvault.records.graph import GraphRows, Imported, KnowledgeGraph
from memvault.records.sidecar import Sidecar, sidecar_path

MAX_NOTE_BYTES = 8 * 1024 * 1024


class ImportRefused(Exception):
    """A source that cannot be imported; the message names it and says why. Nothing was written."""


@dataclass(frozen=True, slots=True)
class Note:
    """One markdown file to become a memory: its name in the vault and its bytes."""

    id: str
    data: bytes
    source: str  # as the user named it, for messages


@dataclass(slots=True)
class NotesDone:
    added: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # a different file is at the name already


def read_note(path: Path, id: str, shown: str) -> Note:
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
    return Note(id, data, shown)


def plan_notes(folder: Path, notes: Iterable[Note]) -> NotesDone:
    """What importing ``notes`` would do, reading the vault only."""
    vault = Vault(folder)
    done = NotesDone()
    seen: set[str] = set()
    for note in notes:
        if note.id in seen:
            raise ImportRefused(f"{note.source} and another source would both become {note.id}")
        seen.add(note.id)
        try:
            path = vault.path_of(note.id)
            present = path.read_bytes() if path.is_file() else None
        except MemvaultError as exc:
            raise ImportRefused(f"{note.source} cannot be written as {note.id}: {exc}") from None
        except OSError:
            present = b""  # unreadable: treated as a different file, never overwritten
        if present is None:
            done.added.append(note.id)
        elif present == note.data:
            done.unchanged.append(note.id)
        else:
            done.kept.append(note.id)
    return done


def write_notes(folder: Path, notes: list[Note], progress: Callable[[int], None]) -> NotesDone:
    """Write the new notes under the folder lock; if one fails, those written by this call are
    taken away again, so a failed import leaves the vault as it was."""
    vault = Vault(folder)
    vault.check_folder()
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    with folder_lock(folder):
        done = plan_notes(folder, notes)
        new = set(done.added)
        try:
            for note in notes:
                if note.id in new:
                    path = vault.path_of(note.id)
                    atomic_write(path, note.data, overwrite=False)
                    written.append(path)
                progress(1)
        except (OSError, MemvaultError):
            for path in written:
                path.unlink(missing_ok=True)
            raise
    return done


# ---------------------------------------------------------------------------- the official server's graph


def read_memory_jsonl(path: Path, shown: str, max_chars: int) -> GraphRows:
    """The official MCP memory server's memory.jsonl, every line checked as the graph tools check
    their arguments; a bad line raises ImportRefused naming it."""

    def unopened() -> Sidecar:
        raise AssertionError("checking rows opens no sidecar")

    checker = KnowledgeGraph(unopened, max_chars=max_chars)
    rows = GraphRows([], [])
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise ImportRefused(f"cannot read {shown} ({exc.strerror or type(exc).__name__})") from None
    with handle:
        for number, raw in enumerate(handle, 1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except (ValueError, RecursionError):
                raise ImportRefused(f"{shown}, line {number}: not valid JSON") from None
            if not isinstance(row, dict) or row.get("type") not in ("entity", "relation"):
                raise ImportRefused(f"{shown}, line {number}: not an entity or relation of memory.jsonl")
            fields = {
                k: v for k, v in row.items() if k in ("name", "entityType", "observations", "from", "to")
            }
            if "relationType" in row:
                fields["relationType"] = row["relationType"]
            try:
                part = checker.parse_rows([{"kind": row["type"], **fields}])
            except MemvaultError as exc:
                raise ImportRefused(f"{shown}, line {number}: {exc}") from None
            rows.entities.extend(part.entities)
            rows.relations.extend(part.relations)
    return rows


def merge_graph(folder: Path, rows: GraphRows, *, dry_run: bool) -> Imported:
    """Merge rows into the token's graph in one transaction (a dry run rolls it back): entities and
    observations missing are added, relations whose two ends exist are added, the rest stays."""
    Vault(folder).check_folder()
    if dry_run and not sidecar_path(folder).is_file() and not sync.has_files(folder):
        # Nothing stored yet, and a dry run creates nothing: all of it would be new.
        names = {entity.name for entity, _, _ in rows.entities}
        facts = {(entity.name, o) for entity, _, _ in rows.entities for o in entity.observations}
        links = set(rows.relations)
        joined = {r for r in links if r.source in names and r.target in names}
        return Imported(len(names), len(facts), len(joined), len(links) - len(joined))
    with Sidecar.open(folder) as sidecar, folder_lock(folder):
        sync.sync(sidecar, folder)
        try:
            with sidecar.transaction() as conn:
                done = KnowledgeGraph.import_into(conn, rows)
                if dry_run:
                    raise _DryRun(done)
                if done.entities or done.observations or done.relations:
                    sync.GraphFile(folder).written(conn)
        except _DryRun as rolled_back:
            done = rolled_back.done
    return done


class _DryRun(Exception):
    """Raised inside a transaction to roll it back, carrying what it would have done."""

    def __init__(self, done: Imported) -> None:
        super().__init__("dry run")
        self.done = done
