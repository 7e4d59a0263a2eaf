"""One token's memory rows and vectors (int8, a scale per row), its queue to embed, its topic model.

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
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from memvault.search import topics
from memvault.search.embedders import FloatMatrix
from memvault.threads import held

if TYPE_CHECKING:
    from memvault.disk.markdown import Memory
    from memvault.records.sidecar import Sidecar

Int8Matrix = npt.NDArray[np.int8]

RECENT_DROPS = 1024  # vectors of dropped memories kept for a moment, for moves


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
    topics: topics.Model | None = None
    topic_rows: npt.NDArray[np.float32] | None = None  # by row, fitted or folded in (see topics.Placement)
    topic_valid: npt.NDArray[np.bool_] | None = None  # rows whose topic_rows are their memory's
    rows_version: int = 0  # keys, rows and created are the same in two views of one rows_version

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
        # Vectors quantized to int8 with one scale per row (a quarter of float32's memory), dot
        # products within a hair of float32's and faster (see VectorView).
        self._matrix: Int8Matrix | None = None
        self._scale = np.zeros(64, dtype=np.float32)
        self._name: str | None = None
        self._pending: dict[str, Memory] = {}  # key -> memory to embed (see take)
        self._removed: set[str] = set()
        self.vocabulary = topics.Vocabulary()
        self._terms: list[topics.Terms | None] = []  # topic words by row, filled by the worker
        self._placement = topics.Placement()  # the topic model and every row's place in it
        self._refold: set[int] = set()  # rows whose words were read since they were last placed
        # Writes (memories added, changed, dropped) counted, each row's count when its text last
        # changed, and the marks: a fit learns from the rows written up to the latest mark
        # (topics.marks_due), so what it learns does not depend on when the worker got to it.
        self._writes = 0
        self._seq: list[int] = []
        self._topic_mark = 0
        self._fitted_mark = 0
        self._last_write = 0.0  # time.monotonic() of the latest write
        self.fit_seconds = 0.0  # CPU time of the latest fit (the pause before a quiet mark scales with it)
        # Vectors of memories dropped lately, by text hash: a move (archive, restore, rename) is a
        # drop and an add, and the add finds its vector here even if the drop was handled first.
        self._recent: dict[str, FloatMatrix] = {}
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
            self._vector_hash = [""] * n
            self._terms = [None] * n
            self._seq = list(range(1, n + 1))
            self._writes = n
            if topics.marks_due(rows=n, writes=n, mark=0):
                self._topic_mark = n
            capacity = n + n // 8 + 64
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
            self._terms[row] = None
            self._placement.forget(row)
            self._wrote(row)
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
        if check and key not in self._pending and self._vector_hash[row] == text_hash(embed_text(memory)):
            return False  # same text (an access time or priority changed): the vector stands
        self._generation[row] += 1
        self._wrote(row)
        self._pending[key] = memory
        return True

    def _wrote(self, row: int) -> None:
        self._writes += 1
        self._last_write = time.monotonic()
        self._seq[row] = self._writes
        if topics.marks_due(rows=len(self._rows), writes=self._writes, mark=self._topic_mark):
            self._topic_mark = self._writes

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
            self._seq.append(0)
            if row >= len(self._has):
                grow = max(64, len(self._has) // 4)  # a quarter: the int8 matrix grows with these
                self._has = np.concatenate([self._has, np.zeros(grow, dtype=bool)])
                self._created = np.concatenate([self._created, np.full(grow, np.nan)])
                self._scale = np.concatenate([self._scale, np.zeros(grow, dtype=np.float32)])
                if self._matrix is not None:
                    # The same number of rows as the arrays above: the matrix once doubled here at
                    # every quarter's growth, and 5,000 writes to one token took gigabytes.
                    extra = np.zeros((grow, self._matrix.shape[1]), dtype=np.int8)
                    self._matrix = np.concatenate([self._matrix, extra])
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
        return topics.refit_due(mark=self._topic_mark, fitted=self._fitted_mark, waiting=len(self._pending))

    def quiet_in(self, quiet: float, now: float) -> float | None:
        """Seconds until the writes since the latest mark have been quiet for ``quiet`` seconds (0:
        they have), None if there are none or the token is too small for topics. Once writes pause,
        a mark of their own (mark_quiet) has the model learn from every row: folding in is exact
        only for words the model knew, so what was written since the fit is learnt from too."""
        with self._lock:
            if self._writes == self._topic_mark or len(self._rows) < topics.MIN_MEMORIES or self._pending:
                return None
            return max(0.0, self._last_write + quiet - now)

    def mark_quiet(self) -> None:
        """Mark the latest write: the next fit learns from every row as it is now."""
        with self._lock:
            self._topic_mark = self._writes

    def fit_topics(self, gap: float, share: float = topics.NEIGHBOUR_SHARE) -> None:
        """Fit the topic model on the rows written up to the latest mark, then place every row in
        it (worker thread; the lock is not held while fitting)."""
        cpu = time.thread_time()
        with self._lock:
            keys = list(self._keys)
            terms = list(self._terms)
            created = self._created.copy()
            mark = self._topic_mark
            seq = list(self._seq)
            generation = list(self._generation)
            self._refold.clear()  # every row is placed below
        # Rows changed after the mark wait for the next fit (they are folded in meanwhile).
        learn = [t if t is not None and seq[i] <= mark else None for i, t in enumerate(terms)]
        where = topics.creation_order(
            [k if learn[i] is not None else None for i, k in enumerate(keys)], created, depth=1, gap=gap
        )
        if sum(1 for t in learn if t is not None) > topics.MAX_ROWS:
            # Bound the fit's time and memory on huge vaults: the most recent memories teach the
            # topics; older ones are still found by words and vectors.
            recent = np.argsort(np.nan_to_num(where.position, nan=-1.0))[-topics.MAX_ROWS :]
            keep = np.zeros(len(learn), dtype=bool)
            keep[recent] = True
            learn = [t if keep[i] else None for i, t in enumerate(learn)]
        model = topics.fit(learn, self.vocabulary, where.before[0], where.after[0], share=share)
        placement = topics.Placement(model)
        if model is not None:
            before, after = topics.neighbours(topics.creation_order(keys, created, depth=1, gap=gap))
            placed = np.flatnonzero([t is not None for t in terms])
            placement.fold_in(terms, before, after, placed)
            placement.before, placement.after = before, after
        with self._lock:
            self._placement = placement
            self._fitted_mark = mark
            self.fit_seconds = time.thread_time() - cpu
            self._replace_later(generation, placement)
            self.version += 1

    def fold_topics(self, gap: float) -> None:
        """Place the rows read since the last fold, and the rows next to them, in the current topic
        model (worker thread, after each batch). Moved rows (a neighbour came or went) too."""
        with self._lock:
            placement = self._placement
            model = placement.model
            if model is None:
                self._refold.clear()
                return
            keys = list(self._keys)
            terms = list(self._terms)
            created = self._created.copy()
            generation = list(self._generation)
            fresh = np.fromiter(self._refold, dtype=np.intp, count=len(self._refold))
            self._refold.clear()
        before, after = topics.neighbours(topics.creation_order(keys, created, depth=1, gap=gap))
        near = np.concatenate([fresh, before[fresh], after[fresh], placement.moved(before, after)])
        targets = np.unique(near[near >= 0])
        targets = targets[[keys[r] is not None and terms[r] is not None for r in targets.tolist()]]
        if not targets.size and len(before) == len(placement.before):
            return
        coordinates = topics.fold(model, terms, before, after, targets)
        with self._lock:
            if self._placement is not placement:
                return  # refitted meanwhile: every row was placed there
            placement.put(targets, coordinates, len(keys))
            placement.before, placement.after = before, after
            self._replace_later(generation, placement)
            self.version += 1

    def _replace_later(self, generation: list[int], placement: topics.Placement) -> None:
        """Rows that changed while they were being placed: place them again (lock held)."""
        for row, before in enumerate(generation):
            if self._generation[row] != before:
                if self._keys[row] is None:
                    placement.forget(row)
                else:
                    self._refold.add(row)

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
                    self._refold.add(row)
            self.version += 1

    def snapshot(self, inline: bool = False) -> VectorView:
        """The rows as they are now; the same object until something changes (no copy per query).
        ``inline``: on the event loop, NeedsThread if the worker holds the lock (memvault.threads)."""
        with held(self._lock, inline):
            view = self._view
            if view is None or view.version != self.version:
                # Only vectors or topics moved: the rows' copies stand.
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
                    topics=self._placement.model,
                    topic_rows=self._placement.rows,
                    topic_valid=self._placement.valid_rows(len(self._keys)),
                )
            return view
