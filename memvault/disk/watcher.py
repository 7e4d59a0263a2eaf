"""Watches the vault for changes made outside the server and hands them, coalesced, to the store."""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirModifiedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import DEFAULT_OBSERVER_TIMEOUT, BaseObserver
from watchdog.observers.polling import PollingObserverVFS

try:
    from watchdog.observers.inotify import InotifyEmitter, InotifyObserver, InotifyWatchGroup
except ImportError:  # not Linux, or an older watchdog: it watches .git/ too (push drops its events)
    InotifyWatchGroup = None  # type: ignore[assignment,misc]

from memvault.disk.names import valid_token

log = logging.getLogger("memvault")

QUIET_SECONDS = 0.05  # a batch closes after this much silence ...
MAX_BATCH_SECONDS = 0.25  # ... or this long after its first event, whichever comes first
HEALTH_CHECK_SECONDS = 5.0  # a quiet watcher checks this often that its observer still runs
# A batch is applied this many paths at a time, the vaults in turn, so that a pull of thousands of
# files into one vault holds another vault's edits back by one chunk, not by the whole pull.
CHUNK_PATHS = 256
# watchdog reports a kernel queue overflow (events lost) only in its log, on these loggers.
WATCHDOG_LOGGER = "watchdog.observers"
OVERFLOW_MESSAGE = "Inotify queue overflowed"

ApplyFn = Callable[[str, set[Path], bool], int]
# What a rescan of a token would read again (worker thread): its changed, new and gone memory files,
# applied then in chunks like events; None when the token is not loaded (apply's rescan does it).
StaleFn = Callable[[str], set[Path] | None]
# Whether a token's paths are as its index holds them (on the loop; our own writes are): no thread.
InLineFn = Callable[[str, set[Path]], bool]
# Told on the loop after a token's batch is applied: (token, paths, listing, rescanned). "listing":
# some path was created, deleted or moved: the list of files may differ, not only their contents.
# A save by rename over an existing name counts too (nothing tells it from a new file without a
# stat per path), and the resource list shows each file's size and time, which it changed.
AnnounceFn = Callable[[str, set[Path], bool, bool], None]
_LISTING_EVENTS = ("created", "deleted", "moved")
_CHANGE_EVENTS: tuple[type[FileSystemEvent], ...] = (
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileDeletedEvent,
    FileMovedEvent,
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
)


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: Watcher, *, polling: bool = False) -> None:
        self.watcher = watcher
        self.polling = polling

    def on_any_event(self, event: FileSystemEvent) -> None:
        # Runs on the watchdog thread: hand the event to the loop and return at once.
        if event.event_type in ("opened", "closed_no_write"):
            return
        if event.is_directory and event.event_type == "modified" and not self.polling:
            # Native events report every entry's own change; a folder's mtime adds nothing. A
            # poller only diffs two snapshots: a file that came and went between them (after a
            # read or a rescan indexed it) shows only as its folder's change, so keep that one.
            return
        if not event.is_directory and all(_dot_name(p) for p in (event.src_path, event.dest_path) if p):
            # A dot-file is never a memory (push drops it too): every write of ours makes four or five
            # events on its temp file, not worth a wake-up of the loop each. A temp file renamed
            # to a memory's name is a move with a visible destination, which goes on.
            return
        loop = self.watcher.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.watcher.push, event)


def _dot_name(path: str | bytes) -> bool:
    """Whether the last part of ``path`` is a dot-name."""
    return os.path.basename(path)[:1] in (".", b".")


def _hidden(root: bytes, path: bytes) -> bool:
    """A path in or under a dot-folder of the vault (.git/, .memvault/, .obsidian/): no memories."""
    return path.startswith(root + b"/") and any(
        part.startswith(b".") for part in path[len(root) + 1 :].split(b"/")
    )


class _Wants:
    """The tokens whose folders are watched (loaded or listened to), shared by the watcher and its
    inotify group. ``lock`` serialises want/unwant and the group's start; it is taken before the
    group's own lock, which the emitter thread takes alone (it reads ``tokens`` without ``lock``)."""

    def __init__(self) -> None:
        self.tokens: set[bytes] = set()
        self.lock = threading.Lock()
        self.group: Any = None


