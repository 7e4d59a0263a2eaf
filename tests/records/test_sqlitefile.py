"""The sidecar's SQLite file: migrations in order from any older schema, a newer schema opened as it
is, WAL, and a corrupt file moved aside (kept, never deleted) while an unopenable one is left alone."""

from __future__ import annotations

import logging
import sqlite3
from contextlib import closing
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memvault.records import sqlitefile
from memvault.records.sidecar import DB_NAME, SIDECAR_DIR, Sidecar, StoredVector, sidecar_path
from memvault.records.sqlitefile import MIGRATIONS, SCHEMA_VERSION
from tests.oldsidecar import migrate_to

T0 = datetime(2026, 2, 10, 10, 30, tzinfo=UTC)


@pytest.fixture
def token_dir(tmp_path: Path) -> Path:
    return tmp_path / "memories" / "tok"


def _user_version(db: Path) -> int:
    with closing(sqlite3.connect(db)) as conn:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _tables(db: Path) -> set[str]:
    with closing(sqlite3.connect(db)) as conn:
        return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_migrations_set_user_version_and_are_idempotent_on_reopen(token_dir: Path) -> None:
    assert SCHEMA_VERSION == len(MIGRATIONS) >= 1
    db = sidecar_path(token_dir)
    with Sidecar.open(token_dir) as sc:
        sc.set_state("k", "v")
    assert _user_version(db) == SCHEMA_VERSION
    assert {"access", "state", "file_stat", "search_stats"} <= _tables(db)
    for _ in range(2):
        with Sidecar.open(token_dir) as sc:
            assert sc.get_state("k") == "v"
            assert sc.search_counts() == (0, 0)
    assert _user_version(db) == SCHEMA_VERSION


def test_a_sidecar_of_schema_7_keeps_its_vectors_and_gains_maxsim_tokens(token_dir: Path) -> None:
    db = sidecar_path(token_dir)
    db.parent.mkdir(parents=True)
    with closing(sqlite3.connect(db)) as conn:  # what the previous memvault made: schema 7
        migrate_to(conn, 7)
        conn.execute("INSERT INTO vectors VALUES ('old.md', 'm', 2, 'h1', ?)", (bytes(8),))
        conn.commit()
    with Sidecar.open(token_dir) as sc:
        assert sc.get_vectors(["old.md"]) == {"old.md": StoredVector("m", 2, "h1", bytes(8), None)}
        tokens = bytes([1, 0, 2, 0])  # two uint16 token ids
        sc.put_vectors({"new.md": StoredVector("m", 2, "h2", bytes(8), tokens)})
    assert _user_version(db) == SCHEMA_VERSION
    with Sidecar.open(token_dir) as sc:
        assert sc.get_vectors(["new.md"])["new.md"].tokens == tokens
        assert sc.vectors_by_hash("m", ["h2"])["h2"].tokens == tokens
        assert sc.vectors_by_hash("m", ["h1"])["h1"].tokens is None


def _vector(i: int) -> StoredVector:
    """A WordLlama-sized vector: 256 float32 and 128 uint16 token ids."""
    return StoredVector("wordllama-l2-256", 256, f"h{i}", i.to_bytes(4, "little") * 256, bytes(256))


def _row(v: StoredVector) -> tuple[object, ...]:
    return (v.model, v.dim, v.hash, v.vec, v.tokens)


def _file_bytes(db: Path) -> int:
    return sum(p.stat().st_size for p in db.parent.glob(db.name + "*"))


def test_a_vector_takes_about_its_own_size_on_disk(token_dir: Path) -> None:
    with Sidecar.open(token_dir) as sc:
        sc.put_vectors({f"m{i}.md": _vector(i) for i in range(600)})
    # 1.3 KB of data a row; an overflow page per row made it 4.7 KB
    assert _file_bytes(sidecar_path(token_dir)) < 600 * 2_000
    with Sidecar.open(token_dir) as sc:
        assert sc.get_vectors(["m7.md"])["m7.md"] == _vector(7)
        assert sc.vectors_by_hash("wordllama-l2-256", ["h9"])["h9"] == _vector(9)


