"""Access times: when a memory was last read, and writing that back to its file (the writeback policy).

The sidecar records every access; the file's ``lastAccessedAt`` follows at most once a day by default
(``MEMVAULT_ACCESS_WRITEBACK``), so reads do not churn a vault kept in git.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from typing import Any

import anyio.to_thread

from memvault.disk.files import fsync_dir
from memvault.disk.markdown import Memory
from memvault.errors import Conflict, InvalidArgument, InvalidName, MemvaultError, NotFound
from memvault.logs import bookkeep, note_failure
from memvault.records.sidecar import Sidecar
from memvault.registry.state import TokenState
from memvault.registry.tokens import Tokens
from memvault.threads import IN_THREAD, MAX_ROWS, ON_LOOP, NeedsThread, Where

BATCH = 16  # file write-backs per turn of the token's lock: a mutation waits for at most one batch
BUSY_PAUSE = 19.0  # while requests come in, write-backs rest this many times as long as they took
MAX_PAUSE = 5.0  # seconds, at most, between two batches
# Seconds a round of access records waits for more: one trip records many reads. 0.25 against 0.02:
# under 32 agents a round held a few reads of each token, a transaction each; two processes side by
# side, 0.7-5.3% more calls/s (six rounds) and 3% less CPU a call. Queued records are visible to
# listings and recall meanwhile (access.recorded); a crash loses at most this much of the statistics.
COALESCE = 0.25


class Recorder:
    """Drains each token's Pending in the background; ``spawn`` runs work after the current request.

    Access rows of every token with some are recorded together, one worker-thread trip per round
    (a round waits ``COALESCE`` for more): under 32 agents a trip per token and read cost about
    as much CPU as the reads themselves. File write-backs go per token, in batches.
    """

    def __init__(self, tokens: Tokens, spawn: Callable[[Coroutine[Any, Any, Any]], None]) -> None:
        self.tokens = tokens
        self.spawn = spawn
        self._loop: asyncio.AbstractEventLoop | None = None
        self._one_at_a_time = asyncio.Lock()
        self._due: dict[str, TokenState] = {}  # tokens with access rows to record
        self._recording = False

    def know_loop(self) -> None:
        """Learn the event loop (called on it, before work that may note from a worker thread):
        a note from a thread before the loop was known was dropped, and that access stayed queued
        until the token's next one, keeping its state alive."""
        if self._loop is None:
            self._loop = asyncio.get_running_loop()

    def noted(self, state: TokenState) -> None:
        """Something was added to the token's Pending: start a round unless one runs (from a
        worker thread, by way of the event loop)."""
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:
            if self._loop is not None:
                self._loop.call_soon_threadsafe(self.noted, state)
            return
        self._due[state.token] = state
        if not self._recording:
            self._recording = True
            self.spawn(self._record())

    def searched(self, state: TokenState, found: bool) -> None:
        """Count a search (and whether it found anything) for memory_stats."""
        if state.sidecar is not None:
            state.pending.searched(found)
            self.noted(state)

    async def _record(self) -> None:
        """Rounds until nothing is due: every due token's rows in one trip (each token kept loaded
        meanwhile), then its file write-backs (see _write_files)."""
        try:
            while self._due:
                await asyncio.sleep(COALESCE)
                due, self._due = list(self._due.values()), {}
                # A token unloaded since its accesses were queued is not loaded again for them (a
                # whole load to write a few rows; and tokens held by a round are not unloaded):
                # its rows go in through a connection of their own.
                unloaded = [state for state in due if not state.loaded]
                async with contextlib.AsyncExitStack() as held:
                    for state in [s for s in due if s.loaded]:
                        try:
                            await held.enter_async_context(self.tokens.using(state.token))
                        except MemvaultError:  # e.g. its folder became a link: the others go on
                            due.remove(state)
                    await anyio.to_thread.run_sync(_flush_each, due, unloaded)
                for state in due:
                    if state.pending.files and not state.pending.draining:
                        state.pending.draining = True
                        self.spawn(self._write_files(state))
        finally:
            self._recording = False

    async def _write_files(self, state: TokenState) -> None:
        try:
            async with self.tokens.using(state.token):
                while state.pending.files:
                    await self._write_some(state)
        finally:
            state.pending.draining = False

    async def _write_some(self, state: TokenState) -> None:
        """One batch of write-backs, one token at a time in the process, then a pause as long as
        the batch took (they use at most half the disk), or BUSY_PAUSE times that while requests
        come in: requests go first (in a thread, each of a batch's system calls waits for the GIL
        while the event loop holds it; under 32 agents they took a tenth of the calls/s)."""
        async with self._one_at_a_time:
            due = state.pending.take_files()
            if not due:
                return
            started = time.monotonic()
            async with state.lock:
                await anyio.to_thread.run_sync(write_back, state, due)
            await asyncio.sleep(rest_after(time.monotonic() - started, self.tokens.embeddings.busy()))

    def drain_now(self, state: TokenState) -> None:
        """Everything pending, at once (worker thread; at shutdown)."""
        flush_records(state)
        due = state.pending.take_files(len(state.pending.files))
        if due:
            write_back(state, due)


def rest_after(took: float, busy: bool) -> float:
    """Seconds write-backs rest after a batch that took ``took`` (see Recorder._write_some)."""
    return min(MAX_PAUSE, took * (BUSY_PAUSE if busy else 1.0))


