"""What changed in a vault, told to whoever listens to that vault (the resource subscriptions).

The files are the truth, so changes are announced from the one place that sees every change to
them: the watcher's batches (an agent's write through this server, the CLI, another server on the
same vault, a person's editor, a git pull). A change is named by keys, vault-relative:

- ``memory:<id>`` and ``archive:<id>``: a hot or an archived memory;
- ``graph``: the knowledge graph file;
- ``session:<stem>``: a session summary's files (see memvault.records.summaryfiles.file_stem).

Listeners are registered per token: a vault never hears of another vault's changes.

A rescan (events were lost: a kernel queue overflow, a folder moved, the watcher restarted) says
nothing of what changed. So that it does not tell every listener "everything changed", the hub keeps,
for each vault listened to, a print of its resource files (each one's stat), taken in a worker thread
when the first listener comes and kept current with each batch; a rescan is announced as what
differs from it. Only a rescan that comes before the print is taken is "everything".
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import anyio.to_thread

from memvault.disk.names import ARCHIVE, GRAPH_FILE, SESSIONS_DIR, is_memory_path
from memvault.records.summaryfiles import stem_of

log = logging.getLogger("memvault")

GRAPH_KEY = "graph"
MEMORY_PREFIX = "memory:"
ARCHIVE_PREFIX = "archive:"
SESSION_PREFIX = "session:"


@dataclass(frozen=True, slots=True)
class Change:
    """One batch of changes to one vault.

    ``listing``: something may have been added, removed or renamed (the resource list changed).
    ``everything``: the vault was rescanned (lost events, a folder moved): anything may have changed.
    """

    keys: frozenset[str]
    listing: bool = False
    everything: bool = False


Listener = Callable[[Change], None]
# A file's (mtime_ns, size, inode), hashed: one int a file keeps a large vault's print small.
Signature = int
Print = dict[str, Signature]  # a vault's resource files (relative, "/"-separated) and their stats


@dataclass(slots=True)
class _Job:
    """What the print of one vault needs next: to be walked whole, or some paths looked at again."""

    walk: bool = False  # a rescan (or the first listener): walk the folder, announce what differs
    announce: bool = False  # tell the listeners what the walk found changed
    paths: set[Path] = field(default_factory=set)


def key_of(rel_parts: tuple[str, ...]) -> str | None:
    """The change key of a path relative to its token folder, or None for a file that is no resource."""
    if not rel_parts:
        return None
    if rel_parts == (GRAPH_FILE,):
        return GRAPH_KEY
    if len(rel_parts) == 2 and rel_parts[0] == SESSIONS_DIR:
        stem = stem_of(rel_parts[1])
        return SESSION_PREFIX + stem if stem else None
    if rel_parts[0] == ARCHIVE:
        inner = rel_parts[1:]
        return ARCHIVE_PREFIX + "/".join(inner) if is_memory_path(inner) else None
    return MEMORY_PREFIX + "/".join(rel_parts) if is_memory_path(rel_parts) else None


class Changes:
    """Listeners per token, and the announcements that reach them (on the event loop)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._listeners: dict[str, dict[object, Listener]] = {}
        # Told (token, True) when a token's first listener comes, before listen returns, and
        # (token, False) when its last one goes: the store watches the folders of listened tokens.
        self.on_listened: Callable[[str, bool], None] | None = None
        # Told the token of every batch, listened to or not (the git sync loop commits soon after).
        self.on_batch: Callable[[str], None] | None = None
        # The print of each vault listened to, and what each needs done to it next (one worker task,
        # so a walk and the look at a batch's paths never race; a token's jobs merge into one).
        self._prints: dict[str, Print] = {}
        self._jobs: dict[str, _Job] = {}
        self._worker: asyncio.Task[None] | None = None
        self._wake: asyncio.Event | None = None
        self._looking = False

    def listen(self, token: str, listener: Listener) -> Callable[[], None]:
        """Register ``listener`` for ``token``'s changes; returns an idempotent unsubscribe."""
        handle = object()
        first = token not in self._listeners
        self._listeners.setdefault(token, {})[handle] = listener
        if first:
            if self.on_listened is not None:
                self.on_listened(token, True)
            if token not in self._prints:
                self._queue(token).walk = True  # the print a later rescan is compared with

        def unsubscribe() -> None:
            mine = self._listeners.get(token)
            if mine is not None and mine.pop(handle, None) is not None and not mine:
                del self._listeners[token]
                self._prints.pop(token, None)
                self._jobs.pop(token, None)
                if self.on_listened is not None:
                    self.on_listened(token, False)

        return unsubscribe

    @property
    def idle(self) -> bool:
        """No print is being taken or brought up to date (tests wait for it)."""
        return not self._jobs and not self._looking

    def listening(self, token: str) -> int:
        return len(self._listeners.get(token, ()))

    def announce(self, token: str, paths: Iterable[Path], listing: bool, everything: bool) -> None:
        """A watcher batch for ``token``: the paths it saw change, whether some were added, removed or
        renamed, whether the token folder was rescanned."""
        if self.on_batch is not None:
            self.on_batch(token)
        mine = self._listeners.get(token)
        if not mine:
            return  # nobody listens: not even the paths are looked at
        if everything and (token in self._prints or self._queued_walk(token)):
            # Compare the folder with its print (a worker thread) and announce what differs.
            job = self._queue(token)
            job.walk = job.announce = True
            job.paths.clear()
            return
        folder = self.root / token
        keys = set()
        seen = []
        for path in paths:
            try:
                rel = path.relative_to(folder)
            except ValueError:
                continue
            key = key_of(rel.parts)
            if key is not None:
                keys.add(key)
                seen.append(path)
        if token in self._prints and seen:
            job = self._queue(token)
            if not job.walk:  # a walk to come looks at these too
                job.paths.update(seen)
        if not keys and not everything:
            return
        self.publish(token, Change(frozenset(keys), listing or everything, everything))

    # ---- the prints (see the module docstring)

    def _queued_walk(self, token: str) -> bool:
        job = self._jobs.get(token)
        return job is not None and job.walk

    def _queue(self, token: str) -> _Job:
        """The token's next job (made if none), and the worker woken; a job kept nowhere when no
        loop runs (the hub alone, in a test): then no print is ever taken."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return _Job()
        job = self._jobs.get(token)
        if job is None:
            job = self._jobs[token] = _Job()
        if self._worker is None or self._worker.done() or self._worker.get_loop() is not loop:
            self._wake = asyncio.Event()
            self._worker = loop.create_task(self._work())
        assert self._wake is not None
        self._wake.set()
        return job

    async def _work(self) -> None:
        assert self._wake is not None
        wake = self._wake
        while True:
            await wake.wait()
            wake.clear()
            while self._jobs:
                token = next(iter(self._jobs))
                job = self._jobs.pop(token)
                if token not in self._listeners:
                    continue
                self._looking = True
                try:
                    found = await anyio.to_thread.run_sync(self._look, token, job)
                except Exception:
                    log.exception("looking at a vault's files for its listeners failed")
                    continue
                finally:
                    self._looking = False
                if found is not None and token in self._listeners:
                    self.publish(token, found)

    def _look(self, token: str, job: _Job) -> Change | None:
        """Bring the token's print up to date (worker thread); for a walk that is to be announced,
        what differs from the print before (None if nothing does): the keys, and whether a file
        came or went. With no print to compare with, "everything"."""
        folder = self.root / token
        before = self._prints.get(token)
        if not job.walk:
            if before is not None:
                for path in job.paths:
                    rel = path.relative_to(folder).as_posix()
                    signature = _signature(path)
                    if signature is None:
                        before.pop(rel, None)
                    else:
                        before[rel] = signature
            return None
        after = walk(folder)
        if token in self._listeners:
            self._prints[token] = after
        if not job.announce:
            return None
        if before is None:
            return Change(frozenset(), listing=True, everything=True)
        keys: set[str] = set()
        listing = before.keys() != after.keys()
        for rel in before.keys() | after.keys():
            if before.get(rel) != after.get(rel):
                key = key_of(tuple(rel.split("/")))
                if key is not None:
                    keys.add(key)
        return Change(frozenset(keys), listing) if keys or listing else None

    def publish(self, token: str, change: Change) -> None:
        for listener in list(self._listeners.get(token, {}).values()):
            try:
                listener(change)
            except Exception:  # one listener's fault must not starve the others
                log.exception("a change listener failed; the others were told")


def _signature(path: Path | str) -> Signature | None:
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return _signed(st) if stat.S_ISREG(st.st_mode) else None


def _signed(st: os.stat_result) -> Signature:
    return hash((st.st_mtime_ns, st.st_size, st.st_ino))


def walk(folder: Path) -> Print:
    """Every resource file in a token folder (memories, archived ones, session files, the graph)
    and its stat, without following a link or entering a dot-folder (worker thread)."""
    found: Print = {}
    top = str(folder)
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(top, rel) if rel else top))
        except OSError:
            continue
        for entry in entries:
            if entry.name.startswith("."):
                continue
            name = f"{rel}/{entry.name}" if rel else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(name)
                    continue
                if key_of(tuple(name.split("/"))) is None or not entry.is_file(follow_symlinks=False):
                    continue
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found[name] = _signed(st)
    return found
