"""Work on the event loop when it cannot wait, else in a worker thread.

Under many agents a worker thread's round trip (a wake-up, and the GIL handed over and back) cost
more CPU than a short look itself (bench_load, bench/RESULTS.md).
So a look that needs only memory tries the event loop first (``inline``): any lock it needs is
taken only if it is free at once, and anything that would read a file or wait raises
:class:`NeedsThread` before changing anything; :func:`look` then runs it again in a thread.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any, Self, TypeVar

import anyio.to_thread

T = TypeVar("T")

# A look over a whole token (recall, a listing) goes on the event loop only up to this many
# memories (a few milliseconds); a larger one would stall every other agent's request.
MAX_ROWS = 5_000


class NeedsThread(Exception):
    """A look meant for the event loop found it must wait (a lock held by a worker thread) or read
    a file: the caller runs it again in a worker thread. Raised before anything was changed."""


class held:
    """``lock`` held for the block; on the event loop (``inline``) only if it is free at once.

    A class, not a generator: every read takes it a few times, and a generator's context manager
    cost five times as much as the lock itself."""

    __slots__ = ("_inline", "_lock")

    def __init__(self, lock: threading.Lock | threading.RLock, inline: bool) -> None:
        self._lock = lock
        self._inline = inline

    def __enter__(self) -> Self:
        if not self._lock.acquire(blocking=not self._inline):
            raise NeedsThread
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


async def look(work: Callable[..., T], *args: Any) -> T:
    """``work(*args, inline=True)`` on the event loop, or, if it raises NeedsThread,
    ``work(*args, inline=False)`` in a worker thread."""
    try:
        return work(*args, inline=True)
    except NeedsThread:
        return await anyio.to_thread.run_sync(functools.partial(work, *args, inline=False))
