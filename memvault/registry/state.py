"""A loaded token's state: its areas, vectors and sidecar, its locks, and the file->index step.

Every change of a memory file reaches the index here: the server's own writes call
:meth:`TokenState.remember` / :meth:`TokenState.drop` after the file is written, outside changes
reach it through memvault.registry.reconcile, which calls :meth:`TokenState.fresh`.

Lock order (outer first; never the other way):
  1. ``TokenState.load_lock`` (asyncio): one load at a time.
  2. ``TokenState.lock`` (asyncio): the token's mutations, one at a time, within the process.
  3. ``TokenState.file_lock()`` (a file lock on ``.memvault/lock``): across processes.
  4. ``TokenState.settle_lock`` (a thread lock): one settle at a time.
  5. ``TokenState.mem_lock`` (a thread lock): the dicts and indexes; held for microseconds to
     milliseconds, never across file I/O or an await. On the event loop it is only taken if free
     at once (memvault.threads.held), else the work moves to a worker thread.
``Pending`` and the sidecar have locks of their own, taken last and never around another.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import os
import threading
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from memvault.config import Settings
from memvault.disk.files import file_stamp, try_lock, unchanged
from memvault.disk.markdown import Memory, content_hash, parse_memory
from memvault.disk.names import LOCK_FILE, STATE_DIR, key, split_key
from memvault.disk.safe import Folder
from memvault.disk.vault import Vault, folder_lock
from memvault.load import snapshot
from memvault.logs import bookkeep
from memvault.records.sidecar import FileStat, Sidecar
from memvault.search.area import Area
from memvault.search.vectors import TokenVectors
from memvault.threads import IN_THREAD, ON_LOOP, NeedsThread, Where, held

BATCH = 16  # file write-backs per turn of the token's lock: a mutation waits for at most one batch


class Phase(enum.Enum):
    UNLOADED = "unloaded"
    LOADING = "loading"
    LOADED = "loaded"


class TokenLock(asyncio.Lock):
    """A token's mutation lock that counts who waits for it: background work holding it (a sweep's
    moves, access write-backs; memvault.ops.background) gives it up after the file in hand when
    someone does, so a write waits for one file, not a batch."""

    def __init__(self) -> None:
        super().__init__()
        self.waiting = 0

    async def acquire(self) -> Literal[True]:
        if not self.locked():
            return await super().acquire()
        self.waiting += 1
        try:
            return await super().acquire()
        finally:
            self.waiting -= 1


class TokenState:
    """Everything memvault holds for one token. ``mem_lock`` guards the dicts and indexes."""

    def __init__(self, token: str, settings: Settings) -> None:
        self.token = token
        self.vault = Vault(settings.token_dir(token))
        self.lock_path = str(settings.token_dir(token) / STATE_DIR / LOCK_FILE)  # see file_lock
        self.hot = Area()
        self.archive = Area()
        self.lock = TokenLock()  # serialises this token's mutations within the process
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
        self.last_sweep: datetime | None = None  # when the last sweep ran, once read (sweep_known)
        self.sweep_known = False
        self.sweep_notice: str | None = None  # what a lazy sweep archived, for the next reply
        self.folder_seen: int | None = None  # the token folder's mtime when a call last looked at it
        self.last_used = 0.0
        self.link_checked = 0.0  # when the registry last made sure the folder is not a link
        self.snapshot_stale = False
        self.snapshot_parts: dict[str, npt.NDArray[Any]] | None = None  # a snapshot ready to write
        self.young_leftovers: list[Path] = []  # temp files too young to remove at the last load
        self.missed: set[Path] = set()
        self.missed_rescan = False
        self.users = 0  # operations in flight (Store.using): a token in use is never unloaded
        self.pending = Pending()  # accesses to record, drained in the background (memvault.ops.access)
        self.parses = 0  # files parsed (not served from the cache); tests count them

    @property
    def loaded(self) -> bool:
        return self.phase is Phase.LOADED

    @property
    def loading(self) -> bool:
        """A load is reading the folder: outside changes wait in ``missed`` until it is done."""
        return self.phase is Phase.LOADING

    def looking(self, where: Where) -> held:
        """``mem_lock`` held for the block; ON_LOOP only if it is free at once: the loop never
        waits for a worker thread (NeedsThread instead)."""
        return held(self.mem_lock, where)

    def memory(self, path_key: str) -> Memory | None:
        """The memory with this id relative to the token folder (``archive/...`` for archived).
        With ``mem_lock`` held."""
        id, archived = split_key(path_key)
        return self.area(archived).memories.get(id)

    def lengths(self, path_keys: Sequence[str]) -> npt.NDArray[np.float32]:
        """The body length in terms of each memory (ids relative to the token folder; 0 if unknown).
        With ``mem_lock`` held."""
        archived = [i for i, k in enumerate(path_keys) if split_key(k)[1]] if self.archive.index else []
        if not archived:  # mostly: recall leaves the archive out
            return self.hot.index.lengths(path_keys)
        out = self.hot.index.lengths(path_keys)  # 0 for the archived ones...
        out[archived] = self.archive.index.lengths([split_key(path_keys[i])[0] for i in archived])
        return out

    @property
    def dir(self) -> Path:
        return self.vault.dir

    @contextlib.contextmanager
    def file_lock(self, where: Where = IN_THREAD) -> Iterator[None]:
        """Cross-process lock (CLI and server, or two servers) held for the block; creates the token
        folder. ON_LOOP (a write on the event loop): NeedsThread unless the sidecar is open and the
        lock is free at once, so the loop never waits for another process."""
        if where is ON_LOOP:
            fd = try_lock(self.lock_path) if self.sidecar is not None else None
            if fd is None:
                raise NeedsThread
            try:
                yield
            finally:
                os.close(fd)
            return
        self.ensure_sidecar()
        with folder_lock(self.dir):
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

    def save_snapshot(self) -> None:
        """Write the token's snapshot (worker thread); a failure only costs restart time.

        Only reference copies are taken under ``mem_lock``; the encoding runs outside it, so
        requests are not held up while it is written."""
        if not self.loaded or self.sidecar is None:
            return
        with self.mem_lock:
            # Parts merged from loader processes are the same data: a restart's rescan catches up
            # with whatever changed since they were read, as with any snapshot.
            ready, self.snapshot_parts = self.snapshot_parts, None
            if ready is None:
                frozen = [(name, area.index.snapshot(), list(area.memories.values()))
                          for name, area in (("hot", self.hot), ("archive", self.archive))]  # fmt: skip
            self.snapshot_stale = False
        snapshot.save(self.dir, ready if ready is not None else snapshot.encode_areas(frozen))

    def read_file(
        self, id: str, archived: bool, previous: Memory | FileStat | None = None, folder: Folder | None = None
    ) -> Memory | None:
        """Read one file; parse it unless its bytes equal the previous parse (git touches mtimes).
        ``folder``: the token folder opened once for many reads (memvault.disk.vault.Vault.opened)."""
        read = self.vault.read_scanned(id, archived, folder)
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

    def remember(self, memory: Memory, *, queued: bool = False) -> None:
        """Index a memory the server just wrote or read, and cache its parse (small vaults).
        ``queued``: the parse is cached with the write's access records, in the background (a
        caller that queued those: a write on the event loop then makes no SQLite transaction)."""
        with self.mem_lock:
            area = self.area(memory.archived)
            area.put(memory)
            large = self.large
        self.vectors.changed(memory)
        # A large vault restarts from its snapshot (written at shutdown), not from this cache; one
        # SQLite transaction per file was most of the time a 1,000-file git pull took to apply.
        if self.sidecar is not None and not large:
            if queued:
                self.pending.cache(memory)
                return
            sidecar = self.sidecar
            bookkeep("cache a parse", lambda: sidecar.put_file_stats([snapshot.file_stat(memory)]))

    def drop(self, id: str, archived: bool) -> None:
        with self.mem_lock:
            self.area(archived).drop(id)
            large = self.large
        self.pending.uncache(key(id, archived))  # a parse queued for the file goes with it
        self.vectors.dropped(key(id, archived))
        if self.sidecar is not None and not large:  # a large vault's cache is not read (snapshot)
            sidecar = self.sidecar
            bookkeep(
                "drop a cached parse",
                lambda: sidecar.delete_file_stats([key(id, archived)]),
            )

    def move(
        self, id: str, *, to_archive: bool, renamed: list[tuple[str, str]] | None = None, sync: bool = True
    ) -> str:
        """Move a memory between hot and archive (file lock held): the file, then the index and
        the access records follow. Returns its id in the other area. ``renamed``: the access
        records' move is added to it for the caller to make (a sweep: one transaction a batch);
        without ``sync`` the caller fsyncs the folders (a sweep: once a batch)."""
        new_id = self.vault.move(id, to_archive=to_archive, sync=sync)
        moved = self.read_file(new_id, to_archive)
        self.drop(id, not to_archive)
        if moved is not None:
            self.remember(moved)
        old, new = key(id, not to_archive), key(new_id, to_archive)
        if renamed is not None:
            renamed.append((old, new))
        else:
            bookkeep("move access records", lambda: self.ensure_sidecar().rename_access(old, new))
        return new_id

    def fresh(self, id: str, archived: bool, where: Where = IN_THREAD) -> Memory | None:
        """The memory as it is on disk now (the watcher may not have caught up yet). ON_LOOP: it
        may stat the file but leaves any change to a worker thread (NeedsThread)."""
        with self.looking(where):
            known = (self.archive if archived else self.hot).memories.get(id)
        try:
            st = os.stat(self.vault.file_name(id, archived))  # every read: see the file as it is now
        except OSError:
            if where is ON_LOOP:
                raise NeedsThread from None
            if known is not None:
                self.drop(id, archived)
            return None
        if known is not None and unchanged(known, st):
            return known
        if where is ON_LOOP:
            raise NeedsThread
        memory = self.read_file(id, archived, known)
        if memory is None:
            self.drop(id, archived)
        else:
            self.remember(memory)
        return memory


class Pending:
    """A token's accesses not yet recorded: sidecar rows, search counts and file write-backs.

    Reads only add to it (microseconds, no I/O); a background task drains it in batches, one
    SQLite transaction for every row and search count, one folder fsync per batch of files, so
    nothing a read must wait for is on its path. Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.records: list[tuple[tuple[str, ...], datetime, bool]] = []
        self.searches: list[bool] = []
        self.files: dict[str, tuple[Memory, datetime]] = {}
        self.to_cache: dict[str, Memory] = {}  # the server's writes whose parse to cache, by key
        self.draining = False
        # Records taken but not yet committed: still counted by latest(), so a listing right after
        # a read never misses its access while the transaction runs.
        self._flushing: list[list[tuple[tuple[str, ...], datetime, bool]]] = []

    def add(self, ids: Sequence[str], at: datetime, hit: bool, due: Sequence[Memory] = ()) -> None:
        with self._lock:
            self.records.append((tuple(ids), at, hit))
            for memory in due:
                self.files[memory.id] = (memory, at)

    def searched(self, found: bool) -> None:
        with self._lock:
            self.searches.append(found)

    def cache(self, memory: Memory) -> None:
        with self._lock:
            self.to_cache[memory.path_id] = memory

    def uncache(self, path_key: str) -> None:
        if self.to_cache:
            with self._lock:
                self.to_cache.pop(path_key, None)

    def take_parses(self) -> list[FileStat]:
        """The queued parses to cache (the recorder puts them in with the access records)."""
        with self._lock:
            memories, self.to_cache = list(self.to_cache.values()), {}
        return [snapshot.file_stat(memory) for memory in memories]

    def empty(self) -> bool:
        """Nothing queued, being recorded or being written back."""
        with self._lock:
            queued = self.records or self.searches or self.files or self.to_cache
            return not (queued or self._flushing or self.draining)

    def latest(self) -> dict[str, datetime]:
        """The latest queued access of each id (not yet in the sidecar)."""
        latest: dict[str, datetime] = {}
        with self._lock:
            for batch in (*self._flushing, self.records):
                for ids, at, _hit in batch:
                    for id in ids:
                        if id not in latest or latest[id] < at:
                            latest[id] = at
        return latest

    def take_records(self) -> tuple[list[tuple[tuple[str, ...], datetime, bool]], list[bool]]:
        """The queued records and search counts; the records stay visible to latest() until
        ``committed`` is called with them."""
        with self._lock:
            records, self.records = self.records, []
            searches, self.searches = self.searches, []
            self._flushing.append(records)
        return records, searches

    def committed(self, records: list[tuple[tuple[str, ...], datetime, bool]]) -> None:
        with self._lock:
            self._flushing = [batch for batch in self._flushing if batch is not records]

    def take_files(self, limit: int = BATCH) -> list[tuple[Memory, datetime]]:
        with self._lock:
            ids = list(self.files)[:limit]
            return [self.files.pop(id) for id in ids]

    def requeue_files(self, items: Sequence[tuple[Memory, datetime]]) -> None:
        """Queue again write-backs taken but not made (a batch gave way to a request); one queued
        for the same memory meanwhile is newer and stays."""
        with self._lock:
            for memory, at in items:
                self.files.setdefault(memory.id, (memory, at))
