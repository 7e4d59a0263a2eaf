"""Hybrid recall: BM25 and the query's embedding, fused by score, memories read in context.

The ranking is pure functions of arrays (``fuse``, ``factor``, ``diversify``); :class:`Recaller` gathers
those arrays from a token's index, vectors and sidecar and turns the result into compact lines.

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
   memory borrows shows it beside the match, but does not count it as used (``accessed``).
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
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

import anyio.to_thread
import numpy as np
import numpy.typing as npt

from memvault.clock import parse_time
from memvault.disk.markdown import PRIORITIES, Memory, clean_tags
from memvault.disk.names import key
from memvault.errors import InvalidArgument, quote
from memvault.ops.access import flush_records, last_access
from memvault.ops.sweeps import last_report
from memvault.search.embedders import Embedder, HashEmbedder, WordLlamaEmbedder, crowds, token_embedder
from memvault.search.index import NEAR_MISSING
from memvault.search.order import Layout, creation_order
from memvault.search.rerankers import MaxSim, Reranker, RerankerUnavailable, Reranking
from memvault.search.snippets import snippet
from memvault.search.text import terms_of
from memvault.search.timewords import read_time
from memvault.search.vectors import VectorView
from memvault.threads import MAX_ROWS, NeedsThread, look

if TYPE_CHECKING:
    from memvault.ops.store import Store
    from memvault.ops.sweeps import Evicted
    from memvault.registry.state import Reading, TokenState
    from memvault.registry.tokens import Tokens
    from memvault.search.embeddings import Embeddings

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
VECTOR_FLOOR = 0.1  # a hash-embedder cosine below this is noise (its chance collisions)
VECTOR_CENTRE = 25.0  # a transformer's crowded cosines count from this percentile of the vault's...
CROWDED = 0.8  # ...when it is at least this share of the best cosine (fuse)
FLOOR = 0.05  # results whose shown score (the value that ranked them) is below this are left out
OWN_FLOOR = 0.1  # beside a clear match, results that earn less than this of the best by themselves
ACCESS_TOP = 3  # the first results shown count as an access if they score ACCESS_MIN of the best...
ACCESS_MIN = 0.25
ACCESS_SHARE = 0.5  # ...the others only when they score at least this share of the best
IMPORTANCE_WEIGHT = 0.3  # importance 1 -> x1.15, 0 -> x0.85, unset -> x1
RECENCY_WEIGHT = 0.1  # x1.1 just accessed, halving every RECENCY_HALF_LIFE_DAYS
RECENCY_HALF_LIFE_DAYS = 30.0
PRIORITY_FACTOR = {"P0": 1.1, "P1": 1.05, "P2": 1.0}
POOL = 40  # candidates considered for diversity (at least 4 x limit)
LEXICAL_LIMIT = 500  # lexical hits scored per query (the rest score too little to matter)
STALE_DAYS = 30
RERANK_TOP = 20  # candidates a reranker (MEMVAULT_RERANKER) looks at
RERANK_WEIGHT = 1.0  # its min-max normalised score, added to the share of the best

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]


@dataclass(frozen=True, slots=True)
class Weights:
    """The ranking's tunable weights, passed per call so a benchmark can try candidates without
    touching module state (bench/recall_cv.py chooses the defaults by cross-validation)."""

    context: tuple[float, ...] = CONTEXT  # at most len(CONTEXT) places (the layout's depth)
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


def layout(view: VectorView, depth: int | None = None, gap: float | None = None) -> Layout:
    """The rows of ``view`` in creation order, with neighbours up to ``len(CONTEXT)`` places away."""
    return creation_order(
        view.keys,
        view.created,
        depth=len(CONTEXT) if depth is None else depth,
        gap=CONTEXT_GAP_SECONDS if gap is None else gap,
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
    lost when centred (bench/RESULTS.md)."""
    context = CONTEXT if context is None else context
    context_words = CONTEXT_WORDS if context_words is None else context_words
    vector_weight = VECTOR_WEIGHT if vector_weight is None else vector_weight
    score = np.zeros(where.n, dtype=np.float64)
    read = np.zeros(where.n, dtype=np.float64)
    top = float(lexical[eligible].max()) if eligible.any() else 0.0
    if top > 0:
        lx = np.append(lexical / top, 0.0)  # index n is "no neighbour"
        score += lx[:-1]
        for weight, prev, nxt in zip(context, where.before, where.after, strict=False):
            read += weight * (lx[prev] + lx[nxt])
        if lengths is not None and context_words > 0:
            read *= np.minimum(1.0, context_words / np.maximum(lengths, context_words))
        score += read
    if vector is not None and eligible.any():
        if centre:
            low = float(np.percentile(vector[eligible], VECTOR_CENTRE))
            if low >= CROWDED * float(vector[eligible].max()):
                vector = vector - low
        best = float(vector[eligible].max())
        if best > 0 and best >= vector_floor:
            score += vector_weight * np.where(vector >= vector_floor, np.clip(vector, 0.0, None), 0.0) / best
    score[~eligible] = 0.0
    read[~eligible] = 0.0
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
    left = sorted(candidates, key=lambda r: (-scores[r], r))
    if not left:
        return []
    rows = np.array(left)
    top = float(scores[left[0]]) or 1.0
    rel = scores[rows].astype(np.float64) / top
    # Every pair's closeness at once (a few dozen candidates): the loop below reads rows of it.
    close = None
    if neighbour_penalty:
        positions, threads = where.position[rows], where.thread[rows]
        same = (threads[:, None] == threads[None, :]) & (threads >= 0)[:, None]
        close = np.where(same, np.exp(-np.abs(positions[:, None] - positions[None, :]) / scale), 0.0)
    near = np.zeros(len(left))
    taken = np.zeros(len(left))  # -inf once picked
    picked: list[tuple[int, float, float]] = []
    for k in range(min(limit, len(left))):
        value = rel + taken
        if k >= free:
            value -= neighbour_penalty * near
        i = int(np.argmax(value))
        picked.append((left[i], float(value[i]), float(rel[i])))
        taken[i] = -np.inf
        if close is not None:
            np.fmax(near, close[i], out=near)  # fmax: a NaN closeness (no position) leaves near as it is
    return picked


