"""Eviction sweeps: moving stale memories to the archive, on demand and lazily after reads.

The policy (which memories, when a sweep is due) is memvault.ops.eviction, pure; this module gathers
its inputs from the index and the sidecar and carries out its plan under the token's locks.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
from collections import Counter
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from memvault.clock import Clock
from memvault.config import Settings
from memvault.disk.files import fsync_dir
from memvault.disk.markdown import Memory
from memvault.errors import InvalidName, NotFound
from memvault.logs import bookkeep, note_failure
from memvault.ops import eviction
from memvault.ops.access import flush_records, last_access
from memvault.ops.background import Background, give_way
from memvault.registry.state import TokenState
from memvault.registry.tokens import Tokens

log = logging.getLogger("memvault")

LAST_EVICTION = "last_eviction"  # sidecar state key: when the last sweep ran
LAST_REPORT = "last_eviction_report"  # sidecar state key: what the last sweep that archived did
CHUNK = 100  # files moved per turn of the token's lock, at most (fewer when a request waits for it)


@dataclass(frozen=True, slots=True)
class Evicted:
    id: str
    reason: str
    archived_as: str | None  # None on a dry run


CONFLICT_HELD = "it has git conflict markers, which memvault never moves; resolve them, then evict again"


@dataclass(frozen=True, slots=True)
class Sweep:
    """What a sweep did (or, on a dry run, would do), and what it held back that it would have moved."""

    evicted: list[Evicted]
    held: list[Evicted]  # reason: why it stays (archived_as is None)


class Sweeps:
    """Runs eviction for the registry's tokens; ``spawn`` runs a lazy sweep after the current request."""

    def __init__(
        self,
        tokens: Tokens,
        settings: Settings,
        clock: Clock,
        spawn: Callable[[Coroutine[Any, Any, Any]], None],
        background: Background | None = None,
    ) -> None:
        self.tokens = tokens
        self.settings = settings
        self.clock = clock
        self.spawn = spawn
        self.background = background if background is not None else Background(tokens.embeddings.busy)
        self.limits = eviction.Limits(
            ttl_p1_days=settings.ttl_p1_days,
            ttl_p2_days=settings.ttl_p2_days,
            capacity=settings.capacity,
            grace_hours=settings.evict_grace_hours,
        )

    async def evict(self, token: str, *, dry_run: bool = False) -> list[Evicted]:
        """What :meth:`sweep` archived (or would archive)."""
        return (await self.sweep(token, dry_run=dry_run)).evicted

    async def sweep(self, token: str, *, dry_run: bool = False, lazy: bool = False) -> Sweep:
        """Plan, then move the plan's files in batches of at most CHUNK, each under the token's
        locks and a turn of the process's background work (memvault.ops.background): a batch
        stops after the file in hand when a request waits for the token's lock, so a write waits
        for one move, not a hundred (under 32 agents, 32 lazy sweeps at once held writes for
        seconds). A ``lazy`` sweep (after a read) also rests between its turns while requests
        come in; one a person asked for does not."""
        async with self.tokens.using(token) as state:
            if not state.dir.is_dir():
                return Sweep([], [])
            async with self.background.turn(rest=lazy), state.lock:
                now, plan, held = await self.background.run(self._plan, state)
            if dry_run:
                return Sweep([Evicted(e.id, e.reason, None) for e in plan], held)
            done: list[Evicted] = []
            start = 0
            while start < len(plan):
                async with self.background.turn(rest=lazy):
                    async with state.lock:
                        moved, taken, folders = await self.background.run(
                            self._move, state, plan[start : start + CHUNK], now, give_way(state)
                        )
                    await self.background.run(sync_folders, folders)  # outside the token's lock
                done += moved
                start += taken
            # In a thread: on the loop, the sidecar's lock may be held by the embedding worker.
            await self.background.run(remember_sweep, state, now, done)
            state.last_sweep, state.sweep_known = now, True
            return Sweep(done, held)

    def _plan(self, state: TokenState) -> tuple[datetime, list[eviction.Eviction], list[Evicted]]:
        """The plan, and the conflicted memories it would have moved were they not conflicted (a
        person asking why one stays is told)."""
        self.tokens.settle(state)  # memories still to build after a restore: a batch per hold of the lock
        now = self.clock()
        with state.file_lock():
            sidecar = state.ensure_sidecar()
            flush_records(state)  # accesses still queued count
            recorded = sidecar.last_access()
            with state.mem_lock:
                memories = list(state.hot.memories.values())
            plan, held = plan_memories(memories, recorded, now, self.limits)
            if plan:
                state.vault.check_archive()  # else every move fails and the sweep looks like a no-op
            return now, plan, held

    def _move(
        self,
        state: TokenState,
        batch: list[eviction.Eviction],
        planned: datetime,
        give_way: Callable[[], bool] = lambda: False,
    ) -> tuple[list[Evicted], int, set[Path]]:
        """Move the batch, or its first files until ``give_way()`` (at least one); a memory read
        or changed since the plan stays (its access is newer). Returns what moved, how many of
        the batch were handled, and the folders to fsync (once for the batch, by the caller)."""
        folders: set[Path] = set()
        taken = 0
        with state.file_lock():
            flush_records(state)
            sidecar = state.ensure_sidecar()
            touched = sidecar.last_access([e.id for e in batch])
            done: list[Evicted] = []
            # The batch's access records move in one transaction: one a file kept the sidecar's lock
            # busy and dropped the kept access table (every read then went to a thread) each time.
            renamed: list[tuple[str, str]] = []
            try:
                for item in batch:
                    if taken and give_way():
                        break
                    taken += 1
                    if item.id in touched and touched[item.id] > planned:
                        continue
                    try:
                        new_id = state.move(item.id, to_archive=True, renamed=renamed, sync=False)
                    except (NotFound, InvalidName, OSError) as exc:
                        log.warning("eviction skipped a memory: %s", type(exc).__name__)
                        continue
                    folders.add((state.vault.area(False) / item.id).parent)
                    folders.add((state.vault.area(True) / new_id).parent)
                    done.append(Evicted(item.id, item.reason, new_id))
            finally:
                bookkeep("move access records", lambda: sidecar.rename_accesses(renamed))
            return done, taken, folders

    def maybe_sweep(self, state: TokenState) -> None:
        """Lazy eviction: after a read, at most once per interval, in the background."""
        if state.evicting or state.sidecar is None:
            return
        if state.sweep_known and not self._due(state):
            return
        state.evicting = True

        async def sweep() -> None:
            try:
                if not state.sweep_known:  # read once per load of the token (in a thread: see sweep)
                    try:
                        raw = await self.background.run(last_sweep, state)
                    except sqlite3.Error as exc:
                        note_failure("read the last sweep time", exc)
                        return
                    state.last_sweep, state.sweep_known = (datetime.fromisoformat(raw) if raw else None), True
                    if not self._due(state):
                        return
                evicted = (await self.sweep(state.token, lazy=True)).evicted
                if evicted:
                    log.info("a lazy sweep archived %s", summary(evicted))
                    state.sweep_notice = notice(evicted)
            except Exception:
                log.exception("background eviction failed")
            finally:
                state.evicting = False

        self.spawn(sweep())

    def _due(self, state: TokenState) -> bool:
        return eviction.sweep_due(state.last_sweep, self.clock(), self.settings.evict_interval_hours)


