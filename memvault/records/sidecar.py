"""The per-token SQLite sidecar: access stats, state, file-stat cache, search counts, sessions and graph."""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import Any

from memvault.clock import Clock, format_time, require_time, utcnow
from memvault.disk.files import atomic_write
from memvault.threads import NeedsThread, held

logger = logging.getLogger(__name__)

SIDECAR_DIR = ".memvault"
DB_NAME = "sidecar.sqlite3"
GITIGNORE_TEXT = "*\n"
BUSY_TIMEOUT_MS = 5000
# SQLite's page cache, per connection (one per loaded token). Its default, 2 MB, fills with the
# pages a token's writes and reads have touched and stays: with 100 tokens loaded that was up to
# 200 MB held for data the operating system's file cache holds anyway.
CACHE_KIB = 256

# Schema migrations, applied in order; migration i (0-based) brings user_version to i + 1.
# Each migration is a sequence of statements run in one BEGIN IMMEDIATE transaction together
# with the user_version bump. Never edit a shipped migration: append a new one.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    # 1: access statistics, key/value state, file-stat cache, search counters.
    (
        """CREATE TABLE IF NOT EXISTS access (
            id TEXT PRIMARY KEY,
            last_access TEXT NOT NULL,
            access_count INT NOT NULL DEFAULT 0,
            hit_count INT NOT NULL DEFAULT 0
        ) WITHOUT ROWID""",
        "CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID",
        """CREATE TABLE IF NOT EXISTS file_stat (
            id TEXT PRIMARY KEY,
            mtime_ns INT NOT NULL,
            size INT NOT NULL,
            hash TEXT NOT NULL
        ) WITHOUT ROWID""",
        """CREATE TABLE IF NOT EXISTS search_stats (
            one INT PRIMARY KEY CHECK (one = 1),
            searches INT NOT NULL,
            misses INT NOT NULL
        )""",
        "INSERT OR IGNORE INTO search_stats (one, searches, misses) VALUES (1, 0, 0)",
    ),
    # 2: the parsed form of each file beside its stat, so a restart re-parses only what changed.
    ("ALTER TABLE file_stat ADD COLUMN parsed TEXT",),
    # 3: session summaries (every version kept) and the knowledge graph: since schema 6 a copy of
    # their files (memvault.records.sync), before it their only home.
    (
        """CREATE TABLE IF NOT EXISTS session_versions (
            session_id TEXT NOT NULL,
            version INT NOT NULL,
            ts TEXT NOT NULL,
            title TEXT,
            tags TEXT NOT NULL DEFAULT '[]',
            summary TEXT NOT NULL,
            PRIMARY KEY (session_id, version)
        ) WITHOUT ROWID""",
        """CREATE TABLE IF NOT EXISTS entities (
            name TEXT PRIMARY KEY,
            entity_type TEXT NOT NULL,
            created TEXT NOT NULL,
            updated TEXT NOT NULL
        )""",
        """CREATE TABLE IF NOT EXISTS observations (
            entity TEXT NOT NULL,
            position INT NOT NULL,
            text TEXT NOT NULL,
            PRIMARY KEY (entity, position),
            UNIQUE (entity, text)
        ) WITHOUT ROWID""",
        """CREATE TABLE IF NOT EXISTS relations (
            from_entity TEXT NOT NULL,
            to_entity TEXT NOT NULL,
            relation_type TEXT NOT NULL,
            UNIQUE (from_entity, to_entity, relation_type)
        )""",
        "CREATE INDEX IF NOT EXISTS relations_to ON relations (to_entity)",
    ),
    # 4: one embedding per memory (derived): the model, its dimension, the hash of the embedded
    # text and the float32 vector, so a restart embeds only what changed.
    (
        """CREATE TABLE IF NOT EXISTS vectors (
            id TEXT PRIMARY KEY,
            model TEXT NOT NULL,
            dim INT NOT NULL,
            hash TEXT NOT NULL,
            vec BLOB NOT NULL
        ) WITHOUT ROWID""",
        "CREATE INDEX IF NOT EXISTS vectors_model_hash ON vectors (model, hash)",
    ),
    # 5: a file's ctime and inode beside mtime and size (vault.file_change): a rename-over keeping
    # mtime and size must not pass for the file already parsed. Old rows have 0: read again once.
    ("ALTER TABLE file_stat ADD COLUMN change INT NOT NULL DEFAULT 0",),
    # 6: the session and graph files (memvault.records.sync) as their tables were last loaded from
    # or written to them: a file whose stat differs is read again.
    (
        """CREATE TABLE IF NOT EXISTS canonical_files (
            path TEXT PRIMARY KEY,
            sig TEXT NOT NULL,
            session_id TEXT,
            conflicted INT NOT NULL DEFAULT 0
        ) WITHOUT ROWID""",
    ),
    # 7: hold what the files hold. A session version stores what its history line stores: the
    # whole text, or (delta) what an append added, with the whole text's length (chars; NULL in
    # older rows, which are whole). A graph entity or relation keeps its graph.jsonl line (line),
    # so a write rewrites only what changed, byte for byte the rest; an entity's observations may
    # repeat, as in the official server's file; lines of graph.jsonl memvault cannot take as an
    # entity or a relation are kept as they are (graph_kept), after the entry they followed.
    (
        "ALTER TABLE session_versions ADD COLUMN delta INT NOT NULL DEFAULT 0",
        "ALTER TABLE session_versions ADD COLUMN chars INT",
        "ALTER TABLE entities ADD COLUMN line TEXT",
        "ALTER TABLE relations ADD COLUMN line TEXT",
        """CREATE TABLE observation_list (
            entity TEXT NOT NULL,
            position INT NOT NULL,
            text TEXT NOT NULL,
            PRIMARY KEY (entity, position)
        ) WITHOUT ROWID""",
        "INSERT INTO observation_list (entity, position, text) "
        "SELECT entity, position, text FROM observations",
        "DROP TABLE observations",
        "ALTER TABLE observation_list RENAME TO observations",
        """CREATE TABLE IF NOT EXISTS graph_kept (
            seq INTEGER PRIMARY KEY,
            after_kind TEXT NOT NULL,
            after_id INT NOT NULL,
            line TEXT NOT NULL,
            why TEXT NOT NULL
        )""",
        # A canonical file read by an older memvault: read it again, into the new columns.
        "DELETE FROM canonical_files",
    ),
    # 8: beside a WordLlama vector, the memory's most telling token ids (uint16, at most 128) for
    # recall's MaxSim reranker, so a restart does not tokenize again. Older rows have NULL: such a
    # vector is embedded again once, by the embedding worker.
    ("ALTER TABLE vectors ADD COLUMN tokens BLOB",),
)
SCHEMA_VERSION = len(MIGRATIONS)

