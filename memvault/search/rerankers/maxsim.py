"""MaxSim, the default reranker: late interaction over WordLlama's token table, from kept token ids."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from memvault.search.embedders import TokenEmbedder, TokenIds
from memvault.search.embedders.wordllama import TokenTable, table_maxsim
from memvault.search.order import distinct
from memvault.search.rerankers.base import FloatArray, RerankerUnavailable

MODEL = False  # nothing to load: /healthz may build it to say whether it is in effect


class MaxSim:
    """Late interaction (ColBERT's MaxSim) over WordLlama's static token table: for each word token
    of the query, the best cosine with any of the memory's at most 128 most telling distinct word
    tokens, averaged with weights by the tokens' row lengths. Chosen by cross-validation over
    LoCoMo and LongMemEval in every fold (bench/RESULTS.md, "MaxSim shipped"). It reads the token
    ids the embedding worker keeps beside each vector (:meth:`score_tokens`): recall never
    tokenizes a memory, only the query. A memory whose ids are not there yet is left out."""

    name = "maxsim"
    reads_tokens = True
    top = 40  # candidates it looks at (recall's whole pool at limit 10)
    weight = 0.3  # its min-max normalised score, added to the share of the best

    def __init__(self) -> None:
        self._wide: Widened | None = None  # the table in use, its rows widened as they are read
        self._lock = threading.Lock()

    def score(self, query: str, texts: Sequence[str]) -> FloatArray:
        raise RerankerUnavailable("maxsim scores token ids, not texts")

    def score_tokens(self, embedder: TokenEmbedder, query: str, tokens: Sequence[TokenIds]) -> FloatArray:
        table = getattr(embedder, "tokens", None)
        if not isinstance(table, TokenTable):
            return embedder.maxsim(query, tokens)
        with self._lock:
            wide = self._wide
            if wide is None or wide.table is not table.table:
                wide = self._wide = Widened(table.table)
        return table_maxsim(table, query, tokens, wide.rows)


class Widened:
    """A token table's rows as float32, each widened once, the first time MaxSim reads it: widening
    the candidates' rows (float16 as shipped) was the largest part of MaxSim's time. The rows read
    so far, one after another (4,190 of WordLlama's 32,000 rows, 4 MB, for all of LoCoMo's turns;
    at most the whole table at float32, 32 MB), and where each is. Readers take no lock: a row's
    place is set only once the row is in every array a reader may hold."""

    def __init__(self, table: npt.NDArray[np.float16]) -> None:
        self.table = table
        self._at = np.full(len(table), -1, dtype=np.intp)  # where each row is in _rows, -1: not yet
        self._rows = np.empty((0, table.shape[1]), dtype=np.float32)
        self._used = 0  # rows widened so far: _rows[:_used]
        self._lock = threading.Lock()

    def rows(self, ids: npt.NDArray[np.intp]) -> npt.NDArray[np.float32]:
        """``table[ids].astype(np.float32)``."""
        at = self._at[ids]
        if (at < 0).any():
            self._widen(distinct(ids[at < 0]))
            at = self._at[ids]
        return self._rows[at]

    def _widen(self, ids: npt.NDArray[np.intp]) -> None:
        with self._lock:
            ids = ids[self._at[ids] < 0]  # another thread may have widened some since
            used = self._used
            rows = self._rows
            if used + ids.size > len(rows):  # grown by half at least: copies stay few
                rows = np.empty((max(used + ids.size, len(rows) * 3 // 2, 256), rows.shape[1]), np.float32)
                rows[:used] = self._rows[:used]
                self._rows = rows
            rows[used : used + ids.size] = self.table[ids]
            self._at[ids] = np.arange(used, used + ids.size)
            self._used = used + ids.size


def load(target: str) -> MaxSim:
    return MaxSim()
