"""The composition root: builds and owns one process's long-lived parts, and says how they are.

A ``Service`` is made once per server, stdio session or CLI command. It builds the registry of
tokens, the embedding worker, recall's reranker, the sweeps, the access recorder, the change
listeners and (when asked) the watcher, joins them, and hands each caller the parts it uses:
``Service.store`` (the memory operations) to the tools and the CLI, ``changes`` to subscriptions,
``registry`` to the server's warm-up and the CLI's loads. ``close`` ends them in order.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any

import anyio.to_thread

from memvault import __version__, heap
from memvault.clock import Clock, utcnow
from memvault.config import Settings
from memvault.disk.watcher import Watcher
from memvault.ops.access import Recorder
from memvault.ops.background import Background
from memvault.ops.changes import Changes
from memvault.ops.store import Store
from memvault.ops.sweeps import Sweeps
from memvault.registry import reconcile
from memvault.registry.tokens import Tokens
from memvault.search.embeddings import Embeddings
from memvault.search.embeddings import from_settings as embeddings_from_settings
from memvault.search.rerankers import Reranking

__all__ = ["Service"]

# A restarted server's background work (building the memories its early load left in their
# stored form, a snapshot) waits at most this long after the start for a first call to end.
HOLD_SECONDS = 1.0
HOLD_POLL_SECONDS = 0.02  # how often the start looks whether that call ended


def _nothing() -> None:
    pass


class Service:
    """One process's parts: the loaded tokens and what works beside them in the background."""

    def __init__(
        self, settings: Settings, *, clock: Clock = utcnow, embeddings: Embeddings | None = None
    ) -> None:
        self.settings = settings
        self.clock = clock
        self.started = time.monotonic()
        self._background: set[asyncio.Task[Any]] = set()
        # Background work held back while the server is still starting (``begin``, ``start``).
        self._held: list[Coroutine[Any, Any, Any]] | None = None
        self._hold_timer: asyncio.TimerHandle | None = None
        self.embeddings = embeddings if embeddings is not None else embeddings_from_settings(settings)
        self.registry = Tokens(settings, self.embeddings, self._in_background)
        # Sweeps and access write-backs take turns, one piece at a time (memvault.ops.background).
        self.background = Background(self.embeddings.busy)
        self.sweeps = Sweeps(self.registry, settings, clock, self._in_background, self.background)
        self.recorder = Recorder(self.registry, self._in_background, self.background)
        # Recall's reranker, loaded on first use; /healthz says which is in effect.
        self.reranking = Reranking(settings.reranker if "recall" in settings.tools else "off")
        # Who listens to which vault's changes; the watcher announces them (see memvault.ops.changes).
        self.changes = Changes(settings.root)
        self.store = Store(settings, self.registry, self.recorder, self.sweeps, clock=clock)
        # The watcher watches a token's folder only while it is loaded or listened to.
        self._watcher: Watcher | None = None
        # Told before a load reads the folder (its thread) or after an unload (the loop); a
        # listener still hears of hand edits after an unload.
        self.registry.on_loaded = functools.partial(self._watch, still=self.changes.listening, walk=False)
        self.registry.on_folder = self._watch_folder  # the load's listing finds the folders in it
        # Told when a token's first listener came (before listen returns) or its last one went.
        self.changes.on_listened = functools.partial(self._watch, still=self.registry.loaded_or_loading)

    # ------------------------------------------------------------------ the watcher

    def watcher(self) -> Watcher:
        """The watcher that brings outside edits of this vault to its loaded tokens and announces
        them (the HTTP server and stdio each make one; ``start`` starts it, ``close`` stops it)."""
        if self._watcher is not None:
            return self._watcher  # made already, before the server's imports (see begin)
        settings = self.settings
        self._watcher = Watcher(
            settings.root,
            self.apply_changes,
            enabled=settings.watch,
            poll_interval=settings.poll_interval_seconds,
            announce=self.changes.announce,
            stale=self.stale_paths,
            in_line=self.in_line,
        )
        for token in list(self.registry.states):
            if self.registry.loaded_or_loading(token) or self.changes.listening(token):
                self._watcher.want(token)
        return self._watcher

    def apply_changes(self, token: str, paths: Iterable[Path], rescan: bool) -> int:
        """Outside changes to a loaded token (worker thread; see memvault.registry.reconcile)."""
        state = self.registry.states.get(token)
        return 0 if state is None else reconcile.apply_changes(state, paths, rescan)

    def in_line(self, token: str, paths: set[Path]) -> bool:
        """Whether a loaded token holds these files as they are (the loop; reconcile.in_line)."""
        state = self.registry.states.get(token)
        return state is not None and reconcile.in_line(state, paths)

    def stale_paths(self, token: str) -> set[Path] | None:
        """A loaded token's files a rescan would read again (worker thread; reconcile.stale_paths)."""
        state = self.registry.states.get(token)
        return None if state is None else reconcile.stale_paths(state)

    def _watch(self, token: str, wanted: bool, *, still: Callable[[str], object], walk: bool = True) -> None:
        """A token became wanted by one of its two users (loaded, listened to), or one stopped
        wanting it: its folder is unwatched only if the other (``still``) does not want it. A load
        (``walk`` False) has the folders in it watched as its listing finds them (_watch_folder)."""
        watcher = self._watcher
        if watcher is None:
            return
        if wanted:
            watcher.want(token, walk=walk)
        elif not still(token):
            watcher.unwant(token)

    def _watch_folder(self, folder: Path, whole: bool) -> None:
        if self._watcher is not None:
            self._watcher.watch_folder(folder, whole=whole)

    # ------------------------------------------------------------------ life

    async def begin(self, tokens: Iterable[str], *, force_polling: bool = False) -> None:
        """Start the watcher (made here if it was not) and the loads of ``tokens``, while the
        server is still starting: a restart's load (the snapshot's decode, the folder scan helper
        on the other core) runs beside the server's imports instead of after its first request.
        The watcher runs first, so an edit made after a load reads a file is caught as at any
        load. What a load leaves to do in the background (building its memories, a snapshot)
        waits (see ``start``): it would slow the imports down."""
        self.watcher()
        await self._start_watcher(force_polling)
        # No heap.keep at a load's end: a collection then walked the SDK's half-made objects (50 ms
        # of the GIL at a restart); the server freezes them all once its imports end.
        self.registry.keep = _nothing
        for token in tokens:
            self.registry.warm(token)
        if self._held is None:
            self._held = []  # from here on (the loads' tasks are made already)

    async def start(self, *, force_polling: bool = False) -> None:
        """Start the watcher (if one was made and ``begin`` did not) and the embedding model's
        load, which nothing waits for and which makes way for the first requests. Background work
        held back since ``begin`` waits on until a first call has come and gone (a restarted
        server's: the memories built beside its handshake took the GIL from it), at most
        HOLD_SECONDS."""
        await self._start_watcher(force_polling)
        self.registry.keep = heap.keep
        self.embeddings.preload()
        if self._held is not None:  # begun: its loads may still be under way
            self._release_after_a_call(time.monotonic(), time.monotonic() + HOLD_SECONDS)
        else:
            self._release()

    def _release_after_a_call(self, started: float, until: float) -> None:
        """Release the held work once an operation began after ``started`` and none is under way
        (each sets Embeddings.last_request as it begins), or at ``until`` (event loop)."""
        now = time.monotonic()
        came = self.embeddings.last_request > started
        if (came and not any(s.users for s in list(self.registry.states.values()))) or now >= until:
            self._release()
        else:
            loop = asyncio.get_running_loop()
            self._hold_timer = loop.call_later(HOLD_POLL_SECONDS, self._release_after_a_call, started, until)

    def _release(self) -> None:
        """Run the background work held back since ``begin`` (event loop)."""
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        held, self._held = self._held or [], None
        for work in held:
            self._in_background(work)

    async def _start_watcher(self, force_polling: bool) -> None:
        if self._watcher is not None and self._watcher.loop is None:
            await self._watcher.start(force_polling=force_polling)

    def health(self) -> dict[str, Any]:
        """What /healthz tells of these parts; ``status`` is "degraded" while the watcher is not
        watching (a container's health check notices a server serving stale results)."""
        watcher = self._watcher
        watching = watcher.state() if watcher is not None else "off"
        loaded = [s for s in list(self.registry.states.values()) if s.loaded]
        body: dict[str, Any] = {
            "status": "ok" if watching in ("inotify", "polling") else "degraded",
            "version": __version__,
            "uptime_seconds": round(time.monotonic() - self.started, 1),
            "tokens_loaded": len(loaded),
            # What the server's memory follows: the loaded tokens and their memories (hot and archived).
            "memories_loaded": sum(len(s.hot.memories) + len(s.archive.memories) for s in loaded),
            "watcher": watching,
            # Folders being read again after lost file events (a queue overflow): catching up, not degraded.
            "rescanning": watcher.rescanning + len(watcher.rescan) if watcher is not None else 0,
            "event_overflows": watcher.overflows if watcher is not None else 0,
            "tools": list(self.settings.tools),
        }
        embedder = self.embeddings.status()
        body["embeddings"] = {
            "name": embedder.name or f"{embedder.requested} (loading)",
            "dim": embedder.dim,
            "pending": self.embeddings.pending(),
            "cpu_seconds": round(self.embeddings.cpu_seconds, 2),
        }
        if embedder.fallback:
            body["embeddings"]["fallback"] = embedder.fallback
        reranker = self.reranking.status(embedder.tokens)
        body["reranker"] = {"name": reranker.name}
        if reranker.fallback:
            body["reranker"]["fallback"] = reranker.fallback
        return body

    def _in_background(self, work: Coroutine[Any, Any, Any]) -> None:
        """Run work after the current request; close() cancels or awaits what is left."""
        if self._held is not None:
            self._held.append(work)
            return
        task = asyncio.get_running_loop().create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def idle(self) -> None:
        """Wait for background work (eviction sweeps) to finish; used by tests and shutdown."""
        while self._background:
            await asyncio.gather(*list(self._background), return_exceptions=True)

    async def close(self) -> None:
        """Stop the watcher, end background work, record queued accesses, save large tokens'
        snapshots, stop the embedding worker and close every sidecar."""
        if self._watcher is not None:
            await self._watcher.stop()
        if self._hold_timer is not None:
            self._hold_timer.cancel()
            self._hold_timer = None
        for work in self._held or []:
            work.close()  # never started
        self._held = None
        for task in list(self._background):
            task.cancel()
        await asyncio.gather(*list(self._background), return_exceptions=True)
        states = self.registry.states
        for state in states.values():  # accesses still queued: recorded, not lost
            if state.loaded:
                await anyio.to_thread.run_sync(self.recorder.drain_now, state)
        for state in states.values():
            if state.loaded and state.large:
                await anyio.to_thread.run_sync(state.save_snapshot)
        await anyio.to_thread.run_sync(self.embeddings.close)
        self.registry.close()