# SQLite primary result codes that mean "this file is not a usable database". Anything else
# (locked, busy, cannot open, read-only) is an environment problem and must not cost the
# user their sidecar, so it is raised as it is.
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_CORRUPT_CODES = frozenset({_SQLITE_CORRUPT, _SQLITE_NOTADB})

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


def _is_corruption(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in _CORRUPT_CODES


def _check_ids(ids: Sequence[str]) -> None:
    # A str is a Sequence[str]: record_access("a.md") would otherwise count 'a', '.', 'm', 'd'.
    if isinstance(ids, str):
        raise TypeError("pass a sequence of ids, not a single string")


def _chunks(items: Sequence[str]) -> Iterator[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


def _write_gitignore(folder: Path) -> None:
    """Write ``.memvault/.gitignore`` with ``*`` atomically, unless one is already there."""
    target = folder / ".gitignore"
    if target.exists():
        return
    atomic_write(target, GITIGNORE_TEXT.encode("utf-8"), mode=0o600)  # mkstemp's mode, as always


def _move_aside(db: Path) -> Path:
    """Rename a corrupt database (and its WAL/SHM/journal files) to ``<name>.corrupt-<time>``."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    base = db.with_name(f"{db.name}.corrupt-{stamp}")
    n = 1
    while base.exists():
        n += 1
        base = db.with_name(f"{db.name}.corrupt-{stamp}-{n}")
    os.replace(db, base)
    for suffix in ("-wal", "-shm", "-journal"):
        extra = db.with_name(db.name + suffix)
        if extra.exists():
            os.replace(extra, base.with_name(base.name + suffix))
    return base


def _connect(db: Path) -> sqlite3.Connection:
    """Open, configure and migrate the database; close the connection again on any failure."""
    # isolation_level=None: the sqlite3 module starts no transactions of its own; every write
    # below opens BEGIN IMMEDIATE itself, so a writer takes the lock up front instead of failing
    # on upgrade from a read lock (which busy_timeout cannot retry).
    conn = sqlite3.connect(db, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            logger.warning("sidecar %s: journal_mode is %s, not WAL; concurrent use will be slower", db, mode)
        conn.execute("PRAGMA synchronous = NORMAL")
        _migrate(conn, db)
    except BaseException:
        conn.close()
        raise
    return conn


def _migrate(conn: sqlite3.Connection, db: Path) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version >= SCHEMA_VERSION:
        if version > SCHEMA_VERSION:
            # A newer memvault wrote this file. Its extra tables are additive, so keep going.
            logger.warning("sidecar %s: schema version %d is newer than %d", db, version, SCHEMA_VERSION)
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Read again under the write lock: another process may have migrated meanwhile.
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        for number in range(version + 1, SCHEMA_VERSION + 1):
            for statement in MIGRATIONS[number - 1]:
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {number}")
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


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
        _write_gitignore(folder)
        db = folder / DB_NAME
        try:
            conn = _connect(db)
        except sqlite3.DatabaseError as exc:
            if not _is_corruption(exc):
                raise
            moved = _move_aside(db)
            logger.warning(
                "sidecar %s is unreadable (%s); moved it to %s and started fresh", db, exc, moved.name
            )
            conn = _connect(db)
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
    def _read(self, inline: bool = False) -> Iterator[sqlite3.Connection]:
        with held(self._lock, inline):
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

    def last_access(self, ids: Sequence[str] | None = None, *, inline: bool = False) -> dict[str, datetime]:
        """Last recorded access per id; ids never accessed are absent. ``None`` means all.

        The whole table stays in memory until it changes: every listing and every recall asks,
        and reading and parsing it each time was most of list_memory_titles under load. Our own
        transactions and other processes' commits (SQLite's data_version) make it stale.
        ``inline`` (the event loop): from that copy only, else NeedsThread (see memvault.threads).
        """
        with self._read(inline) as conn:
            version = self._version(conn)
            cached = self._access_cache
            if cached is not None and cached[0] == version:
                times = cached[1]
            elif inline:
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
