"""The memory operations the tools and the CLI share: find, access, write, update, delete, move, evict."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio.to_thread

from memvault.clock import Clock, utcnow
from memvault.config import Settings
from memvault.disk import files
from memvault.disk.markdown import PRIORITIES, Memory, clean_tags
from memvault.disk.names import check_id, is_memory_path, split_key
from memvault.errors import (
    Conflict,
    InvalidArgument,
    InvalidName,
    NotFound,
)
from memvault.logs import bookkeep
from memvault.ops import access, arguments, supersede
from memvault.ops.edits import Edit, apply_edit, check_version
from memvault.ops.sweeps import Evicted, Sweep, Sweeps
from memvault.registry.state import TokenState
from memvault.registry.tokens import Tokens
from memvault.threads import ON_LOOP, NeedsThread, Where, look

log = logging.getLogger("memvault")
RECENT_WRITES_KEPT = 10_000  # write_memory dedupes a repeat within the window among this many

__all__ = ["Evicted", "Found", "Store", "Sweep", "Written"]


@dataclass(frozen=True, slots=True)
class Written:
    """What a write did: the memory, whether a recent identical write was reused, what it superseded."""

    memory: Memory
    reused: bool
    superseded: tuple[tuple[str, str], ...] = ()  # (old id, its name in the archive)
    kept: tuple[tuple[str, str], ...] = ()  # (id, why it was not superseded), e.g. P0


@dataclass(frozen=True, slots=True)
class Found:
    memories: list[Memory]
    total: int
    matched_all: bool
    missing: tuple[str, ...] = ()  # names asked for by filenames= that do not exist
    in_archive: tuple[str, ...] = ()  # of those, the ones the archive holds (restore_memory)


SMALL_FOLDER = 500  # hot memories up to which a call looks at the token folder itself


class Store:
    """The operations on the memories of the registry's tokens (the parts come from
    memvault.ops.service, which builds them)."""

    def __init__(
        self,
        settings: Settings,
        registry: Tokens,
        recorder: access.Recorder,
        sweeps: Sweeps,
        *,
        clock: Clock = utcnow,
    ) -> None:
        self.settings = settings
        self.clock = clock
        self._registry = registry
        self._recorder = recorder
        self._sweeps = sweeps

    def using(self, token: str) -> contextlib.AbstractAsyncContextManager[TokenState]:
        """The token's state, loaded, and held loaded until the block ends (Tokens.using)."""
        self._recorder.know_loop()
        return self._registry.using(token)

    def take_notice(self, token: str) -> str | None:
        """What a lazy sweep archived since the last reply for this token, told once."""
        state = self._registry.states.get(token)
        if state is None or state.sweep_notice is None:
            return None
        notice, state.sweep_notice = state.sweep_notice, None
        return notice

    async def state(self, token: str) -> TokenState:
        """The loaded state of a token, not held: for tests and tools that only look. Operations use
        :meth:`using`, which keeps the token loaded until they are done."""
        async with self.using(token) as state:
            return state

    # ------------------------------------------------------------------ reading

    async def list_hot(self, token: str) -> tuple[Sequence[Memory], Callable[[Memory], datetime | None]]:
        """The hot memories by id, and when each was last accessed: asked only for the rows a
        reply shows (working it out for every row was most of a listing's cost under load)."""
        async with self.using(token) as state:
            await self._caught_up(state)
            memories, recorded = await look(access.listing, state)
        # No lazy sweep here: it would archive memories the agent was just shown (mem-mcp sweeps
        # in read_memory only, and agents list titles, then read).
        return memories, lambda memory: access.last_access(memory, recorded.get(memory.id))

    async def find(
        self,
        token: str,
        *,
        query: str | None = None,
        filenames: Sequence[str] | None = None,
        limit: int | None = None,
        archived: bool = False,
    ) -> Found:
        """Search (or fetch by name, or list) memories; reading hot ones counts as access."""
        if limit is not None and limit < 1:
            raise InvalidArgument("limit must be at least 1.")
        arguments.check_query(query)
        async with self.using(token) as state:
            if not archived:
                await self._caught_up(state)
            if filenames:
                ids = [check_id(name) for name in filenames]
                return await look(self._by_ids, state, ids, archived)
            if query is not None and query.strip():
                return await look(self._search, state, query, limit, archived)
            return await anyio.to_thread.run_sync(self._all, state, limit, archived)

    async def _caught_up(self, state: TokenState) -> None:
        """A file a person saved in the token folder a moment ago is listed and found by the next
        call, before the watcher's batch arrives (mem-mcp lists the folder on every call): one
        stat of the folder a call and, when it changed, a look at its entries while that is cheap
        (at most SMALL_FOLDER memories at the top; beyond, the watcher's batch brings it). Our
        own writes change the folder too: their names are known, so only a stranger's file costs
        a worker thread."""
        if len(state.hot.memories) > SMALL_FOLDER:
            return  # (before the stat: a large token's folder is left to the watcher either way)
        try:
            mtime = os.stat(state.dir).st_mtime_ns
        except OSError:
            return
        if mtime == state.folder_seen:
            return
        names: set[str] = set()
        try:
            with os.scandir(state.dir) as entries:
                for entry in entries:
                    name = entry.name
                    if is_memory_path((name,)) and entry.is_file(follow_symlinks=False):
                        names.add(name)
        except OSError:
            return

        def known(where: Where) -> set[str]:
            with state.looking(where):
                return {id for id in state.hot.memories if "/" not in id}

        held = await look(known)
        strangers = sorted((names - held) | (held - names))
        if strangers:
            await anyio.to_thread.run_sync(lambda: [state.fresh(id, False) for id in strangers])
        state.folder_seen = mtime

    def _by_ids(self, state: TokenState, ids: list[str], archived: bool, where: Where) -> Found:
        out: list[Memory] = []
        missing: list[str] = []
        for id in dict.fromkeys(ids):
            state.vault.path_of(id, archived=archived)  # validates links and archive escapes
            memory = state.fresh(id, archived, where)
            if memory is None:
                missing.append(id)
            else:
                out.append(memory)
        in_archive: tuple[str, ...] = ()
        if missing and not archived:
            with state.mem_lock:
                kept = state.archive.memories
                in_archive = tuple(id for id in missing if id in kept)
        if missing and not out:
            raise NotFound(missing[0], archived=archived, in_archive=missing[0] in in_archive)
        return Found(out, len(out), True, tuple(missing), in_archive)

    def _search(
        self, state: TokenState, query: str, limit: int | None, archived: bool, where: Where
    ) -> Found:
        area = state.area(archived)
        with state.looking(where):
            hits, total = area.index.search(query, limit=limit or 10)
        memories = []
        for hit in hits:
            memory = state.fresh(hit.id, archived, where)
            if memory is not None:
                memories.append(memory)
        matched_all = bool(hits) and all(h.matched_all for h in hits)
        if not archived:
            self.note_search(state, bool(hits))
        return Found(memories, total, matched_all)

    def _all(self, state: TokenState, limit: int | None, archived: bool) -> Found:
        area = state.area(archived)
        with state.mem_lock:
            memories = list(area.memories.values())
        order = {p: i for i, p in enumerate(PRIORITIES)}
        memories.sort(
            key=lambda m: (order.get(m.priority, 2), -(m.updated_at or m.created_at or _EPOCH).timestamp())
        )
        total = len(memories)
        return Found(memories[:limit] if limit else memories, total, True)

    async def touch(
        self, token: str, memories: Sequence[Memory], *, hit: bool = True, read_only: bool = False
    ) -> None:
        """Record access to hot memories: always in the sidecar, in the file per the writeback policy.

        Only queued here: a background task records them in batches (access.Recorder). A request
        made with a read-only key changes no file: its access goes to the sidecar only, and it
        starts no lazy sweep (which would move files to the archive)."""
        async with self.using(token) as state:
            hot = [m for m in memories if not m.archived]
            if not hot or (state.sidecar is None and not state.dir.is_dir()):
                return
            now = self.clock()
            mode = "never" if read_only else self.settings.access_writeback
            due = [m for m in hot if access.needs_file_write(m, now, mode)]
            state.pending.add([m.id for m in hot], now, hit, due)
            self._recorder.noted(state)
            if not read_only:
                self._sweeps.maybe_sweep(state)

    def note_search(self, state: TokenState, found: bool) -> None:
        self._recorder.searched(state, found)

    # ------------------------------------------------------------------ writing

    async def write(
        self,
        token: str,
        *,
        title: str,
        content: str,
        priority: str | None = None,
        tags: Sequence[str] | None = None,
        importance: float | None = None,
        supersedes: Sequence[str] | None = None,
    ) -> Written:
        """Create a memory; with ``supersedes`` it replaces others: they move to the archive with
        ``supersededBy``.

        The new memory lists them under ``supersedes``. P0 memories are never superseded (they
        stay, and ``Written.kept`` says why). Every name is checked before anything is written.
        """
        title = arguments.check_title(title)
        content = arguments.check_content(content, self.settings.max_content_chars)
        prio = arguments.check_priority(priority) or "P2"
        tag_tuple = clean_tags(tags)
        arguments.check_importance(importance)
        if isinstance(supersedes, str):
            raise InvalidArgument("supersedes must be a list of filenames.")
        replaced = tuple(dict.fromkeys(check_id(name) for name in supersedes or ()))
        async with self.using(token) as state:
            async with state.lock:
                return await look(
                    self._write_sync, state, title, content, prio, tag_tuple, importance, replaced
                )

    def _note_write(self, state: TokenState, key: str, id: str, now: datetime) -> None:
        """Remember a write for the dedupe window; forget, oldest first, those past it or past
        RECENT_WRITES_KEPT. (Rebuilding the dict on each write cost a pass over every write of the
        last five minutes, which grew with a burst of writes.)"""
        recent = state.recent_writes
        recent[key] = (id, now)
        recent.move_to_end(key)
        window = timedelta(seconds=self.settings.dedupe_window_seconds)
        while recent:
            _, at = next(iter(recent.values()))
            if len(recent) <= RECENT_WRITES_KEPT and now - at <= window:
                break
            recent.popitem(last=False)

    def _write_sync(
        self,
        state: TokenState,
        title: str,
        content: str,
        priority: str,
        tags: tuple[str, ...],
        importance: float | None,
        supersedes: tuple[str, ...],
        where: Where,
    ) -> Written:
        """ON_LOOP while fsyncs are fast and the file lock is free (see memvault.threads);
        NeedsThread before anything is written."""
        if where is ON_LOOP and (supersedes or not files.fsync_is_fast()):
            raise NeedsThread  # superseding moves files: a thread's work
        now = self.clock()
        key = hashlib.blake2b(f"{title}\x00{content.strip()}".encode(), digest_size=16).hexdigest()
        with state.file_lock(where):
            recent = state.recent_writes.get(key)
            if recent is not None and now - recent[1] <= timedelta(
                seconds=self.settings.dedupe_window_seconds
            ):
                existing = state.fresh(recent[0], False, where)
                if existing is not None and existing.title == title and existing.content == content.strip():
                    return Written(existing, True)
            targets, kept = supersede.targets(state, supersedes)
            fields: dict[str, Any] = {
                "priority": priority,
                "createdAt": now,
                "updatedAt": now,
                "lastAccessedAt": now,
                "tags": list(tags),
                "importance": importance,
                "supersedes": [t.id for t in targets] or None,
            }
            memory = state.vault.create(title, content, fields)
            state.remember(memory, queued=True)  # its parse is cached with its access (_accessed)
            self._note_write(state, key, memory.id, now)
            # From here the memory exists: bookkeeping that fails (a full disk) is logged, not raised.
            self._accessed(state, memory.id, now)
            superseded = []
            for target in targets:
                try:
                    superseded.append((target.id, supersede.retire(state, target, memory.id)))
                except (NotFound, Conflict, InvalidArgument, InvalidName, OSError) as exc:
                    # Changed or moved by someone else since it was checked: say so, keep going.
                    kept.append((target.id, f"it changed while being superseded ({type(exc).__name__})"))
        return Written(memory, False, tuple(superseded), tuple(kept))

    async def update(
        self,
        token: str,
        filename: str,
        *,
        title: str | None = None,
        content: str | None = None,
        priority: str | None = None,
        tags: Sequence[str] | None = None,
        importance: float | None = None,
        edit: Edit | None = None,
    ) -> Memory:
        """Change a memory in place; ``edit`` changes all or part of its content, if its version is right."""
        id = check_id(filename)
        edit = edit or Edit(content=content)
        title = arguments.check_title(title) if title is not None else None
        fields = arguments.update_fields(
            id, priority, tags, importance, edit, title, self.settings.max_content_chars
        )
        async with self.using(token) as state:
            async with state.lock:
                return await look(self._update_sync, state, id, fields, title, edit)

    def _update_sync(
        self,
        state: TokenState,
        id: str,
        fields: dict[str, Any],
        title: str | None,
        edit: Edit,
        where: Where,
    ) -> Memory:
        if where is ON_LOOP and not files.fsync_is_fast():
            raise NeedsThread
        if state.sidecar is None:
            self._hot(state, id)  # before the file lock makes the token folder
        now = self.clock()
        with state.file_lock(where):
            try:
                raw, current = state.vault.read_both(id, known=_held(state, id, where))
            except NotFound as exc:
                raise _pointed(state, exc) from None
            if current.conflicted:
                raise Conflict(id)
            check_version(current, edit.expected)
            content = apply_edit(current.content, edit, id)
            if content is not None:
                content = arguments.check_content(content, self.settings.max_content_chars)
            fields = {**fields, "updatedAt": now, "lastAccessedAt": now}
            if not current.has_frontmatter:
                fields = {"priority": current.priority, "createdAt": current.created_at or now, **fields}
            memory = state.vault.update(id, fields, title=title, content=content, read=(raw, current))
            state.remember(memory, queued=True)
            self._accessed(state, id, now)
        return memory

    @staticmethod
    def _hot(state: TokenState, id: str) -> None:
        """Refuse a name that is not a hot memory; one the archive holds is pointed there."""
        try:
            state.vault.existing(id)
        except NotFound as exc:
            raise _pointed(state, exc) from None

    def _accessed(self, state: TokenState, id: str, now: datetime) -> None:
        """A write or update counts as an access: queued like a read's (the file says so already)."""
        state.pending.add([id], now, False)
        self._recorder.noted(state)

    async def delete(self, token: str, filename: str) -> str:
        id = check_id(filename)
        async with self.using(token) as state:
            async with state.lock:
                return await anyio.to_thread.run_sync(self._delete_sync, state, id)

    def _delete_sync(self, state: TokenState, id: str) -> str:
        self._hot(state, id)
        with state.file_lock():
            current = state.vault.read(id)
            if current.conflicted:
                raise Conflict(id)
            state.vault.delete(id)
            state.drop(id, False)
            bookkeep("forget access records", lambda: state.ensure_sidecar().forget([id]))
        return id

    async def restore(self, token: str, filename: str) -> str:
        id = check_id(filename)
        id, _ = split_key(id)  # the path as a person sees it in the folder ("archive/x.md") works too
        async with self.using(token) as state:
            async with state.lock:
                return await anyio.to_thread.run_sync(self._restore_sync, state, id)

    def _restore_sync(self, state: TokenState, id: str) -> str:
        state.vault.existing(id, archived=True)
        now = self.clock()
        with state.file_lock():
            before = state.vault.read(id, archived=True)
            new_id = state.move(id, to_archive=False)
            supersede.unlink_restored(state, before, new_id)
            # Restoring is an access: without it the next sweep would archive it again at once.
            bookkeep(
                "record an access", lambda: state.ensure_sidecar().record_access([new_id], now, hit=False)
            )
        return new_id

    # ------------------------------------------------------------------ eviction

    async def migrate(self, token: str, *, dry_run: bool = False) -> list[str]:
        """Give the token's hand-made files (no frontmatter) memvault's frontmatter: mem-mcp did so
        on a file's first read; memvault only when asked (`memvault migrate`)."""
        async with self.using(token) as state:
            with state.mem_lock:
                plain = [m for m in state.hot.memories.values() if not m.has_frontmatter and m.writable]
            plain.sort(key=lambda m: m.id)
            if dry_run or not plain:
                return [m.id for m in plain]
            async with state.lock:
                return await anyio.to_thread.run_sync(access.add_frontmatter, state, plain, self.clock())

    async def evict(self, token: str, *, dry_run: bool = False) -> list[Evicted]:
        """Archive what the eviction policy says is stale (memvault.ops.sweeps)."""
        return await self._sweeps.evict(token, dry_run=dry_run)

    async def sweep(self, token: str, *, dry_run: bool = False) -> Sweep:
        """Archive what is stale, and say what stays that would have gone (memvault.ops.sweeps)."""
        return await self._sweeps.sweep(token, dry_run=dry_run)


def _held(state: TokenState, id: str, where: Where) -> Memory | None:
    """The hot memory as the server holds it: the file's parse, if the file is still the one read."""
    with state.looking(where):
        return state.hot.memories.get(id)


def _pointed(state: TokenState, exc: NotFound) -> NotFound:
    """A hot memory not found: pointed to the archive if it holds one of that name."""
    if not exc.archived and state.vault.path_of(exc.id, archived=True).is_file():
        return NotFound(exc.id, in_archive=True)
    return exc


_EPOCH = datetime.fromtimestamp(0, UTC)
