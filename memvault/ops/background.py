"""Background file work's share of the process: one piece at a time, a rest after each, requests first.

Access write-backs and lazy eviction sweeps change files under a token's lock, in a worker thread.
Under 32 agents, each token's first read started a sweep: 32 ran at once, in as many threads, each
holding its token's lock for a hundred file moves (two folder fsyncs each), and writes to those
tokens waited seconds (bench/bench_background.py). So each piece
(a sweep's plan, a batch of its moves, a batch of write-backs) takes its turn here: one at a time
in the process, in a thread of its own (never one a request is waiting for), and the next waits
as long as the last one took, or BUSY_PAUSE times that while requests come in. A piece holding a
token's lock gives it up after the file in hand when a request waits for it (``give_way``).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import anyio
import anyio.to_thread

from memvault.registry.state import TokenState
from memvault.threads import Threads

__all__ = ["BUSY_PAUSE", "MAX_PAUSE", "Background", "give_way", "rest_after"]

T = TypeVar("T")

BUSY_PAUSE = 19.0  # while requests come in, background work rests this many times as long as it took
MAX_PAUSE = 5.0  # seconds, at most, between two pieces


def rest_after(took: float, busy: bool) -> float:
    """Seconds background work rests after a piece that took ``took``: as long, so it uses at most
    half of the disk and a core, or BUSY_PAUSE times that while requests come in (a twentieth)."""
    return min(MAX_PAUSE, took * (BUSY_PAUSE if busy else 1.0))


def give_way(state: TokenState) -> Callable[[], bool]:
    """Whether someone waits for the token's lock (asked in the worker thread between two files)."""
    return lambda: state.lock.waiting > 0


class Background:
    """The turns of the process's background file work. ``busy`` says whether requests came in
    lately (the embedding worker's clock of them)."""

    def __init__(self, busy: Callable[[], bool]) -> None:
        self.busy = busy
        self._one_at_a_time = asyncio.Lock()
        self._rested = 0.0  # time.monotonic() when the next piece may start
        self._threads = Threads(1)

    @contextlib.asynccontextmanager
    async def turn(self, *, rest: bool = True) -> AsyncIterator[None]:
        """The block runs alone among background pieces, after the last one's rest; with ``rest``
        the next one rests after it (without: a person asked for it, e.g. ``memvault evict``, and it
        neither waits for a rest nor makes others rest)."""
        while True:
            if rest and (left := self._rested - time.monotonic()) > 0:
                await asyncio.sleep(left)
                continue
            await self._one_at_a_time.acquire()
            if not rest or self._rested <= time.monotonic():
                break
            self._one_at_a_time.release()  # another piece ran meanwhile: its rest first
        started = time.monotonic()
        try:
            yield
        finally:
            if rest:
                now = time.monotonic()
                self._rested = now + rest_after(now - started, self.busy())
            self._one_at_a_time.release()

    async def run(self, work: Callable[..., T], *args: object) -> T:
        """``work(*args)`` in a worker thread of background work's own (one at a time): a request
        that needs a thread never queues behind background work for one."""
        return await anyio.to_thread.run_sync(work, *args, limiter=self._threads.limiter())
