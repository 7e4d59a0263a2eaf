"""The embedding worker: one thread per process that fills loaded tokens' vectors.

It loads the process's embedder lazily (never on the event loop), embeds in batches and reuses
vectors the sidecar already holds for the same model and text.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeGuard

import numpy as np

from memvault import heap
from memvault.errors import InvalidArgument
from memvault.kinds import embedder_kind
from memvault.records.sidecar import StoredVector
from memvault.search.embedders import (
    Embedder,
    EmbedderUnavailable,
    FloatMatrix,
    TokenIds,
    load_embedder,
    token_embedder,
)
from memvault.search.embedders.hash import HashEmbedder
from memvault.search.vectors import TokenVectors, Work, embed_text, text_hash

if TYPE_CHECKING:
    from memvault.disk.markdown import Memory
    from memvault.records.sidecar import Sidecar

log = logging.getLogger("memvault")

BATCH = 64
RELEASE_AFTER = 1000  # memories handled before the worker, once idle, releases free heap memory
WORKER_DUTY_PAUSE = 1.0  # after each batch the worker rests as long as the batch took
# While requests come in: a twentieth of one core. The batch's own CPU time is the measure, not
# the time it took: under load a batch waits for the GIL most of its time, and resting in
# proportion to that gave the worker a quarter of the process's CPU (measured, bench_load).
BUSY_DUTY_PAUSE = 19.0
BUSY_SECONDS = 1.0  # a request within this long makes the process busy
# While requests come, work found after a wait waits this long for more before it is taken: a busy
# server's writes come one at a time, and each batch costs the sidecar's reads and transaction.
GATHER_SECONDS = 0.25
LOAD_PATIENCE = 3.0  # the longest a model's load waits for a pause in the requests
HOLD_PATIENCE = 60.0  # ... and for the loads of tokens to end (a cold load of 100,000 files: 5-20 s)


@dataclass(frozen=True, slots=True)
class EmbedderStatus:
    requested: str
    name: str | None  # None while loading
    dim: int | None
    fallback: str | None  # why the requested embedder is not the one in use
    tokens: bool | None  # it keeps token ids for MaxSim (WordLlama); None while loading


class Embeddings:
    """The process's embedder (loaded lazily, off the event loop) and the worker that fills vectors."""

    def __init__(
        self,
        spec: str = "hash",
        *,
        url: str | None = None,
        key: str | None = None,
        model: str | None = None,
        loader: Callable[[], Embedder] | None = None,
        enabled: bool = True,
        processes: int = 1,
    ) -> None:
        embedder_kind(spec)
        self.spec = spec
        self.enabled = enabled  # False when the recall tools are not offered: nothing is embedded
        # `serve --processes N`: each process's worker takes 1/N of the busy share, so the whole
        # server's stays BUSY_DUTY_PAUSE's (each process has about 1/N of the vaults to embed).
        self._busy_pause = (BUSY_DUTY_PAUSE + 1) * processes - 1
        self._holds = 0  # loads in progress: the worker waits, so a load has the CPU to itself
        self._loader = loader or (lambda: load_embedder(spec, url=url, key=key, model=model))
        self._embedder: Embedder | None = None
        self._fallback: str | None = None
        self._load_lock = threading.Lock()
        self._tokens: list[TokenVectors] = []
        self._cond = threading.Condition()
        self._busy = False
        self._thread: threading.Thread | None = None
        self._closed = False
        self._worked = 0  # memories taken since the heap was last released (see heap)
        self.last_request = 0.0  # time.monotonic() of the latest request (Tokens.using sets it)
        self.embedded = 0  # texts embedded by the model (not reused from the sidecar); tests count them
        self.cpu_seconds = 0.0  # CPU time the worker spent on batches (/healthz)
        self._taken = 0  # memories taken by the batch in hand: pending() counts them until placed
        self._patient = False  # preloaded: the model's load waits for a pause in the requests
        self._hurry = False  # someone waits for the vectors (wait_idle): the model loads at once
        self._waiters = 0  # wait_idle calls in progress: new work is taken at once

    # -- the embedder --------------------------------------------------------------------------

    def status(self) -> EmbedderStatus:
        embedder = self._embedder
        return EmbedderStatus(
            self.spec,
            embedder.name if embedder else None,
            embedder.dim if embedder else None,
            self._fallback,
            token_embedder(embedder) is not None if embedder else None,
        )

    def load(self) -> Embedder:
        """The embedder, loading it on first use (blocking: call from a worker thread)."""
        embedder = self._embedder
        if embedder is not None:
            return embedder
        with self._load_lock:
            if self._embedder is None:
                try:
                    self._embedder = self._loader()
                except Exception as exc:
                    reason = (
                        str(exc)
                        if isinstance(exc, EmbedderUnavailable | InvalidArgument)
                        else type(exc).__name__
                    )
                    self._fallback = f"{self.spec} could not load: {reason}"
                    self._embedder = HashEmbedder()
                    log.warning(
                        "embedder %s could not load (%s); falling back to %s",
                        self.spec,
                        reason,
                        self._embedder.name,
                    )
            return self._embedder

    def ready(self) -> Embedder | None:
        """The embedder if it is loaded (the built-in one always is); else start loading, return None."""
        if self._embedder is None and embedder_kind(self.spec).name == "hash":
            return self.load()
        if self._embedder is None:
            self._start()
            with self._cond:
                self._cond.notify_all()
        return self._embedder

    def preload(self) -> None:
        """Load the model in the background once the first requests are answered: a process just
        started counts as busy, so a client's first call (a hook, a stdio client) does not share
        the GIL with the load."""
        self.last_request = max(self.last_request, time.monotonic())
        self._patient = True
        self.ready()

    def embed_query(self, text: str) -> FloatMatrix | None:
        embedder = self.ready()
        if embedder is None:
            return None
        try:
            vector: FloatMatrix = embedder.embed([text])[0]
            return vector
        except Exception as exc:
            log.warning(
                "query embedding failed (%s); answering from the lexical index only", type(exc).__name__
            )
            return None

    # -- tokens and the worker -----------------------------------------------------------------

    def attach(
        self, vectors: TokenVectors, sidecar: Callable[[], Sidecar | None], memories: Iterable[Memory]
    ) -> None:
        """Serve a (re)loaded token: its vectors come from the sidecar or are computed."""
        if not self.enabled:
            return
        vectors.sidecar = sidecar
        vectors.wake = self._wake
        with self._cond:
            if vectors not in self._tokens:
                self._tokens.append(vectors)
        vectors.reset(memories)

    def detach(self, vectors: TokenVectors) -> None:
        """Stop serving an unloaded token (attach serves it again when it loads)."""
        with self._cond:
            if vectors in self._tokens:
                self._tokens.remove(vectors)

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """Hold the worker while a token loads: embedding competes with loading for the one GIL."""
        with self._cond:
            self._holds += 1
        try:
            yield
        finally:
            with self._cond:
                self._holds -= 1
                self._cond.notify_all()

    def busy(self) -> bool:
        """Whether requests came in lately: background work (embedding, access write-backs) makes way."""
        return time.monotonic() - self.last_request < BUSY_SECONDS

    def pending(self) -> int:
        """Memories waiting for a vector, over all loaded tokens (the batch in hand included: its
        memories are not in the vectors until it is done)."""
        return sum(v.pending for v in list(self._tokens)) + self._taken

    def _wake(self) -> None:
        """New work: wake the worker if it waits for some. Not while it works or rests: it looks
        for work again after its rest, and a wake-up per change (a sweep moves hundreds of files,
        two changes each) only handed the GIL to the worker and back for nothing."""
        self._start()
        with self._cond:
            if not self._busy:
                self._cond.notify_all()

    def _start(self) -> None:
        if self._thread is None and not self._closed:
            with self._cond:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="memvault-embeddings", daemon=True)
                    self._thread.start()

    def wait_idle(self, timeout: float = 30.0) -> bool:
        """Block until no memory waits for a vector (tests, benchmarks, the CLI). True if idle."""
        deadline = time.monotonic() + timeout
        self._start()
        with self._cond:
            self._hurry = True
            self._waiters += 1
            self._cond.notify_all()
            try:
                while self._busy or any(v.has_work for v in self._tokens):
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return False
                    self._cond.wait(min(left, 0.05))
            finally:
                self._waiters -= 1
        return True

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _run(self) -> None:
        started = time.monotonic()
        deadline = started + LOAD_PATIENCE
        with self._cond:  # a model's load holds the GIL for a while: requests and loads first
            while self._patient and self._embedder is None and not (self._closed or self._hurry):
                # A token's load holds the worker (paused) and its caller waits for it: the model's
                # load took a core from a cold load's helpers, before its first answer. Once the
                # loads end, the requests that follow have the usual patience.
                now = time.monotonic()
                if self._holds and now - started < HOLD_PATIENCE:
                    self._cond.wait(BUSY_SECONDS)
                    deadline = time.monotonic() + LOAD_PATIENCE
                elif self.busy() and now < deadline:
                    self._cond.wait(min(deadline - now, BUSY_SECONDS))
                else:
                    break
        try:
            embedder = self.load()
        except Exception:  # pragma: no cover - load() falls back instead of raising
            log.exception("embedding worker could not start")
            return
        failures = 0
        while True:
            if self._worked >= RELEASE_AFTER and not any(v.has_work for v in list(self._tokens)):
                heap.release()  # a backlog is done: give its free memory back
                self._worked = 0
            with self._cond:
                waited = False
                while not self._closed and (self._holds or not any(v.has_work for v in self._tokens)):
                    self._busy = False
                    self._cond.notify_all()
                    self._cond.wait()
                    waited = True
                if self._closed:
                    self._busy = False
                    self._cond.notify_all()
                    return
                self._busy = True  # from here a new write's wake-up notifies nobody
                if waited and self.busy():
                    self._gather()
                tokens = list(self._tokens)
            for vectors in tokens:
                try:
                    started, cpu = time.monotonic(), time.thread_time()
                    if self._step(embedder, vectors):
                        failures = 0
                    # Background work takes at most about half of one core, and a twentieth of
                    # its CPU while requests come in (the GIL is shared), so they stay quick
                    # while a large vault is embedded.
                    used = time.thread_time() - cpu
                    self.cpu_seconds += used
                    took = time.monotonic() - started
                    self._rest(used * self._busy_pause if self.busy() else took * WORKER_DUTY_PAUSE)
                except Exception as exc:
                    # A model endpoint that is down: retry with a growing pause, log now and then.
                    failures += 1
                    if failures == 1 or failures % 10 == 0:
                        log.warning("embedding batch failed (%s); retrying", type(exc).__name__)
                    self._rest(min(60.0, 0.5 * 2**failures))

    def _gather(self) -> None:
        """Let more work come (GATHER_SECONDS), unless someone waits for the vectors or the
        worker is closed. With ``_cond`` held."""
        until = time.monotonic() + GATHER_SECONDS
        while not self._closed and not self._waiters and (left := until - time.monotonic()) > 0:
            self._cond.wait(left)

    def _rest(self, seconds: float) -> None:
        """Pause for ``seconds``, or until closed. New work notifies the condition; it must not cut
        the pause short (under a stream of writes the worker then never rested)."""
        until = time.monotonic() + seconds
        with self._cond:
            while not self._closed and (left := until - time.monotonic()) > 0:
                self._cond.wait(left)

    def _step(self, embedder: Embedder, vectors: TokenVectors) -> bool:
        """Embed a batch of this token's memories. False if it was dropped: the token unloaded
        while the batch was in hand (its next load queues every memory again)."""
        work, removed = vectors.take(BATCH)
        self._worked += len(work)
        if not work and not removed:
            return True
        self._taken = len(work)
        sidecar = vectors.sidecar()
        try:
            self._embed(embedder, vectors, work, removed, sidecar)
        except Exception:
            # Unloaded (or unloaded and loaded again) meanwhile: the sidecar the batch used was
            # closed under it. Not a failure to warn of or to pause for: with many tenants through
            # a small cap it happened every few seconds, and each pause held back every other
            # token's vectors. A failure with the token's sidecar still in place is one.
            if sidecar is not None and vectors.sidecar() is not sidecar:
                return False
            raise
        finally:
            self._taken = 0
        return True

    def _embed(
        self,
        embedder: Embedder,
        vectors: TokenVectors,
        work: list[Work],
        removed: list[str],
        sidecar: Sidecar | None,
    ) -> None:
        name = embedder.name
        # WordLlama also keeps each memory's most telling token ids (recall's MaxSim), from the
        # same tokenizing: a stored vector without them is embedded again.
        keeper = token_embedder(embedder)

        def complete(stored: StoredVector | None) -> TypeGuard[StoredVector]:
            """A stored vector with all this embedder keeps (the token ids, for WordLlama)."""
            return stored is not None and (keeper is None or stored.tokens is not None)

        texts = [embed_text(w.memory) for w in work]
        hashes = [text_hash(t) for t in texts]
        found: list[tuple[Work, str, FloatMatrix]] = []
        tokens: list[TokenIds | None] = []
        missing = list(range(len(work)))
        try:
            if sidecar is not None and work:
                missing = []
                stored = sidecar.get_vectors([w.key for w in work])
                current = [
                    complete(row := stored.get(item.key)) and row.model == name and row.hash == hashes[i]
                    for i, item in enumerate(work)
                ]
                # A restart finds every vector under its own key: the lookup by text is for the rest.
                by_hash = sidecar.vectors_by_hash(
                    name, [h for h, ok in zip(hashes, current, strict=True) if not ok]
                )
                reused: dict[str, StoredVector] = {}
                for i, item in enumerate(work):
                    got = stored[item.key] if current[i] else None
                    if got is None:
                        got = by_hash.get(hashes[i])
                        if got is None:
                            moved = vectors.recent(name, hashes[i])
                            if moved is not None:
                                got = StoredVector(
                                    name,
                                    embedder.dim,
                                    hashes[i],
                                    moved[0].astype(np.float32).tobytes(),
                                    None if moved[1] is None else moved[1].tobytes(),
                                )
                        if complete(got):
                            reused[item.key] = StoredVector(
                                name, embedder.dim, hashes[i], got.vec, got.tokens
                            )
                    if complete(got) and len(got.vec) == 4 * embedder.dim:
                        found.append((item, hashes[i], np.frombuffer(got.vec, dtype=np.float32)))
                        tokens.append(
                            None if got.tokens is None else np.frombuffer(got.tokens, dtype=np.uint16)
                        )
                    else:
                        missing.append(i)
                sidecar.put_vectors(reused)
            if missing:
                kept: list[TokenIds] | None = None
                if keeper is not None:
                    matrix, kept = keeper.embed_with_tokens([texts[i] for i in missing])
                else:
                    matrix = embedder.embed([texts[i] for i in missing])
                self.embedded += len(missing)
                rows = [(work[i], hashes[i], matrix[j]) for j, i in enumerate(missing)]
                new_tokens: list[TokenIds | None] = list(kept) if kept is not None else [None] * len(rows)
                if sidecar is not None:
                    sidecar.put_vectors(
                        {
                            w.key: StoredVector(
                                name, embedder.dim, h, v.tobytes(), None if t is None else t.tobytes()
                            )
                            for (w, h, v), t in zip(rows, new_tokens, strict=True)
                        }
                    )
                found += rows
                tokens += new_tokens
            if sidecar is not None and removed:
                sidecar.delete_vectors(removed)
        except Exception:
            vectors.requeue(work)
            raise
        vectors.install(name, found, tokens if keeper is not None else None)


def from_settings(settings: Any) -> Embeddings:
    return Embeddings(
        settings.embedder,
        url=settings.embed_url,
        key=settings.embed_key,
        model=settings.embed_model,
        enabled="recall" in settings.tools,
        processes=settings.processes,
    )
