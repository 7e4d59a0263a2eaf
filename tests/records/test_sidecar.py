"""Tests for the per-token SQLite sidecar."""

from __future__ import annotations

import _sqlite3
import ctypes
import ctypes.util
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memvault.clock import format_time, parse_time
from memvault.records.sidecar import (
    DB_NAME,
    SIDECAR_DIR,
    FileStat,
    Sidecar,
    StoredVector,
    sidecar_path,
)
from memvault.threads import ON_LOOP, NeedsThread

T0 = datetime(2026, 2, 10, 10, 30, tzinfo=UTC)


@pytest.fixture
def token_dir(tmp_path: Path) -> Path:
    return tmp_path / "memories" / "tok"


@pytest.fixture
def sidecar(token_dir: Path) -> Iterator[Sidecar]:
    with Sidecar.open(token_dir) as sc:
        yield sc


# -- opening, migrations, layout ----------------------------------------------------------


def test_open_creates_folder_gitignore_and_database(token_dir: Path) -> None:
    assert not token_dir.exists()
    with Sidecar.open(token_dir) as sc:
        assert sc.path == sidecar_path(token_dir) == token_dir / ".memvault" / "sidecar.sqlite3"
    assert (token_dir / SIDECAR_DIR / ".gitignore").read_bytes() == b"*\n"
    assert (token_dir / SIDECAR_DIR / DB_NAME).is_file()
    # Only the sidecar folder, no stray temp files.
    assert sorted(p.name for p in (token_dir / SIDECAR_DIR).iterdir() if p.name.endswith(".tmp")) == []


def test_open_keeps_an_existing_gitignore(token_dir: Path) -> None:
    (token_dir / SIDECAR_DIR).mkdir(parents=True)
    (token_dir / SIDECAR_DIR / ".gitignore").write_text("*\n!keep\n", encoding="utf-8")
    Sidecar.open(token_dir).close()
    assert (token_dir / SIDECAR_DIR / ".gitignore").read_text(encoding="utf-8") == "*\n!keep\n"


def test_sidecar_path_does_not_create_anything(token_dir: Path) -> None:
    sidecar_path(token_dir)
    assert not token_dir.exists()


# -- access statistics --------------------------------------------------------------------


def test_record_access_keeps_the_latest_time_and_counts(sidecar: Sidecar) -> None:
    sidecar.record_access(["a.md", "b.md"], T0)
    sidecar.record_access(["a.md"], T0 - timedelta(days=3))  # older: time stays, count grows
    sidecar.record_access(["b.md"], T0 + timedelta(hours=1), hit=False)
    assert sidecar.last_access() == {"a.md": T0, "b.md": T0 + timedelta(hours=1)}
    assert sidecar.access_counts() == {"a.md": (2, 2), "b.md": (2, 1)}


def test_record_access_counts_a_repeated_id_each_time(sidecar: Sidecar) -> None:
    sidecar.record_access(["a.md", "a.md"], T0)
    assert sidecar.access_counts() == {"a.md": (2, 2)}


def test_record_access_with_no_ids_does_nothing(sidecar: Sidecar) -> None:
    sidecar.record_access([], T0)
    assert sidecar.access_counts() == {}


def test_record_access_refuses_a_bare_string_and_naive_times(sidecar: Sidecar) -> None:
    with pytest.raises(TypeError):
        sidecar.record_access("a.md", T0)
    with pytest.raises(ValueError):
        sidecar.record_access(["a.md"], datetime(2026, 1, 1))
    assert sidecar.access_counts() == {}


def test_last_access_for_selected_ids(sidecar: Sidecar) -> None:
    ids = [f"n{i}.md" for i in range(1200)]  # more than one parameter chunk
    sidecar.record_access(ids, T0)
    sidecar.record_access(["archive/old.md"], T0 - timedelta(days=1))
    got = sidecar.last_access([*ids[::2], "archive/old.md", "never.md"])
    assert len(got) == 601
    assert got["archive/old.md"] == T0 - timedelta(days=1)
    assert "never.md" not in got
    assert sidecar.last_access([]) == {}


