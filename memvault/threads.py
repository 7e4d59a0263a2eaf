"""Work on the event loop when it cannot wait, else in a worker thread.

Under many agents a worker thread's round trip (a wake-up, and the GIL handed over and back) cost
more CPU than a short look itself (bench_load, bench/RESULTS.md).
So a look that needs only memory tries the event loop first (:data:`ON_LOOP`): any lock it needs
is taken only if it is free at once, and anything that would read a file or wait raises
:class:`NeedsThread` before changing anything; :func:`look` then runs it again in a worker thread
(:data:`IN_THREAD`). A function that can run either way takes the :class:`Where` as its last
argument and hands it on to what it calls.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import threading
from collections.abc import Callable
from typing import Any, Self, TypeVar

import anyio
import anyio.to_thread

T = TypeVar("T")

# A look over a whole token (recall, a listing) goes on the event loop only up to this many
# memories (a few milliseconds); a larger one would stall every other agent's request.
MAX_ROWS = 5_000


class Where(enum.Enum):
    """Where a look runs, and so whether it may wait."""

    ON_LOOP = "on the event loop"  # never waits: a lock only if free at once, else NeedsThread
    IN_THREAD = "in a worker thread"  # may wait for a lock and read files


ON_LOOP = Where.ON_LOOP
IN_THREAD = Where.IN_THREAD


class NeedsThread(Exception):
    """A look meant for the event loop found it must wait (a lock held by a worker thread) or read
    a file: the caller runs it again in a worker thread. Raised before anything was changed."""


class held:
    """``lock`` held for the block; on the event loop (ON_LOOP) only if it is free at once.

    A class, not a generator: every read takes it a few times, and a generator's context manager
    cost five times as much as the lock itself."""

    __slots__ = ("_lock", "_wait")

    def __init__(self, lock: threading.Lock | threading.RLock, where: Where) -> None:
        self._lock = lock
        self._wait = where is IN_THREAD

    def __enter__(self) -> Self:
        if not self._lock.acquire(blocking=self._wait):
            raise NeedsThread
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


async def look(work: Callable[..., T], *args: Any) -> T:
    """``work(*args, ON_LOOP)`` on the event loop, or, if it raises NeedsThread,
    ``work(*args, IN_THREAD)`` in a worker thread."""
    try:
        return work(*args, ON_LOOP)
    except NeedsThread:
        return await anyio.to_thread.run_sync(functools.partial(work, *args, IN_THREAD))


class Threads:
    """At most ``total`` worker threads for one kind of work, in whichever event loop runs it (an
    anyio CapacityLimiter belongs to the loop it was made in: tests and the CLI run several)."""

    __slots__ = ("_made", "_total")

    def __init__(self, total: int) -> None:
        self._total = total
        self._made: tuple[asyncio.AbstractEventLoop, anyio.CapacityLimiter] | None = None

    def limiter(self) -> anyio.CapacityLimiter:
        """This event loop's limiter (made at its first use in it)."""
        loop = asyncio.get_running_loop()
        if self._made is None or self._made[0] is not loop:
            self._made = (loop, anyio.CapacityLimiter(self._total))
        return self._made[1]