def recorded(state: TokenState, where: Where = IN_THREAD) -> dict[str, datetime]:
    """Each memory's last access as the sidecar has it, with the accesses still queued.

    The queue is read first: a record that leaves it meanwhile is in the sidecar by the time the
    sidecar is read (take_records keeps it queued until its transaction committed). ``where``: see
    Sidecar.last_access."""
    queued = state.pending.latest()
    times = state.sidecar.last_access(None, where) if state.sidecar else {}
    for id, at in queued.items():
        if id not in times or times[id] < at:
            times[id] = at
    return times


def listing(state: TokenState, where: Where) -> tuple[Sequence[Memory], dict[str, datetime]]:
    """The hot memories by id, and the access times recorded for them (a listing's look; see
    memvault.threads)."""
    if where is ON_LOOP and (len(state.hot.memories) > MAX_ROWS or state.hot.memories.unbuilt):
        raise NeedsThread  # (memories still to build after a restore: a worker builds them)
    with state.looking(where):
        memories = state.hot.in_order()
    return memories, recorded(state, where)


def _flush_each(states: Sequence[TokenState], unloaded: Sequence[TokenState] = ()) -> None:
    for state in states:
        if state in unloaded:
            _flush_unloaded(state)
        else:
            flush_records(state)


def _flush_unloaded(state: TokenState) -> None:
    """flush_records for a token that is not loaded: through a sidecar connection opened for it and
    closed after (the token's own, if a load opens one meanwhile, is left alone; SQLite serialises
    the two)."""
    records, searches = state.pending.take_records()
    try:
        if (not records and not searches) or not state.dir.is_dir() or os.path.islink(state.dir):
            return

        def record() -> None:
            sidecar = Sidecar.open(state.dir)
            try:
                sidecar.record_batch(records, searches)
            finally:
                sidecar.close()

        bookkeep("record accesses", record)
    finally:
        state.pending.committed(records)


def flush_records(state: TokenState) -> None:
    """Write the pending access rows and search counts in one transaction (worker thread)."""
    records, searches = state.pending.take_records()
    try:
        if not records and not searches:
            return
        if state.sidecar is None and not state.dir.is_dir():
            return  # a token that never wrote anything keeps no statistics (and gets no folder)
        bookkeep("record accesses", lambda: state.ensure_sidecar().record_batch(records, searches))
    finally:
        state.pending.committed(records)


def last_access(memory: Memory, recorded: datetime | None) -> datetime | None:
    """The later of the sidecar's record and the file's lastAccessedAt, else its last change
    (asked for every row a listing shows and every recall candidate: kept to comparisons)."""
    accessed = memory.last_accessed_at
    if recorded is None:
        return accessed if accessed is not None else (memory.updated_at or memory.created_at)
    return recorded if accessed is None or recorded >= accessed else accessed


def needs_file_write(memory: Memory, now: datetime, mode: str) -> bool:
    """Whether an access at ``now`` is written to the file under writeback ``mode``.

    A file a person made (no frontmatter) is theirs: reading it never rewrites it (its accesses
    live in the sidecar); ``memvault migrate`` gives such files frontmatter when asked.
    """
    if memory.conflicted or memory.problem is not None or not memory.has_frontmatter:
        return False
    if mode == "never":
        return False
    if mode == "always":
        return True
    last = memory.last_accessed_at
    return last is None or last.date() != now.date()


def frontmatter_for(memory: Memory, now: datetime, accessed: datetime | None = None) -> dict[str, Any]:
    """The frontmatter a file without any gets (memvault migrate): its priority and times.

    ``lastAccessedAt`` too: mem-mcp's parser rejects a frontmatter without it (and then stacks a
    second block on the file); it is the last access memvault knows, so eviction sees no change."""
    return {
        "priority": memory.priority,
        "createdAt": memory.created_at or now,
        "updatedAt": memory.updated_at or memory.created_at or now,
        "lastAccessedAt": last_access(memory, accessed) or now,
    }


def write_back(state: TokenState, due: Sequence[tuple[Memory, datetime]]) -> None:
    """Write each access time into its file (one folder fsync for the batch); a file changed or
    removed under us, or a full disk, skips it: the read stood either way."""
    by_id = {memory.id: now for memory, now in due}
    done = _update_each(
        state,
        [memory for memory, _ in due],
        lambda memory: {"lastAccessedAt": by_id[memory.id]},
        "write lastAccessedAt back",
        sync_folder=False,
    )
    for folder in {(state.vault.area(False) / id).parent for id in done}:
        try:
            fsync_dir(folder)
        except OSError as exc:
            note_failure("write lastAccessedAt back", exc)


def add_frontmatter(state: TokenState, memories: Sequence[Memory], now: datetime) -> list[str]:
    """Give files without frontmatter memvault's (memvault migrate); returns the ids done."""
    times = recorded(state)
    return _update_each(
        state, memories, lambda m: frontmatter_for(m, now, times.get(m.id)), "add frontmatter"
    )


def _update_each(
    state: TokenState,
    memories: Sequence[Memory],
    fields_for: Callable[[Memory], dict[str, Any]],
    what: str,
    *,
    sync_folder: bool = True,
) -> list[str]:
    done: list[str] = []
    with state.file_lock():
        for memory in memories:
            try:
                updated = state.vault.update(
                    memory.id, fields_for(memory), expect_hash=memory.hash, sync_folder=sync_folder
                )
            except (NotFound, Conflict, InvalidArgument, InvalidName):
                continue  # changed or removed under us; the watcher will catch up
            except OSError as exc:  # a full disk: the file keeps what it had
                note_failure(what, exc)
                continue
            state.remember(updated)
            done.append(memory.id)
    return done