def test_record_access_of_50_ids_counts_each_once(sidecar: Sidecar) -> None:
    ids = [f"n{i}.md" for i in range(50)]
    sidecar.record_access(ids, T0)
    assert sidecar.access_counts() == {i: (1, 1) for i in ids}


def test_rename_access_moves_stats(sidecar: Sidecar) -> None:
    sidecar.record_access(["a.md"], T0)
    sidecar.record_access(["a.md"], T0, hit=False)
    sidecar.rename_access("a.md", "archive/a.md")
    assert sidecar.last_access() == {"archive/a.md": T0}
    assert sidecar.access_counts() == {"archive/a.md": (2, 1)}


def test_rename_access_replaces_stale_stats_at_the_target(sidecar: Sidecar) -> None:
    sidecar.record_access(["archive/a.md"], T0 - timedelta(days=100))
    sidecar.record_access(["a.md"], T0)
    sidecar.rename_access("a.md", "archive/a.md")
    assert sidecar.access_counts() == {"archive/a.md": (1, 1)}
    assert sidecar.last_access() == {"archive/a.md": T0}
    # Moving a memory with no history leaves none behind at the target.
    sidecar.rename_access("nothing.md", "archive/a.md")
    assert sidecar.access_counts() == {}
    # Renaming onto itself keeps everything.
    sidecar.record_access(["b.md"], T0)
    sidecar.rename_access("b.md", "b.md")
    assert sidecar.access_counts() == {"b.md": (1, 1)}


def test_rename_accesses_moves_many_in_one_call_in_order(sidecar: Sidecar) -> None:
    sidecar.record_access(["a.md", "b.md"], T0)
    sidecar.record_access(["archive/b.md"], T0 - timedelta(days=100))  # stale: replaced
    sidecar.record_access(["c.md"], T0, hit=False)
    sidecar.rename_accesses([("a.md", "archive/a.md"), ("b.md", "archive/b.md"), ("c.md", "c.md")])
    assert sidecar.access_counts() == {"archive/a.md": (1, 1), "archive/b.md": (1, 1), "c.md": (1, 0)}
    # In order: a memory moved out and back within one batch ends where it was last moved.
    sidecar.rename_accesses([("archive/a.md", "a.md"), ("a.md", "archive/a-2.md")])
    assert sidecar.last_access()["archive/a-2.md"] == T0 and "a.md" not in sidecar.access_counts()
    sidecar.rename_accesses([])  # nothing to do: no transaction needed


def test_forget_drops_access_and_file_stats(sidecar: Sidecar) -> None:
    sidecar.record_access(["a.md", "b.md"], T0)
    sidecar.put_file_stats([FileStat("a.md", 1, 2, "h1"), FileStat("b.md", 3, 4, "h2")])
    sidecar.forget(["a.md", "missing.md"])
    assert sidecar.access_counts() == {"b.md": (1, 1)}
    assert set(sidecar.file_stats()) == {"b.md"}


def _count_table_reads(sidecar: Sidecar) -> list[str]:
    reads: list[str] = []
    sidecar._conn.set_trace_callback(
        lambda sql: reads.append(sql) if sql.startswith("SELECT id, last_access FROM access") else None
    )
    return reads


def test_access_times_are_read_once_and_kept_in_step_with_our_own_records(sidecar: Sidecar) -> None:
    sidecar.record_access(["a.md"], T0)
    reads = _count_table_reads(sidecar)
    assert sidecar.last_access() == {"a.md": T0}
    sidecar.record_batch([(["a.md", "b.md"], T0 + timedelta(hours=1), True)])
    sidecar.record_access(["a.md"], T0 - timedelta(days=1))  # older: last access stays
    assert sidecar.last_access() == {"a.md": T0 + timedelta(hours=1), "b.md": T0 + timedelta(hours=1)}
    assert sidecar.last_access(["b.md", "c.md"]) == {"b.md": T0 + timedelta(hours=1)}
    assert len(reads) == 1  # the records were carried into the kept table, not read back
    returned = sidecar.last_access()
    returned["z.md"] = T0  # a caller's copy: changing it changes nothing kept
    assert "z.md" not in sidecar.last_access()