def last_sweep(state: TokenState) -> str | None:
    """When the token's last sweep ran, as the sidecar has it (worker thread)."""
    return None if state.sidecar is None else state.sidecar.get_state(LAST_EVICTION)


def remember_sweep(state: TokenState, now: datetime, done: Sequence[Evicted]) -> None:
    """Note in the sidecar when a sweep ran and what it archived (worker thread)."""
    sidecar = state.ensure_sidecar()
    bookkeep("remember the sweep", lambda: sidecar.set_state(LAST_EVICTION, now.isoformat()))
    if done:
        report = json.dumps({"at": now.isoformat(), "summary": summary(done)})
        bookkeep("remember what the sweep archived", lambda: sidecar.set_state(LAST_REPORT, report))


def sync_folders(folders: set[Path]) -> None:
    """fsync the folders a batch of moves changed (a folder pruned since is gone: nothing to do)."""
    for folder in folders:
        try:
            fsync_dir(folder)
        except FileNotFoundError:
            pass
        except OSError as exc:
            note_failure("archive a memory", exc)


def plan_memories(
    memories: Sequence[Memory], recorded: Mapping[str, datetime], now: datetime, limits: eviction.Limits
) -> tuple[list[eviction.Eviction], list[Evicted]]:
    """The plan over a token's hot memories, and the conflicted ones it would have moved were they
    not conflicted. Candidates are built only for the memories the prefilter says a rule can touch
    (issue 49: building one for each of a token's thousand memories was most of a sweep)."""
    prefilter = eviction.Prefilter(len(memories), now, limits)
    candidates: list[eviction.Candidate] = []
    conflicted: set[str] = set()
    for m in memories:
        accessed = last_access(m, recorded.get(m.id)) or now
        written = _later(m.created_at, m.updated_at)
        # A file a person made (no frontmatter, so no priority) is never moved; a conflicted one
        # is asked about as if it were not, to tell a person why it stays.
        if not prefilter.needs(m.priority, accessed, m.importance, not m.has_frontmatter, written):
            continue
        if m.conflicted:
            conflicted.add(m.id)
        candidates.append(
            eviction.Candidate(
                id=m.id,
                priority=m.priority,
                last_access=accessed,
                importance=m.importance,
                pinned=m.conflicted,
                written=written,
            )
        )
    unlisted = len(memories) - len(candidates)
    plan = eviction.plan(candidates, now, limits, unlisted=unlisted)
    held: list[Evicted] = []
    if conflicted:
        freed = [dataclasses.replace(c, pinned=False) if c.pinned else c for c in candidates]
        held = [
            Evicted(e.id, CONFLICT_HELD, None)
            for e in eviction.plan(freed, now, limits, unlisted=unlisted)
            if e.id in conflicted
        ]
    return plan, held