# ---------------------------------------------------------------------------- orchestration


@dataclass(frozen=True, slots=True)
class Recalled:
    memory: Memory
    score: float  # the value that ranked it: a share of the best result (1.0), less diversity penalties
    snippet: str
    # The part of ``score`` the memory earns by itself, not borrowed from its neighbours' words;
    # None: all of it.
    own: float | None = None


@dataclass(frozen=True, slots=True)
class _Filters:
    include_archive: bool
    tags: tuple[str, ...]
    priorities: frozenset[str] | None
    after: float | None  # POSIX seconds, inclusive
    before: float | None  # exclusive


def accessed(results: Sequence[Recalled]) -> list[Recalled]:
    """The results an agent is likely to use, which count as accesses: the first ``ACCESS_TOP`` that
    score at least ``ACCESS_MIN`` of the best, and any other scoring at least ``ACCESS_SHARE`` (the
    rest only passed by in a list: with vectors every memory has some score). What counts is what
    a memory earns by itself: a short note written just after the best match is shown beside it
    for its context, which does not make it used."""
    return [
        hit
        for i, hit in enumerate(results)
        if (i < ACCESS_TOP and _own(hit) >= ACCESS_MIN) or _own(hit) >= ACCESS_SHARE
    ]


def _own(hit: Recalled) -> float:
    return hit.score if hit.own is None else hit.own


@dataclass(frozen=True, slots=True)
class Recall:
    results: list[Recalled]
    vectors: str | None  # model whose vectors took part, None if lexical only
    considered: int  # memories that matched at all
    worded: bool = True  # some memory holds a word of the query (else results are by meaning only)
    in_archive: int = 0  # archived memories that match about as well, when the archive was left out