def test_kept_access_times_follow_other_changes_and_other_processes(
    sidecar: Sidecar, token_dir: Path
) -> None:
    sidecar.record_access(["a.md", "b.md"], T0)
    assert set(sidecar.last_access()) == {"a.md", "b.md"}
    sidecar.forget(["b.md"])
    assert set(sidecar.last_access()) == {"a.md"}
    sidecar.rename_access("a.md", "archive/a.md")
    assert sidecar.last_access() == {"archive/a.md": T0}
    with Sidecar.open(token_dir) as other:  # another process on the same file
        other.record_access(["c.md"], T0 + timedelta(hours=2))
    assert sidecar.last_access() == {"archive/a.md": T0, "c.md": T0 + timedelta(hours=2)}
    assert sidecar.last_access(["c.md"]) == {"c.md": T0 + timedelta(hours=2)}


def test_kept_access_times_outlive_writes_that_leave_the_access_table_alone(sidecar: Sidecar) -> None:
    """Issue 12: every write_memory (file stats) and embedding batch (vectors) made recall and
    listings read the whole access table again; only renames and deletions of access rows must."""
    sidecar.record_access(["a.md"], T0)
    assert sidecar.last_access() == {"a.md": T0}
    reads = _count_table_reads(sidecar)
    sidecar.put_file_stats([FileStat("b.md", 1, 2, "h1")])
    sidecar.set_state("k", "v")
    with sidecar.transaction() as conn:  # sessions and the graph keep their tables this way
        conn.execute("INSERT OR REPLACE INTO state (key, value) VALUES ('x', 'y')")
    assert sidecar.last_access(["a.md"], ON_LOOP) == {"a.md": T0}
    assert reads == []
    sidecar.rename_access("a.md", "archive/a.md")
    with pytest.raises(NeedsThread):  # stale: the event loop never reads the table itself
        sidecar.last_access(None, ON_LOOP)
    assert sidecar.last_access() == {"archive/a.md": T0}
    assert len(reads) == 1


def test_a_look_on_the_loop_never_waits_for_the_sidecar(sidecar: Sidecar) -> None:
    sidecar.record_access(["a.md"], T0)
    assert sidecar.last_access() == {"a.md": T0}
    with sidecar._lock, pytest.raises(NeedsThread):  # a worker thread's transaction holds it
        sidecar.last_access(None, ON_LOOP)


# -- state and search counts --------------------------------------------------------------


def test_state_round_trip(sidecar: Sidecar) -> None:
    assert sidecar.get_state("last_eviction") is None
    sidecar.set_state("last_eviction", "2026-02-10T10:30:00.000Z")
    sidecar.set_state("other", "")
    assert sidecar.get_state("last_eviction") == "2026-02-10T10:30:00.000Z"
    sidecar.set_state("last_eviction", "2026-02-11T00:00:00.000Z")
    assert sidecar.get_state("last_eviction") == "2026-02-11T00:00:00.000Z"
    assert sidecar.get_state("other") == ""


def test_search_counts(sidecar: Sidecar) -> None:
    assert sidecar.search_counts() == (0, 0)
    sidecar.record_search(True)
    sidecar.record_search(False)
    sidecar.record_search(False)
    assert sidecar.search_counts() == (3, 2)


# -- file-stat cache ----------------------------------------------------------------------


def test_file_stats_round_trip_upsert_and_delete(sidecar: Sidecar) -> None:
    big = 1_770_000_000_123_456_789  # a real mtime_ns needs 64 bits
    a = FileStat("a.md", big, 10, "aa")
    b = FileStat("projects/b.md", 2, 20, "bb")
    c = FileStat("archive/c.md", 3, 30, "cc")
    sidecar.put_file_stats([a, b, c])
    assert sidecar.file_stats() == {"a.md": a, "projects/b.md": b, "archive/c.md": c}
    a2 = FileStat("a.md", big + 1, 11, "a2")
    sidecar.put_file_stats([a2])
    sidecar.delete_file_stats(["projects/b.md", "nope.md"])
    assert sidecar.file_stats() == {"a.md": a2, "archive/c.md": c}
    sidecar.put_file_stats([])
    sidecar.delete_file_stats([])
    assert len(sidecar.file_stats()) == 2


