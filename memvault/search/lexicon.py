"""The index's vocabulary: term ids, and which indexed terms a query term matches, with what weight.

A query term matches a term exactly, as a prefix, within one or two typos, as a CJK character
within a bigram, or as a half-typed inflection of a stemmed word.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
from rapidfuzz import process
from rapidfuzz.distance import OSA

from memvault.search.indexarrays import TERM_LIMIT
from memvault.search.text import is_cjk_char

PREFIX_WEIGHT = 0.75
FUZZY_WEIGHT = {1: 0.6, 2: 0.45}
CJK_PARTIAL_WEIGHT = 0.75
MIN_PREFIX = 3
MIN_STEM = 4  # an indexed word the query extends by up to MAX_EXTRA_SUFFIX letters also matches
MAX_EXTRA_SUFFIX = 3
PREFIX_KEY = 3
EXPANSION_CACHE_MAX = 4096
REVERSE_MAX = 8 * EXPANSION_CACHE_MAX  # term ids the cached expansions hold, before all are dropped
ADDED_CHECKED_MAX = 64  # terms added between two lookups beyond which the whole cache goes
MASK_CHUNK = 1 << 16


def _ascii_bits() -> npt.NDArray[np.int8]:
    table = np.full(128, 36, dtype=np.int8)
    table[97:123] = np.arange(26)  # a-z
    table[48:58] = np.arange(26, 36)  # 0-9
    return table


_ASCII_BITS = _ascii_bits()
_ASCII_BIT_LIST: list[int] = _ASCII_BITS.tolist()
_POW2 = np.left_shift(np.uint64(1), np.arange(64, dtype=np.uint64))


def char_masks(terms: list[str]) -> npt.NDArray[np.uint64]:
    """Per term, a 64-bit set of its characters (a-z, 0-9 exact, the rest hashed into 16 bits).

    Hash collisions only make the typo filter let more candidates through, never fewer.
    Every term must be non-empty.
    """
    codes = np.frombuffer("".join(terms).encode("utf-32-le"), dtype=np.uint32)
    bits = np.where(codes < 128, _ASCII_BITS[codes & 127], 48 + (codes & 15).astype(np.int8))
    starts = np.zeros(len(terms), dtype=np.int64)
    np.cumsum([len(t) for t in terms[:-1]], out=starts[1:])
    return np.bitwise_or.reduceat(_POW2[bits], starts)


def char_mask(term: str) -> int:
    """:func:`char_masks` of one term, in plain Python: for a single query term, numpy's fixed cost
    per call was most of the typo filter's (1 us here against 12)."""
    mask = 0
    for ch in term:
        code = ord(ch)
        mask |= 1 << (_ASCII_BIT_LIST[code] if code < 128 else 48 + (code & 15))
    return mask


