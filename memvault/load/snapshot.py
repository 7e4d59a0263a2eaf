"""Derived state and its codecs: parse-cache rows, snapshot columns, the snapshot file saved and loaded.

A Memory is stored as a parse-cache row (JSON, in the sidecar) and as snapshot columns (numpy, in
.memvault/snapshot.npz beside the index).
Every encoding of derived state lives here, with its version: a change to one bumps its version,
and data of another version is read from the files again, never misread.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import struct
import tempfile
import zipfile
import zlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import numpy.typing as npt

from memvault import heap
from memvault.disk.files import TEMP_PREFIX, TEMP_SUFFIX, file_stamp
from memvault.disk.markdown import NO_META, PRIORITIES, Fields, Memory, make_memory
from memvault.disk.names import SNAPSHOT_FILE, STATE_DIR
from memvault.search.columns import StringColumn, pack_strings, prefixed, unpack_strings
from memvault.search.indexarrays import IndexSnapshot, add_postings

if TYPE_CHECKING:
    from memvault.records.sidecar import FileStat
    from memvault.search.area import Area

log = logging.getLogger("memvault")

# 3: a file's ctime and inode (Memory.change) beside mtime and size; 4: priority codes; 5: terms of
# at most 64 characters, umlauts as ae/oe/ue (search.text); 6: each index's postings (a restart
# sorted them out of the term lists). A version 5 file still loads, its postings sorted as before.
VERSION = 6
READABLE = (5, 6)
MIN_MEMORIES = 500  # smaller vaults load from their files fast enough (and keep the parse cache)

# Bump when parse_memory's result for the same bytes changes: older cache entries are parsed again.
PARSER_VERSION = 5


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
    return make_memory(
        id, title, content, priority, when(created), when(updated), when(accessed), tuple(tags), importance,
        archived, NO_META, has_fm, problem, conflicted, mtime_ns, size, change, hash,
    )  # fmt: skip


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


_LAZY_STRINGS = ("title", "content", "hash")  # sliced row by row as memories are built
_PRIORITY_CODES = {p: code for code, p in enumerate(PRIORITIES)}  # a column of uint8
_TIME_COLUMNS = ("created", "updated", "accessed")
_NUMBER_COLUMNS = ("importance", "mtime_ns", "size", "change", "flags")
_HAS_FRONTMATTER, _CONFLICTED, _HAS_PROBLEM = 1, 2, 4


def memories_to_columns(memories: Sequence[Memory]) -> dict[str, npt.NDArray[Any]]:
    """Memories as numpy columns (strings packed, times as POSIX seconds, NaN for none), for the
    index snapshot; meta is not kept. Inverse: memories_from_columns."""
    ms = memories
    return _columns(
        [m.id for m in ms], [m.title for m in ms], [m.content for m in ms], [m.priority for m in ms],
        [m.created_at for m in ms], [m.updated_at for m in ms], [m.last_accessed_at for m in ms],
        [m.tags for m in ms], [m.importance for m in ms], [m.has_frontmatter for m in ms],
        [m.problem for m in ms], [m.conflicted for m in ms], [m.mtime_ns for m in ms], [m.size for m in ms],
        [m.change for m in ms], [m.hash for m in ms],
    )  # fmt: skip


def fields_to_columns(rows: Sequence[Fields]) -> dict[str, npt.NDArray[Any]]:
    """memories_to_columns of the Memories these fields make (memvault.disk.markdown.memory_fields),
    without making them: a loader helper's 50,000 parses go straight into columns."""
    if not rows:
        return memories_to_columns(())
    (id, title, content, priority, created, updated, accessed, tags, importance, _, _, has_frontmatter,
     problem, conflicted, mtime_ns, size, change, hash) = zip(*rows, strict=True)  # fmt: skip
    return _columns(
        id, title, content, priority, created, updated, accessed, tags, importance, has_frontmatter, problem,
        conflicted, mtime_ns, size, change, hash,
    )  # fmt: skip


