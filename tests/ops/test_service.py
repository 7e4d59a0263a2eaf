"""The composition root: what /healthz tells of the parts, the watcher following loads and
listeners, and a close that loses no queued access."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import wait_for

from memvault.config import Settings
from memvault.ops.service import Service
from memvault.records.sidecar import Sidecar

pytestmark = pytest.mark.anyio


async def test_health_counts_the_loaded_tokens_and_their_memories(
    make_settings: Callable[..., Settings],
) -> None:
    service = Service(make_settings(embedder="hash", max_loaded_tokens=2))
    store = service.store
    try:
        assert service.health()["watcher"] == "off"  # no watcher made (the CLI's case): not watching
        assert service.health()["status"] == "degraded"
        await store.write("alice", title="One", content="first")
        await store.write("alice", title="Two", content="second")
        await store.write("bob", title="Three", content="third")
        health = service.health()
        assert (health["tokens_loaded"], health["memories_loaded"]) == (2, 3)
        assert health["embeddings"]["name"] and health["reranker"]["name"]
        await store.write("carol", title="Four", content="fourth")  # alice unloads
        health = service.health()
        assert (health["tokens_loaded"], health["memories_loaded"]) == (2, 2)
    finally:
        await service.close()


async def test_a_listener_hears_a_hand_edit_of_a_vault_that_unloaded(
    make_settings: Callable[..., Settings], vault_root: Path
) -> None:
    """The root joins the registry and the listeners to the watcher: a token's folder stays
    watched while either wants it."""
    service = Service(make_settings(embedder="hash", max_loaded_tokens=1))
    service.watcher()
    heard: list[frozenset[str]] = []
    try:
        await service.start()
        assert service.health()["status"] == "ok"
        await service.store.write("alice", title="One", content="first")
        stop_listening = service.changes.listen("alice", lambda change: heard.append(change.keys))
        await service.store.write("bob", title="Two", content="second")  # alice unloads
        assert service.health()["tokens_loaded"] == 1
        (vault_root / "alice" / "hand.md").write_text("# Hand\n\nsaved in an editor\n", encoding="utf-8")
        await wait_for(lambda: any("hand.md" in " ".join(keys) for keys in heard), timeout=10)
        stop_listening()
    finally:
        await service.close()


async def test_close_records_the_accesses_still_queued(
    make_settings: Callable[..., Settings], vault_root: Path
) -> None:
    service = Service(make_settings(embedder="hash"))
    store = service.store
    await store.write("alice", title="Note", content="a note")
    found = await store.find("alice", filenames=["note.md"])
    await store.touch("alice", found.memories)
    await service.close()  # before the recorder's round: recorded all the same
    with Sidecar.open(vault_root / "alice") as sidecar:
        assert sidecar.access_counts()["note.md"][0] >= 2  # the write and the read


def _note(folder: Path, name: str, body: str) -> None:
    """A memory saved in place, as an editor may: the folder's listing does not change."""
    (folder / name).write_text(f"---\npriority: P1\n---\n# {name[:-3]}\n\n{body}\n", encoding="utf-8")


async def _saved_vault(vault_root: Path, make_settings: Callable[..., Settings]) -> Path:
    """alice's folder of 20 notes, loaded once and closed: its snapshot written, as before a restart."""
    folder = vault_root / "alice"
    folder.mkdir()
    for i in range(20):
        _note(folder, f"note-{i}.md", f"ordinary words number{i}")
    first = Service(make_settings(embedder="hash"))
    await first.store.state("alice")
    await first.close()  # writes the snapshot
    assert (folder / ".memvault" / "snapshot.npz").is_file()
    return folder


async def test_a_load_begun_while_the_server_starts_misses_no_edit_made_meanwhile(
    make_settings: Callable[..., Settings], vault_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """serve begins a restart's load before its imports end (``begin``); an edit made after that
    load read the folder and before the server started still reaches the index: the watcher ran
    before the load began."""
    monkeypatch.setattr("memvault.load.snapshot.MIN_MEMORIES", 0)  # a restart from the snapshot
    folder = await _saved_vault(vault_root, make_settings)

    service = Service(make_settings(embedder="hash"))
    try:
        await service.begin(["alice"])  # (makes the watcher, as serve does not)
        await wait_for(lambda: service.health()["tokens_loaded"] == 1, timeout=10)
        _note(folder, "note-3.md", "changed to mention a zebra")
        await service.start()

        async def edited() -> bool:
            found = await service.store.find("alice", query="zebra")
            return [m.id for m in found.memories] == ["note-3.md"]

        await wait_for(edited, timeout=10)
    finally:
        await service.close()


@pytest.mark.slow
async def test_what_an_early_load_leaves_to_the_background_runs_without_any_request(
    make_settings: Callable[..., Settings], vault_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A restart's background work (building the memories its load left stored) waits for the
    first call to end, and does not wait for ever when no call comes."""
    monkeypatch.setattr("memvault.load.snapshot.MIN_MEMORIES", 0)
    # The folder compared in a helper process, as for a large vault: the load builds no memory.
    monkeypatch.setattr("memvault.load.processes.HELPER_MIN_BYTES", 0)
    monkeypatch.setattr("memvault.load.processes.usable_cpus", lambda: 2)
    await _saved_vault(vault_root, make_settings)

    service = Service(make_settings(embedder="hash"))
    try:
        await service.begin(["alice"])
        await wait_for(lambda: service.health()["tokens_loaded"] == 1, timeout=10)
        state = service.registry.states["alice"]
        assert state.hot.memories.unbuilt == 20
        await service.start()
        await wait_for(lambda: state.hot.memories.unbuilt == 0, timeout=10)
    finally:
        await service.close()
