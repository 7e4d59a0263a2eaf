"""Session summaries and the graph as operations: the token's sidecar read or written safely.

Each runs in a worker thread, under the token's locks, after bringing the sidecar in line with the
files (memvault.records.sync).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import anyio.to_thread

from memvault.ops.store import Store
from memvault.records import sync
from memvault.records.sidecar import Sidecar, sidecar_path

T = TypeVar("T")


async def sidecar_read(store: Store, token: str, work: Callable[[Sidecar, Path], T]) -> T | None:
    """Run ``work(sidecar, token folder)`` in a worker thread, the token held loaded meanwhile (an
    unload closes the sidecar), after bringing the sidecar's sessions and graph in line with their
    files (memvault.records.sync). None when the token has neither: a read never creates a folder."""
    async with store.using(token) as state:
        if state.sidecar is None:
            if not sidecar_path(state.dir).is_file() and not sync.has_files(state.dir):
                return None
            async with state.lock:
                await anyio.to_thread.run_sync(state.ensure_sidecar)
        sidecar = state.sidecar
        assert sidecar is not None

        def run() -> T:
            sync.sync(sidecar, state.dir)
            return work(sidecar, state.dir)

        return await anyio.to_thread.run_sync(run)


async def sidecar_write(store: Store, token: str, work: Callable[[Callable[[], Sidecar], Path], T]) -> T:
    """Run ``work(open sidecar, token folder)`` under the token's locks in a worker thread. The
    sidecar opens (and the folder is created) only when ``work`` first asks, after its arguments
    are checked; it is then in line with the files, under the token's file lock until the end."""
    async with store.using(token) as state, state.lock:

        def run() -> T:
            with contextlib.ExitStack() as stack:
                ready: list[Sidecar] = []

                def opened() -> Sidecar:
                    if not ready:  # first use: the file lock, then the files' state
                        sidecar = state.ensure_sidecar()
                        stack.enter_context(state.file_lock())
                        sync.sync(sidecar, state.dir)
                        ready.append(sidecar)
                    return ready[0]

                return work(opened, state.dir)

        return await anyio.to_thread.run_sync(run)
