"""A token's state: how a file changed on disk reaches the index (fresh, the watcher's batch),
moves between hot and archive, and the accesses queued for the background."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import anyio
import anyio.to_thread
import pytest

from memvault.config import Settings
from memvault.ops.service import Service
from memvault.registry.state import Pending, TokenLock, TokenState

pytestmark = pytest.mark.anyio


@pytest.fixture
async def loaded(make_settings: Callable[..., Settings], vault_root: Path) -> AsyncIterator[TokenState]:
    """alice's state, loaded with note-0.md .. note-2.md, held in use for the test."""
    folder = vault_root / "alice"
    folder.mkdir()
    for i in range(3):
        (folder / f"note-{i}.md").write_text(f"# Note {i}\n\nnote number {i}\n", encoding="utf-8")
    service = Service(make_settings(embedder="hash"))
    try:
        async with service.registry.using("alice") as state:
            yield state
    finally:
        await service.close()


def found(state: TokenState, query: str, *, archived: bool = False) -> list[str]:
    with state.mem_lock:
        ids, _ = state.area(archived).index.scores(query)
    return ids


def ids(state: TokenState, *, archived: bool = False) -> list[str]:
    with state.mem_lock:
        return sorted(state.area(archived).memories)


async def test_a_file_changed_on_disk_reaches_the_index(loaded: TokenState) -> None:
    path = loaded.dir / "note-1.md"
    path.write_text("# Note 1\n\nthe zebra moved in\n", encoding="utf-8")
    memory = await anyio.to_thread.run_sync(loaded.fresh, "note-1.md", False)
    assert memory is not None and "zebra" in memory.content
    assert found(loaded, "zebra") == ["note-1.md"]
    assert "note-1.md" not in found(loaded, "number")


async def test_a_file_made_or_removed_on_disk_is_added_or_dropped(loaded: TokenState) -> None:
    (loaded.dir / "new.md").write_text("# New\n\nan okapi\n", encoding="utf-8")
    (loaded.dir / "note-0.md").unlink()
    assert (await anyio.to_thread.run_sync(loaded.fresh, "new.md", False)) is not None
    assert (await anyio.to_thread.run_sync(loaded.fresh, "note-0.md", False)) is None
    assert ids(loaded) == ["new.md", "note-1.md", "note-2.md"]
    assert found(loaded, "okapi") == ["new.md"]


async def test_an_unchanged_file_is_not_parsed_again(loaded: TokenState) -> None:
    before = loaded.parses
    path = loaded.dir / "note-2.md"
    os.utime(path, (1, 1))  # as git does: the bytes are the same, the stat is not
    memory = await anyio.to_thread.run_sync(loaded.fresh, "note-2.md", False)
    assert memory is not None and "number 2" in memory.content
    assert loaded.parses == before


async def test_the_watchers_batch_brings_changes_to_the_index(
    make_settings: Callable[..., Settings], vault_root: Path
) -> None:
    folder = vault_root / "alice"
    folder.mkdir()
    (folder / "note.md").write_text("# Note\n\nplain words\n", encoding="utf-8")
    service = Service(make_settings(embedder="hash"))
    try:
        state = await service.store.state("alice")
        (folder / "note.md").write_text("# Note\n\na capybara now\n", encoding="utf-8")
        (folder / "hand.md").write_text("# Hand\n\nwritten by a capybara\n", encoding="utf-8")
        changed = await anyio.to_thread.run_sync(
            service.apply_changes, "alice", [folder / "note.md", folder / "hand.md"], False
        )
        assert changed == 2
        assert sorted(found(state, "capybara")) == ["hand.md", "note.md"]
        (folder / "hand.md").unlink()
        await anyio.to_thread.run_sync(service.apply_changes, "alice", [], True)  # a rescan
        assert ids(state) == ["note.md"]
    finally:
        await service.close()