def _columns(
    id: Sequence[str], title: Sequence[str], content: Sequence[str], priority: Sequence[str],
    created: Sequence[datetime | None], updated: Sequence[datetime | None],
    accessed: Sequence[datetime | None], tags: Sequence[tuple[str, ...]], importance: Sequence[float | None],
    has_frontmatter: Sequence[bool], problem: Sequence[str | None], conflicted: Sequence[bool],
    mtime_ns: Sequence[int], size: Sequence[int], change: Sequence[int], hash: Sequence[str],
) -> dict[str, npt.NDArray[Any]]:  # fmt: skip
    n = len(id)
    out: dict[str, npt.NDArray[Any]] = {"version": np.array([PARSER_VERSION], dtype=np.int64)}
    strings = {
        "id": id,
        "title": title,
        "content": content,
        "hash": hash,
        "problem": [p or "" for p in problem],
        "tags": [json.dumps(t, ensure_ascii=False) if t else "" for t in tags],
    }
    for name, values in strings.items():
        out[f"{name}.blob"], out[f"{name}.len"] = pack_strings(values)
    out["priority"] = np.fromiter(map(_PRIORITY_CODES.__getitem__, priority), np.uint8, n)
    for name, stamps in zip(_TIME_COLUMNS, (created, updated, accessed), strict=True):
        out[name] = np.fromiter((t.timestamp() if t else np.nan for t in stamps), np.float64, n)
    out["importance"] = np.fromiter((np.nan if i is None else i for i in importance), np.float64, n)
    out["mtime_ns"] = np.fromiter(mtime_ns, np.int64, n)
    out["size"] = np.fromiter(size, np.int64, n)
    out["change"] = np.fromiter(change, np.int64, n)
    out["flags"] = np.fromiter(
        (
            (_HAS_FRONTMATTER if f else 0)
            | (_CONFLICTED if c else 0)
            | (_HAS_PROBLEM if p is not None else 0)
            for f, c, p in zip(has_frontmatter, conflicted, problem, strict=True)
        ),
        np.uint8,
        n,
    )
    return out


class StoredRows:
    """A snapshot's memory columns, each row built into a Memory on demand (``build``;
    memvault.search.area.Memories asks): the strings stay in one decoded text per column and the
    numbers in their arrays until then, so a restart's first answer waits for neither.
    Everything a build could fail on is checked here: the constructor raises ValueError (or
    KeyError) on data that do not fit, including data from another parser version, and ``build``
    never fails."""

    def __init__(
        self, columns: Mapping[str, npt.NDArray[Any]], *, archived: bool, ids: list[str] | None = None
    ) -> None:
        if columns["version"].tolist() != [PARSER_VERSION]:
            raise ValueError("snapshot from another parser version")
        self.ids: list[str] = (
            ids if ids is not None else unpack_strings(columns["id.blob"], columns["id.len"])
        )
        n = len(self.ids)
        self._titles, self._contents, self._hashes = (
            StringColumn(columns[f"{name}.blob"], columns[f"{name}.len"]) for name in _LAZY_STRINGS
        )
        # Mostly empty: decoded at once (only the filled rows are sliced).
        problems = unpack_strings(columns["problem.blob"], columns["problem.len"])
        tag_texts = unpack_strings(columns["tags.blob"], columns["tags.len"])
        self._numbers = [np.asarray(columns[name]) for name in (*_TIME_COLUMNS, *_NUMBER_COLUMNS)]
        self._codes = np.asarray(columns["priority"])
        sized = (self._titles, self._contents, self._hashes, problems, tag_texts, *self._numbers, self._codes)
        if any(len(values) != n for values in sized) or any(
            a.ndim != 1 for a in (*self._numbers, self._codes)
        ):
            raise ValueError("snapshot columns differ in length")
        if self._codes.dtype.kind not in "iu" or self._numbers[-1].dtype.kind not in "iu":  # codes, flags
            raise ValueError("snapshot holds codes that are not integers")
        if n and not 0 <= int(self._codes.min()) <= int(self._codes.max()) < len(PRIORITIES):
            raise ValueError("snapshot holds an unknown priority")
        for name in _TIME_COLUMNS:  # a time out of datetime's range would fail its build
            stamps = np.asarray(columns[name], dtype=np.float64)
            if n and not np.isnan(stamps).all():
                for extreme in (np.nanmin(stamps), np.nanmax(stamps)):
                    try:
                        datetime.fromtimestamp(float(extreme), UTC)
                    except (OverflowError, OSError, ValueError) as exc:
                        raise ValueError("snapshot holds a time out of range") from exc
        # Few distinct priorities and tag sets: one object each, shared (tuples and strings are
        # immutable), and one json.loads per tag set; a copy per memory added up at scale.
        tag_sets: dict[str, tuple[str, ...]] = {"": ()}
        for text in tag_texts:
            if text not in tag_sets:
                tag_sets[text] = tuple(json.loads(text))
        self.archived = archived
        self._sizes: dict[int, int] = {}
        self._problems = problems
        self._tags = list(map(tag_sets.__getitem__, tag_texts))

    def __len__(self) -> int:
        return len(self.ids)

    def build(self, rows: Sequence[int]) -> list[Memory]:
        at = np.asarray(rows, dtype=np.intp)
        ids, tags, problems, archived = self.ids, self._tags, self._problems, self.archived
        when = datetime.fromtimestamp  # NaN: no time
        numbers = [column[at].tolist() for column in self._numbers]
        out = []
        rows_of = zip(
            at.tolist(), self._titles.take(at), self._contents.take(at), self._hashes.take(at),
            self._codes[at].tolist(), *numbers, strict=True,
        )  # fmt: skip
        sizes = self._sizes
        for (i, title, content, hash, code, created, updated, accessed, importance, mtime_ns, size, change,
             flags) in rows_of:  # fmt: skip
            # Equal values share one object: a memory never edited has its creation time twice, and
            # files' sizes repeat (immutable both, so nothing can tell).
            made = None if created != created else when(created, UTC)
            out.append(
                make_memory(
                    ids[i],
                    title,
                    content,
                    PRIORITIES[code],
                    made,
                    made if updated == created else None if updated != updated else when(updated, UTC),
                    None if accessed != accessed else when(accessed, UTC),
                    tags[i],
                    None if importance != importance else importance,
                    archived,
                    NO_META,
                    bool(flags & _HAS_FRONTMATTER),
                    problems[i] if flags & _HAS_PROBLEM else None,
                    bool(flags & _CONFLICTED),
                    mtime_ns,
                    sizes.setdefault(size, size),
                    change,
                    hash,
                )
            )
        return out


