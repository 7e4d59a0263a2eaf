"""The hash embedder: built in and offline, feature hashing of words and their character n-grams."""

from __future__ import annotations

import hashlib
import math
import threading
from collections import Counter
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from memvault.search.embedders.base import EmbedOptions, FloatMatrix, Traits, normalise_rows
from memvault.search.text import STOP_WORDS, terms_of

HASH_DIM = 512
NOISE = 0.1  # a cosine below this is one of the hash's chance collisions, not a match

_WORD_CACHE_MAX = 200_000
# The cache is bounded by its arrays' bytes too: a word's features grow with its length (three
# grams per letter), so a bound on entries alone let long words hold hundreds of megabytes.
WORD_CACHE_BYTES = 32 * 1024 * 1024


class HashEmbedder:
    """Feature hashing of words and their character 3-5-grams into ``dim`` signed buckets.

    Deterministic across processes and machines (blake2b, not Python's salted ``hash``). Words
    are the index's terms (lightly stemmed; CJK as bigrams), so vectors and lexical search agree
    on what a word is; character n-grams make "deploy"/"deployment"/"redeployed" overlap.
    Repeated words count sublinearly; common function words are left out.
    """

    traits = Traits(quick=True, noise=NOISE)

    def __init__(self, dim: int = HASH_DIM, *, cache_bytes: int = WORD_CACHE_BYTES) -> None:
        if dim < 16:
            raise ValueError("dim must be at least 16")
        self._dim = dim
        self._cache: dict[str, tuple[npt.NDArray[np.int64], FloatMatrix]] = {}
        self._cache_bytes = 0
        self._max_cache_bytes = cache_bytes
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
        size = found[0].nbytes + found[1].nbytes + len(word)
        with self._lock:
            if len(self._cache) >= _WORD_CACHE_MAX or self._cache_bytes + size > self._max_cache_bytes:
                self._cache.clear()
                self._cache_bytes = 0
            if size <= self._max_cache_bytes and word not in self._cache:
                self._cache[word] = found
                self._cache_bytes += size
        return found

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            terms = terms_of(text)
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


def load(target: str, options: EmbedOptions) -> HashEmbedder:
    """``hash`` or ``hash:<dimensions>``."""
    return HashEmbedder(int(target) if target.isdigit() else HASH_DIM)
