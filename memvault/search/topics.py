"""Latent topics (LSI) learned from a token's own memories: a query meets memories on its subject, reworded.

The built-in hash embedder only knows spelling: "pets" never meets "my dog Max". But in a vault
the words of one subject keep company: a memory about the dog sits next to one that says "pets".
A truncated SVD of the token's term-by-memory matrix (tf-idf; each memory read with a share of
the memories written just before and after it) turns that company into a few dozen topic
dimensions; a query is folded into them and compared by cosine. Plain numpy: a randomised SVD
of a sparse matrix kept as CSR arrays, run in the embedding worker thread and refitted after
enough changes. Nothing is stored: a restart refits in the background.

Between refits, a memory written or changed is folded in (:func:`fold`): its words, with its
neighbours' share, are projected on the fitted topics the way a query is, in the worker's batch
that reads it, so recall places it at once. A refit replaces every row's coordinates. Which rows a
fit learns from is fixed by the writes alone (:func:`marks_due`), not by when the worker gets to
it, so the same writes give the same model.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from memvault.search.text import TOPIC_STOP_WORDS, terms_of

DIMENSIONS = 64
MIN_MEMORIES = 50  # fewer than this: too little text to learn from
MAX_ROWS = 20_000  # a bigger vault fits on its most recent memories (time and memory stay bounded)
OVERSAMPLE = 32
POWER_ITERATIONS = 2
NEIGHBOUR_SHARE = 0.75  # of the terms of the memory written just before and just after
MAX_DF_SHARE = 0.5  # terms in more than this share of memories carry no topic
CHUNK = 8_192  # non-zeros per step of a sparse product (bounds temporary memory: 3 MB at k=64)
FOLD_ROWS = 1_024  # rows folded in one step (6 MB of triplets); 100,000 rows at once took 410 MB
SEED = 20240607

FloatMatrix = npt.NDArray[np.float32]
IntArray = npt.NDArray[np.int64]
IntpArray = npt.NDArray[np.intp]
Terms = tuple[npt.NDArray[np.int32], npt.NDArray[np.float32]]  # vocabulary ids, weights 1 + log(count)
Coordinates = npt.NDArray[np.float32]  # rows x k: unit rows (float16 saved memory, but a
# query converted every row, a cost that grew with the vault)
BLOCK = 1 << 18  # elements per block of a matrix-vector product (see matvec)


def marks_due(*, rows: int, writes: int, mark: int) -> bool:
    """The refit policy, decided at each write: this write is a new mark (the next fit learns from
    the rows written up to it) when the token first has MIN_MEMORIES rows, then after each 10% of
    its rows (at least 20) written, changed or dropped since the last mark."""
    if rows < MIN_MEMORIES:
        return False
    return not mark or writes - mark >= max(20, rows // 10)


def refit_due(*, mark: int, fitted: int, waiting: int) -> bool:
    """A fit is due when a mark is newer than the last fit's and no memory waits to be read."""
    return mark > fitted and not waiting


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


def topic_words(text: str) -> Counter[str]:
    """The words that can carry a topic: index terms without function words and numbers."""
    return Counter(t for t in terms_of(text) if t not in TOPIC_STOP_WORDS and not t.isdigit() and len(t) > 1)


class Vocabulary:
    """Term -> id for one token. Only the embedding worker adds terms; readers only look up."""

    def __init__(self) -> None:
        self.ids: dict[str, int] = {}

    def encode(self, text: str) -> Terms:
        counts = topic_words(text)
        ids = np.empty(len(counts), dtype=np.int32)
        weights = np.empty(len(counts), dtype=np.float32)
        for i, (term, count) in enumerate(counts.items()):
            known = self.ids.get(term)
            if known is None:
                known = self.ids[term] = len(self.ids)
            ids[i] = known
            weights[i] = 1.0 + math.log(count)
        return ids, weights


