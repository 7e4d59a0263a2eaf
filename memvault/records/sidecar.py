"""The per-token SQLite sidecar: access stats, state, file-stat cache, search counts, sessions and graph."""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from memvault.clock import Clock, format_time, require_time, utcnow
from memvault.records.sqlitefile import (
    connect,
    is_corruption,
    move_aside,
    write_gitignore,
)
from memvault.threads import IN_THREAD, ON_LOOP, NeedsThread, Where, held

logger = logging.getLogger(__name__)

SIDECAR_DIR = ".memvault"
DB_NAME = "sidecar.sqlite3"

# Keep well below SQLite's host-parameter limit (999 on builds before 3.32).
_CHUNK = 500


@dataclass(frozen=True, slots=True)
class FileStat:
    """What the index last saw of one file, so a restart re-parses only what changed."""

    id: str
    mtime_ns: int
    size: int
    hash: str
    parsed: str | None = None  # the store's serialised parse of the file (JSON), if cached
    change: int = 0  # ctime and inode (vault.file_change)


def sidecar_path(token_dir: Path) -> Path:
    """Where the sidecar database of a token folder lives (whether or not it exists yet)."""
    return token_dir / SIDECAR_DIR / DB_NAME


def _check_ids(ids: Sequence[str]) -> None:
    # A str is a Sequence[str]: record_access("a.md") would otherwise count 'a', '.', 'm', 'd'.
    if isinstance(ids, str):
        raise TypeError("pass a sequence of ids, not a single string")


def _chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


@dataclass(frozen=True, slots=True)
class StoredVector:
    """A memory's embedding as stored: the model that made it, from which text, and its bytes."""

    model: str
    dim: int
    hash: str  # text_hash of the embedded text: a changed text is embedded again
    vec: bytes  # float32, dim values
    tokens: bytes | None = None  # uint16 token ids kept for MaxSim (WordLlama), None if none


