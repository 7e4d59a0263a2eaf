"""Index's search scoring as it was before it scored only the matched documents (bb07b5e), kept as
the reference the new scoring must equal bit for bit."""

# The code below is the old module's search half, unchanged but for its imports and the class it
# sits in: a subclass of the new Index, so both hold the same documents the same way and only
# search and scores differ. tests/search/test_index_equivalence.py compares the two.

from __future__ import annotations

from array import array
from typing import cast

import numpy as np
import numpy.typing as npt
from rapidfuzz import fuzz, process

from memvault.search.index import NEAR_ALL, Hit, Index, _matches
from memvault.search.indexarrays import F_NAME, F_TAG, F_TITLE, TF_MAX
from memvault.search.lexicon import Lexicon
from memvault.search.text import STOP_WORDS, normalize_title, terms_of

_K1 = 1.2
_B = 0.75
_TITLE_BOOST = 2.5
_NAME_TAG_BOOST = 1.5
_TITLE_SIMILARITY = 90.0
_TITLE_POOL = 64
_MAX_QUERY_TERMS = 64
_SCORE_CELLS = 1 << 20

_FloatArray = npt.NDArray[np.float32]


class ReferenceIndex(Index):
    """The new Index with the old search and scores."""

    def search(self, query: str, *, limit: int | None = None) -> tuple[list[Hit], int]:
        """Returns (hits ranked best-first, truncated to limit; total number of matching docs).

        Documents matching every query term come first (``matched_all``); only when there are
        none, documents matching any term, more matched terms first. A query that is nearly a
        memory's whole title puts that memory first.
        """
        ranking = self._rank(query, limit)
        if ranking is None:
            return [], 0
        ranked, total, matched_all, count = ranking
        hits = []
        for docno in ranked:
            doc_id = self._ids_by_no[docno]
            assert doc_id is not None
            hits.append(Hit(doc_id, float(total[docno]), bool(matched_all[docno])))
        return hits, count

    def scores(
        self, query: str, *, limit: int | None = None, every: bool = True, near: str = NEAR_ALL
    ) -> tuple[list[str], _FloatArray]:
        """The ids :meth:`search` would return and their scores, as a list and an array: recall
        wants only these, for up to hundreds of hits a query. ``every=False``: the best by plain BM25
        (no title, name or tag boost) of all that match any term, as recall ranks them (search puts
        those matching every term first and leaves the rest out when there are any). ``near``
        (with ``every=False``): which vocabulary terms besides a query term's own match it, see
        :func:`_matches`."""
        if not every:
            return self._any_term(query, limit, near)
        ranking = self._rank(query, limit)
        if ranking is None:
            return [], np.zeros(0, dtype=np.float32)
        ranked, total, _, _ = ranking
        ids = self._ids_by_no
        return [cast("str", ids[docno]) for docno in ranked], total[ranked]

    def _any_term(self, query: str, limit: int | None, near: str) -> tuple[list[str], _FloatArray]:
        terms = list(dict.fromkeys(terms_of(query)))
        content = [t for t in terms if t not in STOP_WORDS]
        terms = (content or terms)[:_MAX_QUERY_TERMS]
        if not terms or not self._docno:
            return [], np.zeros(0, dtype=np.float32)
        self._flush_postings()
        ndocs = len(self._ids_by_no)
        avgdl = max(self._total_len / len(self._docno), 1.0)
        norm = _K1 * (1.0 - _B + _B * self._dl[:ndocs] / np.float32(avgdl))
        total, matched = _term_scores(
            self._lexicon, self._postings, terms, ndocs, len(self._docno), norm, fields=False, near=near
        )
        docs = np.flatnonzero(matched)
        ranked = top(docs, total.astype(np.float64), len(docs) if limit is None else limit)
        ids = self._ids_by_no
        return [cast("str", ids[docno]) for docno in ranked], total[ranked]

    def _rank(
        self, query: str, limit: int | None
    ) -> tuple[list[int], _FloatArray, npt.NDArray[np.bool_], int] | None:
        """(docnos best first, each docno's score, whether it matched every term, how many
        documents match); None when nothing can match."""
        terms = list(dict.fromkeys(terms_of(query)))
        content = [t for t in terms if t not in STOP_WORDS]
        if content:
            terms = content
        del terms[_MAX_QUERY_TERMS:]  # a pasted document is not a query; bound the work
        if not terms or not self._docno:
            return None
        self._flush_postings()

        ndocs = len(self._ids_by_no)
        n_live = len(self._docno)
        avgdl = max(self._total_len / n_live, 1.0)
        # BM25 length normalisation per docno, shared by all terms of this query.
        norm = _K1 * (1.0 - _B + _B * self._dl[:ndocs] / np.float32(avgdl))
        total, matched = _term_scores(self._lexicon, self._postings, terms, ndocs, n_live, norm)

        nterms = len(terms)
        any_docs = np.flatnonzero(matched)
        if any_docs.size == 0:
            return None
        all_docs = np.flatnonzero(matched == nterms)
        if all_docs.size:
            chosen = all_docs
            key = total.astype(np.float64)
        else:
            chosen = any_docs
            # More matched terms first, then score: count * (max score + 1) + score.
            key = matched.astype(np.float64) * (float(total.max()) + 1.0) + total

        near = self._near_titles(query, any_docs, key)
        near_set = set(near)
        extra = sum(1 for docno in near if matched[docno] != nterms) if all_docs.size else 0
        count = int(chosen.size) + extra

        want = count if limit is None else max(0, min(limit, count))
        ranked = near[:want]
        rest = want - len(ranked)
        if rest > 0:
            ranked += [d for d in top(chosen, key, rest + len(near)) if d not in near_set][:rest]
        return ranked, total, matched == nterms, count

    def _near_titles(
        self, query: str, candidates: npt.NDArray[np.intp], key: npt.NDArray[np.float64]
    ) -> list[int]:
        """Docnos among the best candidates whose whole title is nearly the query, best first."""
        wanted = normalize_title(query)
        if not wanted:
            return []
        size = len(wanted)
        # Both scores are 100 * (1 - distance / total length), and the distance is at least the
        # difference in length (sorting a title's words keeps its length): most titles fail on length.
        slack = (100.0 - _TITLE_SIMILARITY) / 100.0
        # Mostly no candidate's title can (a word or two against whole titles): then nothing below
        # is needed. |length - size| <= slack * (length + size) bounds the length on both sides;
        # the bounds are widened a hair, so rounding never skips what the exact test keeps.
        lengths = self._title_len[candidates]
        low, high = size * (1 - slack) / (1 + slack) * 0.999, size * (1 + slack) / (1 - slack) * 1.001
        if not ((lengths >= low) & (lengths <= high)).any():
            return []
        pool = top(candidates, key, _TITLE_POOL)
        near = [
            docno
            for docno, length in zip(pool, self._title_len[pool].tolist(), strict=True)
            if length and abs(length - size) <= slack * (length + size)
        ]
        if not near:
            return []
        stored = self._stored_titles
        titles = stored.take(near) if stored is not None else [self._titles[d] for d in near]
        # Each scorer over all of them in one call: a call per title cost more than the scoring.
        similarity: dict[int, float] = {}
        for scorer in (fuzz.ratio, fuzz.token_sort_ratio):
            found = process.extract(wanted, titles, scorer=scorer, score_cutoff=_TITLE_SIMILARITY, limit=None)
            for _, score, i in found:
                similarity[i] = max(score, similarity.get(i, 0.0))
        scored = sorted((-score, -float(key[near[i]]), near[i]) for i, score in similarity.items())
        return [docno for _, _, docno in scored]


