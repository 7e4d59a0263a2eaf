"""What reads, sweeps and migrate change: a read-only key nothing, a listing no sweep; what they say."""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import keyed, text_of

from memvault.cli.main import main
from memvault.ops.service import Service
from memvault.server import keys

pytestmark = pytest.mark.anyio

OLD = "2020-01-01T00:00:00.000Z"


def stale_vault(folder: Path, count: int = 5) -> None:
    """Memories that a read would write back (an old lastAccessedAt) and a sweep would archive."""
    folder.mkdir(parents=True)
    for i in range(count):
        (folder / f"note-{i}.md").write_text(
            f"---\npriority: P2\ncreatedAt: {OLD}\nupdatedAt: {OLD}\nlastAccessedAt: {OLD}\n---\n"
            f"# Note {i}\n\nkiwi orchard number {i}\n",
            encoding="utf-8",
        )


def file_hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".memvault" not in p.relative_to(folder).parts
    }


async def test_a_read_only_key_neither_writes_access_times_back_nor_archives(
    server_factory: Callable[..., Any], vault_root: Path, tmp_path: Path
) -> None:
    stale_vault(vault_root / "alice")
    before = file_hashes(vault_root / "alice")
    keys_file = tmp_path / "keys.txt"
    viewer = keys.add(keys_file, "viewer", "alice", read_only=True)
    async with server_factory(keys_file=keys_file, access_writeback="always") as srv:
        async with keyed(srv.url, viewer) as s:
            for tool, args in (
                ("read_memory", {}),
                ("read_memory", {"query": "kiwi"}),
                ("read_memory", {"filenames": ["note-1.md"]}),
                ("list_memory_titles", {}),
                ("recall", {"query": "kiwi orchard"}),
            ):
                result = await s.call_tool(tool, args)
                assert not result.is_error, text_of(result)
        await srv.app.state.service.idle()
    assert file_hashes(vault_root / "alice") == before
    assert not (vault_root / "alice" / "archive").exists()


async def test_listing_titles_archives_nothing_and_reading_may(make_settings, vault_root: Path) -> None:
    stale_vault(vault_root / "alice")
    service = Service(make_settings())
    store = service.store
    try:
        rows, _ = await store.list_hot("alice")
        assert len(rows) == 5
        await service.idle()
        assert not (vault_root / "alice" / "archive").exists()
        found = await store.find("alice", filenames=["note-0.md"])
        await store.touch("alice", found.memories)
        await service.idle()
        assert (vault_root / "alice" / "archive").is_dir()  # the lazy sweep follows a read
    finally:
        await service.close()


def test_migrate_writes_last_accessed_at_as_mem_mcp_expects(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    folder.mkdir()
    (folder / "plain.md").write_text("just my text\n", encoding="utf-8")
    assert main(["migrate", "--root", str(tmp_path)]) == 0
    head = (folder / "plain.md").read_text(encoding="utf-8").split("---\n")[1]
    fields = dict(line.split(": ", 1) for line in head.splitlines())
    assert {"priority", "createdAt", "updatedAt", "lastAccessedAt"} <= set(fields)
    assert fields["lastAccessedAt"].endswith("Z")


def test_evict_dry_run_names_a_conflicted_file_it_keeps_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale_vault(tmp_path / "alice", count=2)
    path = tmp_path / "alice" / "note-0.md"
    path.write_text(path.read_text() + "<<<<<<< HEAD\nmine\n=======\nyours\n>>>>>>> b\n", encoding="utf-8")
    assert main(["evict", "--root", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "alice: would archive 1" in out
    kept = [line for line in out.splitlines() if "note-0.md" in line]
    assert len(kept) == 1 and "conflict markers" in kept[0] and "resolve" in kept[0], out


async def request_while_first_call(state: Any, name: str, request: Any) -> list[int]:
    """Wrap ``state``'s method ``name`` (called in a worker thread, under the token's lock): during
    its first call, start ``request()`` on the event loop and wait until it waits for the token's
    lock. Returns the list of calls, which the request notes the count of once done."""
    loop = asyncio.get_running_loop()
    calls: list[int] = []
    seen: list[int] = []
    target = state.vault if name == "update" else state
    real = getattr(target, name)

    async def run_request() -> None:
        await request()
        seen.append(len(calls))

    def wrapped(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            loop.call_soon_threadsafe(lambda: background_tasks.add(loop.create_task(run_request())))
            deadline = time.monotonic() + 5
            while getattr(state.lock, "waiting", 0) == 0 and time.monotonic() < deadline:
                time.sleep(0.005)
        return real(*args, **kwargs)

    background_tasks: set[asyncio.Task[None]] = set()
    setattr(target, name, wrapped)
    return seen


async def test_a_sweep_gives_the_token_to_a_write_after_the_file_in_hand(
    make_settings: Callable[..., Any], vault_root: Path
) -> None:
    """Under 32 agents, writes waited seconds behind lazy sweeps moving a hundred files per hold of
    the token's lock; now a sweep stops after the file it is moving when a request waits."""
    stale_vault(vault_root / "alice", count=8)
    service = Service(make_settings(capacity=100, embedder="hash"))
    store = service.store
    try:
        state = await store.state("alice")
        seen = await request_while_first_call(
            state, "move", lambda: store.write("alice", title="Fresh", content="a new note")
        )
        evicted = await store.evict("alice")
        await service.idle()
        with anyio.fail_after(10):
            while not seen:
                await anyio.sleep(0.01)
        assert seen == [1]  # the write went in after one move, not eight
        assert len(evicted) == 8  # and the sweep moved the rest after it
        assert sorted(p.name for p in (vault_root / "alice" / "archive").glob("*.md")) == [
            f"note-{i}.md" for i in range(8)
        ]
        assert (vault_root / "alice" / "fresh.md").is_file()
    finally:
        await service.close()


async def test_access_write_backs_give_the_token_to_a_write_after_the_file_in_hand(
    make_settings: Callable[..., Any], vault_root: Path
) -> None:
    """A batch of lastAccessedAt write-backs stops after the file it is writing when a request waits
    for the token's lock; the rest are written after it."""
    stale_vault(vault_root / "alice", count=8)
    service = Service(make_settings(capacity=100, ttl_p2_days=100_000, embedder="hash"))
    store = service.store
    try:
        state = await store.state("alice")
        seen = await request_while_first_call(
            state, "update", lambda: store.write("alice", title="Fresh", content="a new note")
        )
        found = await store.find("alice", query="kiwi")
        assert len(found.memories) == 8
        await store.touch("alice", found.memories)
        with anyio.fail_after(10):
            while not seen:
                await anyio.sleep(0.01)
        await service.idle()
        assert seen == [1]  # the write went in after one write-back, not eight
        for i in range(8):  # and every write-back was made after it
            text = (vault_root / "alice" / f"note-{i}.md").read_text(encoding="utf-8")
            assert f"lastAccessedAt: {OLD}" not in text
    finally:
        await service.close()
