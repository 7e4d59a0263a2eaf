"""Give freed heap memory back to the operating system after large transient work.

glibc keeps memory freed by a thread in that thread's arena and returns it only from the top of
the heap, so after a load, an embedding backlog or a topic fit the server's resident memory
stays near its peak although most of it is free: measured at 100,000 memories, 532 MB resident
of which 175 MB were free. ``malloc_trim(0)`` hands those pages back. Elsewhere (musl, macOS)
there is nothing to call and ``release`` does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import threading
from collections.abc import Callable

__all__ = ["release", "supported"]

_lock = threading.Lock()
_trim: Callable[[int], int] | None = None
_looked = False


def _find() -> Callable[[int], int] | None:
    global _trim, _looked
    with _lock:
        if not _looked:
            _looked = True
            try:
                libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
                trim = libc.malloc_trim
            except (OSError, AttributeError):
                trim = None
            if trim is not None:
                trim.argtypes = [ctypes.c_size_t]
                trim.restype = ctypes.c_int
            _trim = trim
        return _trim


def supported() -> bool:
    return _find() is not None


def release() -> bool:
    """Return free heap pages to the system; True if anything was returned."""
    trim = _find()
    return bool(trim(0)) if trim is not None else False
