"""One token's memory rows and vectors (int8, a scale per row) and its queue to embed.

Each loaded token has a :class:`TokenVectors`: one row per memory (hot and archived, keyed by
the id relative to the token folder), an int8 matrix (a scale per row) for brute-force cosine,
and a queue of memories whose text changed. The store marks changes; the embedding worker
(:mod:`memvault.search.embeddings`) fills the rows; a query reads an immutable :class:`VectorView`.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from memvault.search.embedders import TOKEN_BUDGET, FloatMatrix, TokenIds
from memvault.threads import IN_THREAD, Where, held

if TYPE_CHECKING:
    from memvault.disk.markdown import Memory
    from memvault.records.sidecar import Sidecar

Int8Matrix = npt.NDArray[np.int8]


def kept_tokens(
    ids: npt.NDArray[np.uint16], starts: npt.NDArray[np.int64], counts: npt.NDArray[np.uint8], row: int
) -> TokenIds | None:
    """A row's kept token ids (a view), or None if it has none yet: ``counts[row]`` is their
    number plus one, 0 for none; they are ``ids[starts[row]:]`` (see KeptTokens)."""
    count = int(counts[row])
    if not count:
        return None
    start = int(starts[row])
    return ids[start : start + count - 1]


class KeptTokens:
    """Each row's kept token ids (MaxSim's, WordLlama only), one row after another in one buffer:
    a memory mostly keeps far fewer than TOKEN_BUDGET (a LoCoMo turn about 30), and a matrix
    TOKEN_BUDGET wide was mostly zeros. A row given new ids gets them at the end of the buffer, the
    old ones left until ``tidy``. What is written is never written over (the buffer is replaced
    when it grows or is tidied), so a view keeps seeing the ids its starts and counts point to."""

    def __init__(self, rows: int) -> None:
        self.ids = np.zeros(0, dtype=np.uint16)
        self.used = 0  # ids[:used] written
        self.garbage = 0  # of those, ids no row points to any more
        self.starts = np.zeros(rows, dtype=np.int64)
        self.counts = np.zeros(rows, dtype=np.uint8)  # ids of the row plus one; 0: none

    def grow_rows(self, extra: int) -> None:
        self.starts = np.concatenate([self.starts, np.zeros(extra, dtype=np.int64)])
        self.counts = np.concatenate([self.counts, np.zeros(extra, dtype=np.uint8)])

    def put(self, row: int, ids: TokenIds | None) -> None:
        if self.counts[row]:
            self.garbage += int(self.counts[row]) - 1
        if ids is None:
            self.counts[row] = 0
            return
        ids = ids[:TOKEN_BUDGET]
        end = self.used + len(ids)
        if end > len(self.ids):  # a new buffer, a half larger: what views hold stays as it is
            grown = np.zeros(max(end, len(self.ids) * 3 // 2, 4096), dtype=np.uint16)
            grown[: self.used] = self.ids[: self.used]
            self.ids = grown
        self.ids[self.used : end] = ids
        self.starts[row], self.counts[row] = self.used, len(ids) + 1
        self.used = end

    def row(self, row: int) -> TokenIds | None:
        ids = kept_tokens(self.ids, self.starts, self.counts, row)
        return None if ids is None else ids.copy()

    def tidy(self) -> None:
        """Drop the ids of rows given new ones or none, and the buffer's unused end, when they are
        a good share of it (once a backlog of embeddings is done)."""
        kept = self.used - self.garbage
        if len(self.ids) - kept <= max(4096, kept // 8):
            return
        counts = self.counts.astype(np.int64) - 1
        live = counts >= 0
        lengths = np.where(live, counts, 0)
        rows = np.flatnonzero(lengths)
        starts = np.zeros(len(self.starts), dtype=np.int64)
        starts[rows] = np.cumsum(lengths[rows]) - lengths[rows]
        at = np.repeat(self.starts[rows] - starts[rows], lengths[rows]) + np.arange(kept)
        self.ids = np.concatenate([self.ids[at], np.zeros(kept // 16, dtype=np.uint16)])
        self.starts = np.where(live, starts, 0)
        self.used, self.garbage = kept, 0


RECENT_DROPS = 1024  # vectors of dropped memories kept for a moment, for moves
HASH_WIDTH = 32  # text_hash's length: a row's hash is kept as that many ASCII bytes
BLOCK = 1 << 18  # elements per block of a matrix-vector product (see matvec)


def embed_text(memory: Memory) -> str:
    """What is embedded for a memory: title, tags, then content (frontmatter times never count)."""
    parts = [memory.title]
    if memory.tags:
        parts.append(" ".join(memory.tags))
    parts.append(memory.content)
    return "\n".join(parts)


def text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).hexdigest()


def matvec(matrix: npt.NDArray[Any], vector: FloatMatrix) -> FloatMatrix:
    """``matrix @ vector`` in blocks of rows, each too small for BLAS to spread over threads.

    On a busy machine a threaded product waits for a free core: measured here with two loaded
    cores, blocks were several times faster than one call.
    A matrix of another type (the int8 vectors) is converted block by block into one buffer.
    """
    rows, width = matrix.shape
    out = np.empty(rows, dtype=vector.dtype)
    step = max(1, BLOCK // max(1, width))
    buffer = np.empty((min(step, rows), width), dtype=vector.dtype) if matrix.dtype != vector.dtype else None
    for start in range(0, rows, step):
        block = matrix[start : start + step]
        if buffer is not None:
            converted = buffer[: len(block)]
            converted[...] = block
            block = converted
        np.matmul(block, vector, out=out[start : start + step])
    return out


@dataclass(frozen=True, slots=True)
class Work:
    """A memory whose vector is due. ``generation`` tells a stale item from the row's current one."""

    key: str  # id relative to the token folder ("archive/x.md" for archived ones)
    generation: int
    memory: Memory


