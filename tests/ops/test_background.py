"""Background file work (memvault.ops.background): one piece at a time, rests, and a thread of its own."""

from __future__ import annotations

import threading
import time

import anyio
import anyio.to_thread
import pytest

from memvault.ops import background
from memvault.ops.background import Background

pytestmark = pytest.mark.anyio


def test_background_work_rests_as_long_as_it_took_and_longer_while_requests_come_in() -> None:
    assert background.rest_after(0.01, busy=False) == 0.01
    assert background.rest_after(0.01, busy=True) == pytest.approx(0.19)
    assert background.rest_after(10.0, busy=True) == background.MAX_PAUSE


async def test_pieces_of_background_work_run_one_at_a_time() -> None:
    work = Background(lambda: False)
    inside, most = 0, 0

    async def piece() -> None:
        nonlocal inside, most
        async with work.turn(rest=False):
            inside += 1
            most = max(most, inside)
            await anyio.sleep(0.01)
            inside -= 1

    async with anyio.create_task_group() as tg:
        for _ in range(5):
            tg.start_soon(piece)
    assert most == 1


async def test_a_piece_waits_for_the_last_ones_rest_and_one_a_person_asked_for_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(background, "rest_after", lambda took, busy: 60.0)
    work = Background(lambda: True)
    async with work.turn():
        pass  # a lazy piece: the next lazy one rests a minute
    started: list[str] = []

    async def lazy() -> None:
        async with work.turn():
            started.append("lazy")

    async with anyio.create_task_group() as tg:
        tg.start_soon(lazy)
        with anyio.fail_after(10):
            async with work.turn(rest=False):
                started.append("asked for")
        with anyio.move_on_after(0.2):
            while not started.count("lazy"):
                await anyio.sleep(0.01)
        assert started == ["asked for"]  # the lazy piece still rests
        tg.cancel_scope.cancel()


async def test_background_threads_leave_the_request_threads_free() -> None:
    """Background work runs in threads of its own, one at a time: however much of it is queued, a
    request that needs a worker thread gets one at once."""
    work = Background(lambda: True)
    release = threading.Event()
    running = 0
    most = 0
    lock = threading.Lock()

    def blocked() -> None:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        release.wait(10)
        with lock:
            running -= 1

    async with anyio.create_task_group() as tg:
        for _ in range(50):  # more than anyio's default pool of 40
            tg.start_soon(work.run, blocked)
        await anyio.sleep(0.05)
        with anyio.fail_after(5):
            assert await anyio.to_thread.run_sync(time.monotonic) > 0
        release.set()
    assert most == 1