def memories_from_columns(
    columns: Mapping[str, npt.NDArray[Any]], *, archived: bool, ids: list[str] | None = None
) -> list[Memory]:
    """Inverse of memories_to_columns (``ids``: the id column, already decoded). Raises ValueError
    (or KeyError) on data that do not fit, including data from another parser version."""
    rows = StoredRows(columns, archived=archived, ids=ids)
    return rows.build(range(len(rows)))


# ---------------------------------------------------------------------------- the snapshot file


def encode_areas(areas: Iterable[tuple[str, IndexSnapshot, Sequence[Memory]]]) -> dict[str, npt.NDArray[Any]]:
    """Areas (name, index, memories) in the snapshot's format: ``<name>.index.*`` and
    ``<name>.memories.*`` arrays."""
    out: dict[str, npt.NDArray[Any]] = {}
    for name, index, memories in areas:
        # In the index's order, the memories' id column is the index's: a restart decodes it once.
        by_id = {m.id: m for m in memories}
        ordered = [by_id.get(id) for id in index.live_ids()]
        if len(ordered) == len(by_id) and None not in ordered:
            memories = cast("list[Memory]", ordered)
        out.update(area_arrays(name, index.arrays(), memories_to_columns(memories)))
    return out


def area_arrays(
    name: str, index: Mapping[str, npt.NDArray[Any]], columns: Mapping[str, npt.NDArray[Any]]
) -> dict[str, npt.NDArray[Any]]:
    """One area in the snapshot's format, from its index's arrays and its memories' columns
    (memories_to_columns, or fields_to_columns in a loader helper)."""
    out = {f"{name}.index.{key}": value for key, value in index.items()}
    out.update({f"{name}.memories.{key}": value for key, value in columns.items()})
    return out


def path(folder: Path) -> Path:
    """Where a token's snapshot lives (derived: deleting it costs only restart time)."""
    return folder / STATE_DIR / SNAPSHOT_FILE


def load(folder: Path) -> tuple[Area, Area] | None:
    """The hot and archive areas as the token folder's snapshot holds them; None without a usable one."""
    where = path(folder)
    if not where.is_file():
        return None
    try:
        data = _arrays(where)
        if data["version"].tolist() not in [[v] for v in READABLE]:  # another version of memvault
            log.info("index snapshot in another format; reading the files once instead")
            return None
        return areas_from(data)
    except (OSError, ValueError, KeyError, TypeError, IndexError, zipfile.BadZipFile) as exc:
        log.warning("index snapshot not usable (%s); reading the files instead", type(exc).__name__)
        return None