_ROWS_VERSIONS = itertools.count(1)


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
    rows_version: int = 0  # keys, rows and created are the same in two views of one rows_version
    # MaxSim's tokens (WordLlama; see KeptTokens): a row's token_counts[row] - 1 ids from
    # tokens[token_starts[row]:]; None when the model keeps none. A row without tokens yet counts 0.
    tokens: npt.NDArray[np.uint16] | None = None
    token_counts: npt.NDArray[np.uint8] | None = None
    token_starts: npt.NDArray[np.int64] | None = None

    def tokens_of(self, row: int) -> TokenIds | None:
        """The row's kept token ids, or None if it has none (no vector yet, or another model)."""
        if self.tokens is None or self.token_counts is None or self.token_starts is None:
            return None
        if row >= len(self.token_counts) or not self.has_vector[row]:
            return None
        return kept_tokens(self.tokens, self.token_starts, self.token_counts, row)

    def tokens_of_rows(self, rows: Sequence[int]) -> list[TokenIds | None]:
        """:meth:`tokens_of` each of ``rows``, their counts and starts read in one pass each."""
        if self.tokens is None or self.token_counts is None or self.token_starts is None:
            return [None] * len(rows)
        size = len(self.token_counts)
        inside = [r for r in rows if r < size]
        counts = dict(
            zip(inside, (self.token_counts[inside] * self.has_vector[inside]).tolist(), strict=True)
        )
        starts = dict(zip(inside, self.token_starts[inside].tolist(), strict=True))
        ids = self.tokens
        return [ids[starts[r] : starts[r] + counts[r] - 1] if counts.get(r) else None for r in rows]

    def similarity(self, query: FloatMatrix, n: int) -> npt.NDArray[np.float64] | None:
        """Dot products of the first ``n`` rows with ``query`` (0 where no vector yet); None
        without vectors of the query's dimension."""
        if self.matrix is None or query.shape != (self.matrix.shape[1],):
            return None
        out = matvec(self.matrix[:n], query.astype(np.float32)) * self.scale[:n]
        out[~self.has_vector[:n]] = 0.0
        return out.astype(np.float64)


def quantize(vector: FloatMatrix) -> tuple[Int8Matrix, np.float32]:
    """``vector`` as int8 and a scale: ``q * scale`` is within half a step of each component."""
    top = float(np.abs(vector).max()) if vector.size else 0.0
    if not top or not math.isfinite(top):
        return np.zeros(vector.shape, dtype=np.int8), np.float32(0.0)
    scale = top / 127.0
    return np.round(vector / scale).astype(np.int8), np.float32(scale)


