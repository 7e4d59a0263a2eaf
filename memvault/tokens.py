"""Loaded tokens: each token's state and lifecycle, a locked reading view, and the registry.

The registry loads a token (from its snapshot, the parse cache, helper processes or the files)
and unloads the least recently used idle ones.

A token's lifecycle (``TokenState.phase``): UNLOADED -> LOADING -> LOADED -> UNLOADED (unload_idle,
reindex). Beside it, and independent of it: ``users`` (operations holding the token, which is then
never unloaded), ``lock`` (its mutations, one at a time), ``evicting`` (a sweep runs), and derived
state waiting to be written (``snapshot_stale``, ``snapshot_parts``) or applied (``missed`` and
``missed_rescan``: outside changes reported during a load). A token restored from a snapshot is
LOADED before its memories are all built (memvault.area.Memories): ``settle`` builds the rest in
batches and then serves its vectors; until then ``settled`` is False, and recall waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio.to_thread
import numpy as np
import numpy.typing as npt
from filelock import FileLock, Timeout

from memvault import folderscan, heap, loader, reconcile, snapshot, spawn
from memvault.access import Pending
from memvault.area import Area
from memvault.config import Settings
from memvault.embeddings import Embeddings
from memvault.errors import InvalidName, LinkedFolder, MemvaultError
from memvault.files import file_stamp, try_lock, unchanged
from memvault.inline import NeedsThread, held
from memvault.markdown import Memory, content_hash, parse_memory
from memvault.names import STATE_DIR, key, split_key, valid_token
from memvault.resources import bookkeep
from memvault.sidecar import FileStat, Sidecar
from memvault.vault import Vault
from memvault.vectors import TokenVectors

log = logging.getLogger("memvault")

SETTLE_BATCH = 2_000  # memories built per hold of a token's mem_lock after a restore (~5-10 ms)


def _still(state: TokenState, hot: Area, archive: Area) -> bool:
    """Whether the token is loaded with these areas (``mem_lock`` held)."""
    return state.loaded and state.hot is hot and state.archive is archive


class Phase(enum.Enum):
    UNLOADED = "unloaded"
    LOADING = "loading"
    LOADED = "loaded"


class Reading(held):
    """What recall and the tools may look at while a token's ``mem_lock`` is held: a context
    manager that holds it as ``held`` does (TokenState.reading)."""

    __slots__ = ("_state",)

    def __init__(self, state: TokenState, inline: bool = False) -> None:
        super().__init__(state.mem_lock, inline)
        self._state = state

    def scores(
        self, query: str, *, archived: bool = False, limit: int | None = None
    ) -> tuple[list[str], npt.NDArray[np.float32]]:
        """The ids a search finds, best first, and their scores (Index.scores)."""
        return self._state.area(archived).index.scores(query, limit=limit)

    def memory(self, path_key: str) -> Memory | None:
        """The memory with this id relative to the token folder (``archive/...`` for archived)."""
        id, archived = split_key(path_key)
        return self._state.area(archived).memories.get(id)

    def memories(self, *, archived: bool = False) -> list[Memory]:
        return list(self._state.area(archived).memories.values())

    def count(self, *, archived: bool = False) -> int:
        return len(self._state.area(archived).memories)


class TokenState:
    """Everything memvault holds for one token. ``mem_lock`` guards the dicts and indexes."""

    def __init__(self, token: str, settings: Settings) -> None:
        self.token = token
        self.vault = Vault(settings.token_dir(token))
        self.lock_path = str(settings.token_dir(token) / STATE_DIR / "lock")  # see file_lock
        self.hot = Area()
        self.archive = Area()
        self.lock = asyncio.Lock()  # serialises this token's mutations within the process
        self.mem_lock = threading.Lock()
        self.vectors = TokenVectors()  # embeddings of hot and archived memories, filled in the background
        self.sidecar: Sidecar | None = None
        self.phase = Phase.UNLOADED
        self.load_lock = asyncio.Lock()
        self.settled = False  # loaded, every memory built and the vectors served (Tokens.settle)
        self.settle_lock = threading.Lock()
        # write_memory's recent writes, oldest first: content key -> (id, when) (see Store._write_sync)
        self.recent_writes: OrderedDict[str, tuple[str, datetime]] = OrderedDict()
        self.evicting = False
        self.last_used = 0.0
        self.link_checked = 0.0  # when the registry last made sure the folder is not a link
        self.snapshot_stale = False
        self.snapshot_parts: dict[str, npt.NDArray[Any]] | None = None  # a snapshot ready to write
        self.missed: set[Path] = set()
        self.missed_rescan = False
        self.users = 0  # operations in flight (Store.using): a token in use is never unloaded
        self.pending = Pending()  # accesses to record, drained in the background (memvault.access)

    @property
    def loaded(self) -> bool:
        return self.phase is Phase.LOADED

    @property
    def loading(self) -> bool:
        """A load is reading the folder: outside changes wait in ``missed`` until it is done."""
        return self.phase is Phase.LOADING

    def looking(self, inline: bool) -> held:
        """``mem_lock`` held for the block; on the event loop (``inline``) only if it is free at
        once: the loop never waits for a worker thread (NeedsThread instead)."""
        return held(self.mem_lock, inline)

    def reading(self, inline: bool = False) -> Reading:
        """A consistent look at the memories and indexes (``mem_lock`` held for the block; on the
        event loop only if it is free at once, see memvault.inline)."""
        return Reading(self, inline)

    @property
    def dir(self) -> Path:
        return self.vault.dir

    @contextlib.contextmanager
    def file_lock(self, inline: bool = False) -> Iterator[None]:
        """Cross-process lock (CLI and server, or two servers) held for the block; creates the token
        folder. ``inline`` (a write on the event loop): NeedsThread unless the sidecar is open and the
        lock is free at once, so the loop never waits for another process."""
        if inline:
            fd = try_lock(self.lock_path) if self.sidecar is not None else None
            if fd is None:
                raise NeedsThread
            try:
                yield
            finally:
                os.close(fd)
            return
        self.ensure_sidecar()
        with FileLock(self.lock_path, timeout=30):
            yield

    def ensure_sidecar(self) -> Sidecar:
        if self.sidecar is None:
            self.vault.check_folder()  # mkdir(exist_ok=True) would follow a link
            self.dir.mkdir(parents=True, exist_ok=True)
            self.sidecar = Sidecar.open(self.dir)
        return self.sidecar

    def area(self, archived: bool) -> Area:
        return self.archive if archived else self.hot

    @property
    def large(self) -> bool:
        """Large enough to restart from a snapshot rather than the per-file parse cache."""
        return len(self.hot.memories) + len(self.archive.memories) >= snapshot.MIN_MEMORIES


class Tokens:
    """The registry of tokens this process knows, loading and unloading them; ``spawn`` runs
    background work (a snapshot save, a heap release) after the current request."""

    def __init__(
        self, settings: Settings, embeddings: Embeddings, spawn: Callable[[Coroutine[Any, Any, Any]], None]
    ) -> None:
        self.settings = settings
        self.embeddings = embeddings
        self.spawn = spawn
        self.states: dict[str, TokenState] = {}
        self.parses = 0  # files parsed (not served from the cache); tests count them
        self.unloads = 0
        self.warming: set[str] = set()  # tokens whose load warm() began

    def warm(self, token: str) -> None:
        """Begin loading a token a request just addressed, without waiting for it. A client's
        handshake (initialize, its notification, the GET stream) comes before its first tool call:
        after a restart the load runs meanwhile. A failure is left to the call that needs the token,
        which reports it; a token without a folder loads as empty, creating nothing."""
        state = self.states.get(token)
        if token in self.warming or (state is not None and state.loaded):
            return
        self.warming.add(token)
        self.spawn(self._warm(token))

    async def _warm(self, token: str) -> None:
        try:
            async with self.using(token):
                pass
        except (MemvaultError, OSError):
            pass  # the tool call that needs the token says what is wrong
        finally:
            self.warming.discard(token)

    @contextlib.asynccontextmanager
    async def using(self, token: str) -> AsyncIterator[TokenState]:
        """The token's state, loaded, and kept loaded (never unloaded, its sidecar never closed)
        until the block ends. A read racing an unload once found the token emptied under it."""
        state = self.register(token)
        state.users += 1  # before any await: from here on no unload takes this token
        self.embeddings.last_request = time.monotonic()  # background embedding makes way
        try:
            await self.ensure_loaded(state)
            yield state
        finally:
            state.users -= 1

    def register(self, token: str) -> TokenState:
        if not valid_token(token):
            raise InvalidName(token, "not a valid token")
        now = time.monotonic()
        state = self.states.get(token)
        # A lstat per request was 7% of the event loop under load: a token's folder is looked at
        # again once a second (and every file operation checks it too, in Vault.path_of).
        if state is None or now - state.link_checked > 1.0:
            if os.path.islink(self.settings.token_dir(token)):
                raise LinkedFolder()
            if state is None:
                state = self.states.setdefault(token, TokenState(token, self.settings))
            state.link_checked = now
        state.last_used = now
        return state

    async def ensure_loaded(self, state: TokenState, progress: Callable[[int], None] | None = None) -> None:
        if not state.loaded:
            async with state.load_lock:
                if not state.loaded:
                    with self.embeddings.paused():
                        await anyio.to_thread.run_sync(self.load, state, progress)
                    self.unload_idle()
                    heap.keep()
                    if not state.settled:
                        self.spawn(anyio.to_thread.run_sync(self.settle, state))
                    if state.snapshot_stale:
                        self.spawn(anyio.to_thread.run_sync(snapshot.save, state))
                    elif state.large:
                        self.spawn(anyio.to_thread.run_sync(heap.release))  # the load's garbage

    def unload_idle(self) -> None:
        """Keep at most MEMVAULT_MAX_LOADED_TOKENS indexes in memory; the least recently used go.

        An unloaded token closes its sidecar (three descriptors each: 5,000 tokens once ran the
        process out of them) and reloads from its parse cache on the next request. A token in use
        (an operation in flight, a mutation, a sweep) is never unloaded.
        """
        loaded = [s for s in self.states.values() if s.loaded]
        excess = len(loaded) - self.settings.max_loaded_tokens
        if excess <= 0:
            return
        for state in sorted(loaded, key=lambda s: s.last_used)[:excess]:
            if state.users or state.lock.locked() or state.load_lock.locked() or state.evicting:
                continue
            with state.mem_lock:
                state.hot, state.archive = Area(), Area()
                state.phase = Phase.UNLOADED
                state.settled = False
                state.snapshot_parts = None
            self.embeddings.detach(state.vectors)
            state.vectors.clear()
            if state.sidecar is not None:
                sidecar, state.sidecar = state.sidecar, None
                sidecar.close()
            if state.sidecar is None and not state.load_lock.locked() and not state.dir.is_dir():
                # A token that never wrote anything (a read of an unknown token): forget it
                # entirely, so that requests for made-up tokens cannot pile up state.
                self.states.pop(state.token, None)
            self.unloads += 1
            heap.unkeep()  # its objects go back to the collector (the others are kept at the next load)
            self.spawn(anyio.to_thread.run_sync(heap.release))

    def reindex(self, token: str, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild a token's derived state from its files (worker thread or CLI). Returns files read."""
        state = self.states.get(token) or self.states.setdefault(token, TokenState(token, self.settings))
        if not state.dir.is_dir():
            return 0
        with state.file_lock():
            sidecar = state.ensure_sidecar()
            sidecar.delete_file_stats(list(sidecar.file_stats()))
            with state.mem_lock:
                state.phase = Phase.UNLOADED
                state.snapshot_parts = None
            snapshot.path(state).unlink(missing_ok=True)
            self.load(state, progress)
            self.settle(state)
        return len(state.hot.memories) + len(state.archive.memories)

    def load(self, state: TokenState, progress: Callable[[int], None] | None = None) -> None:
        """Load a token, then apply the outside changes reported while it loaded: a file changed
        after the load read it must not stay stale until its next change."""
        with state.mem_lock:
            state.phase = Phase.LOADING
        try:
            with heap.uncollected():
                self._load_files(state, progress)
            self._remove_leftovers(state)
        finally:
            with state.mem_lock:
                state.phase = Phase.LOADED if state.phase is Phase.LOADED else Phase.UNLOADED
                missed, rescan = state.missed, state.missed_rescan
                state.missed, state.missed_rescan = set(), False
        if missed or rescan:
            reconcile.apply_changes(self, state.token, missed, rescan)

    @staticmethod
    def _remove_leftovers(state: TokenState) -> None:
        """Temp files of ours the load's scan saw, left by a crash mid-write: gone, under the lock."""
        if not state.vault.leftovers:
            return
        try:
            with state.file_lock():
                removed = state.vault.remove_leftovers(time.time())
        except (Timeout, OSError):
            return  # another process holds the lock for long: the next load tries again
        if removed:
            log.info("removed %d temp file(s) left by an interrupted write", removed)

    def _scan_in_helper(self, state: TokenState) -> folderscan.Scan | None:
        """A helper process scanning the folder, for a large snapshot and a second CPU."""
        where = snapshot.path(state)
        try:
            large = where.stat().st_size >= spawn.HELPER_MIN_BYTES
        except OSError:
            return None
        most = spawn.scan_helpers(self.settings.load_processes)
        if not large or most == 0:
            return None
        return folderscan.start(state.dir, where, most=most)

    def _load_files(self, state: TokenState, progress: Callable[[int], None] | None = None) -> None:
        """Read a token's folder: from the index snapshot plus what changed since, else from the files,
        re-parsing only files whose bytes differ from the sidecar's parse cache."""
        if state.dir.is_dir():
            state.ensure_sidecar()
            scan = self._scan_in_helper(state)  # the folder, walked while the snapshot decodes
            try:
                restored = snapshot.load(state)
                if restored is not None:
                    with state.mem_lock:
                        state.hot, state.archive = restored
                    # What changed on disk since the snapshot was taken:
                    reconcile.rescan_folder(self, state, scan.result() if scan is not None else None)
                    self._publish(state, snapshot_stale=False)
                    return
            finally:
                if scan is not None:
                    scan.cancel()
        hot, archive = Area(), Area()
        if state.dir.is_dir():
            sidecar = state.ensure_sidecar()
            cache = sidecar.file_stats()
            ready: list[Memory] = []  # from the parse cache
            todo: list[tuple[str, bool, FileStat | None]] = []  # to read (and parse unless unchanged)
            seen: set[str] = set()
            # Without a parse cache to check files against, their stats are not needed here.
            listing = state.vault.scan() if cache else ((*f, None) for f in state.vault.list_files())
            with loader.Helpers() as pool:
                for id, archived, st in listing:
                    path_key = key(id, archived)
                    seen.add(path_key)
                    cached = cache.get(path_key)
                    if cached is not None and st is not None and cached.parsed and unchanged(cached, st):
                        memory = snapshot.from_stat(cached, id, archived, st)
                        if memory is not None:
                            ready.append(memory)
                            continue
                    todo.append((id, archived, cached))
                    if len(todo) == loader.PARALLEL_MIN:  # helpers will pay: started while the scan goes on
                        pool.start(loader.helpers_for(len(todo), self.settings.load_processes))
                helpers = loader.helpers_for(len(todo), self.settings.load_processes)
                pool.start(helpers)
                parts = pool.load(state.dir, [(i, a) for i, a, _ in todo]) if helpers else None
            if parts is not None:
                self.parses += sum(int(part.pop("parsed")[0]) for part in parts)
                merged = loader.merge_parts([*parts, loader.build_part(ready)])
                del parts
                hot, archive = snapshot.areas_from(merged)
                state.snapshot_parts = merged  # what save_snapshot would encode; written in the background
                if progress is not None:
                    progress(len(ready) + len(todo))
            else:
                refreshed: list[Memory] = []
                for memory in ready:
                    (archive if memory.archived else hot).put(memory)
                if progress is not None:
                    progress(len(ready))
                for id, archived, cached in todo:
                    read = self.read_file(state, id, archived, cached)
                    if read is not None:
                        refreshed.append(read)
                        (archive if archived else hot).put(read)
                    if progress is not None:
                        progress(1)  # file by file: `memvault reindex` shows a moving bar
                if len(seen) < snapshot.MIN_MEMORIES:
                    # Large vaults restart from the snapshot written after this load instead; serialising
                    # 100,000 parses into SQLite as well would add seconds to a cold start.
                    sidecar.put_file_stats([snapshot.file_stat(m) for m in refreshed])
            sidecar.delete_file_stats([key for key in cache if key not in seen])
        with state.mem_lock:
            state.hot, state.archive = hot, archive
        self._publish(
            state, snapshot_stale=len(hot.memories) + len(archive.memories) >= snapshot.MIN_MEMORIES
        )

    def _publish(self, state: TokenState, *, snapshot_stale: bool) -> None:
        with state.mem_lock:
            state.phase = Phase.LOADED
            state.snapshot_stale = snapshot_stale
            state.settled = False
            restored = state.hot.memories.unbuilt + state.archive.memories.unbuilt
        if not restored:
            self.settle(state)  # nothing left to build: the vectors are served before the first answer

    def settle(self, state: TokenState) -> None:
        """Build the memories a restore left in their stored form, a batch per hold of ``mem_lock``
        so that requests go between, then serve the token's vectors (worker thread; idempotent).

        A restart at 100,000 memories answers its first request before this (0.5-0.8 s sooner on a
        slow machine). Recall waits for it: its candidates are the vectors' rows."""
        with state.settle_lock:
            with state.mem_lock:
                if state.settled or not state.loaded:
                    return
                hot, archive = state.hot, state.archive
            with heap.uncollected():  # (the memories stay: see heap.uncollected)
                for area in (hot, archive):
                    done = False
                    while not done:
                        with state.mem_lock:
                            if not _still(state, hot, archive):
                                return  # unloaded, reindexed or reloaded meanwhile
                            done = area.memories.fill(SETTLE_BATCH)
                        time.sleep(0)  # waiting threads and the event loop go first
            with state.mem_lock:
                if not _still(state, hot, archive):
                    return
                # Under the lock: a write between a look at the memories and the vectors' reset
                # would be missing from the vectors until its next change.
                everything = [*hot.memories.values(), *archive.memories.values()]
                self.embeddings.attach(state.vectors, lambda: state.sidecar, everything)
                state.settled = True
        problems = sum(1 for m in everything if m.problem and not m.archived)
        if problems:
            log.warning(
                "%d file(s) with broken frontmatter, indexed as plain text (memvault check lists them)",
                problems,
            )

    def read_file(
        self, state: TokenState, id: str, archived: bool, previous: Memory | FileStat | None = None
    ) -> Memory | None:
        """Read one file; parse it unless its bytes equal the previous parse (git touches mtimes)."""
        read = state.vault.read_scanned(id, archived)
        if read is None:
            return None
        raw, st = read
        if previous is not None and previous.size == len(raw) and previous.hash == content_hash(raw):
            if isinstance(previous, Memory):
                return dataclasses.replace(previous, **file_stamp(st))
            if previous.parsed:
                memory = snapshot.from_stat(previous, id, archived, st)
                if memory is not None:
                    return memory
        self.parses += 1
        return parse_memory(raw, id, archived=archived, keep_meta=False, **file_stamp(st))

    @staticmethod
    def remember(state: TokenState, memory: Memory) -> None:
        """Index a memory the server just wrote or read, and cache its parse (small vaults)."""
        with state.mem_lock:
            area = state.area(memory.archived)
            area.put(memory)
            large = state.large
        state.vectors.changed(memory)
        # A large vault restarts from its snapshot (written at shutdown), not from this cache; one
        # SQLite transaction per file was most of the time a 1,000-file git pull took to apply.
        if state.sidecar is not None and not large:
            sidecar = state.sidecar
            bookkeep("cache a parse", lambda: sidecar.put_file_stats([snapshot.file_stat(memory)]))

    @staticmethod
    def drop(state: TokenState, id: str, archived: bool) -> None:
        with state.mem_lock:
            state.area(archived).drop(id)
            large = state.large
        state.vectors.dropped(key(id, archived))
        if state.sidecar is not None and not large:  # a large vault's cache is not read (snapshot)
            sidecar = state.sidecar
            bookkeep(
                "drop a cached parse",
                lambda: sidecar.delete_file_stats([key(id, archived)]),
            )

    def move(
        self, state: TokenState, id: str, *, to_archive: bool, renamed: list[tuple[str, str]] | None = None
    ) -> str:
        """Move a memory between hot and archive (file lock held): the file, then the index and
        the access records follow. Returns its id in the other area. ``renamed``: the access
        records' move is added to it for the caller to make (a sweep: one transaction a batch)."""
        new_id = state.vault.move(id, to_archive=to_archive)
        moved = self.read_file(state, new_id, to_archive)
        self.drop(state, id, not to_archive)
        if moved is not None:
            self.remember(state, moved)
        old, new = key(id, not to_archive), key(new_id, to_archive)
        if renamed is not None:
            renamed.append((old, new))
        else:
            bookkeep("move access records", lambda: state.ensure_sidecar().rename_access(old, new))
        return new_id

    def fresh(self, state: TokenState, id: str, archived: bool, *, inline: bool = False) -> Memory | None:
        """The memory as it is on disk now (the watcher may not have caught up yet). ``inline``:
        on the event loop, which may stat the file but leaves any change to a worker thread."""
        with state.looking(inline):
            known = state.area(archived).memories.get(id)
        try:
            st = os.stat(state.vault.file_name(id, archived))
        except OSError:
            if inline:
                raise NeedsThread from None
            if known is not None:
                self.drop(state, id, archived)
            return None
        if known is not None and unchanged(known, st):
            return known
        if inline:
            raise NeedsThread
        memory = self.read_file(state, id, archived, known)
        if memory is None:
            self.drop(state, id, archived)
        else:
            self.remember(state, memory)
        return memory
