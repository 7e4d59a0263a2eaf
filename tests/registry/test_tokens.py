"""The registry of tokens: a load reads the folder, settles and serves vectors; idle tokens past
the cap unload, least recently used first; a token in use never does."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import wait_for

from memvault.config import Settings
from memvault.ops.service import Service
from memvault.records.sidecar import Sidecar
from memvault.registry.tokens import Tokens

pytestmark = pytest.mark.anyio


def notes(folder: Path, count: int, word: str = "note") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"{word}-{i}.md").write_text(
            f"# {word.title()} {i}\n\n{word} number {i}\n", encoding="utf-8"
        )


async def test_a_load_reads_the_folder_then_settles_and_embeds(
    make_settings: Callable[..., Settings], vault_root: Path
) -> None:
    notes(vault_root / "alice", 3)
    notes(vault_root / "alice" / "archive", 1, "old")
    service = Service(make_settings(embedder="hash"))
    try:
        async with service.registry.using("alice") as state:
            assert state.loaded
            with state.mem_lock:
                assert sorted(state.hot.memories) == ["note-0.md", "note-1.md", "note-2.md"]
                assert list(state.archive.memories) == ["old-0.md"]
        await wait_for(lambda: state.settled, timeout=10)
        assert await wait_for(lambda: state.vectors.counts() == (4, 4), timeout=20)
    finally:
        await service.close()


async def test_a_token_without_a_folder_loads_empty_and_creates_nothing(
    make_settings: Callable[..., Settings], vault_root: Path
) -> None:
    service = Service(make_settings(embedder="hash"))
    try:
        async with service.registry.using("nobody") as state:
            assert state.loaded
            assert len(state.hot.memories) == 0
        assert not (vault_root / "nobody").exists()
    finally:
        await service.close()


async def test_idle_tokens_past_the_cap_unload_least_recently_used_first(
    make_settings: Callable[..., Settings], vault_root: Path
) -> None:
    for token in ("a", "b", "c"):
        notes(vault_root / token, 2)
    service = Service(make_settings(embedder="hash", max_loaded_tokens=2))
    registry = service.registry
    try:
        for token in ("a", "b", "c"):
            async with registry.using(token):
                pass
        loaded = {t for t, s in registry.states.items() if s.loaded}
        assert loaded == {"b", "c"}
        assert registry.unloads == 1
        parses = registry.parses
        async with registry.using("a") as state:  # back on use, from its parse cache
            assert state.loaded
            assert len(state.hot.memories) == 2
        assert registry.parses == parses
        assert {t for t, s in registry.states.items() if s.loaded} == {"c", "a"}
    finally:
        await service.close()


async def test_a_token_in_use_is_never_unloaded(
    make_settings: Callable[..., Settings], vault_root: Path
) -> None:
    for token in ("held", "b", "c"):
        notes(vault_root / token, 2)
    service = Service(make_settings(embedder="hash", max_loaded_tokens=1))
    registry = service.registry
    try:
        async with registry.using("held") as held:
            for token in ("b", "c"):
                async with registry.using(token):
                    pass
            assert held.loaded  # the least recently used, and past the cap, but in use
            assert len(held.hot.memories) == 2
        registry.unload_idle()  # released: now it goes
        assert not held.loaded
    finally:
        await service.close()


async def test_an_unloaded_tokens_sidecar_is_closed_off_the_event_loop(
    make_settings: Callable[..., Settings], vault_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for token in ("a", "b"):
        notes(vault_root / token, 1)
    closed_on: list[bool] = []
    close = Sidecar.close

    def recording(self: Sidecar) -> None:
        closed_on.append(threading.current_thread() is threading.main_thread())
        close(self)

    monkeypatch.setattr(Sidecar, "close", recording)
    service = Service(make_settings(embedder="hash", max_loaded_tokens=1))
    try:
        async with service.registry.using("a"):
            pass
        async with service.registry.using("b"):
            pass  # unloads a
        await service.idle()
        assert closed_on == [False]  # a's, in a worker thread (the event loop runs on the main one)
    finally:
        await service.close()


async def test_the_first_call_after_a_load_does_not_list_the_folder_again(
    make_settings: Callable[..., Settings], vault_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = vault_root / "alice"
    notes(folder, 3)
    first = Service(make_settings(embedder="hash"))
    try:
        await first.store.find("alice", query="note")  # the token's .memvault/ now exists
    finally:
        await first.close()
    service = Service(make_settings(embedder="hash"))
    listed: list[Any] = []
    scandir = os.scandir

    def counting(path: Any = ".") -> Any:
        if Path(path) == folder:
            listed.append(path)
        return scandir(path)

    try:
        async with service.registry.using("alice"):
            pass
        monkeypatch.setattr(os, "scandir", counting)
        found = await service.store.find("alice", query="note")
        assert len(found.memories) == 3
        assert listed == []  # the load saw the folder as it is; nothing changed since
        (folder / "new.md").write_text("# New\n\na note saved by hand\n", encoding="utf-8")
        found = await service.store.find("alice", query="hand")
        assert [m.id for m in found.memories] == ["new.md"] and len(listed) == 1
    finally:
        await service.close()


async def test_many_cold_tokens_loading_leave_worker_threads_for_other_calls(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    import anyio

    service = Service(make_settings(embedder="hash"))
    registry = service.registry
    release = threading.Event()
    original = registry.load
    entered: list[str] = []

    def slow_load(state: Any, progress: Any = None) -> None:  # a slow disk: each load takes long
        entered.append(state.token)
        release.wait(30)
        original(state, progress)

    monkeypatch.setattr(registry, "load", slow_load)

    async def touch(token: str) -> None:
        async with registry.using(token):
            pass

    try:
        async with anyio.create_task_group() as tg:
            for i in range(60):  # more cold tokens than anyio has worker threads
                tg.start_soon(touch, f"cold{i}")
            await wait_for(lambda: entered)  # the loads have begun (every task ran up to its load)
            with anyio.fail_after(10):  # another call's short work in a thread is not queued behind them
                assert await anyio.to_thread.run_sync(lambda: "done") == "done"
            release.set()
    finally:
        release.set()
        await service.close()


def _loaded(registry: Tokens) -> set[str]:
    return {t for t, s in registry.states.items() if s.loaded}


async def test_a_token_used_again_is_no_longer_the_least_recently_used(
    make_settings: Callable[..., Settings], vault_root: Path
) -> None:
    for token in ("a", "b", "c", "d"):
        notes(vault_root / token, 1)
    service = Service(make_settings(embedder="hash", max_loaded_tokens=2))
    registry = service.registry

    try:
        for token in ("a", "b"):
            async with registry.using(token):
                pass
        async with registry.using("a"):  # loaded already: a use, not a load
            pass
        async with registry.using("c"):
            pass
        assert _loaded(registry) == {"a", "c"}  # b was the least recently used
        for token in ("c", "a", "c"):
            async with registry.using(token):
                pass
        async with registry.using("d"):
            pass
        assert _loaded(registry) == {"c", "d"}
    finally:
        await service.close()


async def test_the_cap_holds_while_the_least_recently_used_token_is_in_use(
    make_settings: Callable[..., Settings], vault_root: Path
) -> None:
    for token in ("held", "b", "c", "d"):
        notes(vault_root / token, 1)
    service = Service(make_settings(embedder="hash", max_loaded_tokens=2))
    registry = service.registry

    try:
        async with registry.using("held"):
            for token in ("b", "c"):
                async with registry.using(token):
                    pass
            assert _loaded(registry) == {"held", "c"}  # the oldest is in use: the next oldest went instead
        async with registry.using("d"):
            pass
        assert _loaded(registry) == {"c", "d"}  # released, and still the least recently used: it goes now
    finally:
        await service.close()


async def test_unloaded_and_failed_tokens_are_forgotten_once_nothing_holds_them(
    make_settings: Callable[..., Settings], vault_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    service = Service(make_settings(embedder="hash", max_loaded_tokens=2))
    registry = service.registry
    load = registry.load

    def failing(state: Any, progress: Any = None) -> None:
        if state.token.startswith("bad"):
            raise OSError("unreadable")
        load(state, progress)

    monkeypatch.setattr(registry, "load", failing)
    try:
        for i in range(40):
            notes(vault_root / f"good{i}", 1)
            await service.store.find(f"good{i}", query="note")  # queues an access to record
            with pytest.raises(OSError):
                async with registry.using(f"bad{i}"):
                    pass
        await service.idle()  # the accesses are recorded: nothing holds the unloaded ones now
        for i in range(12):  # loads that record nothing
            async with registry.using(f"quiet{i}"):
                pass
        assert not [t for t in registry.states if t.startswith("bad")]
        assert len(registry.states) <= 2 + 2, sorted(registry.states)
    finally:
        await service.close()


async def test_recent_writes_of_forgotten_tokens_expire(
    make_settings: Callable[..., Settings], vault_root: Path
) -> None:
    service = Service(make_settings(embedder="hash", max_loaded_tokens=1, dedupe_window_seconds=0))
    registry = service.registry
    try:
        for i in range(10):
            await service.store.write(f"t{i}", title="Note", content=f"hello {i}")
            await service.idle()
        async with registry.using("last"):
            pass
        assert len(registry.recent_writes) <= 1
    finally:
        await service.close()


async def test_accesses_queued_when_a_token_unloads_go_in_through_its_closing_sidecar(
    make_settings: Callable[..., Settings], vault_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notes(vault_root / "a", 2)
    notes(vault_root / "b", 1)
    monkeypatch.setattr("memvault.ops.access.COALESCE", 1.0)  # the round comes after the unload
    opened: list[Path] = []
    open_ = Sidecar.open.__func__

    def counting(cls: type[Sidecar], token_dir: Path) -> Sidecar:
        opened.append(Path(token_dir))
        return open_(cls, token_dir)

    monkeypatch.setattr(Sidecar, "open", classmethod(counting))
    service = Service(make_settings(embedder="hash", max_loaded_tokens=1))
    try:
        found = await service.store.find("a", query="number")
        assert len(found.memories) == 2
        await service.store.touch("a", found.memories, read_only=True)  # queued, to the sidecar only
        del opened[:]
        await service.store.find("b", query="number")  # a unloads, its accesses still queued
        assert not service.registry.loaded_or_loading("a")
        await service.idle()
        assert vault_root / "a" not in opened  # not opened again for them
    finally:
        await service.close()
    with Sidecar.open(vault_root / "a") as sidecar:
        assert set(sidecar.last_access()) == {"note-0.md", "note-1.md"}


async def test_unloads_in_a_burst_release_the_heap_one_at_a_time_and_once_after_the_last(
    make_settings: Callable[..., Settings], vault_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for i in range(6):
        notes(vault_root / f"t{i}", 1)
    started = threading.Event()
    go_on = threading.Event()
    releases: list[int] = []  # the unloads done when each release began
    running = 0
    most = 0
    service = Service(make_settings(embedder="hash", max_loaded_tokens=1))
    registry = service.registry

    def release() -> bool:
        nonlocal running, most
        running += 1
        most = max(most, running)
        releases.append(registry.unloads)
        started.set()
        go_on.wait(30)
        running -= 1
        return True

    monkeypatch.setattr("memvault.heap.release", release)
    try:
        async with registry.using("t0"):
            pass
        async with registry.using("t1"):  # t0 unloads: a release begins, and waits
            pass
        assert await wait_for(started.is_set)
        for i in range(2, 6):  # four more unloads meanwhile
            async with registry.using(f"t{i}"):
                pass
        go_on.set()
        await service.idle()
        assert most == 1
        assert releases == [1, 5]  # one for the first, one after the last
    finally:
        go_on.set()
        await service.close()