if InotifyWatchGroup is not None:

    class _VaultWatchGroup(InotifyWatchGroup):
        """watchdog's recursive inotify watches, less dot-folders and less the folders of tokens
        nobody wants. Every folder of a clone's .git/ took a watch (objects/00..ff: hundreds per
        clone, against fs.inotify.max_user_watches), and git making them in quick succession made
        watchdog warn; their events were dropped anyway. Every token folder ever served took one
        too (with its archive/ and sessions/), and watchdog's objects for each, for events
        that only a loaded token or a listener uses: the root keeps its own watch (token folders
        coming and going), and below it only wanted tokens are watched."""

        wants: _Wants

        def _token_of(self, path: bytes) -> bytes | None:
            """The token folder's name that ``path`` is in or is, or None for the root (or outside)."""
            if not path.startswith(self.path + b"/"):
                return None
            return path[len(self.path) + 1 :].split(b"/", 1)[0]

        def _add_all_callbacks(self, path: bytes) -> None:
            # As watchdog's own, but the walk never enters a dot-folder, nor a token nobody wants.
            # Every watch is added here: at start, for a folder made or moved in, after a queue
            # overflow, and by want().
            if _hidden(self.path, path):
                return
            if path == self.path:
                self._add_callback(path)
                for token in list(self.wants.tokens):
                    self._add_token(token)
                return
            if self._token_of(path) in self.wants.tokens:
                self._add_tree(path)

        def _add_token(self, token: bytes) -> None:
            """Watch a token's folder and every folder in it, if it is a folder (and not a link the
            walk would not follow)."""
            folder = os.path.join(self.path, token)
            if os.path.isdir(folder) and (self.follow_symlink or not os.path.islink(folder)):
                self._add_tree(folder)

        def _add_tree(self, path: bytes) -> None:
            self._add_callback(path)
            if not self.is_recursive or not os.path.isdir(path):
                return
            for top, dirnames, _ in os.walk(path, followlinks=self.follow_symlink):
                dirnames[:] = [name for name in dirnames if not name.startswith(b".")]
                for name in dirnames:
                    full = os.path.join(top, name)
                    if self.follow_symlink or not os.path.islink(full):
                        self._add_callback(full)

        def _drop_tree(self, path: bytes) -> None:
            inside = path + b"/"
            paths = self._active_callbacks_by_path
            self._remove_callbacks([wd for p, wd in paths.items() if p == path or p.startswith(inside)])

        def _move_watches(self, move_src_path: bytes, move_dst_path: bytes) -> bool:
            # A watched folder renamed to a dot-name (hidden by hand), or to a token nobody wants,
            # keeps no watch either.
            moved = super()._move_watches(move_src_path, move_dst_path)
            if moved and (
                _hidden(self.path, move_dst_path) or self._token_of(move_dst_path) not in self.wants.tokens
            ):
                self._drop_tree(move_dst_path)
            return moved

        def want(self, token: bytes, wanted: bool, *, walk: bool = True) -> None:
            """Watch a token's folder (if it exists: else its creation is seen on the root's
            watch) and, with ``walk``, every folder in it; or stop watching it. The caller holds
            ``wants.lock``."""
            with self._lock:
                if wanted:
                    self.wants.tokens.add(token)
                else:
                    self.wants.tokens.discard(token)
                if not self.is_active:
                    return
                if not wanted:
                    self._drop_tree(os.path.join(self.path, token))
                elif walk:
                    self._add_token(token)
                else:
                    folder = os.path.join(self.path, token)
                    if os.path.isdir(folder) and (self.follow_symlink or not os.path.islink(folder)):
                        self._add_callback(folder)

        def watch_folder(self, path: bytes, whole: bool) -> None:
            """Watch a folder of a wanted token (and, with ``whole``, every folder in it)."""
            with self._lock:
                if (
                    not self.is_active
                    or _hidden(self.path, path)
                    or self._token_of(path) not in self.wants.tokens
                ):
                    return
                if whole:
                    self._add_tree(path)
                else:
                    self._add_callback(path)

    class _VaultEmitter(InotifyEmitter):
        wants: _Wants  # set by _VaultObserver on a subclass of its own

        def on_thread_start(self) -> None:
            # The group's class carries the wants: its first walk, in its constructor, reads them.
            group_class = type("_Group", (_VaultWatchGroup,), {"wants": self.wants})
            with self.wants.lock:
                self._inotify = self.wants.group = group_class(
                    self._inotify_fd,
                    os.fsencode(self.watch.path),
                    is_recursive=self.watch.is_recursive,
                    event_mask=self.get_event_mask_from_filter(),
                    follow_symlink=self.watch.follow_symlink,
                )

    class _VaultObserver(InotifyObserver):
        def __init__(self, *, timeout: float = DEFAULT_OBSERVER_TIMEOUT, wants: _Wants | None = None) -> None:
            super().__init__(timeout=timeout)
            self._emitter_class = type(
                "_Emitter", (_VaultEmitter,), {"wants": wants if wants is not None else _Wants()}
            )

    Observer = _VaultObserver  # tests replace it to see the fallback to polling


