"""The registry of loaded tokens: loading them (snapshot, parse cache, helpers, files) and unloading.

A token's lifecycle (``TokenState.phase``): UNLOADED -> LOADING -> LOADED -> UNLOADED (unload_idle,
reindex). Beside it, and independent of it: ``users`` (operations holding the token, which is then
never unloaded), ``lock`` (its mutations, one at a time), ``evicting`` (a sweep runs), and derived
state waiting to be written (``snapshot_stale``, ``snapshot_parts``) or applied (``missed`` and
``missed_rescan``: outside changes reported during a load). A token restored from a snapshot is
LOADED before its memories are all built (memvault.search.area.Memories): ``settle`` builds the rest
in batches and then serves its vectors; until then ``settled`` is False, and recall waits for it.
The lock order is written once, in memvault.registry.state.
"""

import contextlib
import itertools
import logging
import os
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from datetime import datetime
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from memvault import heap
from memvault.config import Settings
from memvault.disk.files import unchanged
from memvault.disk.markdown import Memory
from memvault.disk.names import key, valid_token
from memvault.errors import InvalidName, LinkedFolder, MemvaultError
from memvault.load import folderscan, loader, processes, snapshot
from memvault.logs import bookkeep
from memvault.records.sidecar import FileStat, Sidecar
from memvault.registry import leftovers, reconcile
from memvault.registry.state import Phase, TokenState
from memvault.search.area import Area
from memvault.search.embeddings import Embeddings
from memvault.threads import Threads

log = logging.getLogger("memvault")

SETTLE_BATCH = 2_000  # memories built per hold of a token's mem_lock after a restore
# Loads running at once in worker threads. The others wait on the event loop, not in the worker
# pool: with 1,000 agents on cold tokens, loads filled all of anyio's 40 threads and a write to a
# loaded token queued behind them for minutes, holding its token loaded (bench_tenants).
LOAD_THREADS = 4
# Unloaded states looked at per unload_idle, to forget those nothing holds any more: a bounded
# number, in turn, so a load costs the same with 10 tokens known or 10,000 (see unload_idle).
FORGET_CHECKS = 8


def _sidecar_of(state: TokenState) -> Callable[[], Sidecar | None]:
    """The token's open sidecar, for its vectors, by a weak reference: a closure over the state
    made a cycle (state -> vectors -> closure -> state) that only the cyclic collector could free,
    and the collector never saw it (heap.keep freezes what is alive at each load), so every
    unloaded token stayed in memory for good."""
    ref = weakref.ref(state)

    def sidecar() -> Sidecar | None:
        alive = ref()
        return alive.sidecar if alive is not None else None

    return sidecar


def _record_and_close(state: TokenState, sidecar: Sidecar) -> None:
    """Close an unloaded token's sidecar (worker thread), recording its queued accesses through it
    first: recorded after the unload, each took a connection of its own, opened and closed again
    (a checkpoint more), for half the visits of tenants going through a small cap."""
    records, searches = state.pending.take_records()
    try:
        if records or searches:
            bookkeep("record accesses", lambda: sidecar.record_batch(records, searches))
    finally:
        state.pending.committed(records)
        sidecar.close()


def _still(state: TokenState, hot: Area, archive: Area) -> bool:
    """Whether the token is loaded with these areas (``mem_lock`` held)."""
    return state.loaded and state.hot is hot and state.archive is archive


def _scan_in_helper(
    state: TokenState, load_processes: int, watch: Callable[[Path, bool], None] | None
) -> folderscan.Scan | None:
    """A helper process scanning the folder, for a large snapshot and a second CPU (``watch``:
    Tokens.on_folder, told of the whole folder first, since this process does not list it)."""
    where = snapshot.path(state.dir)
    try:
        large = where.stat().st_size >= processes.HELPER_MIN_BYTES
    except OSError:
        return None
    most = processes.scan_helpers(load_processes)
    if not large or most == 0:
        return None
    if watch is not None:
        folderscan.watch_all(state.dir, watch)
    return folderscan.start(state.dir, where, most=most)


