"""Temp files of ours left by an interrupted write: removed at a token's load, or once old enough."""

import asyncio
import logging
import os
import time
from pathlib import Path

import anyio
import anyio.to_thread
from filelock import Timeout

from memvault.disk.files import TEMP_MIN_AGE_SECONDS
from memvault.disk.vault import Vault, folder_lock
from memvault.registry.state import TokenState

log = logging.getLogger("memvault")


def _remove_in(folder: Path, paths: list[Path]) -> int:
    """Remove these temp files of ours, if old enough, under the token folder's lock (worker thread)."""
    vault = Vault(folder)
    vault.leftovers = paths
    with folder_lock(folder):
        return vault.remove_leftovers(time.time())


def remove(state: TokenState) -> None:
    """Temp files of ours the load's scan saw, left by a crash mid-write: gone, under the lock.
    Those too young to be sure of (a restart right after a SIGKILL) are kept in
    ``young_leftovers``, and removed once they are old enough (see remove_when_due)."""
    seen = list(state.vault.leftovers)
    if not seen:
        return
    try:
        with state.file_lock():
            removed = state.vault.remove_leftovers(time.time())
    except (Timeout, OSError):
        return  # another process holds the lock for long: the next load tries again
    if removed:
        log.info("removed %d temp file(s) left by an interrupted write", removed)
    state.young_leftovers = [p for p in seen if os.path.lexists(p)]


async def remove_when_due(folder: Path, young: list[Path]) -> None:
    """Remove temp files left by an interrupted write once they are old enough: they waited
    for the token's next load, which may be days away (they sit in `git status` meanwhile)."""

    def newest() -> float | None:
        times = [p.lstat().st_mtime for p in young if os.path.lexists(p)]
        return max(times) if times else None

    while (latest := await anyio.to_thread.run_sync(newest)) is not None:
        wait = TEMP_MIN_AGE_SECONDS - (time.time() - latest)
        if wait > 0:
            await asyncio.sleep(wait + 0.05)
            continue

        try:
            removed = await anyio.to_thread.run_sync(_remove_in, folder, list(young))
        except (Timeout, OSError):
            return  # the next load tries again
        if removed:
            log.info("removed %d temp file(s) left by an interrupted write", removed)
        young = [p for p in young if os.path.lexists(p)]
