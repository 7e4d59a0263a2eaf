"""Recall's ranking: BM25 and the query's embedding, fused by score, memories read in context.

Pure functions of arrays (``fuse``, ``factor``, ``diversify``, ``blend``) and the weights they
take; recall (memvault.ops.recall) gathers the arrays from a token's index, vectors and sidecar, calls these
in order and turns the result into compact lines.

How a memory is scored for a query, and why:

1. Time words ("10 days ago", "last Saturday", "in May", "on 16 June, 2023";
   memvault.search.timewords) name a span of creation times; a relative phrase is taken out of
   the words searched (the 10 would match a date), an outright date stays (a note may name it).
2. Lexical: plain BM25 from the token's index over every memory holding a query word
   (``Index.scores(every=False)``: no title boost, memories matching some words not left out),
   divided by the best score. A query word the vault holds matches itself (stemmed) only; one it
   lacks also matches its prefixes and typos (``NEAR``): search lets a typed word find "roles"
   from "rol", but in a question "role" finding "rule" and "roll" (rare, so weighty) buried the
   answer.
3. Context: a memory is read with its neighbours, the memories written just before and after it
   (creation order, within an hour). A note like "I whipped up a chocolate swirl" only means
   something next to "What flavour did you make?", so each memory gets a share of its
   neighbours' lexical score (``CONTEXT``), small enough that a neighbour never outranks the
   memory holding the words. A long memory stands on its own: past ``CONTEXT_WORDS`` words its
   share shrinks in proportion (a long reply beside the turn that holds the answer would
   otherwise borrow the answer's words and, matching many words of its own, outrank it). What a
   memory borrows shows it beside the match, but does not count it as used (memvault.ops.recall.accessed).
4. Vectors: cosine with the query's embedding (the default embedder is WordLlama's static token
   table), divided by the best cosine, added with weight ``VECTOR_WEIGHT``. Scores are summed
   rather than ranks (reciprocal rank fusion), which lost on both benchmarks. A transformer's
   cosines (sentence-transformers, openai) that crowd together count from the vault's lower
   quartile first: E5-like models put any two texts at 0.7-0.9, and divided by the best those all
   came near 1.
5. A memory created in the span of step 1 scores ``SPAN_BOOST`` more; importance, recency of
   access and priority multiply the score by small factors, so they order near-ties.
6. Reranking (memvault.search.rerankers, MEMVAULT_RERANKER): with the WordLlama embedder, by
   default, MaxSim over its token table (each query word's best match among a candidate's 128
   most telling tokens, kept by the embedding worker) is added with weight 0.3 over the best 40,
   min-max normalised; it finds paraphrases a whole-text vector blurs ("musical instruments" /
   "Fender Stratocaster"). A cross-encoder can take its place.
7. Spread: the first ``NEIGHBOUR_AFTER`` of the list is picked by score alone; each later pick
   loses ``NEIGHBOUR_PENALTY`` times its closeness to a result already picked in the same thread
   (memories written within an hour of each other), so the end of the list reaches other
   conversations: a question whose answer is spread over several ("How many classes do I
   attend?") finds more of them, while the best matches, often neighbours, stay first.
8. Floor: a result below ``Weights.floor`` of the best is left out (MEMVAULT_RECALL_FLOOR).
   Beside a clear match (the best result holds every word of the query that is not a question
   word, and is not itself a question), a result that earns less than ``Weights.own_floor`` of
   the best by itself is left out too: in a small vault every memory has some score, from its
   cosine or from the words of the memory written before it, and "which editor does the user
   like" listed the deploy notes written after the editor note. A question that holds the words
   ("Which flavour of ice cream did you make?") is no clear match: its answer is the terse turn
   after it, which earns its place by what it borrows (step 3). A memory that holds some of the
   words on its own (the user's lunch, for "user") earns more and stays. A floor of 0 shows every
   match.

The weights were chosen by cross-validation over LoCoMo and LongMemEval, each loaded one memory
per turn and one per session (bench/recall_bench.py --grid, bench/recall_cv.py --package). A
feature stays only if it helps on both benchmarks in both loadings across folds (issue 34); those
for which cross-validation chose weight 0 went: the title-word bonus, the penalty for repeating a
picked result's meaning, the bonus of "when" questions, the extra spread for questions that
gather, and the vault's own topic model (bench/RESULTS.md has the held-back figures).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import numpy.typing as npt

from memvault.disk.markdown import Memory
from memvault.search.index import NEAR_MISSING
from memvault.search.order import Layout, creation_order
from memvault.search.text import terms_of
from memvault.search.vectors import VectorView

# --- ranking constants (chosen by cross-validation over LoCoMo and LongMemEval; bench/recall_cv.py) ---
CONTEXT = (0.5, 0.25)  # share of the lexical score of the neighbour 1, 2 places away
CONTEXT_GAP_SECONDS = 3600.0  # memories written further apart than this are not neighbours
CONTEXT_WORDS = 60.0  # a memory of more words borrows (this / its words) of CONTEXT: it stands on its own
VECTOR_WEIGHT = 0.9
NEAR = NEAR_MISSING  # a query word the vault lacks also matches its prefixes, typos and stems
SPAN_BOOST = 1.0  # x(1 + this) for a memory created in the span the query's time words name
NEIGHBOUR_PENALTY = 0.2  # times exp(-distance / NEIGHBOUR_SCALE) to a result already picked...
NEIGHBOUR_SCALE = 10.0
NEIGHBOUR_AFTER = 0.7  # ...once this share of the limit is picked by relevance alone
VECTOR_CENTRE = 25.0  # a transformer's crowded cosines count from this percentile of the vault's...
CROWDED = 0.8  # ...when it is at least this share of the best cosine (fuse)
FLOOR = 0.05  # results whose shown score (the value that ranked them) is below this are left out
OWN_FLOOR = 0.1  # beside a clear match, results that earn less than this of the best by themselves
IMPORTANCE_WEIGHT = 0.3  # importance 1 -> x1.15, 0 -> x0.85, unset -> x1
RECENCY_WEIGHT = 0.1  # x1.1 just accessed, halving every RECENCY_HALF_LIFE_DAYS
RECENCY_HALF_LIFE_DAYS = 30.0
PRIORITY_FACTOR = {"P0": 1.1, "P1": 1.05, "P2": 1.0}
POOL = 40  # candidates considered for diversity (at least 4 x limit)
LEXICAL_LIMIT = 500  # lexical hits scored per query (the rest score too little to matter)
RERANK_TOP = 20  # candidates a reranker (MEMVAULT_RERANKER) looks at
RERANK_WEIGHT = 1.0  # its min-max normalised score, added to the share of the best

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class Weights:
    """The ranking's tunable weights, passed per call so a benchmark can try candidates without
    touching module state (bench/recall_cv.py chooses the defaults by cross-validation)."""

    context: tuple[float, ...] = CONTEXT  # at most len(CONTEXT) places (fuse reads no further)
    context_words: float = CONTEXT_WORDS  # longer memories borrow less context (0: all alike)
    vector: float = VECTOR_WEIGHT
    neighbour: float = NEIGHBOUR_PENALTY
    neighbour_after: float = NEIGHBOUR_AFTER  # the share of the limit picked before the penalty applies
    floor: float = FLOOR  # relevance floor: a share of the best result's score
    own_floor: float = OWN_FLOOR  # the same for what a result earns by itself, beside a clear match
    span: float = SPAN_BOOST  # time words in the query ("10 days ago"), a memory created then
    near: str = NEAR  # which vocabulary terms beside a query word's own match it (Index.scores)

    def replace(self, **changes: object) -> Weights:
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


DEFAULT_WEIGHTS = Weights()


# ---------------------------------------------------------------------------- pure ranking


def layout(view: VectorView, gap: float | None = None, since: Layout | None = None) -> Layout:
    """The rows of ``view`` in creation order; ``since``: their layout a little earlier, which only
    the rows that moved since change (order.creation_order)."""
    return creation_order(
        view.keys, view.created, gap=CONTEXT_GAP_SECONDS if gap is None else gap, since=since
    )


def fuse(
    lexical: FloatArray,
    vector: FloatArray | None,
    eligible: npt.NDArray[np.bool_],
    where: Layout,
    *,
    context: Sequence[float] | None = None,
    lengths: FloatArray | None = None,
    context_words: float | None = None,
    vector_weight: float | None = None,
    vector_floor: float = 0.0,
    centre: bool = False,
    borrowers: IntArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Relevance of every row: normalised lexical score read in context, plus normalised cosines
    with the query's embedding (those below ``vector_floor`` count as 0); and the part of it
    borrowed from the row's neighbours (its context).
    ``lengths``: each row's words (0 if not known); a row of more than ``context_words`` words gets
    ``context_words`` / its words of its context.
    ``centre``: a transformer's cosines that crowd together (the eligible rows' lower quartile,
    ``VECTOR_CENTRE``, at ``CROWDED`` of the best or more) are measured from that quartile, those
    below it counting 0. E5's sit in 0.7-0.9, so dividing them by the best left them all near 1
    and meaning ranked next to nothing; MiniLM's and the static tables' spread by themselves, and
    lost when centred (bench/RESULTS.md).
    ``borrowers``: ``where.near`` of the rows with a lexical score, if the caller has them."""
    context = (CONTEXT if context is None else context)[: len(CONTEXT)]  # neighbours read no further
    context_words = CONTEXT_WORDS if context_words is None else context_words
    vector_weight = VECTOR_WEIGHT if vector_weight is None else vector_weight
    n = where.n
    read = np.zeros(n, dtype=np.float64)
    some = bool(eligible.any())
    top = float(np.max(lexical, where=eligible, initial=-np.inf)) if some else 0.0
    if top > 0:
        lx = np.empty(n + 1, dtype=np.float64)  # index n is "no neighbour"
        np.divide(lexical, top, out=lx[:n])
        lx[n] = 0.0
        score = lx[:n].copy()
        # Only a hit's neighbours borrow anything: their shares are worked out, not every row's.
        rows = where.near(np.flatnonzero(lexical), len(context)) if borrowers is None else borrowers
        lent = np.zeros(rows.size, dtype=np.float64)
        for k, weight in enumerate(context, 1):
            prev, nxt = where.neighbours(rows, k)
            lent += weight * (lx[prev] + lx[nxt])
        if lengths is not None and context_words > 0:
            lent *= np.minimum(1.0, context_words / np.maximum(lengths[rows], context_words))
        read[rows] = lent
        read[rows[~eligible[rows]]] = 0.0
        score[rows] += lent
    else:
        score = np.zeros(n, dtype=np.float64)
    if vector is not None and some:
        if centre:
            low = float(np.percentile(vector[eligible], VECTOR_CENTRE))
            if low >= CROWDED * float(vector[eligible].max()):
                vector = vector - low
        best = float(np.max(vector, where=eligible, initial=-np.inf))
        if best > 0 and best >= vector_floor:
            # In place, in the order of vector_weight * where(vector >= floor, clip(vector), 0) / best.
            part = np.maximum(vector, 0.0)  # np.clip(vector, 0.0, None) without its wrappers
            if vector_floor > 0:  # else clip did it (a NaN row is left out below, or NaN is the best)
                part[~(vector >= vector_floor)] = 0.0
            part *= vector_weight
            with np.errstate(over="ignore"):  # only a row left out (zeroed below) can pass the best
                part /= best
            score += part
    score[~eligible] = 0.0
    return score, read


