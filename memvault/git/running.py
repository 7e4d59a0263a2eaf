"""Which vaults this process syncs, and what tools and /healthz say of their sync.

Light enough for every request's module to import: the sync loop itself
(:mod:`memvault.git.loop`) imports git and the merge code, which only MEMVAULT_SYNC=git needs."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from memvault.clock import format_time

__all__ = ["OFF", "Status", "Syncing", "register", "running", "stale_note", "stale_note_once", "unregister"]


@dataclass(frozen=True, slots=True)
class Status:
    """What /healthz shows: ``ok``, ``failing`` or ``off`` (``starting`` until the first sync)."""

    state: str
    last_ok: datetime | None = None
    error: str | None = None
    ahead: int = 0
    behind: int = 0
    failing_since: datetime | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "last_ok": format_time(self.last_ok) if self.last_ok else None,
            "error": self.error,
            "ahead": self.ahead,
            "behind": self.behind,
        }


OFF = Status("off")


class Syncing(Protocol):
    """What this module needs of :class:`memvault.git.loop.SyncLoop` (which imports this one)."""

    def status(self) -> Status: ...

    def stale_note(self, *, once_for: str | None = None) -> str | None: ...


_RUNNING: dict[Path, Syncing] = {}  # the loops this process runs, by resolved vault root
_RUNNING_LOCK = threading.Lock()


def register(root: Path, loop: Syncing) -> None:
    with _RUNNING_LOCK:
        _RUNNING[root.resolve()] = loop


def unregister(root: Path, loop: Syncing) -> None:
    with _RUNNING_LOCK:
        if _RUNNING.get(root.resolve()) is loop:
            del _RUNNING[root.resolve()]


def running(root: Path) -> Syncing | None:
    """The sync loop this process runs for the vault at ``root``, if any."""
    if not _RUNNING:  # no sync (the default): no path to resolve on every write
        return None
    with _RUNNING_LOCK:
        return _RUNNING.get(root.resolve())


def stale_note(root: Path) -> str | None:
    """A sentence for an agent when the vault has not synced for a while, else None (memory_stats)."""
    loop = running(root)
    return loop.stale_note() if loop is not None else None


def stale_note_once(root: Path, token: str) -> str | None:
    """stale_note, said once per vault (token) while the sync keeps failing (a write's reply)."""
    loop = running(root)
    return loop.stale_note(once_for=token) if loop is not None else None
