"""Recall and memory_stats: a token's memories ranked for a query, in compact results.

:class:`Recaller` gathers what the ranking reads from a token's index, vectors and sidecar (lexical
scores, cosines, creation order, access times), asks the embedder and reranker in use what they can
do, calls the ranking's steps (memvault.search.ranking) in order and leaves out what falls below
the floors.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, cast

import anyio.to_thread
import numpy as np
import numpy.typing as npt

from memvault.clock import parse_time
from memvault.disk.markdown import PRIORITIES, Memory, clean_tags
from memvault.disk.names import key
from memvault.errors import InvalidArgument, quote
from memvault.ops.access import flush_records, last_access
from memvault.ops.arguments import check_query
from memvault.ops.sweeps import last_report
from memvault.search import ranking
from memvault.search.embedders import Embedder, token_embedder, traits
from memvault.search.order import Layout
from memvault.search.ranking import (
    DEFAULT_WEIGHTS,
    QUESTION_WORDS,
    Weights,
    blend,
    diversify,
    explains,
    factor,
    fuse,
    layout,
)
from memvault.search.rerankers import Reranker, RerankerUnavailable, Reranking, token_reranker
from memvault.search.snippets import snippet
from memvault.search.text import terms_of
from memvault.search.timewords import read_time
from memvault.search.vectors import VectorView
from memvault.threads import MAX_ROWS, ON_LOOP, NeedsThread, Where, look

if TYPE_CHECKING:
    from memvault.ops.store import Store
    from memvault.ops.sweeps import Evicted
    from memvault.registry.state import TokenState
    from memvault.registry.tokens import Tokens
    from memvault.search.embeddings import Embeddings

ACCESS_TOP = 3  # the first results shown count as an access if they score ACCESS_MIN of the best...
ACCESS_MIN = 0.25
ACCESS_SHARE = 0.5  # ...the others only when they score at least this share of the best
STALE_DAYS = 30

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.intp]
BoolArray = npt.NDArray[np.bool_]


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
        check_query(query)
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
            found = await look(
                self._recall_sync, state, query, min(limit, 100), filters, weights or self.weights
            )
            # Counted here, on the loop: from a worker thread the count woke the loop by its pipe.
            self.store.note_search(state, bool(found.results))
            return found

    def _layout(self, state: TokenState, view: VectorView) -> Layout:
        return self._kept_of(state, view).layout

    def _kept_of(self, state: TokenState, view: VectorView) -> _Kept:
        kept = self._kept.get(state)
        if kept is not None and kept.rows_version == view.rows_version:
            return kept  # only vectors moved since: the rows stand where they were
        since = kept.layout if kept is not None else None
        kept = self._kept[state] = _Kept(view.rows_version, layout(view, since=since))
        return kept

    def _recall_sync(
        self, state: TokenState, query: str, limit: int, filters: _Filters, weights: Weights, where: Where
    ) -> Recall:
        """ON_LOOP (memvault.threads) for a token of at most MAX_ROWS rows
        with a quick embedder (a query costs a table lookup) and no reranker (a few milliseconds
        at most); else NeedsThread.

        The steps: what takes part, which rows may be found, their lexical scores fused with the
        vectors', the best of them weighed (priority, age, use) and reranked, then the picks."""
        reranker, embedder, view = self._ready(state, where)
        order = self._layout(state, view)
        eligible = _eligible(view, order, filters)
        now = self.store.clock()
        # "10 days ago" points at a span of creation times; its words are not words to look for
        # (the 10 would match a date such as 2023/03/10), whatever the weight of the span.
        spoken = read_time(query, now)
        words = spoken.rest if spoken is not None and terms_of(spoken.rest) else query
        with state.looking(where):
            lexical, in_archive = _lexical(state, view, order.n, words, filters.include_archive, weights.near)
            if filters.tags or filters.priorities:
                _keep_fields(state, view, eligible, filters)
            # The rows that borrow context: a lexical hit's neighbours (ranking.fuse).
            depth = min(len(weights.context), len(ranking.CONTEXT))
            borrowers = order.near(np.flatnonzero(lexical), depth)
            lengths = (
                _lengths(state, view, order, lexical, borrowers, depth)
                if weights.context_words > 0 and any(weights.context)
                else None
            )
        score, lent, model = self._fused(
            view, order, words, embedder, lexical, eligible, lengths, weights, borrowers
        )
        if spoken is not None and weights.span > 0:
            with np.errstate(invalid="ignore"):  # NaN: unknown creation time, never inside
                created = view.created[: order.n]
                inside = (created >= spoken.start) & (created <= spoken.end)
            score[inside] *= 1.0 + weights.span
        worded = bool((lexical[eligible] > 0).any())
        matched = int(np.count_nonzero(score > 0))
        if matched == 0:
            return Recall([], model, 0, in_archive=in_archive)
        candidates = _pool(score, max(ranking.POOL, 4 * limit))
        memories, weighted = _weighed(state, view, candidates, score, now, where)
        if reranker is not None and memories:
            self._rerank(reranker, words, memories, weighted, view, embedder)
        terms = {t for t in terms_of(words)} - QUESTION_WORDS
        results = _picked(state, memories, weighted, lent, order, limit, weights, terms, where)
        return Recall(results, model, matched, worded, in_archive)

    def _ready(self, state: TokenState, where: Where) -> tuple[Reranker | None, Embedder | None, VectorView]:
        """The reranker and the embedder that take part, and the vectors' rows (the candidates); on
        the loop NeedsThread when any of them would take long."""
        if not state.settled:  # restored moments ago: the vectors' rows, recall's candidates, come next
            if where is ON_LOOP:
                raise NeedsThread
            self.registry.settle(state)
        reranker = self.reranking.get() if self.reranking is not None else None
        embedder = self.embeddings.ready()
        if token_reranker(reranker) is not None and token_embedder(embedder) is None:
            reranker = None  # MaxSim reads the ids a token embedder keeps: with another it is off
        if where is ON_LOOP and (reranker is not None or not (embedder is None or traits(embedder).quick)):
            raise NeedsThread
        view = state.vectors.snapshot(where)
        if where is ON_LOOP and len(view.keys) > MAX_ROWS:
            raise NeedsThread
        return reranker, embedder, view

    def _fused(
        self,
        view: VectorView,
        order: Layout,
        words: str,
        embedder: Embedder | None,
        lexical: FloatArray,
        eligible: BoolArray,
        lengths: FloatArray | None,
        weights: Weights,
        borrowers: IntArray,
    ) -> tuple[FloatArray, FloatArray, str | None]:
        """Each row's score, lexical and vector fused (ranking.fuse); the share of it that its
        neighbours lent it; the model whose vectors took part (None: lexical only)."""
        vector = None
        model = None
        if view.matrix is not None and embedder is not None and embedder.name == view.name:
            q = self.embeddings.embed_query(words)
            if q is not None and q.any():
                vector = view.similarity(q, order.n)
                model = view.name if vector is not None else None
        score, borrowed = fuse(
            lexical,
            vector,
            eligible,
            order,
            context=weights.context,
            lengths=lengths,
            context_words=weights.context_words,
            vector_weight=weights.vector,
            vector_floor=traits(embedder).noise,
            centre=traits(embedder).crowds,
            borrowers=borrowers,
        )
        # What share of each score its neighbours lent it (the factors after scale both alike);
        # only the borrowers have borrowed anything.
        lent = np.zeros_like(score)
        rows = borrowers[score[borrowers] > 0]
        lent[rows] = borrowed[rows] / score[rows]
        return score, lent, model

    def _rerank(
        self,
        reranker: Reranker,
        query: str,
        memories: dict[int, Memory],
        weighted: FloatArray,
        view: VectorView,
        embedder: Embedder | None,
    ) -> None:
        """Add the reranker's view of the best candidates to their scores (in place). A token
        reranker (MaxSim) reads the token ids kept beside the vectors; a candidate without them
        (its vector is pending) is left out of the normalisation and gets nothing added."""
        count = getattr(reranker, "top", ranking.RERANK_TOP)
        weight = getattr(reranker, "weight", ranking.RERANK_WEIGHT)
        among = list(memories)
        worth = (-weighted[among]).tolist()  # sorted as -weighted[r] sorts them: ties keep their order
        rows = [among[i] for i in sorted(range(len(among)), key=worth.__getitem__)[:count]]
        scored = rows
        try:
            keeper = token_embedder(embedder)
            by_tokens = token_reranker(reranker)
            if by_tokens is not None:
                if keeper is None or view.name != keeper.name:
                    return
                kept = list(zip(rows, view.tokens_of_rows(rows), strict=True))
                scored = [r for r, ids in kept if ids is not None]
                raw = (
                    by_tokens.score_tokens(keeper, query, [ids for _, ids in kept if ids is not None])
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
        blend(weighted, list(memories), rows, scored, raw, weight)

    async def stats(self, token: str) -> Stats:
        async with self.store.using(token) as state:
            evictions = await self.store.evict(token, dry_run=True)
            return await anyio.to_thread.run_sync(self._stats_sync, state, evictions)

    def _stats_sync(self, state: TokenState, evictions: list[Evicted]) -> Stats:
        store = self.store
        with state.mem_lock:
            hot = list(state.hot.memories.values())
            archived = len(state.archive.memories)
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


def _eligible(view: VectorView, order: Layout, filters: _Filters) -> BoolArray:
    """The rows a recall may find: live, hot unless the archive is asked for, created in the span."""
    eligible = order.live.copy() if filters.include_archive else order.live & ~order.archived
    if filters.after is not None or filters.before is not None:
        created = view.created[: order.n]
        with np.errstate(invalid="ignore"):  # NaN (unknown creation time) never passes a filter
            if filters.after is not None:
                eligible &= created >= filters.after
            if filters.before is not None:
                eligible &= created < filters.before
    return eligible


def _lexical(
    state: TokenState, view: VectorView, n: int, words: str, include_archive: bool, near: str
) -> tuple[FloatArray, int]:
    """Each row's lexical score; and, when the archive is left out, how many archived memories
    match about as well as the best hot one. With ``mem_lock`` held."""
    lexical = np.zeros(n, dtype=np.float64)
    rows = view.rows
    for archived in [False, True] if include_archive else [False]:
        ids, found = state.area(archived).index.scores(
            words, limit=ranking.LEXICAL_LIMIT, every=False, near=near
        )
        # Hundreds of hits a query: their rows looked up in one pass, set in one call.
        at = np.fromiter(
            map(rows.get, [key(id, True) for id in ids] if archived else ids, itertools.repeat(-1)),
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
        _, found = state.archive.index.scores(words, limit=ranking.LEXICAL_LIMIT, every=False, near=near)
        best = float(lexical.max()) if n else 0.0
        in_archive = int(np.count_nonzero(found >= 0.5 * best)) if found.size else 0
    return lexical, in_archive


def _lengths(
    state: TokenState, view: VectorView, order: Layout, lexical: FloatArray, borrowers: IntArray, depth: int
) -> FloatArray:
    """The words of each row that borrows context (a neighbour of a lexical hit); 0 for the rest.
    With ``mem_lock`` held."""
    rows = borrowers
    if (lexical < 0).any():  # never from BM25; the lengths were only ever those of positive hits' neighbours
        rows = order.near(np.flatnonzero(lexical > 0), depth)
    lengths = np.zeros(order.n, dtype=np.float64)
    if rows.size:  # rows in creation order: live, so each has a key
        lengths[rows] = state.lengths(cast("list[str]", list(map(view.keys.__getitem__, rows.tolist()))))
    return lengths


def _keep_fields(state: TokenState, view: VectorView, eligible: BoolArray, filters: _Filters) -> None:
    """Leave out (in ``eligible``) the rows whose memory lacks the tags or the priority asked for.
    With ``mem_lock`` held."""
    tags, priorities = filters.tags, filters.priorities
    for row in np.flatnonzero(eligible).tolist():
        memory = state.memory(view.keys[row] or "")
        if memory is None or (priorities and memory.priority not in priorities):
            eligible[row] = False
        elif tags and not {t.casefold() for t in tags} <= {t.casefold() for t in memory.tags}:
            eligible[row] = False


def _pool(score: FloatArray, size: int) -> IntArray:
    """The rows that score at all; at most ``size`` of them, the best."""
    candidates = np.flatnonzero(score > 0)
    if candidates.size > size:
        candidates = candidates[np.argpartition(-score[candidates], size - 1)[:size]]
    return candidates


def _weighed(
    state: TokenState, view: VectorView, candidates: IntArray, score: FloatArray, now: datetime, where: Where
) -> tuple[dict[int, Memory], FloatArray]:
    """The candidates' memories by row, and their scores weighed by what each memory says of
    itself and when it was last used (ranking.factor); 0 for the other rows."""
    rows = candidates.tolist()
    keys = [view.keys[r] or "" for r in rows]
    recorded = state.sidecar.last_access(keys, where) if state.sidecar else {}
    memories: dict[int, Memory] = {}
    values: list[float] = []
    with state.looking(where):
        for row, path_key, value in zip(rows, keys, score[candidates].tolist(), strict=True):
            memory = state.memory(path_key)
            if memory is None:
                continue
            memories[row] = memory
            last = last_access(memory, recorded.get(path_key))
            values.append(value * factor(memory, last_access=last, now=now))
    weighted = np.zeros(len(score), dtype=np.float64)
    weighted[list(memories)] = values  # the rows in the order their values came
    return memories, weighted


def _picked(
    state: TokenState,
    memories: dict[int, Memory],
    weighted: FloatArray,
    lent: FloatArray,
    order: Layout,
    limit: int,
    weights: Weights,
    terms: set[str],
    where: Where,
) -> list[Recalled]:
    """The results, best first: diverse (ranking.diversify), above the floors, each memory as it
    is on disk now."""
    picked = diversify(
        list(memories),
        weighted,
        limit,
        order,
        neighbour_penalty=weights.neighbour,
        free=int(weights.neighbour_after * limit),
    )
    results: list[Recalled] = []
    clear = False  # the first result holds every word of the query: it is what was asked for
    for row, value, _ in picked:
        if weights.floor > 0 and value < weights.floor:  # values only fall down the list
            break
        shown = max(value, 0.0)
        own = shown * (1.0 - lent[row])
        if clear and own < weights.own_floor:  # lent by neighbours or a faint cosine: not this
            continue
        memory = state.fresh(memories[row].id, memories[row].archived, where)
        if memory is not None:  # None: deleted on disk since it was indexed (now dropped too)
            if not results:
                clear = weights.floor > 0 and explains(memory, terms)
            results.append(Recalled(memory, shown, snippet(memory.content, terms), own))
    return results