def quantize_rows(vectors: Sequence[FloatMatrix]) -> tuple[Int8Matrix, FloatMatrix] | None:
    """:func:`quantize` of each vector, all of them in one pass (a restore's batches quantized
    row by row spent a third of their time in numpy's per-call cost), with the same results; None
    unless they share one shape (1-d) and one type."""
    if not vectors or len({(v.dtype, v.shape) for v in vectors}) != 1 or vectors[0].ndim != 1:
        return None
    matrix = np.stack(vectors)
    tops = np.abs(matrix).max(axis=1).astype(np.float64) if matrix.shape[1] else np.zeros(len(matrix))
    usable = np.isfinite(tops) & (tops != 0)
    scales = np.where(usable, tops, 0.0) / 127.0  # in double, as quantize's Python float
    out = np.zeros(matrix.shape, dtype=np.int8)
    # The vectors' type for the divisor, as numpy takes quantize's Python float.
    divisors = scales[usable].astype(matrix.dtype)[:, None]
    out[usable] = np.round(matrix[usable] / divisors).astype(np.int8)
    return out, scales.astype(np.float32)


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
        # Text hash of each row's vector (b"": none yet), as bytes: a str a row, 100,000 of them
        # made in the embedding thread among its batches' garbage, kept the heap from shrinking.
        self._hashes = np.zeros(64, dtype=f"S{HASH_WIDTH}")
        self._created = np.full(64, np.nan)
        self._has = np.zeros(64, dtype=bool)
        # Vectors quantized to int8 with one scale per row (a quarter of float32's memory), dot
        # products within a hair of float32's and faster (see VectorView).
        self._matrix: Int8Matrix | None = None
        self._scale = np.zeros(64, dtype=np.float32)
        self._name: str | None = None
        # MaxSim's tokens beside the vectors (WordLlama only; see VectorView.tokens): 256 bytes a row.
        self._kept: KeptTokens | None = None
        self._pending: dict[str, Memory] = {}  # key -> memory to embed (see take)
        self._removed: set[str] = set()
        # Vectors (and tokens) of memories dropped lately, by text hash: a move (archive, restore,
        # rename) is a drop and an add, and the add finds its vector here even if the drop was
        # handled first.
        self._recent: dict[str, tuple[FloatMatrix, TokenIds | None]] = {}
        self._view: VectorView | None = None
        self.version = 0
        # Moves only when rows come, go or change creation time (see VectorView); unique in the process.
        self.rows_version = next(_ROWS_VERSIONS)

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
            capacity = n + n // 32 + 64  # room for some writes; then rows grow by an eighth
            self._hashes = np.zeros(capacity, dtype=f"S{HASH_WIDTH}")
            self._created = np.full(capacity, np.nan)
            self._created[:n] = created
            self._has = np.zeros(capacity, dtype=bool)
            self._scale = np.zeros(capacity, dtype=np.float32)
            self._pending = dict(zip(keys, memories, strict=True))
            self.version += 1
            self.rows_version = next(_ROWS_VERSIONS)
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
            if self._has[row] and self._matrix is not None:
                if len(self._recent) >= RECENT_DROPS:
                    del self._recent[next(iter(self._recent))]
                self._recent[self._hashes[row].decode("ascii")] = (
                    self._matrix[row] * self._scale[row],
                    self._kept.row(row) if self._kept is not None else None,
                )
            self._hashes[row] = b""
            self._has[row] = False
            self._created[row] = np.nan
            if self._matrix is not None:
                self._matrix[row] = 0
                self._scale[row] = 0.0
            if self._kept is not None:
                self._kept.put(row, None)
            self._free.append(row)
            self._removed.add(key)
            self.version += 1
            self.rows_version = next(_ROWS_VERSIONS)
        self.wake()

    def _mark(self, memory: Memory, *, check: bool) -> bool:
        key = memory.path_id
        row = self._rows.get(key)
        created = memory.created_at.timestamp() if memory.created_at else np.nan
        if row is None:
            row = self._new_row(key)
            self.rows_version = next(_ROWS_VERSIONS)
        elif not (self._created[row] == created or (np.isnan(created) and np.isnan(self._created[row]))):
            self.rows_version = next(_ROWS_VERSIONS)
        self._removed.discard(key)
        self._created[row] = created
        self.version += 1
        if check and key not in self._pending and self._hashes[row] == _ascii(text_hash(embed_text(memory))):
            return False  # same text (an access time or priority changed): the vector stands
        self._generation[row] += 1
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
            if row >= len(self._has):
                grow = max(64, len(self._has) // 8)  # an eighth: the int8 matrix grows with these
                self._has = np.concatenate([self._has, np.zeros(grow, dtype=bool)])
                self._hashes = np.concatenate([self._hashes, np.zeros(grow, dtype=self._hashes.dtype)])
                self._created = np.concatenate([self._created, np.full(grow, np.nan)])
                self._scale = np.concatenate([self._scale, np.zeros(grow, dtype=np.float32)])
                if self._matrix is not None:
                    # The same number of rows as the arrays above: the matrix once doubled here at
                    # every quarter's growth, and 5,000 writes to one token took gigabytes.
                    extra = np.zeros((grow, self._matrix.shape[1]), dtype=np.int8)
                    self._matrix = np.concatenate([self._matrix, extra])
                if self._kept is not None:
                    self._kept.grow_rows(grow)
        self._rows[key] = row
        return row

    # -- the worker's side -----------------------------------------------------------------------

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def has_work(self) -> bool:
        return bool(self._pending or self._removed)

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
                for key in list(itertools.islice(self._pending, limit))
            ]
            removed: list[str] = []
            if not self._pending:
                self._pending = {}  # the emptied dict's table (a restart's 100,000 keys) goes
                removed = sorted(self._removed)
                self._removed.clear()
            return work, removed

    def recent(self, name: str, digest: str) -> tuple[FloatMatrix, TokenIds | None] | None:
        """The vector (and kept tokens) of a lately dropped memory with this text, from model ``name``."""
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
        tokens: Sequence[TokenIds | None] | None = None,
    ) -> None:
        """Put computed vectors (work, text hash, vector) in place, unless the memory changed
        meanwhile; ``tokens``: each one's kept token ids for MaxSim (a model that keeps them)."""
        if not found:
            return
        quantized = quantize_rows([vector for _, _, vector in found])  # outside the lock
        with self._lock:
            dim = found[0][2].shape[0]
            if self._matrix is None or self._name != name or self._matrix.shape[1] != dim:
                self._matrix = np.zeros((len(self._has), dim), dtype=np.int8)
                self._scale[:] = 0.0
                self._has[:] = False
                self._hashes[:] = b""
                self._name = name
                self._kept = None
            if tokens is not None and self._kept is None:
                self._kept = KeptTokens(len(self._has))
            for i, (work, digest, vector) in enumerate(found):
                row = self._rows.get(work.key)
                if row is None or self._generation[row] != work.generation:
                    continue
                self._matrix[row], self._scale[row] = (
                    quantize(vector) if quantized is None else (quantized[0][i], quantized[1][i])
                )
                self._has[row] = True
                self._hashes[row] = _ascii(digest)
                if self._kept is not None:
                    self._kept.put(row, tokens[i] if tokens is not None else None)  # None: none yet
            if self._kept is not None and not self._pending:
                self._kept.tidy()  # a backlog done: its garbage, and the buffer's growth room
            self.version += 1

    def snapshot(self, where: Where = IN_THREAD) -> VectorView:
        """The rows as they are now; the same object until something changes (no copy per query).
        ON_LOOP: NeedsThread if the worker holds the lock (memvault.threads)."""
        with held(self._lock, where):
            view = self._view
            if view is None or view.version != self.version:
                # Only vectors moved: the rows' copies stand.
                same = view if view is not None and view.rows_version == self.rows_version else None
                view = self._view = VectorView(
                    keys=same.keys if same else list(self._keys),
                    rows=same.rows if same else dict(self._rows),
                    matrix=self._matrix,
                    scale=self._scale,
                    has_vector=self._has.copy(),
                    created=same.created if same else self._created.copy(),
                    name=self._name,
                    version=self.version,
                    rows_version=self.rows_version,
                    tokens=None if self._kept is None else self._kept.ids,
                    token_counts=None if self._kept is None else self._kept.counts.copy(),
                    token_starts=None if self._kept is None else self._kept.starts.copy(),
                )
            return view


def _ascii(digest: str) -> bytes:
    return digest.encode("ascii")
