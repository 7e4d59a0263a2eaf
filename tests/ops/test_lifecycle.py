"""A lifecycle an agent can follow: fresh memories stay, a sweep that archives says so, and a name
the archive holds points to restore_memory (issue 50)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from memvault.ops.service import Service

pytestmark = pytest.mark.anyio

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


async def test_two_hundred_fresh_writes_then_a_read_archive_nothing(make_settings: Any, vault_root: Any):
    service = Service(make_settings(), clock=Clock())
    store = service.store
    try:
        for i in range(200):
            await store.write("alice", title=f"Fact {i}", content=f"kiwi fact number {i}")
        found = await store.find("alice", query="kiwi")
        await store.touch("alice", found.memories)
        await service.idle()
        assert (await store.evict("alice", dry_run=True)) == []
        assert not (vault_root / "alice" / "archive").exists() or not any(
            (vault_root / "alice" / "archive").glob("*.md")
        )
        assert len(list((vault_root / "alice").glob("*.md"))) == 200
    finally:
        await service.close()


@pytest.mark.slow
async def test_a_sweep_past_the_grace_period_says_what_it_archived_and_where_it_went(
    server_factory: Any, vault_root: Any
):
    clock = Clock()
    async with server_factory(clock=clock, embedder="hash") as srv, srv.session("alice") as s:
        for i in range(55):
            err, text = await srv.call(s, "write_memory", title=f"Orchard {i}", content=f"kiwi tree {i}")
            assert not err, text
        service: Service = srv.app.state.service
        err, text = await srv.call(s, "read_memory", query="kiwi")
        assert not err, text
        await service.idle()
        assert not list((vault_root / "alice").glob("archive/*.md"))  # written moments ago: kept

        clock.now = T0 + timedelta(days=2)  # past the grace period and the sweep's interval
        err, text = await srv.call(s, "read_memory", filenames=["orchard-54.md"])
        assert not err, text
        await service.idle()
        archived = sorted(p.name for p in (vault_root / "alice" / "archive").glob("*.md"))
        assert len(archived) == 5, archived

        err, text = await srv.call(s, "list_memory_titles")
        assert not err and "The eviction sweep archived 5 memories (5 over capacity)" in text, text
        assert "restore_memory" in text and archived[0] in text
        err, text = await srv.call(s, "list_memory_titles")
        assert "eviction sweep archived" not in text  # told once

        err, text = await srv.call(s, "memory_stats")
        assert not err and "Last sweep that archived" in text and "5 over capacity" in text, text

        err, text = await srv.call(s, "read_memory", filenames=[archived[0]])
        assert err and "in the archive" in text and f"restore_memory(filename='{archived[0]}')" in text
        err, text = await srv.call(s, "read_memory", filenames=[archived[0], "orchard-54.md"])
        assert not err and "In the archive, not hot" in text and archived[0] in text, text
        err, text = await srv.call(s, "update_memory", filename=archived[0], content="changed")
        assert err and "restore_memory" in text, text

        number = archived[0].removeprefix("orchard-").removesuffix(".md")
        err, text = await srv.call(s, "recall", query=f"kiwi tree {number}")
        assert not err and "also match" in text and "includeArchive=true" in text, text

        err, text = await srv.call(s, "restore_memory", filename=archived[0])
        assert not err, text
        err, text = await srv.call(s, "read_memory", filenames=[archived[0]])
        assert not err and "kiwi tree" in text


async def test_a_file_saved_by_hand_is_listed_and_found_by_the_next_call(make_settings: Any, vault_root: Any):
    """Issue 50: mem-mcp lists the folder on every call; a file a person saved was missing from a
    listing made right after (the watcher's batch comes a moment later; here no watcher runs)."""
    service = Service(make_settings(), clock=Clock())
    store = service.store
    try:
        await store.write("alice", title="First", content="written by the agent")
        hand = vault_root / "alice" / "saved-by-hand.md"
        hand.write_text("# Saved by hand\n\nThe gazebo key is under the mat.\n", encoding="utf-8")
        rows, _ = await store.list_hot("alice")
        assert [m.id for m in rows] == ["first.md", "saved-by-hand.md"]
        found = await store.find("alice", query="gazebo")
        assert [m.id for m in found.memories] == ["saved-by-hand.md"]
        hand.unlink()
        rows, _ = await store.list_hot("alice")
        assert [m.id for m in rows] == ["first.md"]
    finally:
        await service.close()


async def test_an_import_of_old_notes_is_not_archived_by_the_next_reads(make_settings: Any, vault_root: Any):
    """Issue 50: 52 imported notes and one recall: the sweep archived the user's notes at once."""
    import anyio

    from memvault.cli.main import main

    notes = vault_root.parent / "notes"
    notes.mkdir()
    old = "2020-01-01T00:00:00.000Z"
    for i in range(60):
        (notes / f"n{i}.md").write_text(
            f"---\npriority: P2\ncreatedAt: {old}\nupdatedAt: {old}\nlastAccessedAt: {old}\n---\n"
            f"# Run {i}\n\nLong run number {i}.\n",
            encoding="utf-8",
        )
    args = ["import-from", "notes", str(notes), "--root", str(vault_root), "--token", "alice"]
    assert await anyio.to_thread.run_sync(main, args) == 0
    clock = Clock()
    clock.now = datetime.now(UTC)
    service = Service(make_settings(), clock=clock)
    store = service.store
    try:
        for _ in range(3):
            found = await store.find("alice", query="run")
            await store.touch("alice", found.memories)
            await service.idle()
        assert not list((vault_root / "alice").glob("archive/**/*.md"))
        clock.now += timedelta(days=2)  # past the grace: the TTL of notes untouched since 2020 applies
        evicted = await store.evict("alice", dry_run=True)
        assert len(evicted) >= 10
    finally:
        await service.close()
