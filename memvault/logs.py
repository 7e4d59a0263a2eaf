"""Logging that cannot flood: one record of a kind per window, and bookkeeping that only logs.

A failure that repeats with every event (a refused accept, a full disk under every access record)
would otherwise write a line, or a traceback, each time.
"""

from __future__ import annotations

import logging
import sqlite3
import time
from collections.abc import Callable

from memvault.errors import is_disk_full

log = logging.getLogger("memvault")

FLOOD_WINDOW_SECONDS = 10.0


class OncePer(logging.Filter):
    """Lets one record of a kind through per window, without its traceback, and says how many
    were held back; other records pass untouched."""

    def __init__(
        self,
        matches: Callable[[logging.LogRecord], bool],
        window: float = FLOOD_WINDOW_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self.matches = matches
        self.window = window
        self.clock = clock
        self._last = -float("inf")
        self.held = 0

    def note(self, logger: logging.Logger, level: int, message: str) -> None:
        """Log ``message`` unless one went out within the window (then it is counted)."""
        record = logger.makeRecord(logger.name, level, __file__, 0, message, (), None)
        if self.filter(record):
            logger.handle(record)

    def filter(self, record: logging.LogRecord) -> bool:
        if not self.matches(record):
            return True
        now = self.clock()
        if now - self._last < self.window:
            self.held += 1
            return False
        self._last = now
        if self.held:
            record.msg = f"{record.msg} ({self.held} more like it in the last {self.window:.0f} s)"
            self.held = 0
        record.exc_info = None  # the same traceback each time says nothing new
        record.exc_text = None
        return True


_FAILURES = OncePer(lambda record: True, window=60.0)


def note_failure(what: str, exc: BaseException) -> None:
    """One log line a minute for bookkeeping that failed, without a path or a token."""
    why = "the disk is full" if is_disk_full(exc) else type(exc).__name__
    _FAILURES.note(log, logging.WARNING, f"could not {what} ({why})")


def bookkeep(what: str, work: Callable[[], object]) -> None:
    """Bookkeeping beside a change that took effect, or beside a read: access records, caches,
    the sweep time. A failure (a full disk, a locked sidecar) costs only that record: it never
    turns a read into an error, or a write that happened into one reported as failed."""
    try:
        work()
    except (sqlite3.Error, OSError) as exc:
        note_failure(what, exc)
