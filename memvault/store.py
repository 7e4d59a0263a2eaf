"""Loaded tokens and the memory operations the tools and the CLI share: locks, index, access, eviction."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import hashlib
import logging
import os
import sqlite3
import tempfile
import threading
import time
import zipfile
from collections.abc import AsyncIterator, Callable, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import anyio.to_thread
import numpy as np
import numpy.typing as npt
from filelock import FileLock, Timeout

from memvault import eviction, heap, loader
from memvault.clock import utcnow
from memvault.columns import prefixed
from memvault.config import Settings
from memvault.embeddings import Embeddings
from memvault.embeddings import from_settings as embeddings_from_settings
from memvault.errors import (
    Conflict,
    InvalidArgument,
    InvalidName,
    LinkedFolder,
    NotFound,
    TooLarge,
    is_disk_full,
    quote,
)
from memvault.files import TEMP_PREFIX, TEMP_SUFFIX, file_stamp, unchanged
from memvault.index import Index
from memvault.markdown import PRIORITIES, Memory, clean_tags, content_hash, parse_memory
from memvault.names import ARCHIVE, STATE_DIR, check_id, is_memory_path, valid_token
from memvault.resources import OncePer
from memvault.sidecar import FileStat, Sidecar
from memvault.snapshot import from_cache, memories_from_columns, to_cache
from memvault.vault import Vault
from memvault.vectors import TokenVectors

log = logging.getLogger("memvault")

Clock = Callable[[], datetime]
MAX_TITLE_CHARS = 200
LAST_EVICTION = "last_eviction"
SNAPSHOT_FILE = "snapshot.npz"
SNAPSHOT_VERSION = 3  # 3: a file's ctime and inode (Memory.change) beside mtime and size
SNAPSHOT_MIN = 500  # smaller vaults load from their files fast enough


@dataclass
class Area:
    """The memories of one folder (hot or archive) and their search index."""

    memories: dict[str, Memory] = field(default_factory=dict)
    index: Index = field(default_factory=Index)

    def put(self, memory: Memory) -> None:
        self.memories[memory.id] = memory
        self.index.upsert(memory.id, title=memory.title, body=memory.content, tags=memory.tags)

    def drop(self, id: str) -> Memory | None:
        self.index.remove(id)
        return self.memories.pop(id, None)


@dataclass(frozen=True, slots=True)
class Evicted:
    id: str
    reason: str
    archived_as: str | None  # None on a dry run


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


class TokenState:
    """Everything memvault holds for one token. ``mem_lock`` guards the dicts and indexes."""

    def __init__(self, token: str, settings: Settings) -> None:
        self.token = token
        self.vault = Vault(settings.token_dir(token))
        self.hot = Area()
        self.archive = Area()
        self.lock = asyncio.Lock()  # serialises this token's mutations within the process
        self.mem_lock = threading.Lock()
        self.vectors = TokenVectors()  # embeddings of hot and archived memories, filled in the background
        self.sidecar: Sidecar | None = None
        self.loaded = False
        self.load_lock = asyncio.Lock()
        self.recent_writes: dict[str, tuple[str, datetime]] = {}
        self.evicting = False
        self.last_used = 0.0
        self.snapshot_stale = False
        self.snapshot_parts: dict[str, npt.NDArray[Any]] | None = None  # a snapshot ready to write
        self.loading = False  # a load is reading the folder; outside changes wait in missed
        self.missed: set[Path] = set()
        self.missed_rescan = False
        self.users = 0  # operations in flight (Store.using): a token in use is never unloaded

    @property
    def dir(self) -> Path:
        return self.vault.dir

    def file_lock(self) -> FileLock:
        """Cross-process lock (CLI and server, or two servers); creates the token folder."""
        self.ensure_sidecar()
        return FileLock(str(self.dir / STATE_DIR / "lock"), timeout=30)

    def ensure_sidecar(self) -> Sidecar:
        if self.sidecar is None:
            self.vault.check_folder()  # mkdir(exist_ok=True) would follow a link
            self.dir.mkdir(parents=True, exist_ok=True)
            self.sidecar = Sidecar.open(self.dir)
        return self.sidecar

    def area(self, archived: bool) -> Area:
        return self.archive if archived else self.hot


class Store:
    """The tokens this process has loaded, and the operations on their memories."""

    def __init__(self, settings: Settings, *, clock: Clock = utcnow) -> None:
        self.settings = settings
        self.clock = clock
        self.tokens: dict[str, TokenState] = {}
        self.parses = 0  # files parsed (not served from the cache); tests count them
        self.unloads = 0
        self._background: set[asyncio.Task[Any]] = set()
        self.limits = eviction.Limits(
            ttl_p1_days=settings.ttl_p1_days, ttl_p2_days=settings.ttl_p2_days, capacity=settings.capacity
        )
        self.embeddings: Embeddings = embeddings_from_settings(settings)

    # ------------------------------------------------------------------ loading

    async def state(self, token: str) -> TokenState:
        """The loaded state of a token, not held: for tests and tools that only look. Operations use
        :meth:`using`, which keeps the token loaded until they are done."""
        async with self.using(token) as state:
            return state

    @contextlib.asynccontextmanager
    async def using(self, token: str) -> AsyncIterator[TokenState]:
        """The token's state, loaded, and kept loaded (never unloaded, its sidecar never closed)
        until the block ends. A read racing an unload once found the token emptied under it."""
        state = self._register(token)
        state.users += 1  # before any await: from here on no unload takes this token
        try:
            await self._ensure_loaded(state)
            yield state
        finally:
            state.users -= 1

    def _register(self, token: str) -> TokenState:
        if not valid_token(token):
            raise InvalidName(token, "not a valid token")
        if self.settings.token_dir(token).is_symlink():
            raise LinkedFolder()
        state = self.tokens.get(token)
        if state is None:
            state = self.tokens.setdefault(token, TokenState(token, self.settings))
        state.last_used = time.monotonic()
        return state

    async def _ensure_loaded(self, state: TokenState) -> None:
        if not state.loaded:
            async with state.load_lock:
                if not state.loaded:
                    with self.embeddings.paused():
                        await anyio.to_thread.run_sync(self._load, state)
                    self._unload_idle()
                    if state.snapshot_stale:
                        self._in_background(anyio.to_thread.run_sync(self.save_snapshot, state))
                    elif len(state.hot.memories) + len(state.archive.memories) >= SNAPSHOT_MIN:
                        self._in_background(anyio.to_thread.run_sync(heap.release))  # the load's garbage

    def _unload_idle(self) -> None:
        """Keep at most MEMVAULT_MAX_LOADED_TOKENS indexes in memory; the least recently used go.

        An unloaded token closes its sidecar (three descriptors each: 5,000 tokens once ran the
        process out of them) and reloads from its parse cache on the next request. A token in use
        (an operation in flight, a mutation, a sweep) is never unloaded.
        """
        loaded = [s for s in self.tokens.values() if s.loaded]
        excess = len(loaded) - self.settings.max_loaded_tokens
        if excess <= 0:
            return
        for state in sorted(loaded, key=lambda s: s.last_used)[:excess]:
            if state.users or state.lock.locked() or state.load_lock.locked() or state.evicting:
                continue
            with state.mem_lock:
                state.hot, state.archive = Area(), Area()
                state.loaded = False
                state.snapshot_parts = None
            self.embeddings.detach(state.vectors)
            state.vectors.clear()
            if state.sidecar is not None:
                sidecar, state.sidecar = state.sidecar, None
                sidecar.close()
            if state.sidecar is None and not state.load_lock.locked() and not state.dir.is_dir():
                # A token that never wrote anything (a read of an unknown token): forget it
                # entirely, so that requests for made-up tokens cannot pile up state.
                self.tokens.pop(state.token, None)
            self.unloads += 1
            self._in_background(anyio.to_thread.run_sync(heap.release))

    def reindex(self, token: str, progress: Callable[[int], None] | None = None) -> int:
        """Rebuild a token's derived state from its files (worker thread or CLI). Returns files read."""
        state = self.tokens.get(token) or self.tokens.setdefault(token, TokenState(token, self.settings))
        if not state.dir.is_dir():
            return 0
        with state.file_lock():
            sidecar = state.ensure_sidecar()
            sidecar.delete_file_stats(list(sidecar.file_stats()))
            with state.mem_lock:
                state.loaded = False
                state.snapshot_parts = None
            self._snapshot_path(state).unlink(missing_ok=True)
            self._load(state, progress)
        return len(state.hot.memories) + len(state.archive.memories)

    def _load(self, state: TokenState, progress: Callable[[int], None] | None = None) -> None:
        """Load a token, then apply the outside changes reported while it loaded: a file changed
        after the load read it must not stay stale until its next change."""
        with state.mem_lock:
            state.loading = True
        try:
            self._load_files(state, progress)
            self._remove_leftovers(state)
        finally:
            with state.mem_lock:
                state.loading = False
                missed, rescan = state.missed, state.missed_rescan
                state.missed, state.missed_rescan = set(), False
        if missed or rescan:
            self.apply_changes(state.token, missed, rescan)

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

    def _load_files(self, state: TokenState, progress: Callable[[int], None] | None = None) -> None:
        """Read a token's folder: from the index snapshot plus what changed since, else from the files,
        re-parsing only files whose bytes differ from the sidecar's parse cache."""
        if state.dir.is_dir():
            state.ensure_sidecar()
            restored = self._load_snapshot(state)
            if restored is not None:
                with state.mem_lock:
                    state.hot, state.archive = restored
                self._rescan(state)  # what changed on disk since the snapshot was taken
                self._publish(state, snapshot_stale=False)
                return
        hot, archive = Area(), Area()
        if state.dir.is_dir():
            sidecar = state.ensure_sidecar()
            cache = sidecar.file_stats()
            ready: list[Memory] = []  # from the parse cache
            todo: list[tuple[str, bool, FileStat | None]] = []  # to read (and parse unless unchanged)
            seen: set[str] = set()
            for id, archived, st in state.vault.scan():
                key = f"{ARCHIVE}/{id}" if archived else id
                seen.add(key)
                cached = cache.get(key)
                if cached is not None and cached.parsed and unchanged(cached, st):
                    memory = _from_cache(cached, id, archived, st)
                    if memory is not None:
                        ready.append(memory)
                        continue
                todo.append((id, archived, cached))
            helpers = loader.helpers_for(len(todo), self.settings.load_processes)
            parts = (
                loader.load_in_helpers(state.dir, [(i, a) for i, a, _ in todo], helpers) if helpers else None
            )
            if parts is not None:
                self.parses += sum(int(part.pop("parsed")[0]) for part in parts)
                merged = loader.merge_parts([*parts, loader.build_part(ready)])
                del parts
                hot, archive = _areas_from(merged)
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
                    read = self._read_file(state, id, archived, cached)
                    if read is not None:
                        refreshed.append(read)
                        (archive if archived else hot).put(read)
                    if progress is not None:
                        progress(1)  # file by file: `memvault reindex` shows a moving bar
                if len(seen) < SNAPSHOT_MIN:
                    # Large vaults restart from the snapshot written after this load instead; serialising
                    # 100,000 parses into SQLite as well would add seconds to a cold start.
                    sidecar.put_file_stats([_file_stat(m) for m in refreshed])
            sidecar.delete_file_stats([key for key in cache if key not in seen])
        with state.mem_lock:
            state.hot, state.archive = hot, archive
        self._publish(state, snapshot_stale=len(hot.memories) + len(archive.memories) >= SNAPSHOT_MIN)

    def _publish(self, state: TokenState, *, snapshot_stale: bool) -> None:
        with state.mem_lock:
            state.loaded = True
            state.snapshot_stale = snapshot_stale
            everything = [*state.hot.memories.values(), *state.archive.memories.values()]
        self.embeddings.attach(state.vectors, lambda: state.sidecar, everything)
        problems = sum(1 for m in everything if m.problem and not m.archived)
        if problems:
            log.warning(
                "%d file(s) with broken frontmatter, indexed as plain text (memvault check lists them)",
                problems,
            )

    # The index snapshot: the loaded memories and their index as plain data (JSON and numpy arrays,
    # never pickle: the vault may be synced from elsewhere) in .memvault/, so a restart of a large
    # vault does not re-tokenise every memory. Derived: deleting it costs only restart time.

    @staticmethod
    def _snapshot_path(state: TokenState) -> Path:
        return state.dir / STATE_DIR / SNAPSHOT_FILE

    def _load_snapshot(self, state: TokenState) -> tuple[Area, Area] | None:
        path = self._snapshot_path(state)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                if data["version"].tolist() != [SNAPSHOT_VERSION]:
                    raise ValueError("snapshot version")
                return _areas_from(data)
        except (OSError, ValueError, KeyError, TypeError, IndexError, zipfile.BadZipFile) as exc:
            log.warning("index snapshot not usable (%s); reading the files instead", type(exc).__name__)
            return None

    def save_snapshot(self, state: TokenState) -> None:
        """Write the token's snapshot (worker thread). Atomic; a failure only costs restart time.

        Only reference copies are taken under ``mem_lock`` (milliseconds at 100,000 memories);
        the encoding runs outside it, so requests are not held up while it is written."""
        if not state.loaded or state.sidecar is None:
            return
        with state.mem_lock:
            # Parts merged from loader processes are the same data: a restart's rescan catches up
            # with whatever changed since they were read, as with any snapshot.
            ready, state.snapshot_parts = state.snapshot_parts, None
            if ready is None:
                frozen = [(name, area.index.snapshot(), list(area.memories.values()))
                          for name, area in (("hot", state.hot), ("archive", state.archive))]  # fmt: skip
            state.snapshot_stale = False
        parts: dict[str, npt.NDArray[Any]] = {"version": np.array([SNAPSHOT_VERSION], dtype=np.int64)}
        parts.update(ready if ready is not None else loader.encode_areas(frozen))
        del ready
        path = self._snapshot_path(state)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=TEMP_PREFIX, suffix=TEMP_SUFFIX)
        try:
            with os.fdopen(fd, "wb") as handle:
                np.savez(handle, **cast("dict[str, Any]", parts))  # (numpy stubs: see loader)
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("could not write the index snapshot (%s)", exc.strerror or type(exc).__name__)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            del parts
            heap.release()  # the encoding's and, after a cold load, the load's garbage

    def _read_file(
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
                memory = _from_cache(previous, id, archived, st)
                if memory is not None:
                    return memory
        self.parses += 1
        return parse_memory(raw, id, archived=archived, keep_meta=False, **file_stamp(st))

    @staticmethod
    def _remember(state: TokenState, memory: Memory) -> None:
        """Index a memory the server just wrote or read, and cache its parse (small vaults)."""
        with state.mem_lock:
            area = state.area(memory.archived)
            area.put(memory)
            large = len(state.hot.memories) + len(state.archive.memories) >= SNAPSHOT_MIN
        state.vectors.changed(memory)
        # A large vault restarts from its snapshot (written at shutdown), not from this cache; one
        # SQLite transaction per file was most of the time a 1,000-file git pull took to apply.
        if state.sidecar is not None and not large:
            sidecar = state.sidecar
            bookkeep("cache a parse", lambda: sidecar.put_file_stats([_file_stat(memory)]))

    @staticmethod
    def _drop(state: TokenState, id: str, archived: bool) -> None:
        with state.mem_lock:
            state.area(archived).drop(id)
            large = len(state.hot.memories) + len(state.archive.memories) >= SNAPSHOT_MIN
        state.vectors.dropped(f"{ARCHIVE}/{id}" if archived else id)
        if state.sidecar is not None and not large:  # a large vault's cache is not read (snapshot)
            sidecar = state.sidecar
            bookkeep(
                "drop a cached parse",
                lambda: sidecar.delete_file_stats([f"{ARCHIVE}/{id}" if archived else id]),
            )

    # ------------------------------------------------------------------ reading

    async def list_hot(self, token: str) -> list[tuple[Memory, datetime | None]]:
        async with self.using(token) as state:
            memories = await anyio.to_thread.run_sync(self._snapshot, state)
            result = [(m, self.last_access(m, stats)) for m, stats in memories]
            self._maybe_sweep(state)
            return result

    def _snapshot(self, state: TokenState) -> list[tuple[Memory, datetime | None]]:
        with state.mem_lock:
            memories = sorted(state.hot.memories.values(), key=lambda m: m.id)
        recorded = state.sidecar.last_access() if state.sidecar else {}
        return [(m, recorded.get(m.id)) for m in memories]

    @staticmethod
    def last_access(memory: Memory, recorded: datetime | None) -> datetime | None:
        """The later of the sidecar's record and the file's lastAccessedAt, else its last change."""
        times = [t for t in (recorded, memory.last_accessed_at) if t is not None]
        return max(times) if times else (memory.updated_at or memory.created_at)

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
        async with self.using(token) as state:
            if filenames:
                ids = [check_id(name) for name in filenames]
                found = await anyio.to_thread.run_sync(self._by_ids, state, ids, archived)
            elif query is not None and query.strip():
                found = await anyio.to_thread.run_sync(self._search, state, query, limit, archived)
            else:
                found = await anyio.to_thread.run_sync(self._all, state, limit, archived)
            return found

    def _by_ids(self, state: TokenState, ids: list[str], archived: bool) -> Found:
        out: list[Memory] = []
        missing: list[str] = []
        for id in dict.fromkeys(ids):
            state.vault.path_of(id, archived=archived)  # validates links and archive escapes
            memory = self._fresh(state, id, archived)
            if memory is None:
                missing.append(id)
            else:
                out.append(memory)
        if missing and not out:
            raise NotFound(missing[0], archived=archived)
        return Found(out, len(out), True, tuple(missing))

    def _fresh(self, state: TokenState, id: str, archived: bool) -> Memory | None:
        """The memory as it is on disk now (the watcher may not have caught up yet)."""
        path = state.vault.area(archived) / id
        with state.mem_lock:
            known = state.area(archived).memories.get(id)
        try:
            st = path.stat()
        except OSError:
            if known is not None:
                self._drop(state, id, archived)
            return None
        if known is not None and unchanged(known, st):
            return known
        memory = self._read_file(state, id, archived, known)
        if memory is None:
            self._drop(state, id, archived)
        else:
            self._remember(state, memory)
        return memory

    def _search(self, state: TokenState, query: str, limit: int | None, archived: bool) -> Found:
        area = state.area(archived)
        with state.mem_lock:
            hits, total = area.index.search(query, limit=limit or 10)
        memories = [m for m in (self._fresh(state, h.id, archived) for h in hits) if m is not None]
        matched_all = bool(hits) and all(h.matched_all for h in hits)
        if state.sidecar is not None and not archived:
            sidecar = state.sidecar
            bookkeep("count a search", lambda: sidecar.record_search(found=bool(hits)))
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

    async def touch(self, token: str, memories: Sequence[Memory], *, hit: bool = True) -> None:
        """Record access to hot memories: always in the sidecar, in the file per the writeback policy."""
        async with self.using(token) as state:
            hot = [m for m in memories if not m.archived]
            if not hot or not state.dir.is_dir():
                return
            now = self.clock()
            await anyio.to_thread.run_sync(
                lambda: bookkeep("record an access", lambda: state.ensure_sidecar().record_access(
                    [m.id for m in hot], now, hit=hit))
            )  # fmt: skip
            due = [m for m in hot if self._needs_file_write(m, now)]
            if due:
                async with state.lock:
                    await anyio.to_thread.run_sync(self._write_access, state, due, now)
            self._maybe_sweep(state)

    def _needs_file_write(self, memory: Memory, now: datetime) -> bool:
        if memory.conflicted or memory.problem is not None:
            return False
        if not memory.has_frontmatter:
            return True  # legacy file: migrated once, on first access
        mode = self.settings.access_writeback
        if mode == "never":
            return False
        if mode == "always":
            return True
        last = memory.last_accessed_at
        return last is None or last.date() != now.date()

    def _write_access(self, state: TokenState, memories: Sequence[Memory], now: datetime) -> None:
        with state.file_lock():
            for memory in memories:
                fields: dict[str, Any] = {}
                if self.settings.access_writeback != "never":
                    fields["lastAccessedAt"] = now
                if not memory.has_frontmatter:
                    fields = {
                        "priority": memory.priority,
                        "createdAt": memory.created_at or now,
                        "updatedAt": memory.updated_at or memory.created_at or now,
                        **fields,
                    }
                try:
                    updated = state.vault.update(memory.id, fields, expect_hash=memory.hash)
                except (NotFound, Conflict, InvalidArgument, InvalidName):
                    continue  # changed or removed under us; the watcher will catch up
                except OSError as exc:  # a full disk: the read stands, the file keeps its old time
                    _note_failure("write lastAccessedAt back", exc)
                    continue
                self._remember(state, updated)

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
    ) -> tuple[Memory, bool]:
        """Create a memory. Returns (memory, True) when an identical recent write was reused."""
        written = await self.write_superseding(
            token, title=title, content=content, priority=priority, tags=tags, importance=importance
        )
        return written.memory, written.reused

    async def write_superseding(
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
        """Create a memory that replaces others: they move to the archive with ``supersededBy``.

        The new memory lists them under ``supersedes``. P0 memories are never superseded (they
        stay, and ``Written.kept`` says why). Every name is checked before anything is written.
        """
        title = self._check_title(title)
        content = self._check_content(content)
        prio = self._check_priority(priority) or "P2"
        tag_tuple = clean_tags(tags)
        self._check_importance(importance)
        if isinstance(supersedes, str):
            raise InvalidArgument("supersedes must be a list of filenames.")
        replaced = tuple(dict.fromkeys(check_id(name) for name in supersedes or ()))
        async with self.using(token) as state:
            async with state.lock:
                return await anyio.to_thread.run_sync(
                    self._write_sync, state, title, content, prio, tag_tuple, importance, replaced
                )

    def _write_sync(
        self,
        state: TokenState,
        title: str,
        content: str,
        priority: str,
        tags: tuple[str, ...],
        importance: float | None,
        supersedes: tuple[str, ...] = (),
    ) -> Written:
        now = self.clock()
        key = hashlib.blake2b(f"{title}\x00{content.strip()}".encode(), digest_size=16).hexdigest()
        with state.file_lock():
            recent = state.recent_writes.get(key)
            if recent is not None and now - recent[1] <= timedelta(
                seconds=self.settings.dedupe_window_seconds
            ):
                existing = self._fresh(state, recent[0], False)
                if existing is not None and existing.title == title and existing.content == content.strip():
                    return Written(existing, True)
            targets, kept = self._supersede_targets(state, supersedes)
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
            self._remember(state, memory)
            state.recent_writes = {
                k: v
                for k, v in state.recent_writes.items()
                if now - v[1] <= timedelta(seconds=self.settings.dedupe_window_seconds)
            }
            state.recent_writes[key] = (memory.id, now)
            # From here the memory exists: bookkeeping that fails (a full disk) is logged, not raised.
            bookkeep(
                "record an access", lambda: state.ensure_sidecar().record_access([memory.id], now, hit=False)
            )
            superseded = []
            for target in targets:
                try:
                    superseded.append((target.id, self._retire(state, target, memory.id)))
                except (NotFound, Conflict, InvalidArgument, InvalidName, OSError) as exc:
                    # Changed or moved by someone else since it was checked: say so, keep going.
                    kept.append((target.id, f"it changed while being superseded ({type(exc).__name__})"))
        return Written(memory, False, tuple(superseded), tuple(kept))

    def _supersede_targets(
        self, state: TokenState, ids: tuple[str, ...]
    ) -> tuple[list[Memory], list[tuple[str, str]]]:
        """The hot memories a write will supersede, checked up front; P0 ones are kept, with the reason."""
        targets: list[Memory] = []
        kept: list[tuple[str, str]] = []
        for id in ids:
            state.vault.existing(id)  # refuses archive/ names, escapes and links out of the vault
            current = state.vault.read(id)
            if current.conflicted:
                raise Conflict(id)
            if current.problem is not None:
                raise InvalidArgument(
                    f"'{id}' has a problem ({current.problem}), so it cannot be superseded; "
                    "ask the user to fix it."
                )
            if current.priority == "P0":
                kept.append((id, "it is P0 (permanent)"))
            else:
                targets.append(current)
        if targets:
            state.vault.check_archive()  # before anything is written
        return targets, kept

    def _retire(self, state: TokenState, target: Memory, by: str) -> str:
        """Mark ``target`` as superseded by ``by`` and move it to the archive; returns its archive id."""
        state.vault.update(target.id, {"supersededBy": by}, expect_hash=target.hash)
        archived_id = state.vault.move(target.id, to_archive=True)
        archived = self._read_file(state, archived_id, True)
        self._drop(state, target.id, False)
        if archived is not None:
            self._remember(state, archived)
        bookkeep(
            "move access records",
            lambda: state.ensure_sidecar().rename_access(target.id, f"{ARCHIVE}/{archived_id}"),
        )
        return archived_id

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
    ) -> Memory:
        id = check_id(filename)
        if title is not None:
            title = self._check_title(title)
        if content is not None:
            content = self._check_content(content)
        prio = self._check_priority(priority)
        self._check_importance(importance)
        fields: dict[str, Any] = {}
        if prio is not None:
            fields["priority"] = prio
        if tags is not None:
            fields["tags"] = list(clean_tags(tags))
        if importance is not None:
            fields["importance"] = importance
        async with self.using(token) as state:
            async with state.lock:
                return await anyio.to_thread.run_sync(self._update_sync, state, id, fields, title, content)

    def _update_sync(
        self, state: TokenState, id: str, fields: dict[str, Any], title: str | None, content: str | None
    ) -> Memory:
        state.vault.existing(id)
        now = self.clock()
        with state.file_lock():
            current = state.vault.read(id)
            if current.conflicted:
                raise Conflict(id)
            fields = {**fields, "updatedAt": now, "lastAccessedAt": now}
            if not current.has_frontmatter:
                fields = {"priority": current.priority, "createdAt": current.created_at or now, **fields}
            memory = state.vault.update(id, fields, title=title, content=content)
            self._remember(state, memory)
            bookkeep("record an access", lambda: state.ensure_sidecar().record_access([id], now, hit=False))
        return memory

    async def delete(self, token: str, filename: str) -> str:
        id = check_id(filename)
        async with self.using(token) as state:
            async with state.lock:
                return await anyio.to_thread.run_sync(self._delete_sync, state, id)

    def _delete_sync(self, state: TokenState, id: str) -> str:
        state.vault.existing(id)
        with state.file_lock():
            current = state.vault.read(id)
            if current.conflicted:
                raise Conflict(id)
            state.vault.delete(id)
            self._drop(state, id, False)
            bookkeep("forget access records", lambda: state.ensure_sidecar().forget([id]))
        return id

    async def restore(self, token: str, filename: str) -> str:
        id = check_id(filename)
        if id.startswith(f"{ARCHIVE}/"):
            id = id[len(ARCHIVE) + 1 :]  # the path as a person sees it in the folder works too
        async with self.using(token) as state:
            async with state.lock:
                return await anyio.to_thread.run_sync(self._restore_sync, state, id)

    def _restore_sync(self, state: TokenState, id: str) -> str:
        state.vault.existing(id, archived=True)
        now = self.clock()
        with state.file_lock():
            new_id = state.vault.move(id, to_archive=False)
            memory = self._read_file(state, new_id, False)
            self._drop(state, id, True)
            if memory is not None:
                self._remember(state, memory)
            # Restoring is an access: without it the next sweep would archive it again at once.
            bookkeep(
                "move access records", lambda: state.ensure_sidecar().rename_access(f"{ARCHIVE}/{id}", new_id)
            )
            bookkeep(
                "record an access", lambda: state.ensure_sidecar().record_access([new_id], now, hit=False)
            )
        return new_id

    # ------------------------------------------------------------------ eviction

    async def evict(self, token: str, *, dry_run: bool = False) -> list[Evicted]:
        async with self.using(token) as state:
            if not state.dir.is_dir():
                return []
            async with state.lock:
                return await anyio.to_thread.run_sync(self._evict_sync, state, dry_run)

    def _evict_sync(self, state: TokenState, dry_run: bool) -> list[Evicted]:
        now = self.clock()
        with state.file_lock():
            sidecar = state.ensure_sidecar()
            recorded = sidecar.last_access()
            with state.mem_lock:
                memories = list(state.hot.memories.values())
            candidates = [
                eviction.Candidate(
                    id=m.id,
                    priority=m.priority,
                    last_access=self.last_access(m, recorded.get(m.id)) or now,
                    importance=m.importance,
                    pinned=m.conflicted,
                )
                for m in memories
            ]
            plan = eviction.plan(candidates, now, self.limits)
            if dry_run:
                return [Evicted(e.id, e.reason, None) for e in plan]
            if plan:
                state.vault.check_archive()  # else every move fails and the sweep looks like a no-op
            done: list[Evicted] = []
            for item in plan:
                try:
                    new_id = state.vault.move(item.id, to_archive=True)
                except (NotFound, InvalidName, OSError) as exc:
                    log.warning("eviction skipped a memory: %s", type(exc).__name__)
                    continue
                archived = self._read_file(state, new_id, True)
                self._drop(state, item.id, False)
                if archived is not None:
                    self._remember(state, archived)
                bookkeep(
                    "move access records",
                    functools.partial(sidecar.rename_access, item.id, f"{ARCHIVE}/{new_id}"),
                )
                done.append(Evicted(item.id, item.reason, new_id))
            bookkeep("remember the sweep", lambda: sidecar.set_state(LAST_EVICTION, now.isoformat()))
            return done

    def _maybe_sweep(self, state: TokenState) -> None:
        """Lazy eviction: after a read, at most once per interval, in the background."""
        if state.evicting or state.sidecar is None:
            return
        try:
            raw = state.sidecar.get_state(LAST_EVICTION)
        except sqlite3.Error as exc:
            _note_failure("read the last sweep time", exc)
            return
        last = datetime.fromisoformat(raw) if raw else None
        if not eviction.sweep_due(last, self.clock(), self.settings.evict_interval_hours):
            return
        state.evicting = True

        async def sweep() -> None:
            try:
                evicted = await self.evict(state.token)
                if evicted:
                    log.info("archived %d stale memories", len(evicted))
            except Exception:
                log.exception("background eviction failed")
            finally:
                state.evicting = False

        self._in_background(sweep())

    def _in_background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run work after the current request; close() cancels or awaits what is left."""
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def idle(self) -> None:
        """Wait for background work (eviction sweeps) to finish; used by tests and shutdown."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    # ------------------------------------------------------------------ outside changes

    def apply_changes(self, token: str, paths: Iterable[Path], rescan: bool) -> int:
        """Bring a loaded token in line with files changed outside the server (worker thread).

        Returns how many memories changed. Our own writes are recognised by mtime and size and
        cost a stat each.
        """
        state = self.tokens.get(token)
        if state is None:
            return 0
        paths = list(paths)
        with state.mem_lock:
            if not state.loaded:
                if state.loading:  # applied when the load is done (see _load)
                    state.missed.update(paths)
                    state.missed_rescan |= rescan
                return 0
        if rescan:
            return self._rescan(state)
        changed = 0
        parents: dict[str, bool] = {}
        for path in paths:
            located = self._locate(state, path)
            if located is None:
                continue
            id, archived = located
            with state.mem_lock:
                before = state.area(archived).memories.get(id)
            try:
                # A link (or a folder link above it) may point out of the token folder: to another
                # token or anywhere on the machine. The scan skips those; events must too.
                if not self._plainly_inside(state, path, parents):
                    state.vault.path_of(id, archived=archived)
            except InvalidName:
                if before is not None:
                    self._drop(state, id, archived)
                    changed += 1
                continue
            after = self._fresh(state, id, archived)
            if before is not after:
                changed += 1
        return changed

    @staticmethod
    def _plainly_inside(state: TokenState, path: Path, parents: dict[str, bool]) -> bool:
        """True when no link is involved: the file is not a link and its folder resolves to itself.

        Cheap (one lstat, one realpath per folder per batch); anything else gets the full check.
        """
        folder = os.path.dirname(path)
        plain = parents.get(folder)
        if plain is None:
            plain = parents[folder] = os.path.realpath(folder) == os.path.abspath(folder)
        return plain and not os.path.islink(path)

    def _locate(self, state: TokenState, path: Path) -> tuple[str, bool] | None:
        try:
            rel = path.relative_to(state.dir)
        except ValueError:
            return None
        parts = rel.parts
        archived = bool(parts) and parts[0] == ARCHIVE
        if archived:
            parts = parts[1:]
        if not is_memory_path(parts):
            return None
        return "/".join(parts), archived

    def _rescan(self, state: TokenState) -> int:
        """Bring the loaded memories in line with the folder."""
        seen: set[tuple[str, bool]] = set()
        changed = 0
        with state.mem_lock:
            known = (dict(state.hot.memories), dict(state.archive.memories))
        for id, archived, st in state.vault.scan():
            seen.add((id, archived))
            before = known[archived].get(id)
            if before is not None and unchanged(before, st):
                continue  # unchanged: the scan's stat is enough
            if self._fresh(state, id, archived) is not before:
                changed += 1
        for archived in (False, True):
            with state.mem_lock:
                gone = [id for id in state.area(archived).memories if (id, archived) not in seen]
            for id in gone:
                self._drop(state, id, archived)
            changed += len(gone)
        return changed

    # ------------------------------------------------------------------ checks

    def _check_title(self, title: str) -> str:
        title = (title or "").strip()
        if not title:
            raise InvalidArgument("title is empty; give the memory a short title.")
        if "\n" in title or "\r" in title:
            raise InvalidArgument("title must be one line; put details in content.")
        if len(title) > MAX_TITLE_CHARS:
            raise TooLarge("title", len(title), MAX_TITLE_CHARS)
        return title

    def _check_content(self, content: str) -> str:
        if content is None or not content.strip():
            raise InvalidArgument("content is empty; say what the memory should hold.")
        if len(content) > self.settings.max_content_chars:
            raise TooLarge("content", len(content), self.settings.max_content_chars)
        return content

    @staticmethod
    def _check_priority(priority: str | None) -> str | None:
        if priority is None:
            return None
        value = priority.strip().upper()
        if value not in PRIORITIES:
            raise InvalidArgument(
                f"priority must be P0 (permanent), P1 (90 days) or P2 (30 days), not {quote(priority)}."
            )
        return value

    @staticmethod
    def _check_importance(importance: float | None) -> None:
        if importance is not None and not 0.0 <= importance <= 1.0:
            raise InvalidArgument("importance must be between 0 and 1.")

    async def close(self) -> None:
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*list(self._background), return_exceptions=True)
        for state in self.tokens.values():
            if state.loaded and len(state.hot.memories) + len(state.archive.memories) >= SNAPSHOT_MIN:
                await anyio.to_thread.run_sync(self.save_snapshot, state)
        await anyio.to_thread.run_sync(self.embeddings.close)
        for state in self.tokens.values():
            if state.sidecar is not None:
                state.sidecar.close()
                state.sidecar = None


