"""In-memory search index of one token's memories: inverted postings, BM25 ranking, typo and prefix match."""

from __future__ import annotations

from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
from rapidfuzz import fuzz, process

from memvault.search.columns import StringColumn, unpack_strings
from memvault.search.indexarrays import (
    DOC_LIMIT,
    F_NAME,
    F_TAG,
    F_TITLE,
    NO_TERMS,
    RESTORED,
    TF_MAX,
    DocTerms,
    IndexSnapshot,
    entries_of,
    postings_of,
    uint32s,
)
from memvault.search.lexicon import Lexicon
from memvault.search.order import best, stable_order
from memvault.search.text import STOP_WORDS, name_text, normalize_title, terms_of

__all__ = ["DOC_LIMIT", "F_NAME", "F_TAG", "F_TITLE", "TF_MAX", "Hit", "Index", "name_text"]


# --- scoring constants -------------------------------------------------------------------------

_K1 = 1.2
NEAR_ALL, NEAR_MISSING, NEAR_NONE = "all", "missing", "none"  # see _matches
NEAR_MODES = (NEAR_ALL, NEAR_MISSING, NEAR_NONE)
_B = 0.75
_TITLE_BOOST = 2.5  # added to the body's BM25 term factor (which lies in (0, 2.2))
_NAME_TAG_BOOST = 1.5
_TITLE_SIMILARITY = 90.0  # whole-title similarity (0-100) that puts a memory first
_TITLE_POOL = 64  # best-scoring candidates whose titles are compared with the query
_MAX_QUERY_TERMS = 64
_TABLE_AT_MOST = 1 << 14  # docnos up to which a query's matched ones are found by a table, not a sort

_FLUSH_AT = 1 << 20  # queued postings appended once this many are waiting

