"""Keep the server's resident memory near what it uses (glibc; elsewhere these do nothing).

glibc keeps memory freed by a thread in that thread's arena and returns it only from the top of
the heap, so after a load or an embedding backlog the server's resident memory stays near its
peak although much of it is free (a third of it, measured at 100,000 memories).
``release`` (``malloc_trim(0)``) hands those pages back.

glibc also raises its mmap threshold each time a large block is freed (up to 32 MB), after which
numpy's temporaries of a few MB come from the heap and fragment it. ``configure`` pins the
threshold at 1 MiB, so large blocks are always mapped and unmapped: at 100,000 memories the
server settled lower (bench/RESULTS.md, bench_scale).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import gc
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from typing import Any

__all__ = ["Counts", "configure", "counts", "keep", "release", "supported", "uncollected", "unkeep"]

M_MMAP_THRESHOLD = -3  # mallopt parameter (malloc.h)
MMAP_THRESHOLD = 1 << 20

_lock = threading.Lock()
_trim: Callable[[int], int] | None = None
_mallopt: Callable[[int, int], int] | None = None
_mallinfo2: Callable[[], _MallInfo2] | None = None
_looked = False
_uncollected = 0  # loads under way with the collector paused (see uncollected)
_collector_was_on = False


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


@dataclass(frozen=True)
class Counts:
    """glibc's own account of its memory (``mallinfo2``), in bytes: what lives outside Python
    (SQLite, tokenizers) as well as in it, which tracemalloc does not see."""

    in_use: int  # in use in its arenas
    free: int  # free, kept in its arenas
    mapped: int  # in blocks mapped on their own (large ones)


def _find() -> Callable[[int], int] | None:
    global _trim, _mallopt, _mallinfo2, _looked
    with _lock:
        if not _looked:
            _looked = True
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                trim, mallopt = libc.malloc_trim, libc.mallopt
            except (OSError, AttributeError):
                return None
            trim.argtypes = [ctypes.c_size_t]
            trim.restype = ctypes.c_int
            mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
            mallopt.restype = ctypes.c_int
            _trim, _mallopt = trim, mallopt
            info = getattr(libc, "mallinfo2", None)  # glibc 2.33+
            if info is not None:
                info.restype = _MallInfo2
                _mallinfo2 = info
        return _trim


def supported() -> bool:
    return _find() is not None


def configure() -> bool:
    """Pin glibc's mmap threshold (call once, early: the server does at start). True if set."""
    _find()
    return _mallopt is not None and _mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1


def counts() -> Counts | None:
    """glibc's counts now, or None where they cannot be read (another libc, glibc before 2.33)."""
    _find()
    if _mallinfo2 is None:
        return None
    info = _mallinfo2()
    return Counts(in_use=info.uordblks, free=info.fordblks, mapped=info.hblkhd)


def release() -> bool:
    """Return free heap pages to the system; True if anything was returned."""
    trim = _find()
    return bool(trim(0)) if trim is not None else False


# Seconds between two unkeeps that hand everything back to the collector (see unkeep): at least
# UNKEEP_EVERY, doubling up to UNKEEP_MOST while hand-backs find fewer than FEW_FOUND dead objects.
UNKEEP_EVERY = 60.0
UNKEEP_MOST = 16 * 60.0
FEW_FOUND = 2_000
_unkeep_every = UNKEEP_EVERY
_last_unkeep = float("-inf")


def keep(*, collect: bool = True) -> None:
    """What is alive now stays for long (a token just loaded: its memories and index), so Python's
    cyclic garbage collector stops scanning it (``gc.freeze``). Under many agents a full collection
    over every loaded token held the event loop for as long as a request's whole p99. Reference counts
    still free whatever the kept objects drop.

    What died since the last freeze is collected first (a pass over only what is not frozen yet):
    frozen with the living, the cycles of finished requests (frames, tracebacks, cancel scopes,
    sockets) were never collected, and a server loading and unloading tokens grew with every token
    it served. ``collect`` False skips that pass where no request has run yet (a server's start,
    whose imports made 100,000 objects and few dead ones: the pass over them took 60 ms)."""
    if collect:
        gc.collect()
    gc.freeze()


def unkeep(now: float | None = None) -> bool:
    """Hand everything back to the collector (at an unload) and collect what died while frozen,
    then keep the living again; True if it did. Objects alive at a freeze that died since in a
    cycle (a request's frames, caught while a load ran) are found only so; an unloaded token's own
    objects need no collector (reference counts free them).

    The collection walks every object the process holds (67-155 ms on the event loop among 100
    loaded tokens), so it runs at most once per UNKEEP_EVERY, and while hand-backs find little
    (under token churn they found nothing) the wait doubles up to UNKEEP_MOST: what stays frozen
    in between is bounded by what the last one found. ``now``: time.monotonic() by default."""
    global _last_unkeep, _unkeep_every
    now = time.monotonic() if now is None else now
    with _lock:
        if now - _last_unkeep < _unkeep_every:
            return False
        _last_unkeep = now
    gc.unfreeze()
    found = gc.collect()
    gc.freeze()
    with _lock:
        _unkeep_every = UNKEEP_EVERY if found >= FEW_FOUND else min(UNKEEP_MOST, 2 * _unkeep_every)
    return True


@contextlib.contextmanager
def uncollected() -> Iterator[None]:
    """No automatic cyclic collection while the block runs (a token's load, in a worker thread).

    A load creates some ten objects per memory and keeps them all, so the collector's passes over
    them find nothing: at 100,000 memories its passes were a tenth of a restart. Reference counting
    frees as always; the collector resumes when the last such block ends (loads of two tokens may
    overlap). A block that ends without an error first freezes what it made (as ``keep`` would):
    else the first young pass after it walks all of it, a long pause at 100,000 memories, and finds
    only a few hundred objects of cyclic garbage (numpy's header parsing), which stay frozen until
    ``unkeep``."""
    global _uncollected, _collector_was_on
    with _lock:
        if _uncollected == 0:
            _collector_was_on = gc.isenabled()
            if _collector_was_on:
                gc.collect()  # what died before (finished requests' cycles) is not frozen at the end
            gc.disable()
        _uncollected += 1
    done = False
    try:
        yield
        done = True
    finally:
        with _lock:
            _uncollected -= 1
            if _uncollected == 0 and _collector_was_on:
                if done:
                    gc.freeze()
                gc.enable()


class Releases:
    """Free memory given back (:func:`release`, in a worker thread), one release at a time: under
    token churn an unload came every 25 ms, and releases ran side by side, each holding glibc's
    arena locks (p99 48 ms a release) while loads allocated. Requests that come while one runs
    get one more after it. ``spawn`` runs a coroutine in the background (the registry's)."""

    def __init__(self, spawn: Callable[[Coroutine[Any, Any, Any]], None]) -> None:
        self._spawn = spawn
        self._running = False
        self._again = False

    def request(self) -> None:
        if self._running:
            self._again = True
            return
        self._running = True
        self._spawn(self._run())

    async def _run(self) -> None:
        import anyio.to_thread

        try:
            again = True
            while again:
                self._again = False
                await anyio.to_thread.run_sync(release)
                again = self._again
        finally:
            self._running = False