def _term_scores(
    lexicon: Lexicon,
    postings: list[array[int]],
    terms: list[str],
    ndocs: int,
    n_live: int,
    norm: _FloatArray,
    fields: bool = True,
    near: str = NEAR_ALL,
) -> tuple[_FloatArray, npt.NDArray[np.int16]]:
    """Per docno: the sum over the query terms of each term's score (its best matching
    vocabulary term's), and how many terms match it; ``fields``: a term in the title, name or tags
    earns its boost. The postings of all terms are scored in
    one pass: a pass per term cost more in numpy's per-call overhead than in arithmetic on the
    thousand-memory tokens agents mostly have."""
    total = np.zeros(ndocs, dtype=np.float32)
    matched = np.zeros(ndocs, dtype=np.int16)
    # Rows of at most _SCORE_CELLS cells: a long query over a large token stays a few MB.
    step = max(1, _SCORE_CELLS // max(ndocs, 1))
    for first in range(0, len(terms), step):
        chunk = terms[first : first + step]
        lists: list[array[int]] = []
        weights: list[float] = []
        owners: list[int] = []
        for i, term in enumerate(chunk):
            for tid, weight in _matches(lexicon, term, near):
                lists.append(postings[tid])
                weights.append(weight)
                owners.append(i)
        if not lists:
            continue
        sizes = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
        # idf (BM25, always > 0) times the match-kind weight, repeated over each list's postings.
        idf = np.log1p((n_live - sizes + 0.5) / (sizes + 0.5))
        factor = np.repeat((idf * np.array(weights)).astype(np.float32), sizes)
        # concatenate copies, so no numpy view keeps exporting an array('I') buffer (which
        # would stop the array from growing later).
        packed = np.concatenate([np.frombuffer(p, dtype=np.uint32) for p in lists])
        docs = packed >> 8
        tf = ((packed >> 3) & TF_MAX).astype(np.float32)
        score = tf * np.float32(_K1 + 1.0) / (tf + norm[docs])
        if fields:
            where = packed & 7
            score += np.where(where & F_TITLE, np.float32(_TITLE_BOOST), np.float32(0.0))
            score += np.where(where & (F_NAME | F_TAG), np.float32(_NAME_TAG_BOOST), np.float32(0.0))
        score *= factor
        # Each (term, docno) cell keeps the best way the doc matches that term.
        best = np.zeros(len(chunk) * ndocs, dtype=np.float32)
        cells = docs if len(chunk) == 1 else np.repeat(np.array(owners, dtype=np.int64) * ndocs, sizes) + docs
        if len(lists) == len(set(owners)):
            best[cells] = score  # one list per term: docnos are unique within a list
        else:
            np.maximum.at(best, cells, score)
        for row in best.reshape(len(chunk), ndocs):  # term by term, in query order, as ever
            total += row
            matched += row > 0
    return total, matched


# memvault.search.order.top as it was (order.best returns positions instead).
def top(docs: npt.NDArray[np.intp], key: npt.NDArray[np.float64], k: int) -> list[int]:
    """The ``k`` docnos of ``docs`` with the highest ``key``, best first (ties: lower docno)."""
    if k <= 0 or docs.size == 0:
        return []
    values = key[docs]
    if k < docs.size:
        part = np.argpartition(-values, k - 1)[:k]
        docs, values = docs[part], values[part]
    order = np.lexsort((docs, -values))
    result: list[int] = docs[order].tolist()
    return result