def test_a_sidecar_of_schema_8_keeps_its_vectors_in_a_smaller_file(token_dir: Path) -> None:
    db = sidecar_path(token_dir)
    db.parent.mkdir(parents=True)
    with closing(sqlite3.connect(db)) as conn:  # what the previous memvault made: schema 8
        migrate_to(conn, 8)
        rows = [(f"m{i}.md", *_row(_vector(i))) for i in range(2_000)]
        conn.executemany("INSERT INTO vectors VALUES (?, ?, ?, ?, ?, ?)", rows)
        conn.commit()
    before = _file_bytes(db)
    with Sidecar.open(token_dir) as sc:
        assert sc.get_vectors([f"m{i}.md" for i in range(2_000)]) == {
            f"m{i}.md": _vector(i) for i in range(2_000)
        }
        sc.put_vectors({"new.md": _vector(5)})
        assert sc.vectors_by_hash("wordllama-l2-256", ["h5"])["h5"] == _vector(5)
    assert _user_version(db) == SCHEMA_VERSION
    assert _file_bytes(db) < before / 2


def test_database_uses_wal(token_dir: Path) -> None:
    Sidecar.open(token_dir).close()
    with closing(sqlite3.connect(sidecar_path(token_dir))) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_a_newer_schema_version_is_opened_as_it_is(token_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    Sidecar.open(token_dir).close()
    with closing(sqlite3.connect(sidecar_path(token_dir))) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
        conn.commit()
    with caplog.at_level(logging.WARNING, logger="memvault.records.sidecar"), Sidecar.open(token_dir) as sc:
        sc.set_state("k", "v")
        assert sc.get_state("k") == "v"
    assert "newer" in caplog.text
    assert _user_version(sidecar_path(token_dir)) == SCHEMA_VERSION + 5


def test_corrupt_database_is_moved_aside_and_a_fresh_one_opens(
    token_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = token_dir / SIDECAR_DIR
    folder.mkdir(parents=True)
    garbage = b"this is not a database at all \x00\xff" * 200
    (folder / DB_NAME).write_bytes(garbage)
    with caplog.at_level(logging.WARNING, logger="memvault.records.sidecar"), Sidecar.open(token_dir) as sc:
        sc.record_access(["a.md"], T0)
        assert sc.access_counts() == {"a.md": (1, 1)}
    moved = [p for p in folder.iterdir() if p.name.startswith(f"{DB_NAME}.corrupt-")]
    assert len(moved) == 1
    assert moved[0].read_bytes() == garbage
    assert "moved it to" in caplog.text
    assert _user_version(folder / DB_NAME) == SCHEMA_VERSION


def test_corrupt_database_twice_keeps_both_copies(token_dir: Path) -> None:
    folder = token_dir / SIDECAR_DIR
    folder.mkdir(parents=True)
    for n in range(2):
        (folder / DB_NAME).write_bytes(b"garbage %d " % n * 500)
        Sidecar.open(token_dir).close()
    moved = [p for p in folder.iterdir() if ".corrupt-" in p.name and not p.name.endswith(("-wal", "-shm"))]
    assert sorted(p.read_bytes()[:9] for p in moved) == [b"garbage 0", b"garbage 1"]


def test_an_unopenable_database_raises_and_is_not_moved_aside(token_dir: Path) -> None:
    # "Cannot open" (here: a folder where the file should be) is not corruption: raise, keep it.
    (token_dir / SIDECAR_DIR / DB_NAME).mkdir(parents=True)
    with pytest.raises(sqlite3.OperationalError):
        Sidecar.open(token_dir)
    assert (token_dir / SIDECAR_DIR / DB_NAME).is_dir()
    assert not [p for p in (token_dir / SIDECAR_DIR).iterdir() if ".corrupt-" in p.name]


def test_a_new_file_another_process_switches_to_wal_meanwhile_is_opened(tmp_path, monkeypatch):
    """SQLite answers "database is locked" at once (no busy handler) to a journal mode switch while
    another process switches the same new file: connect tries again instead of failing the write."""
    real = sqlite3.connect
    refusals = []

    class Racing:
        def __init__(self, conn):
            self._conn = conn

        def execute(self, sql, *args):
            if sql.startswith("PRAGMA journal_mode") and len(refusals) < 3:
                refusals.append(sql)
                raise sqlite3.OperationalError("database is locked")
            return self._conn.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self._conn, name)

    monkeypatch.setattr(sqlite3, "connect", lambda *a, **k: Racing(real(*a, **k)))
    conn = sqlitefile.connect(tmp_path / "side.db")
    try:
        assert len(refusals) == 3
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
