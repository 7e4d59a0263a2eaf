"""The sidecar's SQLite file: opened with its pragmas, migrated in order, moved aside when corrupt."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from datetime import UTC, datetime
from pathlib import Path

from memvault.disk.files import atomic_write

logger = logging.getLogger("memvault.records.sidecar")

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
    # 9: vectors in a rowid table. A WITHOUT ROWID table keeps its rows in an index b-tree, whose
    # cells hold at most about a quarter of a page: a row of 1 KB of float32 and its token ids
    # went past that and took an overflow page of its own, 4.7 KB of file per memory (469 MB for
    # 100,000) where a rowid table's leaves hold three such rows a page.
    (
        """CREATE TABLE vectors_rows (
            id TEXT PRIMARY KEY,
            model TEXT NOT NULL,
            dim INT NOT NULL,
            hash TEXT NOT NULL,
            vec BLOB NOT NULL,
            tokens BLOB
        )""",
        "INSERT INTO vectors_rows (id, model, dim, hash, vec, tokens) "
        "SELECT id, model, dim, hash, vec, tokens FROM vectors",
        "DROP TABLE vectors",
        "ALTER TABLE vectors_rows RENAME TO vectors",
        "CREATE INDEX IF NOT EXISTS vectors_model_hash ON vectors (model, hash)",
    ),
)
SCHEMA_VERSION = len(MIGRATIONS)
# After a migration that freed this many pages (the old vectors table's), the file is rewritten
# once (VACUUM) to give them back to the disk.
VACUUM_MIN_FREE_PAGES = 2_048

# SQLite primary result codes that mean "this file is not a usable database". Anything else
# (locked, busy, cannot open, read-only) is an environment problem and must not cost the
# user their sidecar, so it is raised as it is.
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26
_CORRUPT_CODES = frozenset({_SQLITE_CORRUPT, _SQLITE_NOTADB})


def is_corruption(exc: sqlite3.DatabaseError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and (code & 0xFF) in _CORRUPT_CODES


def write_gitignore(folder: Path) -> None:
    """Write ``.memvault/.gitignore`` with ``*`` atomically, unless one is already there."""
    target = folder / ".gitignore"
    if target.exists():
        return
    atomic_write(target, GITIGNORE_TEXT.encode("utf-8"), mode=0o600)  # mkstemp's mode, as always


def move_aside(db: Path) -> Path:
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


def connect(db: Path) -> sqlite3.Connection:
    """Open, configure and migrate the database; close the connection again on any failure."""
    # isolation_level=None: the sqlite3 module starts no transactions of its own; every write
    # below opens BEGIN IMMEDIATE itself, so a writer takes the lock up front instead of failing
    # on upgrade from a read lock (which busy_timeout cannot retry).
    conn = sqlite3.connect(db, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    try:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
        mode = _wal(conn)
        if str(mode).lower() != "wal":
            logger.warning("sidecar %s: journal_mode is %s, not WAL; concurrent use will be slower", db, mode)
        conn.execute("PRAGMA synchronous = NORMAL")
        migrate(conn, db)
    except BaseException:
        conn.close()
        raise
    return conn


def _wal(conn: sqlite3.Connection) -> str:
    """Switch to WAL; the journal mode now. SQLite answers "database is locked" at once, without
    its busy handler, while another process opens the same new file and switches it too (a stdio
    and an HTTP server's first writes to one vault): retried until BUSY_TIMEOUT_MS."""
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            return str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0])
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def migrate(conn: sqlite3.Connection, db: Path) -> None:
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
    if conn.execute("PRAGMA freelist_count").fetchone()[0] >= VACUUM_MIN_FREE_PAGES:
        try:
            conn.execute("VACUUM")
        except sqlite3.OperationalError as exc:  # another process has it open: the pages are reused
            logger.info("a sidecar was not compacted after its migration (%s)", exc)