@dataclass(frozen=True, slots=True)
class Model:
    """A fitted topic space: which words carry topics, their weights, and the topics themselves."""

    vocabulary: Vocabulary
    column: npt.NDArray[np.int64]  # vocabulary id -> column, -1 if not a topic word
    idf: FloatMatrix  # by column
    terms: FloatMatrix  # columns x k
    share: float  # of the neighbours' words a memory is read with (the fit's and every fold's)

    @property
    def k(self) -> int:
        return int(self.terms.shape[1])

    def query(self, query: str) -> FloatMatrix | None:
        """The query's place in the topics (a unit vector), or None if no query word is a topic word."""
        cols: list[int] = []
        weights: list[float] = []
        for term, count in topic_words(query).items():
            vid = self.vocabulary.ids.get(term)
            if vid is not None and vid < len(self.column) and self.column[vid] >= 0:
                col = int(self.column[vid])
                cols.append(col)
                weights.append(float(self.idf[col]) * (1.0 + math.log(count)))
        if not cols:
            return None
        vector = (self.terms[cols] * np.asarray(weights, dtype=np.float32)[:, None]).sum(axis=0)
        norm = float(np.linalg.norm(vector))
        return vector / np.float32(norm) if norm > 0.0 else None


def _steps(targets: npt.NDArray[np.intp]) -> Iterator[tuple[int, npt.NDArray[np.intp]]]:
    for start in range(0, len(targets), FOLD_ROWS):
        yield start, targets[start : start + FOLD_ROWS]


def fold(
    model: Model,
    rows: Sequence[Terms | None],
    before: npt.NDArray[np.intp],
    after: npt.NDArray[np.intp],
    targets: npt.NDArray[np.intp],
) -> FloatMatrix:
    """The topic coordinates of rows ``targets`` (unit rows; zero without topic words): each one's
    words plus ``model.share`` of its neighbours' (``before``/``after``: a row, or any row number
    outside ``rows`` for none), weighted by the model's idf and projected on its topics. Exactly a
    fitted row's coordinates when the words and neighbours are those of the fit; words the model
    does not know are left out, as they are from a query. Folds FOLD_ROWS targets at a time, so its
    temporary memory stays bounded however many rows a refit places."""
    targets = np.asarray(targets, dtype=np.intp)
    if len(targets) > FOLD_ROWS:
        out = np.empty((len(targets), model.k), dtype=np.float32)
        for start, step in _steps(targets):
            out[start : start + len(step)] = fold(model, rows, before, after, step)
        return out
    n = len(rows)
    size = len(model.column)
    sources = ((targets, 1.0), (before[targets], model.share), (after[targets], model.share))
    wanted = np.concatenate([rows_ for rows_, _ in sources])
    read = np.unique(wanted[(wanted >= 0) & (wanted < n)])  # every row whose words are needed, once
    found = [rows[i] for i in read.tolist()]
    lengths = np.fromiter((0 if t is None else t[0].size for t in found), dtype=np.int64, count=len(found))
    starts = np.zeros(len(found) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    words = np.concatenate([np.zeros(0, np.int32), *(t[0] for t in found if t is not None)]).astype(np.int64)
    tf = np.concatenate([np.zeros(0, np.float32), *(t[1] for t in found if t is not None)])
    column = np.full(words.size, -1, dtype=np.int64)  # words the model does not know stay -1
    known = words < size
    column[known] = model.column[words[known]]
    parts_row: list[IntArray] = []
    parts_col: list[IntArray] = []
    parts_w: list[FloatMatrix] = []
    for source, share in sources:
        ok = np.flatnonzero((source >= 0) & (source < n))
        if not share or not ok.size:
            continue
        at_read = np.searchsorted(read, source[ok])
        span = lengths[at_read]
        # Positions of the sources' words in the flat arrays (a ragged gather, as in fit).
        at = np.repeat(starts[at_read] - np.cumsum(span) + span, span) + np.arange(int(span.sum()))
        cols = column[at]
        keep = cols >= 0
        parts_row.append(np.repeat(ok, span)[keep])
        parts_col.append(cols[keep])
        parts_w.append(tf[at][keep] * np.float32(share))
    out = np.zeros((len(targets), model.k), dtype=np.float32)
    if not parts_row or not sum(part.size for part in parts_row):
        return out
    row_of = np.concatenate(parts_row)
    order = np.argsort(row_of, kind="stable")
    col_of = np.concatenate(parts_col)[order]
    weight = np.concatenate(parts_w)[order] * model.idf[col_of]
    indptr = np.zeros(len(targets) + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_of, minlength=len(targets)), out=indptr[1:])
    out = _Csr(indptr, col_of, weight, (len(targets), len(model.idf))).dot(model.terms)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    unit: FloatMatrix = np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)
    return unit