def _visible_entries(path: str | None) -> Iterator[os.DirEntry[str]]:
    """A folder's entries less dot-names: the poller never lists or stats what is in .git/."""
    return (entry for entry in os.scandir(path) if not entry.name.startswith("."))


class _OverflowListener(logging.Handler):
    """Hears watchdog's "queue overflowed" log record (its only report of lost events) and tells
    the watcher, on its loop, to rescan."""

    def __init__(self, watcher: Watcher) -> None:
        super().__init__(logging.WARNING)
        self.watcher = watcher

    def emit(self, record: logging.LogRecord) -> None:
        if not isinstance(record.msg, str) or not record.msg.startswith(OVERFLOW_MESSAGE):
            return
        loop = self.watcher.loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self.watcher.overflowed)


class Watcher:
    """Observer on the root; events are grouped per token and applied in batches off the loop.

    Native watches cover the root and the folders of wanted tokens (``want``, ``unwant``); the
    poller, a fallback, walks every token folder, wanted or not.

    ``mode`` is "inotify" (native events), "polling" (fallback when native watching fails) or
    "off" (disabled by settings); /healthz reports it.
    """

    def __init__(
        self,
        root: Path,
        apply: ApplyFn,
        *,
        enabled: bool = True,
        poll_interval: float = 2.0,
        announce: AnnounceFn | None = None,
        stale: StaleFn | None = None,
        in_line: InLineFn | None = None,
    ) -> None:
        self.root = root
        self.apply = apply
        self.stale, self.in_line = stale, in_line
        self.announce = announce
        self.enabled = enabled
        self.poll_interval = poll_interval
        self.mode = "off"
        self.observer: BaseObserver | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pending: dict[str, set[Path]] = {}
        self.rescan: set[str] = set()
        self.listing: set[str] = set()  # tokens whose batch holds a file created, deleted or moved
        self.batches = 0
        self.overflows = 0  # kernel queue overflows heard of (each rescans every watched token)
        self.rescans = 0  # token rescans done
        self.rescanning = 0  # tokens being rescanned now (shown in /healthz)
        self._listener = _OverflowListener(self)
        self._wake = asyncio.Event()
        self._last_event = 0.0  # loop.time() of the latest event that queued work
        self._task: asyncio.Task[Any] | None = None
        self._busy = False
        self._wants = _Wants()

    def want(self, token: str, *, walk: bool = True) -> None:
        """Watch ``token``'s folder from now on (any thread; idempotent). Only wanted folders take
        inotify watches, and a token is wanted while it is loaded or listened to: the index and the
        listeners are all that use its events. Call it before reading the folder, so that an edit
        made after the read is seen. The poller walks every folder regardless.

        Without ``walk`` only the token's own folder is watched: the caller is about to list the
        folder and calls ``watch_folder`` for each folder in it before reading that one (a load of
        100,000 files listed them twice, once here to find the folders among them)."""
        self._set_wanted(token, True, walk=walk)

    def watch_folder(self, path: Path, *, whole: bool = False) -> None:
        """Watch a folder of a wanted token (any thread), and with ``whole`` every folder below
        it: one the caller's listing found and is about to read (``whole``: one it does not read,
        as a load does not read ``sessions/``). Other paths are ignored."""
        try:
            rel = path.relative_to(self.root)
        except ValueError:
            return
        if not rel.parts:
            return  # the root's watch is the observer's own
        with self._wants.lock:
            group = self._wants.group
            try:  # an error must not reach the caller's listing, which it would cut short
                if group is not None:
                    group.watch_folder(os.path.join(group.path, os.fsencode(rel)), whole)
            except OSError as exc:
                log.warning("could not watch a folder (%s)", exc.strerror or type(exc).__name__)

    def unwant(self, token: str) -> None:
        """Stop watching ``token``'s folder (any thread; idempotent)."""
        self._set_wanted(token, False)

    def _set_wanted(self, token: str, wanted: bool, *, walk: bool = True) -> None:
        name = os.fsencode(token)
        with self._wants.lock:
            group = self._wants.group
            if group is not None:
                group.want(name, wanted, walk=walk)
            elif wanted:
                self._wants.tokens.add(name)
            else:
                self._wants.tokens.discard(name)

    async def start(self, *, force_polling: bool = False) -> None:
        # When a program makes nested folders in quick succession, watchdog adds a watch it already
        # holds and warns with a screenful per folder. The watch is the same and nothing is lost.
        warnings.filterwarnings(
            "ignore", message=r"Callback with id .* already exists", category=RuntimeWarning
        )
        self.loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = self.loop.create_task(self._run())
        if not self.enabled:
            self.mode = "polling"
            force_polling = True
        self.root.mkdir(parents=True, exist_ok=True)
        watchdog_log = logging.getLogger(WATCHDOG_LOGGER)
        watchdog_log.addHandler(self._listener)
        if watchdog_log.getEffectiveLevel() > logging.WARNING:
            watchdog_log.setLevel(logging.WARNING)  # the overflow record must be made to be heard
        if not force_polling:
            try:
                native = Observer(wants=self._wants) if InotifyWatchGroup is not None else Observer()
                self.observer = self._start(native, polling=False)
                self.mode = "inotify"
                return
            except OSError as exc:
                log.warning(
                    "file watcher could not start (%s); falling back to polling every %.1fs. "
                    "Raise fs.inotify.max_user_watches to fix.",
                    exc.strerror or type(exc).__name__,
                    self.poll_interval,
                )
        self.observer = self._start(self._poller(), polling=True)
        self.mode = "polling"

    def _start(self, observer: BaseObserver, *, polling: bool) -> BaseObserver:
        # Only changes: without a filter inotify also reports every open and read, so the server's
        # own reads (100,000 files at a cold start) became 200,000 events for watchdog's thread,
        # which competed with the load for the GIL and tripled its time.
        kinds: list[type[FileSystemEvent]] = [*_CHANGE_EVENTS, *([DirModifiedEvent] if polling else [])]
        observer.schedule(_Handler(self, polling=polling), str(self.root), recursive=True, event_filter=kinds)
        observer.start()
        return observer

    def _poller(self) -> BaseObserver:
        return PollingObserverVFS(os.stat, _visible_entries, polling_interval=self.poll_interval)

    def state(self) -> str:
        if self.observer is not None and not self._alive(self.observer):
            return "failed"
        return self.mode

    @staticmethod
    def _alive(observer: BaseObserver) -> bool:
        # The dispatcher thread can outlive its emitter (the thread that reads inotify).
        return observer.is_alive() and all(emitter.is_alive() for emitter in tuple(observer.emitters))

    async def _check(self) -> None:
        """If the native observer stopped, poll instead and rescan: its events since then are lost."""
        dead = self.observer
        if dead is None or self.mode != "inotify" or self._alive(dead):
            return
        self.observer = None
        await anyio.to_thread.run_sync(dead.stop)
        log.warning("file watcher stopped; falling back to polling every %.1fs", self.poll_interval)
        try:
            self.observer = self._start(self._poller(), polling=True)
        except OSError as exc:
            self.mode = "failed"
            log.error("polling could not start either (%s); hand edits reach search after a restart", exc)
            return
        self.mode = "polling"
        self.rescan.update(self._token_folders())
        self._poke()

    def overflowed(self) -> None:
        """The kernel dropped events (a burst outran the queue). One queue serves every watch and
        the kernel does not say whose events it dropped, so every watched token (loaded or listened
        to: no other folder is watched) is rescanned, once for a storm of overflows. A token nobody
        wants lost nothing: it is read afresh when it is loaded."""
        self.overflows += 1
        if self.overflows == 1 or self.overflows % 100 == 0:
            log.warning("file events were lost (queue overflow %d); rescanning the vault", self.overflows)
        with self._wants.lock:
            watched = [os.fsdecode(token) for token in self._wants.tokens]
        self.rescan.update(token for token in watched if valid_token(token))
        self._poke()

    def _token_folders(self) -> list[str]:
        try:
            return [e.name for e in os.scandir(self.root) if valid_token(e.name) and e.is_dir()]
        except OSError:
            return []

    async def stop(self) -> None:
        logging.getLogger(WATCHDOG_LOGGER).removeHandler(self._listener)
        if self.observer is not None:
            observer, self.observer = self.observer, None
            observer.stop()
            await anyio.to_thread.run_sync(observer.join, 5)
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None

    # ---- on the event loop

    def push(self, event: FileSystemEvent) -> None:
        paths = [event.src_path]
        if event.event_type == "moved":
            paths.append(event.dest_path)
        queued = False
        for raw in paths:
            path = Path(raw.decode() if isinstance(raw, bytes) else raw)
            try:
                rel = path.relative_to(self.root)
            except ValueError:
                continue
            if not rel.parts or not valid_token(rel.parts[0]):
                continue
            token = rel.parts[0]
            if any(part.startswith(".") for part in rel.parts[1:-1]):
                continue  # .memvault/, .git/ and other dot-folders are never memories
            if event.is_directory and rel.parts[-1].startswith(".") and len(rel.parts) > 1:
                continue  # a dot-folder itself (.memvault/, .git/): it holds no memories
            if event.is_directory or len(rel.parts) == 1:
                # A folder moved, added or removed: its children send no events of their own.
                self.rescan.add(token)
                queued = True
            elif not rel.parts[-1].startswith("."):
                self.pending.setdefault(token, set()).add(path)
                if event.event_type in _LISTING_EVENTS:
                    self.listing.add(token)
                queued = True
        if queued:
            # Only real work restarts the quiet window: the sidecar's own writes under .memvault/
            # (every read records access) must not hold a hand edit back until the batch cap.
            self._poke()

    def _poke(self) -> None:  # work was queued (on the loop): a batch starts, or its quiet restarts
        self._last_event = self.loop.time() if self.loop is not None else 0.0
        self._wake.set()

    @property
    def idle(self) -> bool:
        return not self.pending and not self.rescan and not self._busy

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                await asyncio.wait_for(self._wake.wait(), HEALTH_CHECK_SECONDS)
            except TimeoutError:
                await self._check()
                continue
            started = loop.time()
            # Coalesce: a short silence (editor saves, a pull's burst), bounded; events only move _last_event.
            self._wake.clear()
            while (until := min(self._last_event + QUIET_SECONDS, started + MAX_BATCH_SECONDS)) > loop.time():
                await asyncio.sleep(until - loop.time())
                self._wake.clear()
            self._busy = True
            try:
                await self._apply_all()
            finally:
                self._busy = False
                self.rescanning = 0
                self.batches += 1
            await self._check()

    async def _apply_all(self) -> None:
        """Apply what is pending, a chunk of one token's paths (or one token's rescan) at a time,
        the tokens in turn, taking in what arrives meanwhile: until nothing is left."""
        work: dict[str, set[Path]] = {}
        rescan: set[str] = set()
        listing: set[str] = set()
        rescanned: set[str] = set()  # tokens whose rescan's files are being applied as chunks

        def take() -> None:
            for token, paths in self.pending.items():
                work.setdefault(token, set()).update(paths)
            rescan.update(self.rescan)
            listing.update(self.listing)
            self.pending, self.rescan, self.listing = {}, set(), set()
            self.rescanning = len(rescan) + len(rescanned)

        take()
        while work or rescan:
            for token in list(dict.fromkeys([*rescan, *work])):
                if token in rescan:
                    stale = None
                    if self.stale is not None:
                        try:
                            stale = await anyio.to_thread.run_sync(self.stale, token)
                        except Exception:
                            log.exception("looking for changed files failed; reading the folder whole")
                    if stale is not None:
                        # The rescan's files join the token's work, applied a chunk at a time;
                        # announced as a rescan once the last of them is in.
                        work.setdefault(token, set()).update(stale)
                        rescan.discard(token)
                        rescanned.add(token)
                        if stale:
                            listing.add(token)
                        self.rescans += 1
                        if work.get(token):
                            continue
                        work.pop(token, None)
                        paths, whole = set(), False
                    else:
                        paths, whole = work.pop(token, set()), True
                elif token not in work:
                    continue  # rescanned meanwhile
                elif len(work[token]) <= CHUNK_PATHS:
                    paths, whole = work.pop(token), False
                else:
                    paths, whole = set(itertools.islice(work[token], CHUNK_PATHS)), False
                    work[token] -= paths
                if paths or whole:
                    try:
                        if whole or self.in_line is None or not self.in_line(token, paths):
                            await anyio.to_thread.run_sync(self.apply, token, paths, whole)
                    except Exception:
                        log.exception("applying file changes failed; the next change or restart will retry")
                if whole:
                    rescan.discard(token)
                    self.rescans += 1
                # The list may differ once the last of the token's chunks is in.
                last = token not in work and token not in rescan
                listed = token in listing and last
                if listed:
                    listing.discard(token)
                everything = whole or (last and token in rescanned)
                if everything:
                    rescanned.discard(token)
                if self.announce is not None:
                    try:
                        # A rescan's files are announced by the rescan itself, once, at its end.
                        shown = set() if token in rescanned else paths
                        self.announce(token, shown, listed, everything)
                    except Exception:
                        log.exception("announcing file changes failed")
                take()