def _listed(state: TokenState, pool: loader.Helpers, setting: int | None) -> list[tuple[str, bool]]:
    """The token's files, listed for a cold load; ``pool``'s helpers started as soon as there are
    enough files to pay for them, so they import while the listing goes on."""
    listing = state.vault.list_files()
    files = list(itertools.islice(listing, loader.PARALLEL_MIN))
    if len(files) == loader.PARALLEL_MIN:
        pool.start(loader.helpers_for(len(files), setting))
        files += listing
    return files


def _checked(
    state: TokenState, cache: dict[str, FileStat], pool: loader.Helpers, setting: int | None
) -> tuple[list[Memory], list[tuple[str, bool, FileStat | None]], set[str]]:
    """The token's files against its parse cache: those unchanged since they were parsed (their
    Memory), those to read (and parse unless unchanged), and every file's key. ``pool``'s helpers
    start as soon as there are enough files to read to pay for them."""
    ready: list[Memory] = []
    todo: list[tuple[str, bool, FileStat | None]] = []
    seen: set[str] = set()
    for id, archived, st in state.vault.scan():
        path_key = key(id, archived)
        seen.add(path_key)
        cached = cache.get(path_key)
        if cached is not None and cached.parsed and unchanged(cached, st):
            memory = snapshot.from_stat(cached, id, archived, st)
            if memory is not None:
                ready.append(memory)
                continue
        todo.append((id, archived, cached))
        if len(todo) == loader.PARALLEL_MIN:  # helpers will pay: started while the scan goes on
            pool.start(loader.helpers_for(len(todo), setting))
    return ready, todo, seen


def _in_use(state: TokenState) -> bool:
    """An operation, a mutation, a load or a sweep holds the token: it must not be unloaded."""
    return bool(state.users or state.lock.locked() or state.load_lock.locked() or state.evicting)


def _idle(state: TokenState, warming: set[str]) -> bool:
    """Nothing in flight holds the token: not in use, nor warming, nor with accesses queued."""
    return not (_in_use(state) or state.token in warming or not state.pending.empty())