def explains(memory: Memory, terms: set[str]) -> bool:
    """Whether ``memory`` (title and content) holds every one of ``terms``, the query's words
    beside its question words, and says something rather than asks it: a clear match, beside which
    what earns little by itself is noise. A question that holds the words is no answer: the answer
    is a neighbour, which earns its place by what it borrows from the question."""
    return (
        bool(terms)
        and not memory.content.rstrip().endswith("?")
        and terms <= set(terms_of(f"{memory.title}\n{memory.content}"))
    )


def factor(memory: Memory, *, last_access: datetime | None, now: datetime) -> float:
    """Small multipliers: importance, recency of access, priority."""
    value = 1.0
    if memory.importance is not None:
        value *= 1.0 + IMPORTANCE_WEIGHT * (float(memory.importance) - 0.5)
    if last_access is not None:
        age_days = max(0.0, (now - last_access).total_seconds() / 86400.0)
        value *= 1.0 + RECENCY_WEIGHT * 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)
    return value * PRIORITY_FACTOR.get(memory.priority, 1.0)


def diversify(
    candidates: Sequence[int],
    scores: FloatArray,
    limit: int,
    where: Layout,
    *,
    neighbour_penalty: float | None = None,
    scale: float | None = None,
    free: int = 0,
) -> list[tuple[int, float, float]]:
    """Pick ``limit`` rows greedily: best score, less closeness to a row already picked in the same
    thread (the first ``free`` picks by score alone). Returns each row with the value
    that picked it (a share of the best score, less its penalties then) and its relevance (the share
    of the best score alone). The values never rise down the list: penalties only grow, so what is
    left only loses value."""
    neighbour_penalty = NEIGHBOUR_PENALTY if neighbour_penalty is None else neighbour_penalty
    scale = NEIGHBOUR_SCALE if scale is None else scale
    given = np.asarray(candidates, dtype=np.intp)
    if not given.size:
        return []
    rows = given[np.lexsort((given, -scores[given]))]  # best first; ties: lower row first
    left: list[int] = rows.tolist()
    top = float(scores[left[0]]) or 1.0
    rel = scores[rows].astype(np.float64) / top
    # Every pair's penalty at once (a few dozen candidates): the loop below reads rows of it. A
    # positive weight times the closest pick is the largest of the weighted closenesses, so the
    # weight is applied once here rather than at each pick.
    penalty = None
    if neighbour_penalty:
        positions, threads = where.position[rows], where.thread[rows]
        apart = (threads[:, None] != threads[None, :]) | (threads < 0)[:, None]
        # Only a pair in one thread has a closeness: the others' distances are not taken to exp,
        # whose underflow far apart (e^-1000) is numpy's slow path, most of this at 10,000 memories.
        distance = np.abs(positions[:, None] - positions[None, :])
        distance[apart] = 0.0
        penalty = np.exp(-distance / scale)
        penalty[apart] = 0.0
        if neighbour_penalty > 0:
            penalty *= neighbour_penalty
    near = np.zeros(len(left))
    open_ = rel + near  # -inf once picked
    picked: list[tuple[int, float, float]] = []
    for k in range(min(limit, len(left))):
        if k < free or penalty is None:
            value = open_
        elif neighbour_penalty > 0:
            value = open_ - near
        else:
            value = open_ - neighbour_penalty * near
        i = int(value.argmax())
        picked.append((left[i], float(value[i]), float(rel[i])))
        open_[i] = -np.inf
        if penalty is not None:
            np.fmax(near, penalty[i], out=near)  # fmax: a NaN closeness (no position) leaves near as it is
    return picked


