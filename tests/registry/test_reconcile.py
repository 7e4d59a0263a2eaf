"""Outside changes (memvault.registry.reconcile): which changed paths need reading again."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest

from memvault.config import Settings
from memvault.ops.service import Service
from memvault.registry import reconcile
from memvault.registry.state import TokenState

pytestmark = pytest.mark.anyio


@pytest.fixture
async def written(make_settings: Callable[..., Settings]) -> AsyncIterator[tuple[Service, TokenState]]:
    """alice with two memories the server wrote, held loaded for the test."""
    service = Service(make_settings(embedder="hash"))
    try:
        await service.store.write("alice", title="One", content="first")
        await service.store.write("alice", title="Two", content="second")
        async with service.registry.using("alice") as state:
            yield service, state
    finally:
        await service.close()


async def test_the_server_s_own_writes_are_in_line_and_a_change_by_hand_is_not(
    written: tuple[Service, TokenState],
) -> None:
    service, state = written
    one, two = state.dir / "one.md", state.dir / "two.md"
    assert reconcile.in_line(state, [one, two])
    assert reconcile.in_line(state, [state.dir / ".memvault" / "sidecar.db"])  # never a memory
    await service.store.update("alice", "two.md", tags=["edited"])
    assert reconcile.in_line(state, [two])  # the server's update: the index has it already
    two.write_text("# Two\n\nchanged by hand\n", encoding="utf-8")
    assert not reconcile.in_line(state, [one, two])
    assert reconcile.apply_changes(state, [one, two], False) == 1
    assert reconcile.in_line(state, [one, two])  # read again: in line now


async def test_a_new_a_gone_or_a_linked_file_is_not_in_line(written: tuple[Service, TokenState]) -> None:
    _, state = written
    new = state.dir / "new.md"
    new.write_text("# New\n\nby hand\n", encoding="utf-8")
    assert not reconcile.in_line(state, [new])
    (state.dir / "one.md").unlink()
    assert not reconcile.in_line(state, [state.dir / "one.md"])
    (state.dir / "link.md").symlink_to(state.dir / "two.md")
    assert not reconcile.in_line(state, [state.dir / "link.md"])


async def test_many_paths_are_left_to_a_worker_thread(written: tuple[Service, TokenState]) -> None:
    _, state = written
    paths = [state.dir / "one.md"] * (reconcile.MAX_IN_LINE + 1)
    assert reconcile.in_line(state, paths[:-1])
    assert not reconcile.in_line(state, paths)