def test_put_file_stats_is_all_or_nothing(sidecar: Sidecar) -> None:
    bad = FileStat("b.md", 1, 1, None)  # type: ignore[arg-type]  # violates NOT NULL
    with pytest.raises(sqlite3.IntegrityError):
        sidecar.put_file_stats([FileStat("a.md", 1, 1, "h"), bad])
    assert sidecar.file_stats() == {}
    sidecar.put_file_stats([FileStat("a.md", 1, 1, "h")])  # the connection is still usable
    assert list(sidecar.file_stats()) == ["a.md"]


@pytest.mark.slow
def test_file_stats_of_100k_rows_round_trip(sidecar: Sidecar) -> None:
    # Speed is measured in bench/, not asserted here: shared machines make timed tests flaky.
    stats = [
        FileStat(f"dir{i % 100}/note-{i}.md", 1_770_000_000_000_000_000 + i, i, f"{i:064x}")
        for i in range(100_000)
    ]
    sidecar.put_file_stats(stats)
    got = sidecar.file_stats()
    assert len(got) == 100_000
    assert got[stats[12345].id] == stats[12345]


# -- persistence, times, concurrency ------------------------------------------------------


def test_everything_persists_across_close_and_reopen(token_dir: Path) -> None:
    with Sidecar.open(token_dir) as sc:
        sc.record_access(["a.md"], T0, hit=False)
        sc.set_state("last_eviction", "x")
        sc.put_file_stats([FileStat("a.md", 1, 2, "h")])
        sc.record_search(False)
    with Sidecar.open(token_dir) as sc:
        assert sc.last_access() == {"a.md": T0}
        assert sc.access_counts() == {"a.md": (1, 0)}
        assert sc.get_state("last_eviction") == "x"
        assert sc.file_stats() == {"a.md": FileStat("a.md", 1, 2, "h")}
        assert sc.search_counts() == (1, 1)


def test_closed_sidecar_refuses_calls_and_closes_twice(token_dir: Path) -> None:
    sc = Sidecar.open(token_dir)
    sc.close()
    sc.close()
    with pytest.raises(RuntimeError):
        sc.get_state("k")
    with pytest.raises(RuntimeError):
        sc.set_state("k", "v")


def test_times_are_stored_as_utc_text_with_milliseconds(sidecar: Sidecar) -> None:
    at = datetime(2026, 2, 10, 12, 30, 0, 123_999, tzinfo=timezone(timedelta(hours=2)))
    sidecar.record_access(["a.md"], at)
    with closing(sqlite3.connect(sidecar.path)) as conn:
        stored = conn.execute("SELECT last_access FROM access").fetchone()[0]
    assert stored == "2026-02-10T10:30:00.123Z"
    got = sidecar.last_access()["a.md"]
    assert got.tzinfo is not None and got.utcoffset() == timedelta(0)
    assert got == datetime(2026, 2, 10, 10, 30, 0, 123_000, tzinfo=UTC)