class Lexicon:
    """Term ids (reused once freed) and the expansion of query terms, cached until a term that
    changes it is added or freed. Not thread-safe: the index's callers serialise access."""

    def __init__(self) -> None:
        self._termid: dict[str, int] = {}
        # The id of a term, or None if it is not indexed: the dict's own get (a load asks about
        # 35 times a memory; a method around it cost a Python call each time).
        self.get: Callable[[str], int | None] = self._termid.get
        self.terms: list[str] = []  # by term id; "" for a freed id
        self._free_tids: list[int] = []
        # Length and character set of each term id, for the typo filter; 0 for freed ids. New
        # ids are queued and filled in one vectorised pass before the next typo lookup.
        self._tlen: npt.NDArray[np.int16] = np.zeros(0, dtype=np.int16)
        self._tmask: npt.NDArray[np.uint64] = np.zeros(0, dtype=np.uint64)
        self._unmasked: list[int] = []
        self._by_prefix: dict[str, array[int]] = {}  # first letters -> term ids, for prefix matches
        self._cjk_bigrams: dict[str, set[str]] = {}  # CJK char -> bigrams holding it
        # Query-term expansions. A term added drops only the expansions it would join (at the next
        # expand: see _forget_near); a term freed, those that hold it. Dropping them all at every
        # new word (a number in each new memory) left the cache nearly always empty under load.
        self._expansions: dict[str, list[tuple[int, float]]] = {}
        self._expanded_with: dict[int, set[str]] = {}  # term id -> cached query terms holding it
        self._added: list[str] = []  # terms added since the last expand, while anything is cached

    @classmethod
    def from_terms(cls, terms: list[str]) -> Lexicon:
        """A lexicon holding ``terms`` at their positions ("" for a free id)."""
        lexicon = cls()
        lexicon.terms = terms
        for tid, term in enumerate(terms):
            if not term:
                lexicon._free_tids.append(tid)
                continue
            lexicon._termid[term] = tid
            lexicon._register_term(tid, term)
        lexicon._unmasked = [tid for tid, term in enumerate(terms) if term]
        return lexicon

    def __contains__(self, term: str) -> bool:
        return term in self._termid

    def add(self, term: str) -> int:
        """A new id for ``term`` (not indexed yet)."""
        if self._free_tids:
            tid = self._free_tids.pop()
            self.terms[tid] = term
        else:
            tid = len(self.terms)
            if tid >= TERM_LIMIT:
                raise OverflowError(f"the index holds at most {TERM_LIMIT} distinct words")
            self.terms.append(term)
        self._termid[term] = tid
        self._unmasked.append(tid)
        self._register_term(tid, term)
        if self._expansions:
            if len(self._added) < ADDED_CHECKED_MAX:
                self._added.append(term)
            else:  # many new terms (a burst of new files): checking each costs more than refilling
                self._forget_all()
        return tid

    def _register_term(self, tid: int, term: str) -> None:
        """Add a term to the prefix buckets or the CJK character map."""
        if len(term) >= PREFIX_KEY:
            bucket = self._by_prefix.get(term[:PREFIX_KEY])
            if bucket is None:
                self._by_prefix[term[:PREFIX_KEY]] = array("I", (tid,))
            else:
                bucket.append(tid)
        elif len(term) == 2 and is_cjk_char(term[0]) and is_cjk_char(term[1]):
            for ch in set(term):
                self._cjk_bigrams.setdefault(ch, set()).add(term)

    def free(self, tid: int) -> None:
        """Give up the id of a term no document holds any more."""
        term = self.terms[tid]
        del self._termid[term]
        self.terms[tid] = ""
        if tid < len(self._tlen):
            self._tlen[tid] = 0
            self._tmask[tid] = 0
        self._free_tids.append(tid)
        if len(term) >= PREFIX_KEY:
            bucket = self._by_prefix[term[:PREFIX_KEY]]
            bucket.remove(tid)
            if not bucket:
                del self._by_prefix[term[:PREFIX_KEY]]
        elif len(term) == 2:
            for ch in set(term):
                _discard(self._cjk_bigrams, ch, term)
        for query in self._expanded_with.pop(tid, ()):
            self._expansions.pop(query, None)

    def _fill_term_masks(self) -> None:
        n = len(self.terms)
        if n > len(self._tlen):
            grow = max(n, 2 * len(self._tlen)) - len(self._tlen)
            self._tlen = np.concatenate([self._tlen, np.zeros(grow, dtype=np.int16)])
            self._tmask = np.concatenate([self._tmask, np.zeros(grow, dtype=np.uint64)])
        # A queued id may have been freed (term "") or freed and reused since: use its term now.
        tids = [tid for tid in dict.fromkeys(self._unmasked) if self.terms[tid]]
        self._unmasked.clear()
        for start in range(0, len(tids), MASK_CHUNK):  # chunks bound the temporary arrays
            chunk = tids[start : start + MASK_CHUNK]
            terms = [self.terms[tid] for tid in chunk]
            self._tlen[chunk] = np.minimum([len(t) for t in terms], 32767)
            self._tmask[chunk] = char_masks(terms)

    def expand(self, term: str) -> list[tuple[int, float]]:
        """Vocabulary terms that count as a match for query term ``term``, with their weights."""
        if self._added:
            self._forget_near(self._added)
        if len(self._expansions) >= EXPANSION_CACHE_MAX or len(self._expanded_with) >= REVERSE_MAX:
            self._forget_all()
        cached = self._expansions.get(term)
        if cached is not None:
            return cached

        weights: dict[str, float] = {}
        if len(term) >= MIN_PREFIX:
            vocabulary = self.terms
            for tid in self._by_prefix.get(term[:PREFIX_KEY], ()):
                if vocabulary[tid].startswith(term):
                    weights[vocabulary[tid]] = PREFIX_WEIGHT
        elif len(term) == 1 and is_cjk_char(term):
            # A one-character CJK query: the documents only hold bigrams of longer runs.
            for other in self._cjk_bigrams.get(term, ()):
                weights[other] = CJK_PARTIAL_WEIGHT
        for other, distance in self._typo_variants(term):
            weights.setdefault(other, FUZZY_WEIGHT[distance])
        if term in self._termid:
            weights[term] = 1.0
        elif term.isalpha():
            # Stemming shortens indexed words ("staging" -> "stag"), so a half-typed or misspelt
            # inflection ("stagin", "deployign") is neither a prefix nor a near neighbour of them:
            # accept an indexed word that the query extends by a few letters.
            for cut in range(1, MAX_EXTRA_SUFFIX + 1):
                if len(term) - cut >= MIN_STEM and term[:-cut] in self._termid:
                    weights.setdefault(term[:-cut], FUZZY_WEIGHT[1])
        result = [(self._termid[t], w) for t, w in weights.items()]
        self._expansions[term] = result
        for tid, _ in result:
            self._expanded_with.setdefault(tid, set()).add(term)
        return result

    def _forget_near(self, added: list[str]) -> None:
        """Drop the cached expansions that terms added since would join (see expand): a query
        term they equal or extend (prefix), a CJK character of a bigram, and, for terms with a
        letter, any query term within three edits (two typos; a stem the query extends by three
        letters)."""
        cache = self._expansions
        self._added = []
        for term in added:
            for end in range(min(MIN_PREFIX, len(term)), len(term) + 1):
                cache.pop(term[:end], None)
            if len(term) == 2:
                for ch in term:
                    cache.pop(ch, None)
            if cache and any(ch.isalpha() for ch in term):
                near = process.extract(term, list(cache), scorer=OSA.distance, score_cutoff=3, limit=None)
                for query, _, _ in near:
                    del cache[query]

    def _forget_all(self) -> None:
        self._expansions.clear()
        self._expanded_with.clear()
        self._added = []

    def _typo_variants(self, term: str) -> list[tuple[str, int]]:
        size = len(term)
        if size < 4 or size > 64 or not term.isalpha():  # short words and numbers are not fuzzed
            return []
        max_distance = 1 if size <= 7 else 2
        self._fill_term_masks()
        n = len(self.terms)
        # Cheap vectorised filter over the whole vocabulary before rapidfuzz: a term within
        # distance d differs in length by <= d, and each side lacks <= d of the other's characters.
        lengths = self._tlen[:n]
        masks = self._tmask[:n]
        qmask = np.uint64(char_mask(term))
        keep = np.abs(lengths - np.int16(size)) <= max_distance
        keep &= np.bitwise_count(masks & ~qmask) <= max_distance
        keep &= np.bitwise_count(~masks & qmask) <= max_distance
        candidates = [self.terms[tid] for tid in np.flatnonzero(keep).tolist()]
        # OSA rather than plain Levenshtein: a swap of neighbours ("postgers") is one typo.
        found = process.extract(term, candidates, scorer=OSA.distance, score_cutoff=max_distance, limit=None)
        return [(other, int(distance)) for other, distance, _ in found if distance > 0]


def _discard(buckets: dict[str, set[str]], key: str, term: str) -> None:
    bucket = buckets.get(key)
    if bucket is not None:
        bucket.discard(term)
        if not bucket:
            del buckets[key]