async def test_a_move_takes_the_memory_and_its_index_entry_to_the_archive_and_back(
    loaded: TokenState,
) -> None:
    def move(id: str, to_archive: bool) -> str:
        with loaded.file_lock():
            return loaded.move(id, to_archive=to_archive)

    archived = await anyio.to_thread.run_sync(move, "note-1.md", True)
    assert (loaded.dir / "archive" / archived).is_file() and not (loaded.dir / "note-1.md").exists()
    assert "note-1.md" not in ids(loaded) and ids(loaded, archived=True) == [archived]
    assert found(loaded, "number", archived=True) == [archived]
    back = await anyio.to_thread.run_sync(move, archived, False)
    assert back == "note-1.md" and ids(loaded, archived=True) == []
    assert "note-1.md" in found(loaded, "number")


def test_pending_accesses_stay_visible_until_recorded() -> None:
    pending = Pending()
    assert pending.empty()
    at = datetime(2026, 3, 1, tzinfo=UTC)
    pending.add(["a.md", "b.md"], at, True)
    pending.searched(False)
    assert not pending.empty()
    assert pending.latest() == {"a.md": at, "b.md": at}
    records, searches = pending.take_records()
    assert records == [(("a.md", "b.md"), at, True)] and searches == [False]
    assert pending.latest() == {"a.md": at, "b.md": at}  # being recorded: still seen by a listing
    assert not pending.empty()
    pending.committed(records)
    assert pending.empty() and pending.latest() == {}
    assert pending.take_records() == ([], [])  # taken once


async def test_the_token_lock_counts_who_waits_for_it() -> None:
    """Background work holding a token's lock asks this between two files (see ops.background)."""
    lock = TokenLock()
    assert lock.waiting == 0
    async with lock:
        async with anyio.create_task_group() as tg:

            async def wait_for_it() -> None:
                async with lock:
                    pass

            tg.start_soon(wait_for_it)
            with anyio.fail_after(5):
                while lock.waiting != 1:
                    await anyio.sleep(0.001)
            tg.start_soon(wait_for_it)
            with anyio.fail_after(5):
                while lock.waiting != 2:
                    await anyio.sleep(0.001)
            lock.release()  # the first waiter takes it, then the second
            with anyio.fail_after(5):
                while lock.waiting:
                    await anyio.sleep(0.001)
            await lock.acquire()  # for the block's own release
    assert lock.waiting == 0 and not lock.locked()


def test_write_backs_given_back_stay_queued_behind_newer_ones() -> None:
    pending = Pending()
    at, later = datetime(2026, 3, 1, tzinfo=UTC), datetime(2026, 3, 2, tzinfo=UTC)
    a, b = SimpleNamespace(id="a.md"), SimpleNamespace(id="b.md")
    pending.add(["a.md", "b.md"], at, True, [a, b])  # type: ignore[list-item]
    taken = pending.take_files(2)
    pending.add(["a.md"], later, True, [a])  # type: ignore[list-item]  # read again meanwhile
    pending.requeue_files(taken)  # the batch gave way before writing either
    assert {id: when for id, (_, when) in pending.files.items()} == {"a.md": later, "b.md": at}


async def test_a_write_caches_its_parse_in_the_background_not_on_the_event_loop(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A small vault caches each file's parse for its restart: the server's writes queue theirs
    with their access records (one transaction in a worker thread), and a delete drops the queued one."""
    import threading

    from memvault.records.sidecar import Sidecar

    loop_thread = threading.get_ident()
    on_loop: list[str] = []
    real = Sidecar.put_file_stats

    def put(self: Sidecar, stats) -> None:  # type: ignore[no-untyped-def]
        if threading.get_ident() == loop_thread:
            on_loop.extend(s.id for s in stats)
        real(self, stats)

    monkeypatch.setattr(Sidecar, "put_file_stats", put)
    service = Service(make_settings(embedder="hash"))
    store = service.store
    try:
        await store.write("alice", title="First", content="opens the token")
        await service.idle()
        await store.write("alice", title="Kept", content="cached after the reply")
        await store.update("alice", "kept.md", tags=["later"])
        await store.write("alice", title="Gone", content="deleted at once")
        await store.delete("alice", "gone.md")
        await service.idle()
        assert on_loop == []
        state = await store.state("alice")
        assert state.sidecar is not None
        cached = state.sidecar.file_stats()
        assert {"first.md", "kept.md"} <= cached.keys() and "gone.md" not in cached
        with state.mem_lock:
            assert cached["kept.md"].hash == state.hot.memories["kept.md"].hash  # the update's
    finally:
        await service.close()