def blend(
    weighted: FloatArray,
    candidates: Sequence[int],
    rows: Sequence[int],
    scored: Sequence[int],
    raw: npt.ArrayLike,
    weight: float,
) -> None:
    """Add a reranker's view to the scores, in place. ``rows``: the best of ``candidates``, best
    first, which the reranker looked at; ``scored``: those of them it could score, with ``raw``
    scores in the same order (any scale). Every candidate's score becomes its share of the best,
    and each of ``scored`` gains ``weight`` times its min-max normalised score; the others of
    ``rows`` (a memory whose tokens are pending) gain nothing."""
    values = np.asarray(raw, dtype=np.float64)
    low, high = (float(values.min()), float(values.max())) if len(values) else (0.0, 0.0)
    spread = dict(
        zip(
            scored,
            ((values - low) / (high - low)).tolist() if high > low else [0.0] * len(scored),
            strict=True,
        )
    )
    top = (float(weighted[rows[0]]) if rows else 0.0) or 1.0
    # All at once, each row as ``weighted[row] / top + weight * spread.get(row, 0.0)``.
    others = np.zeros(len(weighted), dtype=bool)
    others[list(candidates)] = True
    if rows:
        at = list(rows)
        others[at] = False
        gained = np.array([spread.get(row, 0.0) for row in at], dtype=np.float64)
        weighted[at] = weighted[at] / top + weight * gained
    weighted[others] /= top


# Words that say what kind of answer is wanted, not what it is about: a snippet is not centred on
# them, and a clear match (``explains``) need not hold them.
QUESTION_WORDS = frozenset(
    terms_of(
        "a an and are as at be been but by can could do does did for from had has have how i if in into is "
        "it its me my of on or our should so than that the their them then there these they this those to "
        "us was we were what when where which who whom whose why will with would you your"
    )
)