class Sidecar:
    """One token's sidecar database: a single connection, used by one thread at a time.

    Thread-safe: every call takes the instance lock, so worker threads can share one
    instance. Other processes may open the same file; WAL and the busy timeout let them
    take turns.
    """

    def __init__(self, path: Path, conn: sqlite3.Connection) -> None:
        self.path = path
        self._conn = conn
        self._lock = threading.Lock()
        self._closed = False
        self._writes = 0  # transactions of ours so far: with SQLite's data_version, says what changed
        self._access_cache: tuple[tuple[int, int], dict[str, datetime]] | None = None
        # What the modules that keep their own tables derive from them (the graph's search form),
        # each under the data_version it was made at; dropped with the sidecar when a token unloads.
        self.derived: dict[str, tuple[tuple[int, int], Any]] = {}
        # memvault.records.sync's: the signatures of the session and graph files last found in line
        # with the tables. Kept here, it goes with the sidecar when the token unloads.
        self.files_in_line: dict[str, str] | None = None

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    def open(cls, token_dir: Path) -> Sidecar:
        """Open (creating if needed) the sidecar of ``token_dir`` and bring its schema up to date.

        Creates ``token_dir/.memvault/`` with a ``.gitignore`` of ``*``. A database file that
        SQLite reports as corrupt or not a database is moved aside (kept: an older memvault kept
        sessions and the graph only there) and replaced by a fresh one, rebuilt from the files.
        """
        folder = token_dir / SIDECAR_DIR
        folder.mkdir(parents=True, exist_ok=True)
        write_gitignore(folder)
        db = folder / DB_NAME
        try:
            conn = connect(db)
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc):
                raise
            moved = move_aside(db)
            logger.warning(
                "sidecar %s is unreadable (%s); moved it to %s and started fresh", db, exc, moved.name
            )
            conn = connect(db)
        return cls(db, conn)

    def close(self) -> None:
        """Close the connection; further calls fail. Closing twice is harmless."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self.derived.clear()
            try:
                self._conn.execute("PRAGMA optimize")
            except sqlite3.Error:
                pass  # only a planner hint; never keep the connection open over it
            finally:
                self._conn.close()

    def __enter__(self) -> Sidecar:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def _read(self, where: Where = IN_THREAD) -> Iterator[sqlite3.Connection]:
        with held(self._lock, where):
            if self._closed:
                raise RuntimeError("sidecar is closed")
            yield self._conn

    @contextmanager
    def _write(
        self, accessed: Sequence[tuple[str, datetime]] = (), *, moves_access: bool = False
    ) -> Iterator[sqlite3.Connection]:
        """One short BEGIN IMMEDIATE transaction; rolled back if the body raises. ``accessed``:
        the access times it records, carried into the cached table (see last_access) when that
        was current, so recording accesses (or writing anything else) does not make every listing
        and recall read the table again; ``moves_access``: it changes access rows otherwise
        (renames, deletions), so the cached table is read again."""
        with self._lock:
            if self._closed:
                raise RuntimeError("sidecar is closed")
            conn = self._conn
            cached = self._access_cache
            # Only worth a PRAGMA when there is a kept table to carry over.
            version = self._version(conn) if cached is not None and not moves_access else None
            carry = cached is not None and cached[0] == version
            conn.execute("BEGIN IMMEDIATE")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                carry = False
                raise
            finally:
                self._writes += 1
                if carry and cached is not None and version is not None:
                    times = cached[1]
                    for id_, at in accessed:
                        if id_ not in times or times[id_] < at:
                            times[id_] = at
                    self._access_cache = ((self._writes, version[1]), times)

    def _version(self, conn: sqlite3.Connection) -> tuple[int, int]:
        """What the database holds, as far as the access cache cares: our transactions so far and
        SQLite's data_version (which moves with other connections' commits). Lock held."""
        return self._writes, conn.execute("PRAGMA data_version").fetchone()[0]

    # -- for the modules that keep their own tables (sessions, graph) ---------------------

    @contextmanager
    def snapshot(self) -> Iterator[sqlite3.Connection]:
        """One read transaction, so several SELECTs see the same state (WAL: never waits on a writer)."""
        with self._read() as conn:
            conn.execute("BEGIN")
            try:
                yield conn
            finally:
                if conn.in_transaction:
                    conn.execute("COMMIT")

    def data_version(self, conn: sqlite3.Connection) -> tuple[int, int]:
        """What the tables hold, as a value that changes with every commit (ours or another
        process's). Call inside snapshot() or transaction(), with the connection they give."""
        return self._version(conn)

    def transaction(self) -> AbstractContextManager[sqlite3.Connection]:
        """One short BEGIN IMMEDIATE transaction; rolled back if the body raises."""
        return self._write()

    # -- access statistics ---------------------------------------------------------------

    def record_access(self, ids: Sequence[str], at: datetime, *, hit: bool = True) -> None:
        """Count one access of each id at ``at``; last access only ever moves forward."""
        self.record_batch([(ids, at, hit)])

    def record_batch(
        self, accesses: Sequence[tuple[Sequence[str], datetime, bool]], searches: Sequence[bool] = ()
    ) -> None:
        """Many accesses ``(ids, at, hit)`` and search outcomes (found or not) in one transaction."""
        rows = []
        accessed: list[tuple[str, datetime]] = []
        for ids, at, hit in accesses:
            _check_ids(ids)
            stamp = format_time(at)
            rows += [(id_, stamp, 1 if hit else 0) for id_ in ids]
            exact = require_time(stamp)  # what reading the row back gives
            accessed += [(id_, exact) for id_ in ids]
        if not rows and not searches:
            return
        with self._write(accessed) as conn:
            conn.executemany(
                "INSERT INTO access (id, last_access, access_count, hit_count) VALUES (?, ?, 1, ?) "
                "ON CONFLICT (id) DO UPDATE SET "
                "last_access = max(access.last_access, excluded.last_access), "
                "access_count = access.access_count + 1, "
                "hit_count = access.hit_count + excluded.hit_count",
                rows,
            )
            if searches:
                conn.execute(
                    "UPDATE search_stats SET searches = searches + ?, misses = misses + ? WHERE one = 1",
                    (len(searches), sum(1 for found in searches if not found)),
                )

    def last_access(self, ids: Sequence[str] | None = None, where: Where = IN_THREAD) -> dict[str, datetime]:
        """Last recorded access per id; ids never accessed are absent. ``None`` means all.

        The whole table stays in memory until it changes: every listing and every recall asks,
        and reading and parsing it each time was most of list_memory_titles under load. Our own
        transactions and other processes' commits (SQLite's data_version) make it stale.
        ON_LOOP: from that copy only, else NeedsThread (see memvault.threads).
        """
        with self._read(where) as conn:
            version = self._version(conn)
            cached = self._access_cache
            if cached is not None and cached[0] == version:
                times = cached[1]
            elif where is ON_LOOP:
                raise NeedsThread
            else:  # read once, then kept current (see _write): recall asks on the loop from it
                rows = conn.execute("SELECT id, last_access FROM access").fetchall()
                times = {id_: require_time(text) for id_, text in rows}
                self._access_cache = (version, times)
        if ids is None:
            return dict(times)
        return {id_: times[id_] for id_ in ids if id_ in times}

    def access_counts(self) -> dict[str, tuple[int, int]]:
        """``id -> (access_count, hit_count)`` for every id with recorded access."""
        with self._read() as conn:
            rows = conn.execute("SELECT id, access_count, hit_count FROM access").fetchall()
        return {id_: (count, hits) for id_, count, hits in rows}

    def rename_access(self, old_id: str, new_id: str) -> None:
        """Move the statistics of a memory that moved (archive/restore) to its new id.

        Any stale record already under ``new_id`` is dropped: the moved memory brings its own
        history. If ``old_id`` has none, ``new_id`` ends up with none.
        """
        self.rename_accesses([(old_id, new_id)])

    def rename_accesses(self, pairs: Sequence[tuple[str, str]]) -> None:
        """:meth:`rename_access` for many memories, in order, in one transaction."""
        pairs = [(old, new) for old, new in pairs if old != new]
        if not pairs:
            return
        with self._write(moves_access=True) as conn:
            for old_id, new_id in pairs:
                conn.execute("DELETE FROM access WHERE id = ?", (new_id,))
                conn.execute("UPDATE access SET id = ? WHERE id = ?", (new_id, old_id))

    def forget(self, ids: Sequence[str]) -> None:
        """Drop access statistics and file stats of deleted memories."""
        _check_ids(ids)
        if not ids:
            return
        params = [(id_,) for id_ in ids]
        with self._write(moves_access=True) as conn:
            conn.executemany("DELETE FROM access WHERE id = ?", params)
            conn.executemany("DELETE FROM file_stat WHERE id = ?", params)

    # -- key/value state -----------------------------------------------------------------

    def get_state(self, key: str) -> str | None:
        with self._read() as conn:
            row = conn.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def set_state(self, key: str, value: str) -> None:
        with self._write() as conn:
            conn.execute(
                "INSERT INTO state (key, value) VALUES (?, ?) "
                "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    # -- file-stat cache -----------------------------------------------------------------

    def file_stats(self) -> dict[str, FileStat]:
        with self._read() as conn:
            rows = conn.execute("SELECT id, mtime_ns, size, hash, parsed, change FROM file_stat").fetchall()
        return {row[0]: FileStat(*row) for row in rows}

    def put_file_stats(self, stats: Sequence[FileStat]) -> None:
        """Insert or replace the given file stats in one transaction."""
        if not stats:
            return
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO file_stat (id, mtime_ns, size, hash, parsed, change) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET mtime_ns = excluded.mtime_ns, size = excluded.size, "
                "hash = excluded.hash, parsed = excluded.parsed, change = excluded.change",
                [(s.id, s.mtime_ns, s.size, s.hash, s.parsed, s.change) for s in stats],
            )

    def delete_file_stats(self, ids: Sequence[str]) -> None:
        _check_ids(ids)
        if not ids:
            return
        with self._write() as conn:
            conn.executemany("DELETE FROM file_stat WHERE id = ?", [(id_,) for id_ in ids])

    # -- search statistics ---------------------------------------------------------------

    def record_search(self, found: bool) -> None:
        with self._write() as conn:
            conn.execute(
                "UPDATE search_stats SET searches = searches + 1, misses = misses + ? WHERE one = 1",
                (0 if found else 1,),
            )

    def search_counts(self) -> tuple[int, int]:
        """``(total searches, searches that found nothing)``."""
        with self._read() as conn:
            row = conn.execute("SELECT searches, misses FROM search_stats WHERE one = 1").fetchone()
        return (0, 0) if row is None else (int(row[0]), int(row[1]))

    # -- vectors (embeddings of memory texts; derived) -------------------------------------

    def get_vectors(self, ids: Sequence[str]) -> dict[str, StoredVector]:
        """The stored vector of each given id that has one."""
        rows = self._select_in("SELECT id, model, dim, hash, vec, tokens FROM vectors WHERE id", ids)
        return {
            row[0]: StoredVector(
                row[1], int(row[2]), row[3], bytes(row[4]), None if row[5] is None else bytes(row[5])
            )
            for row in rows
        }

    def vectors_by_hash(self, model: str, hashes: Sequence[str]) -> dict[str, StoredVector]:
        """``text hash -> stored vector`` of any memory's vector from ``model`` with that text."""
        if not hashes:
            return {}
        rows = self._select_in(
            "SELECT hash, dim, vec, tokens FROM vectors WHERE model = ? AND hash", hashes, model
        )
        return {
            digest: StoredVector(
                model, int(dim), digest, bytes(vec), None if tokens is None else bytes(tokens)
            )
            for digest, dim, vec, tokens in rows
        }

    def _select_in(self, select: str, keys: Sequence[str], *first: Any) -> list[Any]:
        """Rows of ``select`` + `` IN (...)`` over keys, in chunks under SQLite's parameter limit."""
        with self._read() as conn:
            return self._select_in_locked(conn, select, keys, *first)

    @staticmethod
    def _select_in_locked(
        conn: sqlite3.Connection, select: str, keys: Sequence[str], *first: Any
    ) -> list[Any]:
        _check_ids(keys)
        rows: list[Any] = []
        for chunk in _chunks(list(dict.fromkeys(keys))):
            marks = ",".join("?" * len(chunk))
            rows += conn.execute(f"{select} IN ({marks})", (*first, *chunk)).fetchall()
        return rows

    def put_vectors(self, vectors: Mapping[str, StoredVector]) -> None:
        """Insert or replace the vectors of the given ids, in one transaction."""
        if not vectors:
            return
        with self._write() as conn:
            conn.executemany(
                "INSERT INTO vectors (id, model, dim, hash, vec, tokens) VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET model = excluded.model, dim = excluded.dim, "
                "hash = excluded.hash, vec = excluded.vec, tokens = excluded.tokens",
                [(id_, v.model, v.dim, v.hash, v.vec, v.tokens) for id_, v in vectors.items()],
            )

    def delete_vectors(self, ids: Sequence[str]) -> None:
        _check_ids(ids)
        if not ids:
            return
        with self._write() as conn:
            conn.executemany("DELETE FROM vectors WHERE id = ?", [(id_,) for id_ in ids])


class SidecarRecords:
    """What the knowledge graph and session summaries share: their sidecar, opened on first use (so
    arguments are checked before a token folder is created), the content limit and a clock."""

    def __init__(
        self, sidecar: Sidecar | Callable[[], Sidecar], *, max_chars: int, clock: Clock = utcnow
    ) -> None:
        self._source = sidecar
        self.max_chars = max_chars
        self.clock = clock

    @property
    def sidecar(self) -> Sidecar:
        if not isinstance(self._source, Sidecar):
            self._source = self._source()
        return self._source