def _arrays(where: Path) -> dict[str, npt.NDArray[Any]]:
    """The arrays of a snapshot file (``np.savez``'s: a zip of uncompressed .npy members), each
    read straight into an array of its own. ``np.load`` reads a member into bytes objects, then
    copies them into the array: twice the memory written, most of it pages new to a restarting
    process. Raises ValueError or zipfile.BadZipFile (OSError when unreadable) on a file that is
    not as ``save`` writes it; each member's bytes are checked against its CRC-32."""
    out: dict[str, npt.NDArray[Any]] = {}
    with open(where, "rb") as handle, zipfile.ZipFile(handle) as archive:
        for info in archive.infolist():
            if info.compress_type != zipfile.ZIP_STORED or not info.filename.endswith(".npy"):
                raise ValueError("not an uncompressed array")
            handle.seek(info.header_offset)
            local = handle.read(_LOCAL_HEADER.size)
            if len(local) != _LOCAL_HEADER.size or not local.startswith(b"PK\x03\x04"):
                raise zipfile.BadZipFile("bad local file header")
            name_length, extra_length = _LOCAL_HEADER.unpack(local)[-2:]
            start = info.header_offset + len(local) + name_length + extra_length
            handle.seek(start)
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, fortran_order, dtype = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, fortran_order, dtype = np.lib.format.read_array_header_2_0(handle)
            else:
                raise ValueError("an array format this reader does not know")
            if fortran_order or dtype.hasobject:
                raise ValueError("an array save does not write")
            array = np.empty(shape, dtype=dtype)
            header = handle.tell() - start
            if header + array.nbytes != info.file_size:
                raise ValueError("an array of another size than its member")
            handle.seek(start)
            crc = zlib.crc32(handle.read(header))
            data = array.reshape(-1).view(np.uint8)
            if handle.readinto(data) != array.nbytes:
                raise ValueError("an array cut short")
            if zlib.crc32(data, crc) != info.CRC:
                raise zipfile.BadZipFile(f"bad CRC-32 for {info.filename}")
            out[info.filename[: -len(".npy")]] = array
    return out


_LOCAL_HEADER = struct.Struct("<4s5H3L2H")  # a zip member's local file header, before its name


def save(folder: Path, areas: dict[str, npt.NDArray[Any]]) -> None:
    """Write a token folder's snapshot from its encoded areas (worker thread). Atomic; a failure
    only costs restart time."""
    parts: dict[str, npt.NDArray[Any]] = {"version": np.array([VERSION], dtype=np.int64)}
    parts.update(areas)
    del areas
    for name in ("hot", "archive"):  # a loader's parts come without postings
        index = prefixed(parts, f"{name}.index.")
        if "doc_terms" in index:
            parts.update({f"{name}.index.{key}": value for key, value in add_postings(index).items()})
    where = path(folder)
    fd, tmp = tempfile.mkstemp(dir=where.parent, prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez(handle, **cast("dict[str, Any]", parts))  # (numpy stubs: see memvault.load.pipes)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, where)
    except OSError as exc:
        log.warning("could not write the index snapshot (%s)", exc.strerror or type(exc).__name__)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        del parts
        heap.release()  # the encoding's and, after a cold load, the load's garbage


def areas_from(data: Mapping[str, npt.NDArray[Any]]) -> tuple[Area, Area]:
    """Hot and archive areas from arrays in the snapshot's format. Raises ValueError (or KeyError,
    TypeError, IndexError) if they do not fit together. An index without its postings (a loader's)
    gets them sorted out of its term lists, added to ``data`` too when it is a dict."""
    # Imported here: a loader helper imports this module for its codecs (memories_to_columns), and
    # the index, the areas and the sidecar (SQLite, asyncio) were most of its import time.
    from memvault.search.area import Area, Memories
    from memvault.search.index import Index

    areas = []
    for name, archived in (("hot", False), ("archive", True)):
        index_columns = prefixed(data, f"{name}.index.")
        if "postings" not in index_columns and isinstance(data, dict):
            # A loader's arrays, saved as the snapshot later: sorted once, here, for both.
            index_columns = add_postings(index_columns)
            data.update({f"{name}.index.{key}": index_columns[key] for key in ("postings", "term_postings")})
        columns = prefixed(data, f"{name}.memories.")
        index = Index.from_snapshot(index_columns)
        # Memories stored in the index's order share its id strings (100,000 of them at 100k).
        same_ids = all(np.array_equal(index_columns[f"ids.{k}"], columns[f"id.{k}"]) for k in ("blob", "len"))
        # Built into Memory objects as they are asked for (memvault.search.area.Memories).
        rows = StoredRows(columns, archived=archived, ids=index.ids() if same_ids else None)
        differ = not same_ids and any(id not in index for id in rows.ids)
        if differ or len(rows) != len(index):
            raise ValueError("snapshot memories and index differ")
        area = Area(Memories.stored(rows.ids, rows), index)
        areas.append(area)
    return areas[0], areas[1]


def from_stat(cached: FileStat, id: str, archived: bool, st: os.stat_result) -> Memory | None:
    """The cached parse of a file whose bytes are known to be unchanged, as it is now on disk."""
    if not cached.parsed:
        return None
    return from_cache(cached.parsed, id, archived=archived, hash=cached.hash, **file_stamp(st))


def file_stat(memory: Memory) -> FileStat:
    from memvault.records.sidecar import FileStat  # (see areas_from)

    return FileStat(
        memory.path_id, memory.mtime_ns, memory.size, memory.hash, to_cache(memory), memory.change
    )