def test_times_round_trip_as_aware_utc(sidecar: Sidecar) -> None:
    # One sidecar for all examples (hypothesis does not reset function-scoped fixtures).
    @given(
        st.datetimes(
            min_value=datetime(1970, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
        ),
        st.integers(min_value=-14 * 60, max_value=14 * 60),
    )
    def check(at: datetime, offset_minutes: int) -> None:
        at = at.replace(microsecond=at.microsecond // 1000 * 1000)
        local = at.astimezone(timezone(timedelta(minutes=offset_minutes)))
        text = format_time(local)
        assert len(text) == 24 and text.endswith("Z")
        assert parse_time(text) == at
        sidecar.forget(["t.md"])
        sidecar.record_access(["t.md"], local)
        got = sidecar.last_access(["t.md"])["t.md"]
        assert got == at and got.utcoffset() == timedelta(0)

    check()


def test_stored_times_sort_in_time_order() -> None:
    times = [T0 - timedelta(days=400 * 365), T0, T0 + timedelta(milliseconds=1), T0 + timedelta(days=1)]
    texts = [format_time(t) for t in times]
    assert texts == sorted(texts)


def test_concurrent_record_access_from_8_threads_loses_no_counts(sidecar: Sidecar) -> None:
    threads_n, rounds = 8, 100
    barrier = threading.Barrier(threads_n)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            barrier.wait()
            for r in range(rounds):
                sidecar.record_access(["shared.md", f"own-{n}.md"], T0 + timedelta(seconds=r), hit=r % 2 == 0)
                sidecar.record_search(r % 3 == 0)
                sidecar.last_access(["shared.md"])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(threads_n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    counts = sidecar.access_counts()
    assert counts["shared.md"] == (threads_n * rounds, threads_n * rounds // 2)
    for n in range(threads_n):
        assert counts[f"own-{n}.md"] == (rounds, rounds // 2)
    assert sidecar.last_access(["shared.md"])["shared.md"] == T0 + timedelta(seconds=rounds - 1)
    assert sidecar.search_counts() == (threads_n * rounds, threads_n * (rounds - (rounds + 2) // 3))


def test_two_connections_to_one_database_lose_no_counts(token_dir: Path) -> None:
    # Stands in for the CLI and the server each holding the file open: WAL + busy timeout.
    first, second = Sidecar.open(token_dir), Sidecar.open(token_dir)
    try:
        rounds = 150

        def worker(sc: Sidecar) -> None:
            for _ in range(rounds):
                sc.record_access(["x.md"], T0)

        threads = [threading.Thread(target=worker, args=(sc,)) for sc in (first, second, first, second)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert first.access_counts() == second.access_counts() == {"x.md": (4 * rounds, 4 * rounds)}
    finally:
        first.close()
        second.close()


def test_a_batch_of_accesses_and_searches_is_one_write(tmp_path: Path) -> None:
    with Sidecar.open(tmp_path / "t") as sidecar:
        sidecar.record_batch(
            [(["a.md", "b.md"], T0, True), (["a.md"], T0 + timedelta(hours=1), False)], [True, False, False]
        )
        assert sidecar.last_access() == {"a.md": T0 + timedelta(hours=1), "b.md": T0}
        assert sidecar.access_counts()["a.md"] == (2, 1)
        assert sidecar.search_counts() == (3, 2)
        sidecar.record_batch([], [])
        assert sidecar.search_counts() == (3, 2)


def _sqlite_memory_used() -> int | None:
    """Bytes SQLite holds in this process (every connection's page cache among them), if readable."""
    for library in (_sqlite3.__file__, ctypes.util.find_library("sqlite3")):
        if library:
            try:
                used = ctypes.CDLL(library).sqlite3_memory_used
            except (OSError, AttributeError):
                continue
            used.restype = ctypes.c_int64
            return int(used())
    return None


def test_a_loaded_sidecar_holds_a_bounded_page_cache(tmp_path: Path) -> None:
    # One connection per loaded token: what each keeps after touching megabytes of its data is
    # what a hundred loaded tokens multiply (SQLite's default cache kept 2 MB each).
    if _sqlite_memory_used() is None:
        pytest.skip("this Python's SQLite library does not export sqlite3_memory_used")
    before = _sqlite_memory_used()
    opened = []
    try:
        for t in range(4):
            car = Sidecar.open(tmp_path / f"t{t}")
            opened.append(car)
            ids = [f"note-{i}.md" for i in range(300)]
            parsed = '{"c": "' + "lorem ipsum " * 80 + '"}'
            car.put_file_stats([FileStat(i, 1, 500, "h" * 16, parsed) for i in ids])
            car.put_vectors({i: StoredVector("m", 256, "h", bytes(1024)) for i in ids})
            car.file_stats()
            car.get_vectors(ids)
            for k in range(30):
                car.record_access(ids[k::30], datetime.now(UTC))
        per_connection = (_sqlite_memory_used() - before) / len(opened)
    finally:
        for car in opened:
            car.close()
    assert per_connection < 1_000_000, per_connection