_EPOCH = datetime.fromtimestamp(0, UTC)
_FAILURES = OncePer(lambda record: True, window=60.0)


def _note_failure(what: str, exc: BaseException) -> None:
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
        _note_failure(what, exc)


def _areas_from(data: Mapping[str, npt.NDArray[Any]]) -> tuple[Area, Area]:
    """Hot and archive areas from arrays in the snapshot's format. Raises ValueError (or KeyError,
    TypeError, IndexError) if they do not fit together."""
    areas = []
    for name, archived in (("hot", False), ("archive", True)):
        index = Index.from_snapshot(prefixed(data, f"{name}.index."))
        memories = memories_from_columns(prefixed(data, f"{name}.memories."), archived=archived)
        area = Area({m.id: m for m in memories}, index)
        if len(area.memories) != len(index) or any(id not in index for id in area.memories):
            raise ValueError("snapshot memories and index differ")
        areas.append(area)
    return areas[0], areas[1]


def _from_cache(cached: FileStat, id: str, archived: bool, st: os.stat_result) -> Memory | None:
    """The cached parse of a file whose bytes are known to be unchanged, as it is now on disk."""
    if not cached.parsed:
        return None
    return from_cache(cached.parsed, id, archived=archived, hash=cached.hash, **file_stamp(st))


def _file_stat(memory: Memory) -> FileStat:
    return FileStat(
        memory.path_id, memory.mtime_ns, memory.size, memory.hash, to_cache(memory), memory.change
    )