def last_report(state: TokenState) -> tuple[datetime, str] | None:
    """When the last sweep that archived anything ran, and what it archived (for memory_stats)."""
    if state.sidecar is None:
        return None
    try:
        raw = state.sidecar.get_state(LAST_REPORT)
        if not raw:
            return None
        data = json.loads(raw)
        return datetime.fromisoformat(data["at"]), str(data["summary"])
    except (sqlite3.Error, ValueError, KeyError, TypeError) as exc:
        note_failure("read the last sweep's report", exc)
        return None


def kind(reason: str) -> str:
    """A reason's kind: "P2 past their TTL" or "over capacity" (see eviction.plan)."""
    first = reason.split(",")[0]
    return f"{first} past their TTL" if first in ("P1", "P2") else "over capacity"


def summary(evicted: Sequence[Evicted]) -> str:
    """ "3 memories (2 over capacity; 1 P2 past their TTL)": counts and reasons, no names."""
    kinds = Counter(kind(item.reason) for item in evicted)
    noun = "memory" if len(evicted) == 1 else "memories"
    return f"{len(evicted)} {noun} ({'; '.join(f'{n} {k}' for k, n in sorted(kinds.items()))})"


def notice(evicted: Sequence[Evicted], shown: int = 10) -> str:
    """What an agent is told once, with its next reply, after a lazy sweep archived memories."""
    names = ", ".join(item.archived_as or item.id for item in evicted[:shown])
    more = f" and {len(evicted) - shown} more" if len(evicted) > shown else ""
    return (
        f"[The eviction sweep archived {summary(evicted)}: {names}{more}. search_archive finds them; "
        "restore_memory(filename) brings one back.]"
    )


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None or b is None:
        return a or b
    return max(a, b)