@dataclass(frozen=True, slots=True)
class Stats:
    hot: dict[str, int]  # by priority
    archived: int
    embedded: int
    rows: int
    pending: int
    embedder: str | None
    fallback: str | None
    searches: int
    misses: int
    stale: list[str]  # hot memories not accessed in STALE_DAYS days
    oldest: Memory | None
    newest: Memory | None
    next_eviction: list[Evicted]
    last_sweep: tuple[datetime, str] | None = None  # when the last sweep that archived ran, and what


def check_priorities(priority: str | Sequence[str] | None) -> frozenset[str] | None:
    if priority is None:
        return None
    raw = [priority] if isinstance(priority, str) else list(priority)
    wanted = {p.strip().upper() for item in raw for p in item.split(",") if p.strip()}
    bad = sorted(p for p in wanted if p not in PRIORITIES)
    if bad:
        raise InvalidArgument(
            f"priority must be P0, P1 or P2 (or several, comma-separated), not {quote(', '.join(bad))}."
        )
    return frozenset(wanted) or None


def check_time(name: str, value: str | None) -> float | None:
    """An ``after``/``before`` argument (ISO date or date and time, UTC unless it says otherwise) as
    POSIX seconds."""
    if value is None or not str(value).strip():
        return None
    at = parse_time(str(value))
    if at is None:
        raise InvalidArgument(
            f"{name} must be an ISO date such as 2026-01-15 or 2026-01-15T09:30:00Z, not {quote(str(value))}."
        )
    return at.timestamp()


@dataclass(slots=True)
class _Kept:
    """What recall keeps of a loaded token between calls: where its rows stand, until they move."""

    rows_version: int
    layout: Layout