class Using:
    """``async with tokens.using(token) as state``: a class, not a generator (every tool call
    enters two or three of these; contextlib's cost four times the block's own work)."""

    __slots__ = ("_state", "_token", "_tokens")

    def __init__(self, tokens: "Tokens", token: str) -> None:
        self._tokens = tokens
        self._token = token
        self._state: TokenState | None = None

    async def __aenter__(self) -> TokenState:
        tokens = self._tokens
        state = tokens.register(self._token)
        state.users += 1  # before any await: from here on no unload takes this token
        self._state = state
        tokens.embeddings.last_request = time.monotonic()  # background embedding makes way
        if not state.loaded:
            try:
                await tokens.ensure_loaded(state)
            except BaseException:
                self._state = None
                tokens._let_go(state)
                raise
        return state

    async def __aexit__(self, *exc: object) -> None:
        state, self._state = self._state, None
        if state is not None:
            self._tokens._let_go(state)


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
        self.unloads = 0
        self.forgotten_parses = 0  # files parsed by tokens since forgotten (see parses)
        # write_memory's recent writes of forgotten tokens: (when forgotten, monotonic; the writes)
        self.recent_writes: dict[str, tuple[float, OrderedDict[str, tuple[str, datetime]]]] = {}
        self.warming: set[str] = set()  # tokens whose load warm() began
        # Told (token, True) before a load reads the token's folder (in the load's thread), and
        # (token, False) once it is unloaded: the store watches the folders of loaded tokens only.
        self.on_loaded: Callable[[str, bool], None] | None = None
        # Told of each folder in a loading token's folder before the load lists it, (folder, whether
        # to watch all below it), in the load's thread: on_loaded watches the token's folder alone,
        # and the load's own listing finds the folders in it (Vault.entering), so it is listed once.
        self.on_folder: Callable[[Path, bool], None] | None = None
        # Unloaded tokens' sidecars, being closed in a worker thread, and whose they were.
        self.closing: dict[Sidecar, TokenState] = {}
        self.releases = heap.Releases(spawn)  # the unloaded tokens' memory, given back in turn
        # Every state is in one of these two or is loading: the loaded ones, least recently used
        # first (moved to the end on each use), and the unloaded ones still held by something in
        # flight (queued accesses, a failed load's caller), oldest first, to forget once idle.
        # Both are changed on the event loop only.
        self._recency: OrderedDict[str, TokenState] = OrderedDict()
        self._unloaded: OrderedDict[str, TokenState] = OrderedDict()
        self._loads = Threads(LOAD_THREADS)
        self.keep: Callable[[], None] = heap.keep  # at a load's end (Service.begin: not while importing)

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

    def using(self, token: str) -> Using:
        """The token's state, loaded, and kept loaded (never unloaded, its sidecar never closed)
        until the block ends. A read racing an unload once found the token emptied under it."""
        return Using(self, token)

    def _let_go(self, state: TokenState) -> None:
        """The end of a ``using`` block."""
        state.users -= 1
        if not state.loaded and self.states.get(state.token) is state:
            self._unloaded[state.token] = state  # its load failed: forgotten once nothing holds it

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
                kept = self.recent_writes.pop(token, None)
                if kept is not None:
                    state.recent_writes = kept[1]
            state.link_checked = now
        state.last_used = now
        if token in self._recency:
            self._recency.move_to_end(token)
        return state

    async def ensure_loaded(self, state: TokenState, progress: Callable[[int], None] | None = None) -> None:
        if not state.loaded:
            async with state.load_lock:
                if not state.loaded:
                    with self.embeddings.paused():
                        await anyio.to_thread.run_sync(
                            self.load, state, progress, limiter=self._loads.limiter()
                        )
                    if state.loaded:
                        self._loaded(state)
                    self.unload_idle()
                    self.keep()
                    if not state.settled:
                        self.spawn(anyio.to_thread.run_sync(self.settle, state))
                    if state.young_leftovers:
                        young, state.young_leftovers = state.young_leftovers, []
                        self.spawn(leftovers.remove_when_due(state.dir, young))
                    if state.snapshot_stale:
                        self.spawn(anyio.to_thread.run_sync(state.save_snapshot))
                    elif state.large:
                        self.spawn(anyio.to_thread.run_sync(heap.release))  # the load's garbage

    def _loaded(self, state: TokenState) -> None:
        """A load of this state succeeded: it is the most recently used (event loop)."""
        self._unloaded.pop(state.token, None)
        self._recency[state.token] = state
        self._recency.move_to_end(state.token)

    def unload_idle(self) -> None:
        """Keep at most MEMVAULT_MAX_LOADED_TOKENS indexes in memory; the least recently used go.

        An unloaded token closes its sidecar (three descriptors each: 5,000 tokens once ran the
        process out of them) and reloads from its parse cache on the next request. A token in use
        (an operation in flight, a mutation, a sweep) is never unloaded: the next least recently
        used goes instead, so the cap holds while some of the oldest are busy.

        O(1) amortized (after every load): it once scanned every state and sorted the loaded ones,
        two thirds of the event loop with 10,000 tenants under a cap of 100 (bench_tenants).
        """
        # Unloaded earlier while something still held them (queued accesses): forgotten once idle,
        # a few looked at per call, in turn.
        for _ in range(min(FORGET_CHECKS, len(self._unloaded))):
            token, state = self._unloaded.popitem(last=False)
            if self.states.get(token) is not state or state.loaded:
                continue  # forgotten or loaded again meanwhile
            if _idle(state, self.warming):
                self._forget(state)
            else:
                self._unloaded[token] = state
        excess = len(self._recency) - self.settings.max_loaded_tokens
        if excess <= 0:
            return
        going: list[TokenState] = []
        gone: list[str] = []  # entries no longer loaded (a reindex whose load failed)
        for token, state in self._recency.items():  # least recently used first
            if len(going) >= excess:
                break
            if not state.loaded or self.states.get(token) is not state:
                gone.append(token)
                excess -= 1
            elif not _in_use(state):
                going.append(state)
        for token in gone:
            del self._recency[token]
        for state in going:
            del self._recency[state.token]
            self._unload(state)

    def _unload(self, state: TokenState) -> None:
        with state.mem_lock:
            state.hot, state.archive = Area(), Area()
            state.phase = Phase.UNLOADED
            state.settled = False
            state.snapshot_parts = None
        self.embeddings.detach(state.vectors)
        state.vectors.clear()
        if state.sidecar is not None:
            sidecar, state.sidecar = state.sidecar, None
            # Off the loop: closing runs PRAGMA optimize and checkpoints, which touch the disk.
            self.closing[sidecar] = state
            self.spawn(self._close(sidecar))
        if self.on_loaded is not None:
            self.on_loaded(state.token, False)
        if _idle(state, self.warming):
            self._forget(state)
        else:
            self._unloaded[state.token] = state
        self.unloads += 1
        heap.unkeep()  # what died while frozen is collected (at most once a minute, rarer if little)
        self.releases.request()

    async def _close(self, sidecar: Sidecar) -> None:
        try:
            await anyio.to_thread.run_sync(_record_and_close, self.closing[sidecar], sidecar)
        finally:
            self.closing.pop(sidecar, None)

    def close(self) -> None:
        """Close every sidecar: the loaded tokens' and any an unload left closing (at shutdown,
        when the background work that would have closed it was cancelled)."""
        for sidecar, state in list(self.closing.items()):
            _record_and_close(state, sidecar)
        self.closing.clear()
        for state in self.states.values():
            if state.sidecar is not None:
                state.sidecar.close()
                state.sidecar = None

    def loaded_or_loading(self, token: str) -> bool:
        """Whether the token is loaded, or a load of it has begun."""
        state = self.states.get(token)
        return state is not None and (state.loaded or state.loading or state.load_lock.locked())

    def _forget(self, state: TokenState) -> None:
        """Drop an unloaded token's state: memory follows the loaded tokens only (an unloaded one
        kept its empty index and vectors for every token ever served, made-up ones included).
        Nothing in flight holds it (no user, lock, sweep or queued access); the next request builds
        a new one. Its recent writes (write_memory's dedupe window) stay aside until
        the window has passed, and the files it parsed still count."""
        self.states.pop(state.token, None)
        self.forgotten_parses += state.parses
        now = time.monotonic()
        window = self.settings.dedupe_window_seconds
        if state.recent_writes:
            self.recent_writes[state.token] = (now, state.recent_writes)
        # Oldest first (each is added at its forgetting, or taken back by register): the expired
        # ones are at the front, and a forget no longer walks all of them.
        while self.recent_writes:
            token, (at, _) = next(iter(self.recent_writes.items()))
            if now - at <= window:
                break
            del self.recent_writes[token]

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
            snapshot.path(state.dir).unlink(missing_ok=True)
            self.load(state, progress)
            self.settle(state)
        if state.loaded:
            self._loaded(state)
        return len(state.hot.memories) + len(state.archive.memories)

    def load(self, state: TokenState, progress: Callable[[int], None] | None = None) -> None:
        """Load a token, then apply the outside changes reported while it loaded: a file changed
        after the load read it must not stay stale until its next change."""
        with state.mem_lock:
            state.phase = Phase.LOADING
        if self.on_loaded is not None:
            self.on_loaded(state.token, True)  # before the read: an edit made after it is seen
        # The folder as the load is about to read it: the first call after the load need not look
        # at it again (ops.store's _caught_up looks when the folder's mtime moved since).
        with contextlib.suppress(OSError):
            state.folder_seen = os.stat(state.dir).st_mtime_ns
        state.vault.entering = self.on_folder
        try:
            with heap.uncollected():
                self._load_files(state, progress)
            leftovers.remove(state)
        finally:
            state.vault.entering = None
            with state.mem_lock:
                state.phase = Phase.LOADED if state.phase is Phase.LOADED else Phase.UNLOADED
                failed = state.phase is not Phase.LOADED
                missed, rescan = state.missed, state.missed_rescan
                state.missed, state.missed_rescan = set(), False
            if failed and self.on_loaded is not None:
                self.on_loaded(state.token, False)  # a load that failed keeps no watch
        if missed or rescan:
            reconcile.apply_changes(state, missed, rescan)

    def _load_files(self, state: TokenState, progress: Callable[[int], None] | None = None) -> None:
        """Read a token's folder: from the index snapshot plus what changed since, else from the files,
        re-parsing only files whose bytes differ from the sidecar's parse cache."""
        if state.dir.is_dir():
            state.ensure_sidecar()
            scan = _scan_in_helper(
                state, self.settings.load_processes, self.on_folder
            )  # the folder, walked while the snapshot decodes
            try:
                restored = snapshot.load(state.dir)
                if restored is not None:
                    with state.mem_lock:
                        state.hot, state.archive = restored
                    # What changed on disk since the snapshot was taken:
                    reconcile.rescan_folder(state, scan.result() if scan is not None else None)
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
            with loader.Helpers() as pool:
                if cache:
                    ready, todo, seen = _checked(state, cache, pool, self.settings.load_processes)
                    files, listed = [(i, a) for i, a, _ in todo], len(seen)
                else:  # nothing to check the files against, so no stat: a cold load lists them only
                    files = _listed(state, pool, self.settings.load_processes)
                    listed = len(files)
                helpers = loader.helpers_for(len(files), self.settings.load_processes)
                pool.start(helpers)
                parts = pool.load(state.dir, files) if helpers else None
            if parts is None and not cache:
                todo = [(id, archived, None) for id, archived in files]
            if parts is not None:
                state.parses += sum(int(part.pop("parsed")[0]) for part in parts)
                merged = loader.merge_parts([*parts, loader.build_part(map(loader.fields_of, ready))])
                del parts
                hot, archive = snapshot.areas_from(merged)
                state.snapshot_parts = merged  # what save_snapshot would encode; written in the background
                if progress is not None:
                    progress(len(ready) + len(files))
            else:
                refreshed: list[Memory] = []
                for memory in ready:
                    (archive if memory.archived else hot).put(memory)
                if progress is not None:
                    progress(len(ready))
                folder = state.vault.opened() if todo else None  # each file one open, not three
                try:
                    for id, archived, cached in todo:
                        read = state.read_file(id, archived, cached, folder)
                        if read is not None:
                            refreshed.append(read)
                            (archive if archived else hot).put(read)
                        if progress is not None:
                            progress(1)  # file by file: `memvault reindex` shows a moving bar
                finally:
                    if folder is not None:
                        folder.close()
                if listed < snapshot.MIN_MEMORIES:
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
                self.embeddings.attach(state.vectors, _sidecar_of(state), everything)
                state.settled = True
        problems = sum(1 for m in everything if m.problem and not m.archived)
        if problems:
            log.warning(
                "%d file(s) with broken frontmatter, indexed as plain text (memvault check lists them)",
                problems,
            )

    @property
    def parses(self) -> int:
        """Files parsed (not served from the parse cache) by the tokens this registry holds."""
        return self.forgotten_parses + sum(state.parses for state in self.states.values())