class Placement:
    """Every row's place in a token's topic space: the model and each row's coordinates, fitted or
    folded in since. The embedding worker changes it under the token's lock; a query reads the
    model, ``rows`` and a copy of ``valid`` (see vectors.VectorView)."""

    def __init__(self, model: Model | None = None) -> None:
        self.model = model
        self.rows: Coordinates = np.zeros((0, model.k if model else 0), dtype=np.float32)
        self.valid = np.zeros(0, dtype=bool)
        # The neighbours each row was folded with (-1: none), to find the rows a change moved.
        self.before = np.zeros(0, dtype=np.intp)
        self.after = np.zeros(0, dtype=np.intp)

    def forget(self, row: int) -> None:
        """The row's memory is gone: it has no place until a new memory there is folded in."""
        if row < len(self.valid):
            self.valid[row] = False

    def valid_rows(self, n: int) -> npt.NDArray[np.bool_]:
        """Which of the first ``n`` rows hold coordinates of their memory (a copy)."""
        out = np.zeros(n, dtype=bool)
        m = min(n, len(self.valid))
        out[:m] = self.valid[:m]
        return out

    def moved(self, before: npt.NDArray[np.intp], after: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
        """Rows whose neighbours differ from those they were folded with (``-1``: none)."""
        n = len(before)
        old_before = np.full(n, -1, dtype=np.intp)
        old_after = np.full(n, -1, dtype=np.intp)
        m = min(n, len(self.before))
        old_before[:m] = self.before[:m]
        old_after[:m] = self.after[:m]
        return np.flatnonzero((old_before != before) | (old_after != after))

    def fold_in(
        self, rows: Sequence[Terms | None], before: IntpArray, after: IntpArray, placed: IntpArray
    ) -> None:
        """:func:`fold` of rows ``placed`` put straight into this placement, a step at a time: a
        refit of 100,000 rows then holds no second copy of every row's coordinates."""
        if self.model is None:
            return
        for _, step in _steps(placed):
            self.put(step, fold(self.model, rows, before, after, step), len(rows))

    def put(self, targets: npt.NDArray[np.intp], coordinates: FloatMatrix, n: int) -> None:
        """Set the coordinates of ``targets`` (rows of a token of ``n`` rows now), growing by a quarter."""
        if self.model is None:
            return
        if n > len(self.rows):
            size = len(self.rows) + max(n - len(self.rows), len(self.rows) // 4, 64)
            rows = np.zeros((size, self.model.k), dtype=np.float32)  # one new block, no zeros to join
            rows[: len(self.rows)] = self.rows
            valid = np.zeros(size, dtype=bool)
            valid[: len(self.valid)] = self.valid
            self.rows, self.valid = rows, valid
        self.rows[targets] = coordinates
        self.valid[targets] = True


def neighbours(where: Layout) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """A layout's nearest neighbours before and after each row, ``-1`` for none."""
    n = where.n
    before, after = where.before[0].copy(), where.after[0].copy()
    before[before >= n] = -1
    after[after >= n] = -1
    return before, after


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each row sits in creation order: neighbours (``n`` = none), position, thread."""

    n: int
    live: npt.NDArray[np.bool_]
    archived: npt.NDArray[np.bool_]
    before: tuple[npt.NDArray[np.intp], ...]  # before[k][row]: the row written k + 1 places earlier, or n
    after: tuple[npt.NDArray[np.intp], ...]
    position: npt.NDArray[np.float64]  # rank in creation order (NaN: unknown creation time)
    thread: npt.NDArray[np.intp]  # runs of memories written within ``gap`` seconds of each other; -1 = none


def creation_order(
    keys: Sequence[str | None], created: npt.NDArray[np.float64], *, depth: int, gap: float
) -> Layout:
    """Rows (keys by row, None = free) in the order they were written (``created``: POSIX seconds,
    NaN = unknown); neighbours are only those written within ``gap`` seconds of the next one."""
    n = len(keys)
    live = np.array([key is not None for key in keys], dtype=bool)
    archived = np.array([key is not None and key.startswith("archive/") for key in keys], dtype=bool)
    created = created[:n]
    rows = np.flatnonzero(live & ~np.isnan(created))
    order = rows[np.argsort(created[rows], kind="stable")]  # ties: the order the rows were added
    position = np.full(n, np.nan)
    position[order] = np.arange(order.size, dtype=np.float64)
    thread = np.full(n, -1, dtype=np.intp)
    if order.size:
        breaks = np.concatenate([[True], np.diff(created[order]) > gap])
        thread[order] = np.cumsum(breaks) - 1
    before: list[npt.NDArray[np.intp]] = []
    after: list[npt.NDArray[np.intp]] = []
    for k in range(1, depth + 1):
        prev = np.full(n, n, dtype=np.intp)
        nxt = np.full(n, n, dtype=np.intp)
        if order.size > k:
            same = thread[order[k:]] == thread[order[:-k]]
            prev[order[k:][same]] = order[:-k][same]
            nxt[order[:-k][same]] = order[k:][same]
        before.append(prev)
        after.append(nxt)
    return Layout(n, live, archived, tuple(before), tuple(after), position, thread)


@dataclass(frozen=True, slots=True)
class _Csr:
    indptr: IntArray
    indices: IntArray
    data: FloatMatrix
    shape: tuple[int, int]

    def transpose(self) -> _Csr:
        rows = np.repeat(np.arange(self.shape[0]), np.diff(self.indptr))
        order = np.argsort(self.indices, kind="stable")
        indptr = np.zeros(self.shape[1] + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.indices, minlength=self.shape[1]), out=indptr[1:])
        return _Csr(indptr, rows[order], self.data[order], (self.shape[1], self.shape[0]))

    def dot(self, dense: FloatMatrix) -> FloatMatrix:
        """self @ dense, in row chunks of about CHUNK non-zeros."""
        n = self.shape[0]
        out = np.zeros((n, dense.shape[1]), dtype=np.float32)
        start = 0
        while start < n:
            end = int(np.searchsorted(self.indptr, self.indptr[start] + CHUNK, side="right")) - 1
            end = min(n, max(end, start + 1))
            lo, hi = int(self.indptr[start]), int(self.indptr[end])
            if hi > lo:
                product = dense[self.indices[lo:hi]] * self.data[lo:hi, None]
                filled = np.flatnonzero(np.diff(self.indptr[start : end + 1]))
                out[start + filled] = np.add.reduceat(product, self.indptr[start:end][filled] - lo, axis=0)
            start = end
        return out


def _orthonormal(block: FloatMatrix) -> FloatMatrix:
    """An orthonormal basis of the columns of a tall block (Cholesky QR, twice for accuracy).

    Much cheaper than a Householder QR of the whole block: one small Gram matrix and a triangular
    solve; a tiny ridge keeps rank-deficient blocks (few distinct memories) well defined.
    """
    q = block.astype(np.float64)
    for _ in range(2):
        gram = q.T @ q
        gram[np.diag_indices_from(gram)] += 1e-10 * max(1.0, float(np.trace(gram)))
        lower = np.linalg.cholesky(gram)
        # q @ inv(L).T: one product into a new block, where solve() would copy q twice over.
        q = q @ np.linalg.inv(lower).T
    return q.astype(np.float32)


def fit(
    rows: Sequence[Terms | None],
    vocabulary: Vocabulary,
    before: npt.NDArray[np.intp],
    after: npt.NDArray[np.intp],
    *,
    dimensions: int = DIMENSIONS,
    share: float = NEIGHBOUR_SHARE,
) -> Model | None:
    """Fit topics on the rows' terms (None: a free row or one not read yet). ``before``/``after``
    give each row's neighbour in creation order (``len(rows)``: none). None if too little text."""
    n = len(rows)
    live = [i for i, r in enumerate(rows) if r is not None and r[0].size]
    if len(live) < MIN_MEMORIES:
        return None
    size = len(vocabulary.ids)
    # Every fitted row's words as flat arrays: row p of the matrix is rows[live[p]]. Rows without
    # words are left out: they would be zero rows that change nothing but size every temporary.
    fitted = len(live)
    lengths = np.fromiter((rows[i][0].size for i in live), dtype=np.int64, count=fitted)  # type: ignore[index]
    starts = np.zeros(fitted + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    words = np.concatenate([rows[i][0] for i in live])  # type: ignore[index]
    tf = np.concatenate([rows[i][1] for i in live])  # type: ignore[index]
    df = np.bincount(words, minlength=size)
    useful = (df >= 2) & (df <= MAX_DF_SHARE * fitted)
    width = int(useful.sum())
    k = min(dimensions, fitted - 1, width - 1)
    if k < 2:
        return None
    column = np.full(size, -1, dtype=np.int64)
    column[useful] = np.arange(width)
    idf = np.log((fitted + 1) / (df[useful] + 0.5)).astype(np.float32)

    # Triplets (fitted row, column, weight): each row's own words, plus a share of the words of
    # its neighbours in creation order (when they are fitted too).
    position = np.full(n + 1, -1, dtype=np.int32)  # row -> fitted row; n (no neighbour) -> -1
    live_rows = np.asarray(live, dtype=np.int64)
    position[live_rows] = np.arange(fitted, dtype=np.int32)
    parts_row, parts_col, parts_w = [], [], []
    sources = ((live_rows, 1.0), (before[live_rows], share), (after[live_rows], share))
    for neighbours, share in sources:
        source = position[np.minimum(neighbours, n)]  # the neighbour's fitted row, or -1
        target = np.flatnonzero(source >= 0).astype(np.int32)
        source = source[target]
        span = lengths[source]
        # Positions of the sources' words in the flat arrays (a ragged gather).
        at = np.repeat(starts[source] - np.cumsum(span) + span, span) + np.arange(int(span.sum()))
        cols = column[words[at]]
        keep = cols >= 0
        parts_row.append(np.repeat(target, span)[keep])
        parts_col.append(cols[keep].astype(np.int32))
        parts_w.append(tf[at][keep] * np.float32(share))
        del at, cols, keep
    del words, tf
    # CSR by row. A (row, column) pair may occur up to three times (own and neighbours' words):
    # the products below add them up, which is all a merged entry would do. Each part is sorted
    # by row, so the stable sort only merges three runs.
    row_of = np.concatenate(parts_row)
    if not row_of.size:
        return None
    order = np.argsort(row_of, kind="stable")
    col_of = np.concatenate(parts_col)[order]
    weight = np.concatenate(parts_w)[order]
    del parts_row, parts_col, parts_w, order
    indptr = np.zeros(fitted + 1, dtype=np.int64)
    np.cumsum(np.bincount(row_of, minlength=fitted), out=indptr[1:])
    del row_of
    matrix = _Csr(indptr, col_of, weight * idf[col_of], (fitted, width))
    del weight

    transposed = matrix.transpose()
    rng = np.random.default_rng(SEED)
    sample = rng.standard_normal((width, k + OVERSAMPLE)).astype(np.float32)
    basis = _orthonormal(matrix.dot(sample))
    for _ in range(POWER_ITERATIONS):
        basis = _orthonormal(matrix.dot(_orthonormal(transposed.dot(basis))))
    _, _, vt = np.linalg.svd(transposed.dot(basis).T, full_matrices=False)
    terms_k = np.ascontiguousarray(vt[:k].T, dtype=np.float32)
    return Model(vocabulary, column, idf, terms_k, share)