class Recaller:
    """The recall and stats operations over a :class:`Store`'s tokens, with the registry (which
    settles a restored token) and the embeddings (a query's vector) that the store's tokens use."""

    def __init__(
        self,
        store: Store,
        registry: Tokens,
        embeddings: Embeddings,
        weights: Weights = DEFAULT_WEIGHTS,
        reranking: Reranking | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        self.embeddings = embeddings
        self.weights = weights
        self.reranking = reranking
        # By token state, weakly: what is kept of a token goes with its state when the registry
        # forgets it, so memory follows the loaded tokens.
        self._kept: weakref.WeakKeyDictionary[TokenState, _Kept] = weakref.WeakKeyDictionary()

    async def recall(
        self,
        token: str,
        query: str,
        *,
        limit: int = 10,
        include_archive: bool = False,
        tags: Sequence[str] | None = None,
        priority: str | Sequence[str] | None = None,
        after: str | None = None,
        before: str | None = None,
        weights: Weights | None = None,
    ) -> Recall:
        """The best memories for ``query``; ``after`` (inclusive) and ``before`` (exclusive) keep
        memories created in that span; ``weights`` overrides the Recaller's for this call."""
        if not query or not query.strip():
            raise InvalidArgument("query is empty; say what you are looking for.")
        if limit < 1:
            raise InvalidArgument("limit must be at least 1.")
        wanted_tags = clean_tags(tags) if tags else ()
        priorities = check_priorities(priority)
        span = (check_time("after", after), check_time("before", before))
        if span[0] is not None and span[1] is not None and span[0] >= span[1]:
            raise InvalidArgument(f"after ({after}) must be earlier than before ({before}).")
        filters = _Filters(include_archive, wanted_tags, priorities, span[0], span[1])
        async with self.store.using(token) as state:
            return await look(
                self._recall_sync, state, query, min(limit, 100), filters, weights or self.weights
            )

    def _layout(self, state: TokenState, view: VectorView) -> Layout:
        return self._kept_of(state, view).layout

    def _kept_of(self, state: TokenState, view: VectorView) -> _Kept:
        kept = self._kept.get(state)
        if kept is not None and kept.rows_version == view.rows_version:
            return kept  # only vectors moved since: the rows stand where they were
        kept = self._kept[state] = _Kept(view.rows_version, layout(view))
        return kept

    def _recall_sync(
        self, state: TokenState, query: str, limit: int, filters: _Filters, weights: Weights, *, inline: bool
    ) -> Recall:
        """``inline``: on the event loop (memvault.threads), for a token of at most MAX_ROWS rows
        with a static embedder (a query costs a table lookup) and no reranker (a few milliseconds
        at most); else NeedsThread."""
        store = self.store
        if not state.settled:  # restored moments ago: the vectors' rows, recall's candidates, come next
            if inline:
                raise NeedsThread
            self.registry.settle(state)
        reranker = self.reranking.get() if self.reranking is not None else None
        embedder = self.embeddings.ready()
        if isinstance(reranker, MaxSim) and token_embedder(embedder) is None:
            reranker = None  # MaxSim needs WordLlama's tokens: with another embedder it is off
        if inline and (reranker is not None or not (embedder is None or _static(embedder))):
            raise NeedsThread
        view = state.vectors.snapshot(inline)
        if inline and len(view.keys) > MAX_ROWS:
            raise NeedsThread
        where = self._layout(state, view)
        n = where.n
        lexical = np.zeros(n, dtype=np.float64)
        include_archive, tags, priorities = filters.include_archive, filters.tags, filters.priorities
        eligible = where.live.copy() if include_archive else where.live & ~where.archived
        if filters.after is not None or filters.before is not None:
            created = view.created[:n]
            with np.errstate(invalid="ignore"):  # NaN (unknown creation time) never passes a filter
                if filters.after is not None:
                    eligible &= created >= filters.after
                if filters.before is not None:
                    eligible &= created < filters.before
        now = store.clock()
        # "10 days ago" points at a span of creation times; its words are not words to look for
        # (the 10 would match a date such as 2023/03/10), whatever the weight of the span.
        spoken = read_time(query, now)
        words = spoken.rest if spoken is not None and terms_of(spoken.rest) else query
        areas = [False, True] if include_archive else [False]
        with state.reading(inline) as reading:
            rows = view.rows
            for archived in areas:
                ids, found = reading.scores(
                    words, archived=archived, limit=LEXICAL_LIMIT, every=False, near=weights.near
                )
                # Hundreds of hits a query: their rows looked up in one pass, set in one call.
                at = np.fromiter(
                    (rows.get(k, -1) for k in ([key(id, True) for id in ids] if archived else ids)),
                    dtype=np.intp,
                    count=len(ids),
                )
                known = at >= 0
                lexical[at[known]] = found[known]
            in_archive = 0
            if not include_archive and state.archive.memories:
                # Said in the reply, so an agent knows includeArchive=true would find more: those
                # that match at least half as well as the best hot one (any word of the query alone
                # would count a whole archive of notes about "the user").
                _, found = reading.scores(
                    words, archived=True, limit=LEXICAL_LIMIT, every=False, near=weights.near
                )
                best = float(lexical.max()) if n else 0.0
                in_archive = int(np.count_nonzero(found >= 0.5 * best)) if found.size else 0
            if tags or priorities:
                for row in np.flatnonzero(eligible).tolist():
                    memory = reading.memory(view.keys[row] or "")
                    if memory is None or (priorities and memory.priority not in priorities):
                        eligible[row] = False
                    elif tags and not {t.casefold() for t in tags} <= {t.casefold() for t in memory.tags}:
                        eligible[row] = False
            lengths = (
                self._lengths(reading, view, where, lexical, len(weights.context))
                if weights.context_words > 0 and any(weights.context)
                else None
            )
        vector = None
        model = None
        if view.matrix is not None and embedder is not None and embedder.name == view.name:
            q = self.embeddings.embed_query(words)
            if q is not None and q.any():
                vector = view.similarity(q, n)
                model = view.name if vector is not None else None
        score, borrowed = fuse(
            lexical,
            vector,
            eligible,
            where,
            context=weights.context,
            lengths=lengths,
            context_words=weights.context_words,
            vector_weight=weights.vector,
            vector_floor=VECTOR_FLOOR if isinstance(embedder, HashEmbedder) else 0.0,
            centre=crowds(embedder),
        )
        # What share of each score its neighbours lent it (the factors below scale both alike).
        lent = np.divide(borrowed, score, out=np.zeros_like(score), where=score > 0)
        if spoken is not None and weights.span > 0:
            with np.errstate(invalid="ignore"):  # NaN: unknown creation time, never inside
                inside = (view.created[:n] >= spoken.start) & (view.created[:n] <= spoken.end)
            score[inside] *= 1.0 + weights.span
        worded = bool((lexical[eligible] > 0).any())
        matched = int(np.count_nonzero(score > 0))
        pool_size = max(POOL, 4 * limit)
        if matched == 0:
            return self._record(state, Recall([], model, 0, in_archive=in_archive))
        candidates = np.flatnonzero(score > 0)
        if candidates.size > pool_size:
            candidates = candidates[np.argpartition(-score[candidates], pool_size - 1)[:pool_size]]

        terms = {t for t in terms_of(words)} - _QUESTION_WORDS
        recorded = (
            state.sidecar.last_access([view.keys[r] or "" for r in candidates.tolist()], inline=inline)
            if state.sidecar
            else {}
        )
        memories: dict[int, Memory] = {}
        weighted = np.zeros(n, dtype=np.float64)
        with state.reading(inline) as reading:
            for row in candidates.tolist():
                path_key = view.keys[row] or ""
                memory = reading.memory(path_key)
                if memory is None:
                    continue
                memories[row] = memory
                last = last_access(memory, recorded.get(path_key))
                weighted[row] = score[row] * factor(memory, last_access=last, now=now)
        if reranker is not None and memories:
            self._rerank(reranker, words, memories, weighted, view, embedder)
        picked = diversify(
            list(memories),
            weighted,
            limit,
            where,
            neighbour_penalty=weights.neighbour,
            free=int(weights.neighbour_after * limit),
        )
        results = []
        clear = False  # the first result holds every word of the query: it is what was asked for
        for row, value, _ in picked:
            if weights.floor > 0 and value < weights.floor:  # values only fall down the list
                break
            shown = max(value, 0.0)
            own = shown * (1.0 - lent[row])
            if clear and own < weights.own_floor:  # lent by neighbours or a faint cosine: not this
                continue
            memory = store.fresh(state, memories[row].id, memories[row].archived, inline=inline)
            if memory is not None:  # None: deleted on disk since it was indexed (now dropped too)
                if not results:
                    clear = weights.floor > 0 and explains(memory, terms)
                results.append(Recalled(memory, shown, snippet(memory.content, terms), own))
        return self._record(state, Recall(results, model, matched, worded, in_archive))

    @staticmethod
    def _lengths(
        reading: Reading, view: VectorView, where: Layout, lexical: FloatArray, depth: int
    ) -> FloatArray:
        """The words of each row that borrows context (a neighbour of a lexical hit); 0 for the rest."""
        hits = np.flatnonzero(lexical > 0)
        n = where.n
        rows = np.unique(
            np.concatenate([side[hits] for side in (*where.before[:depth], *where.after[:depth])])
        )
        rows = rows[rows < n]
        lengths = np.zeros(n, dtype=np.float64)
        if rows.size:
            lengths[rows] = reading.lengths([view.keys[r] or "" for r in rows.tolist()])
        return lengths

    def _rerank(
        self,
        reranker: Reranker,
        query: str,
        memories: dict[int, Memory],
        weighted: FloatArray,
        view: VectorView,
        embedder: Embedder | None,
    ) -> None:
        """Add the reranker's view of the best candidates to their scores (in place). MaxSim
        reads the token ids kept beside the vectors; a candidate without them (its vector is
        pending) is left out of the normalisation and gets nothing added."""
        count = getattr(reranker, "top", RERANK_TOP)
        weight = getattr(reranker, "weight", RERANK_WEIGHT)
        rows = sorted(memories, key=lambda r: -weighted[r])[:count]
        scored = rows
        try:
            keeper = token_embedder(embedder)
            if isinstance(reranker, MaxSim):
                if keeper is None or view.name != keeper.name:
                    return
                kept = [(r, view.tokens_of(r)) for r in rows]
                scored = [r for r, ids in kept if ids is not None]
                raw = (
                    reranker.score_tokens(keeper, query, [ids for _, ids in kept if ids is not None])
                    if scored
                    else np.zeros(0)
                )
            else:
                raw = reranker.score(query, [f"{memories[r].title}\n{memories[r].content}" for r in rows])
            if len(raw) != len(scored) or not np.isfinite(raw).all():
                raise RerankerUnavailable(f"it returned {len(raw)} scores for {len(scored)} texts")
        except RerankerUnavailable as exc:
            assert self.reranking is not None
            self.reranking.failed(exc)
            return
        low, high = (float(np.min(raw)), float(np.max(raw))) if len(raw) else (0.0, 0.0)
        spread = dict(
            zip(
                scored,
                (np.asarray(raw, dtype=np.float64) - low) / (high - low)
                if high > low
                else np.zeros(len(scored)),
                strict=True,
            )
        )
        top = float(weighted[rows[0]]) or 1.0
        for row in rows:
            weighted[row] = weighted[row] / top + weight * spread.get(row, 0.0)
        chosen = set(rows)
        weighted[[r for r in memories if r not in chosen]] /= top

    def _record(self, state: TokenState, found: Recall) -> Recall:
        self.store.note_search(state, bool(found.results))
        return found

    async def stats(self, token: str) -> Stats:
        async with self.store.using(token) as state:
            evictions = await self.store.evict(token, dry_run=True)
            return await anyio.to_thread.run_sync(self._stats_sync, state, evictions)

    def _stats_sync(self, state: TokenState, evictions: list[Evicted]) -> Stats:
        store = self.store
        with state.reading() as reading:
            hot = reading.memories()
            archived = reading.count(archived=True)
        by_priority = {p: 0 for p in PRIORITIES}
        for memory in hot:
            by_priority[memory.priority] = by_priority.get(memory.priority, 0) + 1
        embedded, rows = state.vectors.counts()
        status = self.embeddings.status()
        flush_records(state)
        searches, misses = state.sidecar.search_counts() if state.sidecar else (0, 0)
        recorded = state.sidecar.last_access() if state.sidecar else {}
        now = store.clock()
        stale = []
        for memory in hot:
            last = last_access(memory, recorded.get(memory.id))
            if last is None or (now - last).total_seconds() > STALE_DAYS * 86400:
                stale.append(memory.id)
        dated = [m for m in hot if m.created_at is not None]
        oldest = min(dated, key=lambda m: (m.created_at, m.id)) if dated else None
        newest = max(dated, key=lambda m: (m.created_at, m.id)) if dated else None
        return Stats(
            hot=by_priority,
            archived=archived,
            embedded=embedded,
            rows=rows,
            pending=state.vectors.pending,
            embedder=status.name,
            fallback=status.fallback,
            searches=searches,
            misses=misses,
            stale=sorted(stale),
            oldest=oldest,
            newest=newest,
            next_eviction=evictions,
            last_sweep=last_report(state),
        )


def _static(embedder: Embedder) -> bool:
    """Whether a query's vector costs next to nothing (a hash, a table lookup): recall may run inline."""
    return isinstance(embedder, HashEmbedder | WordLlamaEmbedder)


# Words that say what kind of answer is wanted, not what it is about: a snippet is not centred on them.
_QUESTION_WORDS = frozenset(
    terms_of(
        "a an and are as at be been but by can could do does did for from had has have how i if in into is "
        "it its me my of on or our should so than that the their them then there these they this those to "
        "us was we were what when where which who whom whose why will with would you your"
    )
)