if array("I").itemsize != 4:  # pragma: no cover - every mainstream platform has 4-byte unsigned int
    raise ImportError("memvault.search.index needs a 4-byte array('I')")


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result."""

    id: str  # memory id, e.g. "projects/alpha.md"
    score: float  # higher is better
    matched_all: bool  # True if every query term matched


_FloatArray = npt.NDArray[np.float32]


class Index:
    """Inverted index over title, filename, tags and body of each memory.

    Postings are compact: per term an ``array('I')`` of ``docno << 8 | tf << 3 | fields``, and
    per document an ``array('I')`` of ``termid << 8 | low byte`` so it can be removed without
    its text. The body itself is not kept. Not thread-safe: callers serialise access.

    A query term matches a vocabulary term exactly (weight 1), as a prefix (0.75, query term of
    3+ characters), or within 1 typo (0.6; words of 4-7 letters) or 2 typos (0.45; 8+ letters).
    Scores are BM25 over the body plus fixed boosts for title and filename/tag hits, all
    computed from the postings with numpy; expansions are cached until the vocabulary changes.
    """

    def __init__(self) -> None:
        # documents
        self._docno: dict[str, int] = {}
        self._ids_by_no: list[str | None] = []
        self._free_docnos: list[int] = []
        self._doc_terms: list[DocTerms] = []  # termid << 8 | low byte of its posting
        # A restored index keeps its documents' term entries in one buffer, sliced on demand
        # (building 100,000 arrays was an eighth of a restart's decode): see entries_of.
        self._restored: memoryview = NO_TERMS
        self._restored_at: array[int] = array("q")  # document no's entries: [at[no], at[no + 1])
        self._titles: list[str] = []  # normalized titles, by docno
        # A restored index's titles, until something needs them as a list (see _listed_titles).
        self._stored_titles: StringColumn | None = None
        self._dl: _FloatArray = np.zeros(64, dtype=np.float32)  # body lengths, by docno
        self._title_len = np.zeros(64, dtype=np.int64)  # len(self._titles[docno]), for _near_titles
        self._total_len = 0
        # vocabulary: term ids, and postings by term id
        self._lexicon = Lexicon()
        self._postings: list[array[int]] = []
        # Postings of upserted documents not yet appended to self._postings: (term id, posting).
        self._pending_tids: array[int] = array("I")
        self._pending_postings: array[int] = array("I")

    # --- documents -----------------------------------------------------------------------------

    def __contains__(self, id: str) -> bool:
        return id in self._docno

    def __len__(self) -> int:
        return len(self._docno)

    def ids(self) -> list[str]:
        """Ids of all indexed memories, in the order they were first added."""
        return list(self._docno)

    def lengths(self, ids: Sequence[str]) -> _FloatArray:
        """The body length in terms of each of ``ids`` (0 for an id not indexed)."""
        docno = self._docno.get
        nos = np.fromiter((docno(id, -1) for id in ids), dtype=np.intp, count=len(ids))
        return np.where(nos >= 0, self._dl[nos], np.float32(0.0))

    def upsert(self, id: str, *, title: str, body: str, tags: Sequence[str] = ()) -> None:
        """Add the memory ``id``, or replace everything indexed for it."""
        if isinstance(tags, str):
            raise TypeError("tags must be a sequence of strings, not a string")
        # term -> low byte of its posting (tf << 3 | field flags). Bulk loads are dominated by this
        # per-term work, so it is kept to comprehensions and a few small loops.
        body_tokens = terms_of(body)
        packed = {t: (tf if tf < TF_MAX else TF_MAX) << 3 for t, tf in Counter(body_tokens).items()}
        for term in terms_of(title):
            packed[term] = packed.get(term, 0) | F_TITLE
        for term in terms_of(name_text(id)):
            packed[term] = packed.get(term, 0) | F_NAME
        for tag in tags:
            for term in terms_of(tag):
                packed[term] = packed.get(term, 0) | F_TAG
        kept: set[int] = set()
        docno = self._docno.get(id)
        if docno is None:
            docno = self._new_docno(id)
        else:
            # Words the new text keeps stay in the vocabulary, so the typo/prefix caches survive
            # an edit that adds no new word; postings that stay the same stay where they are.
            kept = self._drop_doc_terms(docno, keep=packed)
        terms = list(packed)
        lows = list(packed.values())
        known = self._lexicon.get
        found = [known(t) for t in terms]
        tids = (
            [self._new_term(t) if tid is None else tid for t, tid in zip(terms, found, strict=True)]
            if None in found
            else cast("list[int]", found)
        )
        # Postings are queued and appended term by term later (see _flush_postings).
        high = docno << 8
        entries = [tid << 8 | low for tid, low in zip(tids, lows, strict=True)]
        if kept:
            new = [i for i, entry in enumerate(entries) if entry not in kept]
            tids, lows = [tids[i] for i in new], [lows[i] for i in new]
        self._pending_tids.fromlist(tids)
        self._pending_postings.fromlist([high | low for low in lows])
        self._doc_terms[docno] = array("I", entries)
        if len(self._pending_tids) >= _FLUSH_AT:
            self._flush_postings()
        titles = self._listed_titles()
        titles[docno] = normalize_title(title)
        self._title_len[docno] = len(titles[docno])
        self._dl[docno] = len(body_tokens)
        self._total_len += len(body_tokens)

    def remove(self, id: str) -> None:
        """Forget the memory ``id``; nothing happens if it is not indexed."""
        docno = self._docno.pop(id, None)
        if docno is None:
            return
        self._drop_doc_terms(docno)
        self._ids_by_no[docno] = None
        self._listed_titles()[docno] = ""
        self._title_len[docno] = 0
        self._free_docnos.append(docno)

    def _new_docno(self, id: str) -> int:
        if self._free_docnos:
            docno = self._free_docnos.pop()
            self._ids_by_no[docno] = id
        else:
            docno = len(self._ids_by_no)
            if docno >= DOC_LIMIT:
                raise OverflowError(f"the index holds at most {DOC_LIMIT} memories")
            self._ids_by_no.append(id)
            self._doc_terms.append(None)
            self._listed_titles().append("")
            if docno >= len(self._dl):  # the per-docno arrays, always of one length, grow together
                self._dl = np.concatenate([self._dl, np.zeros_like(self._dl)])
                self._title_len = np.concatenate([self._title_len, np.zeros_like(self._title_len)])
        self._docno[id] = docno
        return docno

    def _drop_doc_terms(self, docno: int, keep: Mapping[str, int] | None = None) -> set[int]:
        """Take the document's postings out, but those ``keep`` (term -> low byte of its new
        posting) has unchanged: returns their entries, which stay where they are (an edit of a
        tag or a sentence looked up every term's posting otherwise)."""
        entries = entries_of(self._doc_terms[docno], self._restored, self._restored_at, docno)
        kept: set[int] = set()
        if entries is None:
            return kept
        self._flush_postings()
        high = docno << 8
        terms = self._lexicon.terms
        for entry in entries:
            tid, low = entry >> 8, entry & 0xFF
            if keep is not None and keep.get(terms[tid]) == low:
                kept.add(entry)
                continue
            plist = self._postings[tid]
            i = _position(plist, high | low)
            last = plist.pop()
            if i < len(plist):
                plist[i] = last  # swap-remove: postings are unordered
            elif not plist and (keep is None or terms[tid] not in keep):
                self._lexicon.free(tid)
        self._doc_terms[docno] = None
        self._total_len -= int(self._dl[docno])
        self._dl[docno] = 0
        return kept

    def _flush_postings(self) -> None:
        """Append queued postings, grouped by term: one Python step per term, not per posting."""
        if not self._pending_tids:
            return
        tids = np.frombuffer(self._pending_tids, dtype=np.uint32)
        order = stable_order(tids)
        sorted_tids = tids[order]
        data = np.frombuffer(self._pending_postings, dtype=np.uint32)[order].tobytes()
        del tids
        self._pending_tids = array("I")
        self._pending_postings = array("I")
        cuts = (np.flatnonzero(sorted_tids[1:] != sorted_tids[:-1]) + 1).tolist()
        starts = [0, *cuts]
        ends = [*cuts, len(sorted_tids)]
        view = memoryview(data)
        postings = self._postings
        for tid, start, end in zip(sorted_tids[starts].tolist(), starts, ends, strict=True):
            postings[tid].frombytes(view[4 * start : 4 * end])

    # --- snapshot ------------------------------------------------------------------------------

    def snapshot(self) -> IndexSnapshot:
        """What a snapshot needs, copied by reference (fast: callers hold their lock only for this);
        ``.arrays()`` on the result does the slow part. Document term arrays are replaced, never
        changed in place, so the copy stays valid; the postings change in place: their bytes are
        copied (sorting them out of the term lists again took a restart's worth of memory)."""
        self._flush_postings()
        counts = np.fromiter(map(len, self._postings), dtype=np.int64, count=len(self._postings))
        return IndexSnapshot(
            list(self._ids_by_no), list(self._doc_terms), self._restored, self._restored_at,
            self._stored_titles or list(self._titles), self._dl.copy(), list(self._lexicon.terms),
            b"".join(self._postings), counts,
        )  # fmt: skip

    @classmethod
    def from_snapshot(cls, arrays: Mapping[str, npt.NDArray[Any]]) -> Index:
        """Inverse of ``snapshot().arrays()``. Raises ValueError (or KeyError) if the data do not fit.
        Without ``postings`` (a loader's arrays) they are sorted out of the documents' term lists."""
        index = cls()
        ids = unpack_strings(arrays["ids.blob"], arrays["ids.len"])
        titles = StringColumn(arrays["titles.blob"], arrays["titles.len"])
        title_len = np.asarray(arrays["titles.len"], dtype=np.int64)
        terms = unpack_strings(arrays["terms.blob"], arrays["terms.len"])
        counts = np.asarray(arrays["doc_term_counts"], dtype=np.int64)
        flat = np.ascontiguousarray(arrays["doc_terms"], dtype=np.uint32)
        dl = np.asarray(arrays["dl"], dtype=np.float32)
        n = len(ids)
        if not (len(counts) == len(dl) == len(titles) == n) or int(counts.sum()) != len(flat):
            raise ValueError("index snapshot is inconsistent")
        index._docno = {id: no for no, id in enumerate(ids)}
        if len(index._docno) != n or len(set(filter(None, terms))) != sum(1 for t in terms if t):
            raise ValueError("index snapshot repeats an id or a term")
        tids = flat >> 8
        if len(tids) and int(tids.max()) >= len(terms):
            raise ValueError("index snapshot refers to unknown terms")
        if "postings" in arrays:
            postings = np.ascontiguousarray(arrays["postings"], dtype=np.uint32)
            per_term = np.asarray(arrays["term_postings"], dtype=np.int64)
            # The file's checksum guards its bytes; this, that it was written whole and by its index.
            if len(postings) != len(flat) or not np.array_equal(
                per_term, np.bincount(tids, minlength=len(terms))
            ):
                raise ValueError("index snapshot's postings do not fit its documents")
            if len(postings) and int(postings.max() >> 8) >= n:
                raise ValueError("index snapshot's postings refer to unknown documents")
        else:
            postings, per_term = postings_of(flat, counts, len(terms))
        index._ids_by_no = cast("list[str | None]", ids)
        index._stored_titles = titles
        index._title_len = np.concatenate([title_len, np.zeros(max(64, n), dtype=np.int64)])
        index._dl = np.concatenate([dl, np.zeros(max(64, n), dtype=np.float32)])
        index._total_len = int(dl.astype(np.int64).sum())
        index._restored = memoryview(flat).cast("B").cast("I")  # never resized: the view may stay
        index._restored_at = array("q", np.concatenate([[0], np.cumsum(counts)]).astype(np.int64).tobytes())
        index._doc_terms = [RESTORED] * n
        data = memoryview(postings).cast("B")
        index._postings = []
        start = 0
        for count in per_term.tolist():
            index._postings.append(uint32s(data[4 * start : 4 * (start + count)]))
            start += count
        index._lexicon = Lexicon.from_terms(terms)
        return index

    def _listed_titles(self) -> list[str]:
        """The titles by docno as a list, the restored ones decoded on the first change (a restart
        answers without them: a query compares only a few candidates' titles)."""
        if self._stored_titles is not None:
            self._titles = self._stored_titles.take(range(len(self._stored_titles)))
            self._stored_titles = None
        return self._titles

    # --- vocabulary ----------------------------------------------------------------------------

    def _new_term(self, term: str) -> int:
        tid = self._lexicon.add(term)
        if tid == len(self._postings):
            self._postings.append(array("I"))
        return tid

    # --- search --------------------------------------------------------------------------------

    def search(self, query: str, *, limit: int | None = None) -> tuple[list[Hit], int]:
        """Returns (hits ranked best-first, truncated to limit; total number of matching docs).

        Documents matching every query term come first (``matched_all``); only when there are
        none, documents matching any term, more matched terms first. A query that is nearly a
        memory's whole title puts that memory first.
        """
        ranking = self._rank(query, limit)
        if ranking is None:
            return [], 0
        ranked, scores, matched_all, count = ranking
        hits = []
        for docno, score, all_terms in zip(ranked, scores.tolist(), matched_all.tolist(), strict=True):
            doc_id = self._ids_by_no[docno]
            assert doc_id is not None
            hits.append(Hit(doc_id, score, all_terms))
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
        ranked, scores, _, _ = ranking
        ids = self._ids_by_no
        return [cast("str", ids[docno]) for docno in ranked], scores

    def _any_term(self, query: str, limit: int | None, near: str) -> tuple[list[str], _FloatArray]:
        terms = list(dict.fromkeys(terms_of(query)))
        content = [t for t in terms if t not in STOP_WORDS]
        terms = (content or terms)[:_MAX_QUERY_TERMS]
        if not terms or not self._docno:
            return [], np.zeros(0, dtype=np.float32)
        docs, total, _ = self._scored(terms, fields=False, near=near)
        kept = best(docs, total.astype(np.float64), len(docs) if limit is None else limit)
        ids = self._ids_by_no
        return [cast("str", ids[docno]) for docno in docs[kept].tolist()], total[kept]

    def _scored(
        self, terms: list[str], *, fields: bool = True, near: str = NEAR_ALL
    ) -> tuple[npt.NDArray[np.intp], _FloatArray, npt.NDArray[np.int16]]:
        """Docnos matching any of ``terms`` (ascending), their scores, terms matched (_term_scores)."""
        self._flush_postings()
        ndocs, n_live = len(self._ids_by_no), len(self._docno)
        avgdl = max(self._total_len / n_live, 1.0)
        docs, total, matched = _term_scores(
            self._lexicon, self._postings, terms, n_live, self._dl[:ndocs], avgdl, fields=fields, near=near
        )
        hit = matched > 0  # a posting may score 0: a title-only match without the field boosts
        if hit.all():
            return docs, total, matched
        return docs[hit], total[hit], matched[hit]

    def _rank(
        self, query: str, limit: int | None
    ) -> tuple[list[int], _FloatArray, npt.NDArray[np.bool_], int] | None:
        """(docnos best first, their scores, whether each matched every term, how many
        documents match); None when nothing can match."""
        terms = list(dict.fromkeys(terms_of(query)))
        content = [t for t in terms if t not in STOP_WORDS]
        if content:
            terms = content
        del terms[_MAX_QUERY_TERMS:]  # a pasted document is not a query; bound the work
        if not terms or not self._docno:
            return None
        # Only the documents some term matches are scored: positions below are into ``docs``.
        docs, total, matched = self._scored(terms)
        if docs.size == 0:
            return None
        every = matched == len(terms)
        all_at = np.flatnonzero(every)
        if all_at.size:
            chosen = all_at
            key = total.astype(np.float64)
        else:
            chosen = np.arange(docs.size)
            # More matched terms first, then score: count * (max score + 1) + score.
            key = matched.astype(np.float64) * (float(total.max()) + 1.0) + total

        near = self._near_titles(query, docs, key)
        near_set = set(near)
        extra = sum(1 for at in near if not every[at]) if all_at.size else 0
        count = int(chosen.size) + extra

        want = count if limit is None else max(0, min(limit, count))
        ranked = near[:want]
        rest = want - len(ranked)
        if rest > 0:
            kept = chosen[best(docs[chosen], key[chosen], rest + len(near))].tolist()
            ranked += [at for at in kept if at not in near_set][:rest]
        return docs[ranked].tolist(), total[ranked], every[ranked], count

    def _near_titles(
        self, query: str, candidates: npt.NDArray[np.intp], key: npt.NDArray[np.float64]
    ) -> list[int]:
        """Positions in ``candidates`` (docnos, ascending; ``key``: theirs) of the best ones whose
        whole title is nearly the query, best first."""
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
        pool = best(candidates, key, _TITLE_POOL)
        near = [
            at
            for at, length in zip(pool.tolist(), lengths[pool].tolist(), strict=True)
            if length and abs(length - size) <= slack * (length + size)
        ]
        if not near:
            return []
        stored = self._stored_titles
        docnos = candidates[near].tolist()
        titles = stored.take(docnos) if stored is not None else [self._titles[d] for d in docnos]
        # Each scorer over all of them in one call: a call per title cost more than the scoring.
        similarity: dict[int, float] = {}
        for scorer in (fuzz.ratio, fuzz.token_sort_ratio):
            found = process.extract(wanted, titles, scorer=scorer, score_cutoff=_TITLE_SIMILARITY, limit=None)
            for _, score, i in found:
                similarity[i] = max(score, similarity.get(i, 0.0))
        scored = sorted((-score, -float(key[near[i]]), docnos[i], near[i]) for i, score in similarity.items())
        return [at for _, _, _, at in scored]


def _term_scores(
    lexicon: Lexicon,
    postings: list[array[int]],
    terms: list[str],
    n_live: int,
    dl: _FloatArray,
    avgdl: float,
    fields: bool = True,
    near: str = NEAR_ALL,
) -> tuple[npt.NDArray[np.intp], _FloatArray, npt.NDArray[np.int16]]:
    """The docnos in the postings of the vocabulary terms that match the query ``terms``
    (ascending), and for each the sum over the query terms of each term's score (its best matching
    vocabulary term's), and how many terms match it; ``fields``: a term in the title, name or tags
    earns its boost. ``dl``: body lengths by docno. The postings of all terms are scored in one
    pass: a pass per term cost more in numpy's per-call overhead than in arithmetic on the
    thousand-memory tokens agents mostly have; only the documents they hold are scored (a
    query's terms mostly match a few dozen of a large token's memories)."""
    lists: list[array[int]] = []
    weights: list[float] = []
    spans: list[tuple[int, int, int]] = []  # per term: its postings' first, their end, its lists
    end = 0
    for term in terms:
        found = _matches(lexicon, term, near)
        start = end
        for tid, weight in found:
            lists.append(postings[tid])
            weights.append(weight)
            end += len(postings[tid])
        spans.append((start, end, len(found)))
    if not end:
        return np.zeros(0, dtype=np.intp), np.zeros(0, dtype=np.float32), np.zeros(0, dtype=np.int16)
    sizes = np.fromiter(map(len, lists), dtype=np.int64, count=len(lists))
    # idf (BM25, always > 0) times the match-kind weight, repeated over each list's postings.
    idf = np.log1p((n_live - sizes + 0.5) / (sizes + 0.5))
    factor = np.repeat((idf * np.array(weights)).astype(np.float32), sizes)
    # concatenate copies, so no numpy view keeps exporting an array('I') buffer (which
    # would stop the array from growing later).
    packed = np.concatenate([np.frombuffer(p, dtype=np.uint32) for p in lists])
    docs, column = _distinct_inverse(packed >> 8, len(dl))
    # BM25 length normalisation of the matched documents, shared by all terms of this query.
    norm = _K1 * (1.0 - _B + _B * dl[docs] / np.float32(avgdl))
    tf = ((packed >> 3) & TF_MAX).astype(np.float32)
    score = tf * np.float32(_K1 + 1.0) / (tf + norm[column])
    if fields:
        where = packed & 7
        score += np.where(where & F_TITLE, np.float32(_TITLE_BOOST), np.float32(0.0))
        score += np.where(where & (F_NAME | F_TAG), np.float32(_NAME_TAG_BOOST), np.float32(0.0))
    score *= factor
    total = np.zeros(len(docs), dtype=np.float32)
    matched = np.zeros(len(docs), dtype=np.int16)
    for start, end, count in spans:  # term by term, in query order, as ever (adding 0 changes nothing)
        if start == end:
            continue
        at, part = column[start:end], score[start:end]
        if count == 1:  # a list holds each document once
            total[at] += part
            matched[at] += part > 0
        else:  # each document by the best way it matches the term
            row = np.zeros(len(docs), dtype=np.float32)
            np.maximum.at(row, at, part)
            total += row
            matched += row > 0
    return docs, total, matched


def _distinct_inverse(
    values: npt.NDArray[np.integer[Any]], bound: int
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """``values`` (each below ``bound``) sorted, each once, and where each value is in that:
    np.unique's with ``return_inverse``, by a sort, or by a table of ``bound`` places when that
    is small or the values many (it cost less there, and more than the sort on a large token)."""
    if bound > _TABLE_AT_MOST and values.size * 8 < bound:
        distinct, column = np.unique(values, return_inverse=True)
        return distinct.astype(np.intp), column.reshape(-1).astype(np.intp)
    seen = np.zeros(bound, dtype=bool)
    seen[values] = True
    docs = np.flatnonzero(seen)
    at = np.empty(bound, dtype=np.intp)
    at[docs] = np.arange(docs.size)
    return docs, at[values]


def _matches(lexicon: Lexicon, term: str, near: str) -> list[tuple[int, float]]:
    """The vocabulary terms that match query term ``term``, with their weights. ``near``: NEAR_ALL,
    the prefixes, typos and stems :meth:`Lexicon.expand` finds beside the term itself (search, where
    a person types); NEAR_MISSING, those only for a term the vault does not hold (a misspelt
    word still finds its memory, a word that is there matches itself); NEAR_NONE, the term alone."""
    if near == NEAR_ALL:
        return lexicon.expand(term)
    tid = lexicon.get(term)
    if tid is not None:
        return [(tid, 1.0)]
    return lexicon.expand(term) if near == NEAR_MISSING else []


def _position(plist: array[int], value: int) -> int:
    """Index of ``value`` in ``plist``; numpy scans long lists (array.index boxes every item)."""
    if len(plist) < 512:
        return plist.index(value)
    found = np.flatnonzero(np.frombuffer(plist, dtype=np.uint32) == value)
    return int(found[0])  # the temporary view is gone here, so plist may be resized again
