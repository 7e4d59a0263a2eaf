"""Embedders (the seam, the built-in hash embedder, optional models) and per-token vectors, kept up to date.

An :class:`Embedder` turns texts into L2-normalised float32 rows. ``hash`` is built in and
offline; ``model2vec:<name-or-path>``, ``sentence-transformers:<name-or-path>`` and ``openai``
are loaded lazily in the embedding worker thread, and anything that cannot load falls back to
``hash`` with one log line (shown in ``/healthz``).

Each loaded token has a :class:`TokenVectors`: one row per memory (hot and archived, keyed by
the id relative to the token folder), a float32 matrix for brute-force cosine, and a queue of
memories whose text changed. The store marks changes; one worker thread per process embeds
them in batches, reusing vectors the sidecar already holds for the same model and text.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from memvault import heap, topics
from memvault.errors import InvalidArgument
from memvault.text import STOP_WORDS, tokenize

if TYPE_CHECKING:
    from memvault.sidecar import Sidecar
    from memvault.vault import Memory

log = logging.getLogger("memvault")

FloatMatrix = npt.NDArray[np.float32]
Int8Matrix = npt.NDArray[np.int8]

EMBEDDER_KINDS = ("hash", "model2vec", "sentence-transformers", "openai")
DEFAULT_OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
HASH_DIM = 512
MAX_EMBED_CHARS = 8000  # models see at most this much of a memory (title and tags first)
BATCH = 64
RELEASE_AFTER = 1000  # memories handled before the worker, once idle, releases free heap memory
WORKER_DUTY_PAUSE = 1.0  # after each batch the worker rests as long as the batch took
RECENT_DROPS = 1024  # vectors of dropped memories kept for a moment, for moves


class Embedder(Protocol):
    """Turns texts into vectors. ``name`` identifies the model: vectors of another name are redone."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        """One L2-normalised float32 row per text (all-zero for a text with nothing to embed)."""
        ...


class EmbedderUnavailable(Exception):
    """A configured model could not be loaded or used; the reason is safe to show."""


def normalise_rows(matrix: npt.ArrayLike) -> FloatMatrix:
    rows = np.asarray(matrix, dtype=np.float32)
    if rows.ndim != 2:
        raise EmbedderUnavailable(f"the model returned an array of shape {rows.shape}, not one row per text")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: FloatMatrix = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return out


# ---------------------------------------------------------------------------- hash embedder

_WORD_CACHE_MAX = 200_000


class HashEmbedder:
    """Feature hashing of words and their character 3-5-grams into ``dim`` signed buckets.

    Deterministic across processes and machines (blake2b, not Python's salted ``hash``). Words
    are the index's terms (lightly stemmed; CJK as bigrams), so vectors and lexical search agree
    on what a word is; character n-grams make "deploy"/"deployment"/"redeployed" overlap.
    Repeated words count sublinearly; common function words are left out.
    """

    def __init__(self, dim: int = HASH_DIM) -> None:
        if dim < 16:
            raise ValueError("dim must be at least 16")
        self._dim = dim
        self._cache: dict[str, tuple[npt.NDArray[np.int64], FloatMatrix]] = {}
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"hash-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
        return digest % self._dim, (1.0 if digest >> 63 else -1.0)

    def _features(self, word: str) -> tuple[npt.NDArray[np.int64], FloatMatrix]:
        found = self._cache.get(word)
        if found is not None:
            return found
        bucket, sign = self._bucket("w:" + word)
        buckets = [bucket]
        weights = [sign]
        if len(word) > 2:
            marked = f"<{word}>"
            grams = [marked[i : i + n] for n in (3, 4, 5) for i in range(len(marked) - n + 1)]
            share = 1.0 / math.sqrt(len(grams))
            for gram in grams:
                bucket, sign = self._bucket("g:" + gram)
                buckets.append(bucket)
                weights.append(sign * share)
        found = (np.asarray(buckets, dtype=np.int64), np.asarray(weights, dtype=np.float32))
        with self._lock:
            if len(self._cache) >= _WORD_CACHE_MAX:
                self._cache.clear()
            self._cache[word] = found
        return found

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            terms = tokenize(text)
            kept = [t for t in terms if t not in STOP_WORDS] or terms
            if not kept:
                continue
            index_parts = []
            weight_parts = []
            for word, count in Counter(kept).items():
                buckets, weights = self._features(word)
                index_parts.append(buckets)
                weight_parts.append(weights * np.float32(1.0 + math.log(count)))
            out[row] = np.bincount(
                np.concatenate(index_parts), weights=np.concatenate(weight_parts), minlength=self._dim
            )
        return normalise_rows(out)


# ---------------------------------------------------------------------------- model embedders


class _ModelEmbedder:
    """Shared shape of the model-backed embedders: a name, a dimension found by a probe, embed()."""

    def __init__(self, name: str, encode: Callable[[list[str]], Any]) -> None:
        self._name = name
        self._encode = encode
        probe = self._call(["memvault"])
        self._dim = int(probe.shape[1])

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def _call(self, texts: list[str]) -> FloatMatrix:
        rows = normalise_rows(self._encode(texts))
        if rows.shape[0] != len(texts):
            raise EmbedderUnavailable(f"the model returned {rows.shape[0]} vectors for {len(texts)} texts")
        return rows

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        rows = self._call([t[:MAX_EMBED_CHARS] or " " for t in texts])
        if rows.shape[1] != self._dim:
            raise EmbedderUnavailable(f"the model changed dimension from {self._dim} to {rows.shape[1]}")
        return rows


def _model2vec(target: str) -> Embedder:
    try:
        from model2vec import StaticModel  # type: ignore[import-not-found]
    except ImportError:
        raise EmbedderUnavailable("the model2vec package is not installed (pip install model2vec)") from None
    try:
        model = StaticModel.from_pretrained(target)
    except Exception as exc:
        raise EmbedderUnavailable(f"model2vec could not load {target!r} ({type(exc).__name__})") from None
    return _ModelEmbedder(f"model2vec:{target}", lambda texts: model.encode(texts))


def _sentence_transformers(target: str) -> Embedder:
    try:
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]
    except ImportError:
        raise EmbedderUnavailable(
            "the sentence-transformers package is not installed (pip install sentence-transformers)"
        ) from None
    try:
        model = SentenceTransformer(target, device="cpu")
    except Exception as exc:
        raise EmbedderUnavailable(
            f"sentence-transformers could not load {target!r} ({type(exc).__name__})"
        ) from None
    return _ModelEmbedder(
        f"sentence-transformers:{target}",
        lambda texts: model.encode(texts, convert_to_numpy=True, show_progress_bar=False),
    )


def _openai(url: str | None, key: str | None, model: str | None) -> Embedder:
    import httpx2  # ships with mcp; imported here so the hash embedder needs nothing

    endpoint = (url or DEFAULT_OPENAI_URL).rstrip("/") + "/embeddings"
    model_name = model or DEFAULT_OPENAI_MODEL
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    client = httpx2.Client(timeout=60.0)

    def encode(texts: list[str]) -> list[list[float]]:
        try:
            response = client.post(endpoint, json={"model": model_name, "input": texts}, headers=headers)
        except httpx2.HTTPError as exc:
            raise EmbedderUnavailable(
                f"the embeddings endpoint did not answer ({type(exc).__name__})"
            ) from None
        if response.status_code != 200:
            raise EmbedderUnavailable(f"the embeddings endpoint answered HTTP {response.status_code}")
        try:
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            return [item["embedding"] for item in data]
        except (ValueError, KeyError, TypeError):
            raise EmbedderUnavailable(
                "the embeddings endpoint's answer is not in the OpenAI format"
            ) from None

    return _ModelEmbedder(f"openai:{model_name}", encode)


def check_spec(spec: str) -> str:
    """The embedder kind of a MEMVAULT_EMBEDDER value; an unknown kind is a configuration error."""
    kind, _, target = spec.partition(":")
    kind = kind.strip().lower()
    if kind not in EMBEDDER_KINDS:
        raise InvalidArgument(
            f"MEMVAULT_EMBEDDER must be hash, model2vec:<name-or-path>, sentence-transformers:<name-or-path> "
            f"or openai, not {spec!r}."
        )
    if kind in ("model2vec", "sentence-transformers") and not target.strip():
        raise InvalidArgument(f"MEMVAULT_EMBEDDER={kind} needs a model: {kind}:<name-or-path>.")
    return kind


def load_embedder(
    spec: str, *, url: str | None = None, key: str | None = None, model: str | None = None
) -> Embedder:
    """Load the embedder ``spec`` names; raises :class:`EmbedderUnavailable` if it cannot be used."""
    kind = check_spec(spec)
    target = spec.partition(":")[2].strip()
    if kind == "hash":
        return HashEmbedder(int(target) if target.isdigit() else HASH_DIM)
    if kind == "model2vec":
        return _model2vec(target)
    if kind == "sentence-transformers":
        return _sentence_transformers(target)
    return _openai(url, key, model or target or None)


# ---------------------------------------------------------------------------- per-token vectors


def embed_text(memory: Memory) -> str:
    """What is embedded for a memory: title, tags, then content (frontmatter times never count)."""
    parts = [memory.title]
    if memory.tags:
        parts.append(" ".join(memory.tags))
    parts.append(memory.content)
    return "\n".join(parts)


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class Work:
    """A memory whose vector is due. ``generation`` tells a stale item from the row's current one."""

    key: str  # id relative to the token folder ("archive/x.md" for archived ones)
    generation: int
    memory: Memory


@dataclass(frozen=True, slots=True)
class VectorView:
    """A consistent look at a token's rows for one query (shared, read-only: never write to it)."""

    keys: list[str | None]  # by row; None for a free row
    rows: dict[str, int]
    matrix: Int8Matrix | None  # rows x dim, quantized; zero rows where no vector yet
    scale: FloatMatrix  # by row: vector = matrix[row] * scale[row]
    has_vector: npt.NDArray[np.bool_]
    created: npt.NDArray[np.float64]  # POSIX seconds, NaN if unknown
    name: str | None  # model of the vectors in the matrix
    version: int
    topics: topics.Model | None = None  # fitted on the rows as they were then (see Model.keys)

    def similarity(self, query: FloatMatrix, n: int) -> npt.NDArray[np.float64] | None:
        """Dot products of the first ``n`` rows with ``query`` (0 where no vector yet); None
        without vectors of the query's dimension."""
        if self.matrix is None or query.shape != (self.matrix.shape[1],):
            return None
        out = topics.matvec(self.matrix[:n], query.astype(np.float32)) * self.scale[:n]
        out[~self.has_vector[:n]] = 0.0
        return out.astype(np.float64)

    def vectors(self, rows: npt.NDArray[np.intp]) -> FloatMatrix | None:
        """The vectors of ``rows`` as float32 (zero where none yet); None without vectors."""
        if self.matrix is None:
            return None
        return self.matrix[rows] * self.scale[rows, None]


def quantize(vector: FloatMatrix) -> tuple[Int8Matrix, np.float32]:
    """``vector`` as int8 and a scale: ``q * scale`` is within half a step of each component."""
    top = float(np.abs(vector).max()) if vector.size else 0.0
    if not top or not math.isfinite(top):
        return np.zeros(vector.shape, dtype=np.int8), np.float32(0.0)
    scale = top / 127.0
    return np.round(vector / scale).astype(np.int8), np.float32(scale)


class TokenVectors:
    """One token's memory rows, their vectors and the queue of memories to embed. Thread-safe.

    Marking is cheap (no hashing, no tokenizing): a load of 100,000 memories only queues them;
    the worker hashes each text and finds most vectors in the sidecar.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.wake: Callable[[], None] = lambda: None
        self.sidecar: Callable[[], Sidecar | None] = lambda: None
        self._clear()

    def _clear(self) -> None:
        self._rows: dict[str, int] = {}
        self._keys: list[str | None] = []
        self._free: list[int] = []
        self._generation: list[int] = []
        self._vector_hash: list[str] = []  # text hash of the row's vector ("" = none yet)
        self._created = np.full(64, np.nan)
        self._has = np.zeros(64, dtype=bool)
        # Vectors quantized to int8 with one scale per row (a quarter of float32's memory: 51 MB
        # for 100,000 x 512), dot products within 1% of float32's and faster (see VectorView).
        self._matrix: Int8Matrix | None = None
        self._scale = np.zeros(64, dtype=np.float32)
        self._name: str | None = None
        self._pending: dict[str, Memory] = {}  # key -> memory to embed (see take)
        self._removed: set[str] = set()
        self.vocabulary = topics.Vocabulary()
        self._terms: list[topics.Terms | None] = []  # topic words by row, filled by the worker
        self._topics: topics.Model | None = None
        self._changes = 0  # rows added, changed or dropped since the topics were fitted
        # Vectors of memories dropped lately, by text hash: a move (archive, restore, rename) is a
        # drop and an add, and the add finds its vector here even if the drop was handled first.
        self._recent: dict[str, FloatMatrix] = {}
        self._view: VectorView | None = None
        self.version = 0

    # -- marking (store hooks; any thread) -----------------------------------------------------

    def reset(self, memories: Iterable[Memory]) -> None:
        """Start over from a freshly loaded token: every memory is checked against the sidecar."""
        memories = list(memories)
        keys = [m.path_id for m in memories]
        created = np.fromiter(
            (m.created_at.timestamp() if m.created_at else np.nan for m in memories),
            np.float64,
            len(memories),
        )
        with self._lock:
            self._clear()
            # In bulk, not memory by memory through _mark: 100,000 rows at a restart.
            n = len(keys)
            self._rows = dict(zip(keys, range(n), strict=True))
            if len(self._rows) != n:
                raise ValueError("two memories with the same key")
            self._keys = list(keys)
            self._generation = [1] * n
            self._vector_hash = [""] * n
            self._terms = [None] * n
            capacity = n + n // 8 + 64
            self._created = np.full(capacity, np.nan)
            self._created[:n] = created
            self._has = np.zeros(capacity, dtype=bool)
            self._scale = np.zeros(capacity, dtype=np.float32)
            self._pending = dict(zip(keys, memories, strict=True))
            self._changes = n
            self.version += 1
        self.wake()

    def clear(self) -> None:
        """Forget everything (the token was unloaded); the sidecar keeps its vectors."""
        with self._lock:
            self._clear()

    def changed(self, memory: Memory) -> None:
        with self._lock:
            queued = self._mark(memory, check=True)
        if queued:
            self.wake()

    def dropped(self, key: str) -> None:
        with self._lock:
            row = self._rows.pop(key, None)
            self._pending.pop(key, None)
            if row is None:
                return
            self._keys[row] = None
            self._generation[row] += 1
            self._terms[row] = None
            self._changes += 1
            if self._has[row] and self._matrix is not None:
                if len(self._recent) >= RECENT_DROPS:
                    del self._recent[next(iter(self._recent))]
                self._recent[self._vector_hash[row]] = self._matrix[row] * self._scale[row]
            self._vector_hash[row] = ""
            self._has[row] = False
            self._created[row] = np.nan
            if self._matrix is not None:
                self._matrix[row] = 0
                self._scale[row] = 0.0
            self._free.append(row)
            self._removed.add(key)
            self.version += 1
        self.wake()

    def _mark(self, memory: Memory, *, check: bool) -> bool:
        key = memory.path_id
        row = self._rows.get(key)
        if row is None:
            row = self._new_row(key)
        self._removed.discard(key)
        self._created[row] = memory.created_at.timestamp() if memory.created_at else np.nan
        self.version += 1
        if check and key not in self._pending and self._vector_hash[row] == text_hash(embed_text(memory)):
            return False  # same text (an access time or priority changed): the vector stands
        self._generation[row] += 1
        self._changes += 1
        self._pending[key] = memory
        return True

    def _new_row(self, key: str) -> int:
        if self._free:
            row = self._free.pop()
            self._keys[row] = key
        else:
            row = len(self._keys)
            self._keys.append(key)
            self._generation.append(0)
            self._vector_hash.append("")
            self._terms.append(None)
            if row >= len(self._has):
                grow = max(64, len(self._has) // 4)  # a quarter: the int8 matrix grows with these
                self._has = np.concatenate([self._has, np.zeros(grow, dtype=bool)])
                self._created = np.concatenate([self._created, np.full(grow, np.nan)])
                self._scale = np.concatenate([self._scale, np.zeros(grow, dtype=np.float32)])
                if self._matrix is not None:
                    self._matrix = np.concatenate([self._matrix, np.zeros_like(self._matrix)])
        self._rows[key] = row
        return row

    # -- the worker's side -----------------------------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def has_work(self) -> bool:
        return bool(self._pending or self._removed) or self.topics_due

    @property
    def topics_due(self) -> bool:
        """Refit when nothing waits for a vector and enough changed: 10% of the rows, at least 20."""
        if self._pending or len(self._rows) < topics.MIN_MEMORIES or not self._changes:
            return False
        return self._topics is None or self._changes >= max(20, len(self._rows) // 10)

    def fit_topics(self, depth: int, gap: float) -> None:
        """Fit the topic model on the rows as they are now (worker thread; the lock is not held)."""
        with self._lock:
            keys = list(self._keys)
            terms = list(self._terms)
            created = self._created.copy()
            changes = self._changes
        where = topics.creation_order(keys, created, depth=depth, gap=gap)
        if sum(1 for t in terms if t is not None) > topics.MAX_ROWS:
            # Bound the fit's time and memory on huge vaults: the most recent memories teach the
            # topics; older ones are still found by words and vectors.
            recent = np.argsort(np.nan_to_num(where.position, nan=-1.0))[-topics.MAX_ROWS :]
            keep = np.zeros(len(terms), dtype=bool)
            keep[recent] = True
            terms = [t if keep[i] else None for i, t in enumerate(terms)]
        model = topics.fit(terms, self.vocabulary, where.before[0], where.after[0], keys)
        with self._lock:
            self._topics = model
            self._changes -= changes
            if model is None:
                self._changes = 0  # too little text: wait for the next change
            self.version += 1

    def counts(self) -> tuple[int, int]:
        """(memories with a vector of their current text, all memories)."""
        with self._lock:
            done = sum(1 for key, row in self._rows.items() if self._has[row] and key not in self._pending)
            return done, len(self._rows)

    def take(self, limit: int) -> tuple[list[Work], list[str]]:
        """Up to ``limit`` memories to embed; once none are left, the keys removed meanwhile.

        Removals wait for the queue to drain: a memory that moved (archived, restored) arrives as
        a removal and an addition, and the addition reuses the removed key's vector by its hash.
        """
        with self._lock:
            work = [
                Work(key, self._generation[self._rows[key]], self._pending.pop(key))
                for key in list(self._pending)[:limit]
            ]
            removed: list[str] = []
            if not self._pending:
                removed = sorted(self._removed)
                self._removed.clear()
            return work, removed

    def recent(self, name: str, digest: str) -> FloatMatrix | None:
        """The vector of a lately dropped memory with this text, from model ``name``."""
        with self._lock:
            return self._recent.get(digest) if name == self._name else None

    def requeue(self, work: Sequence[Work]) -> None:
        with self._lock:
            for item in work:
                row = self._rows.get(item.key)
                if (
                    row is not None
                    and self._generation[row] == item.generation
                    and item.key not in self._pending
                ):
                    self._pending[item.key] = item.memory

    def install(
        self,
        name: str,
        found: Sequence[tuple[Work, str, FloatMatrix]],
        terms: dict[str, topics.Terms] | None = None,
    ) -> None:
        """Put computed vectors (work, text hash, vector) and topic words in place, unless the
        memory changed meanwhile."""
        if not found:
            return
        with self._lock:
            dim = found[0][2].shape[0]
            if self._matrix is None or self._name != name or self._matrix.shape[1] != dim:
                self._matrix = np.zeros((len(self._has), dim), dtype=np.int8)
                self._scale[:] = 0.0
                self._has[:] = False
                self._vector_hash = ["" for _ in self._keys]
                self._name = name
            for work, digest, vector in found:
                row = self._rows.get(work.key)
                if row is None or self._generation[row] != work.generation:
                    continue
                self._matrix[row], self._scale[row] = quantize(vector)
                self._has[row] = True
                self._vector_hash[row] = digest
                if terms is not None and work.key in terms:
                    self._terms[row] = terms[work.key]
            self.version += 1

    def snapshot(self) -> VectorView:
        """The rows as they are now; the same object until something changes (no copy per query)."""
        with self._lock:
            view = self._view
            if view is None or view.version != self.version:
                view = self._view = VectorView(
                    keys=list(self._keys),
                    rows=dict(self._rows),
                    matrix=self._matrix,
                    scale=self._scale,
                    has_vector=self._has.copy(),
                    created=self._created.copy(),
                    name=self._name,
                    version=self.version,
                    topics=self._topics,
                )
            return view


# ---------------------------------------------------------------------------- the service


@dataclass(frozen=True, slots=True)
class EmbedderStatus:
    requested: str
    name: str | None  # None while loading
    dim: int | None
    fallback: str | None  # why the requested embedder is not the one in use


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
    ) -> None:
        check_spec(spec)
        self.spec = spec
        self.enabled = enabled  # False when the recall tools are not offered: nothing is embedded
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
        self.embedded = 0  # texts embedded by the model (not reused from the sidecar); tests count them
        # Which memories count as written together, for the topic model (recall sets the same).
        self.context_depth = 1
        self.context_gap = 3600.0

    # -- the embedder --------------------------------------------------------------------------

    def status(self) -> EmbedderStatus:
        embedder = self._embedder
        return EmbedderStatus(
            self.spec, embedder.name if embedder else None, embedder.dim if embedder else None, self._fallback
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
        if self._embedder is None and check_spec(self.spec) == "hash":
            return self.load()
        if self._embedder is None:
            self._start()
            with self._cond:
                self._cond.notify_all()
        return self._embedder

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

    def pending(self) -> int:
        """Memories waiting for a vector, over all loaded tokens."""
        return sum(v.pending for v in list(self._tokens))

    def topics_due(self) -> int:
        """Loaded tokens whose topic model waits to be (re)fitted."""
        return sum(1 for v in list(self._tokens) if v.topics_due)

    def _wake(self) -> None:
        self._start()
        with self._cond:
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
            while self._busy or any(v.has_work for v in self._tokens):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.05))
        return True

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=10)

    def _run(self) -> None:
        try:
            embedder = self.load()
        except Exception:  # pragma: no cover - load() falls back instead of raising
            log.exception("embedding worker could not start")
            return
        failures = 0
        while True:
            if self._worked >= RELEASE_AFTER and not any(v.has_work for v in list(self._tokens)):
                heap.release()  # a backlog or a topic fit is done: give its free memory back
                self._worked = 0
            with self._cond:
                while not self._closed and (self._holds or not any(v.has_work for v in self._tokens)):
                    self._busy = False
                    self._cond.notify_all()
                    self._cond.wait()
                if self._closed:
                    self._busy = False
                    self._cond.notify_all()
                    return
                self._busy = True
                tokens = list(self._tokens)
            for vectors in tokens:
                try:
                    started = time.monotonic()
                    self._step(embedder, vectors)
                    failures = 0
                    # Background work takes at most about half of one core, so requests and the
                    # watcher stay quick while a large vault is embedded.
                    with self._cond:
                        self._cond.wait((time.monotonic() - started) * WORKER_DUTY_PAUSE)
                except Exception as exc:
                    # A model endpoint that is down: retry with a growing pause, log now and then.
                    failures += 1
                    if failures == 1 or failures % 10 == 0:
                        log.warning("embedding batch failed (%s); retrying", type(exc).__name__)
                    with self._cond:
                        self._cond.wait(min(60.0, 0.5 * 2**failures))

    def _step(self, embedder: Embedder, vectors: TokenVectors) -> None:
        work, removed = vectors.take(BATCH)
        self._worked += len(work)
        if not work and not removed:
            if vectors.topics_due:
                vectors.fit_topics(self.context_depth, self.context_gap)
                heap.release()  # now, before the duty-cycle pause: a fit's garbage is large
            return
        sidecar = vectors.sidecar()
        name = embedder.name
        texts = [embed_text(w.memory) for w in work]
        hashes = [text_hash(t) for t in texts]
        # Topics learn from what memories say; titles are often labels ("D3:13 Caroline", "v2 notes")
        # whose ids would make a topic of their own.
        words = {w.key: vectors.vocabulary.encode(w.memory.content) for w in work}
        found: list[tuple[Work, str, FloatMatrix]] = []
        missing = list(range(len(work)))
        try:
            if sidecar is not None and work:
                missing = []
                stored = sidecar.get_vectors([w.key for w in work])
                by_hash = sidecar.vectors_by_hash(name, hashes)
                reused: list[tuple[str, str, int, str, bytes]] = []
                for i, item in enumerate(work):
                    row = stored.get(item.key)
                    blob = row[3] if row is not None and row[0] == name and row[2] == hashes[i] else None
                    if blob is None:
                        blob = by_hash.get(hashes[i])
                        if blob is None:
                            moved = vectors.recent(name, hashes[i])
                            blob = moved.tobytes() if moved is not None else None
                        if blob is not None:
                            reused.append((item.key, name, embedder.dim, hashes[i], blob))
                    if blob is not None and len(blob) == 4 * embedder.dim:
                        found.append((item, hashes[i], np.frombuffer(blob, dtype=np.float32)))
                    else:
                        missing.append(i)
                sidecar.put_vectors(reused)
            if missing:
                matrix = embedder.embed([texts[i] for i in missing])
                self.embedded += len(missing)
                rows = [(work[i], hashes[i], matrix[j]) for j, i in enumerate(missing)]
                if sidecar is not None:
                    sidecar.put_vectors([(w.key, name, embedder.dim, h, v.tobytes()) for w, h, v in rows])
                found += rows
            if sidecar is not None and removed:
                sidecar.delete_vectors(removed)
        except Exception:
            vectors.requeue(work)
            raise
        vectors.install(name, found, words)


def from_settings(settings: Any) -> Embeddings:
    return Embeddings(
        settings.embedder,
        url=settings.embed_url,
        key=settings.embed_key,
        model=settings.embed_model,
        enabled="recall" in settings.tools,
    )
