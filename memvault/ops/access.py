"""Access times: when a memory was last read, and writing that back to its file (the writeback policy).

The sidecar records every access; the file's ``lastAccessedAt`` follows at most once a day by default
(``MEMVAULT_ACCESS_WRITEBACK``), so reads do not churn a vault kept in git.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Coroutine, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio.to_thread

from memvault.disk.files import fsync_dir
from memvault.disk.markdown import Memory
from memvault.errors import Conflict, InvalidArgument, InvalidName, MemvaultError, NotFound
from memvault.logs import bookkeep, note_failure
from memvault.ops.background import Background, give_way
from memvault.records.sidecar import Sidecar
from memvault.registry.state import TokenState
from memvault.registry.tokens import Tokens
from memvault.threads import IN_THREAD, MAX_ROWS, ON_LOOP, NeedsThread, Where

BATCH = 16  # file write-backs per turn of the token's lock, at most (fewer when a request waits for it)
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

    def __init__(
        self,
        tokens: Tokens,
        spawn: Callable[[Coroutine[Any, Any, Any]], None],
        background: Background | None = None,
    ) -> None:
        self.tokens = tokens
        self.spawn = spawn
        self.background = background if background is not None else Background(tokens.embeddings.busy)
        self._loop: asyncio.AbstractEventLoop | None = None
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
        """One batch of write-backs in a turn of the process's background work, which then rests
        as long as the batch took, or BUSY_PAUSE times that while requests come in (in a thread,
        each of a batch's system calls waits for the GIL while the event loop holds it; under 32
        agents they took a tenth of the calls/s). The batch stops after the file in hand when a
        request waits for the token's lock; the rest stays queued. The folders' fsync comes after
        the lock is given back (memvault.ops.background)."""
        async with self.background.turn():
            due = state.pending.take_files()
            if not due:
                return
            async with state.lock:
                left, folders = await self.background.run(write_files, state, due, give_way(state))
            state.pending.requeue_files(left)
            await self.background.run(sync_folders, folders, "write lastAccessedAt back")

    def drain_now(self, state: TokenState) -> None:
        """Everything pending, at once (worker thread; at shutdown)."""
        flush_records(state)
        due = state.pending.take_files(len(state.pending.files))
        if due:
            write_back(state, due)


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
    parses = state.pending.take_parses()
    try:
        if not (records or searches or parses) or not state.dir.is_dir() or os.path.islink(state.dir):
            return

        def record() -> None:
            sidecar = Sidecar.open(state.dir)
            try:
                sidecar.record_batch(records, searches)
                sidecar.put_file_stats(parses)
            finally:
                sidecar.close()

        bookkeep("record accesses", record)
    finally:
        state.pending.committed(records)


def flush_records(state: TokenState) -> None:
    """Write the pending access rows and search counts in one transaction, and the parses of the
    server's writes to cache in another (worker thread)."""
    records, searches = state.pending.take_records()
    try:
        parses = state.pending.take_parses()
        if parses and state.sidecar is not None:
            sidecar = state.sidecar
            bookkeep("cache parses", lambda: sidecar.put_file_stats(parses))
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
    _, folders = write_files(state, due)
    sync_folders(folders, "write lastAccessedAt back")


def write_files(
    state: TokenState, due: Sequence[tuple[Memory, datetime]], give_way: Callable[[], bool] = lambda: False
) -> tuple[list[tuple[Memory, datetime]], set[Path]]:
    """write_back's files, without the folders' fsync: the write-backs not made because
    ``give_way()`` said so after one (at least one is made), and the folders to fsync."""
    by_id = {memory.id: now for memory, now in due}
    memories = [memory for memory, _ in due]
    done, handled = _update_each(
        state,
        memories,
        lambda memory: {"lastAccessedAt": by_id[memory.id]},
        "write lastAccessedAt back",
        sync_folder=False,
        give_way=give_way,
    )
    return list(due[handled:]), {(state.vault.area(False) / id).parent for id in done}


def sync_folders(folders: set[Path], what: str) -> None:
    for folder in folders:
        try:
            fsync_dir(folder)
        except OSError as exc:
            note_failure(what, exc)


def add_frontmatter(state: TokenState, memories: Sequence[Memory], now: datetime) -> list[str]:
    """Give files without frontmatter memvault's (memvault migrate); returns the ids done."""
    times = recorded(state)
    done, _ = _update_each(
        state, memories, lambda m: frontmatter_for(m, now, times.get(m.id)), "add frontmatter"
    )
    return done


def _update_each(
    state: TokenState,
    memories: Sequence[Memory],
    fields_for: Callable[[Memory], dict[str, Any]],
    what: str,
    *,
    sync_folder: bool = True,
    give_way: Callable[[], bool] = lambda: False,
) -> tuple[list[str], int]:
    """The ids updated, and how many of ``memories`` were handled (all, unless ``give_way()``
    said to stop after one)."""
    done: list[str] = []
    handled = 0
    with state.file_lock():
        for memory in memories:
            if handled and give_way():
                break
            handled += 1
            try:
                updated = state.vault.update(
                    memory.id,
                    fields_for(memory),
                    expect_hash=memory.hash,
                    sync_folder=sync_folder,
                    known=memory,
                )
            except (NotFound, Conflict, InvalidArgument, InvalidName):
                continue  # changed or removed under us; the watcher will catch up
            except OSError as exc:  # a full disk: the file keeps what it had
                note_failure(what, exc)
                continue
            state.remember(updated)
            done.append(memory.id)
    return done, handled
