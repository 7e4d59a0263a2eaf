"""WordLlama, the default embedder: a static table of token vectors whose weights ship in its wheel.

Nothing is downloaded. It also keeps each text's most telling token ids, for recall's MaxSim
(memvault.search.rerankers.maxsim): a :class:`~memvault.search.embedders.base.TokenEmbedder`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from memvault.search.embedders.base import (
    TOKEN_BUDGET,
    EmbedderUnavailable,
    EmbedOptions,
    FloatMatrix,
    TokenIds,
    Traits,
    normalise_rows,
)
from memvault.search.order import distinct
from memvault.search.text import STOP_WORDS

WORDLLAMA_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
WORDLLAMA_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
WORD_CACHE = 1000  # distinct words the tokenizer keeps split (see WordLlamaEmbedder)
MAX_QUERY_CHARS = 2000  # MaxSim tokenizes at most this much of a query, on the request path
BLOCK = 1 << 18  # multiply-adds in one matrix product of MaxSim's (see _products)


class TokenTable(NamedTuple):
    """WordLlama's tokenizer and table as MaxSim reads them: the rows (float16 as shipped), each
    row's length, and the tokens MaxSim leaves out (stop words, pieces with no letter or digit)."""

    tokenizer: Any
    table: npt.NDArray[np.float16]
    norms: npt.NDArray[np.float32]
    skip: npt.NDArray[np.bool_]


class WordLlamaEmbedder:
    """WordLlama's L2 "supercat" token table (256 dimensions, MIT licence): a text's vector is the
    mean of its tokens' rows, as WordLlama's own inference computes it.

    The table and the tokenizer are read from the files the ``wordllama`` wheel ships, with the
    ``tokenizers`` and ``safetensors`` packages it depends on: ``WordLlama.load`` would look for the
    tokenizer in a folder the wheel does not have and then go online. Texts are encoded one by one
    (``encode_batch`` would start a thread pool that competes with the event loop for two cores),
    whole: a mean costs one pass over the tokens, so a long memory is not cut at MAX_EMBED_CHARS.
    """

    traits = Traits(quick=True, tokens=True)

    def __init__(self) -> None:
        try:
            import wordllama  # type: ignore[import-untyped]
            from safetensors import safe_open
            from tokenizers import Tokenizer
        except ImportError:
            raise EmbedderUnavailable(
                "the wordllama package is not installed (pip install wordllama)"
            ) from None
        root = Path(wordllama.__file__).parent
        try:
            tokenizer = Tokenizer.from_file(str(root.joinpath(*WORDLLAMA_TOKENIZER)))
            with safe_open(str(root.joinpath(*WORDLLAMA_WEIGHTS)), framework="np") as f:
                table = np.asarray(f.get_tensor("embedding.weight"))
        except Exception as exc:
            raise EmbedderUnavailable(
                f"wordllama's bundled files could not be read ({type(exc).__name__})"
            ) from None
        tokenizer.no_padding()
        tokenizer.no_truncation()
        # The tokenizer keeps every distinct word it splits, up to 10,000 of them at about 1.5 KB
        # each: a server that embeds new words kept growing by that much per word, to ~15 MB.
        # The common words fit in WORD_CACHE, and embedding was no slower (2,685 LongMemEval
        # turns: 3.0 / 2.7 s with 10,000, 2.2 / 2.7 s with 1,000). A method of tokenizers 0.20+.
        resize = getattr(tokenizer.model, "_resize_cache", None)
        if resize is not None:
            resize(WORD_CACHE)
        self._tokenizer = tokenizer
        self._table = table  # float16 as shipped: half the memory; rows are widened when read
        self._dim = int(table.shape[1])
        if table.shape[0] > 1 << 16:  # token ids are kept as uint16 (32,000 in the shipped table)
            raise EmbedderUnavailable(f"wordllama's table has {table.shape[0]} rows, more than 65,536")
        # MaxSim's view of the table (memvault.search.rerankers.maxsim): each row's length, WordLlama's own
        # measure of how much a token counts (1.6 for "the", 14-18 for "guitar"), and the tokens
        # it leaves out (stop words, pieces with no letter or digit). Rows are widened when read.
        self._norms = np.concatenate(
            [
                np.linalg.norm(table[i : i + 4096].astype(np.float32), axis=1)
                for i in range(0, table.shape[0], 4096)
            ]
        )
        self._skip = np.zeros(table.shape[0], dtype=bool)
        for piece, i in tokenizer.get_vocab().items():
            if i < table.shape[0]:
                word = piece.replace("\u2581", "").lower()
                self._skip[i] = not word or word in STOP_WORDS or not any(c.isalnum() for c in word)

    @property
    def name(self) -> str:
        return f"wordllama-l2-{self._dim}"

    @property
    def tokens(self) -> TokenTable:
        """The tokenizer and the table as :meth:`maxsim` reads them (bench/recall_bench.py's
        MaxSim variants read the same)."""
        return TokenTable(self._tokenizer, self._table, self._norms, self._skip)

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        return self._embed(texts, None)

    def embed_with_tokens(self, texts: Sequence[str]) -> tuple[FloatMatrix, list[TokenIds]]:
        """The vectors, and each text's at most TOKEN_BUDGET most telling distinct word tokens
        (longest rows first once cut; else in the order they first appear), from one tokenizing."""
        kept: list[TokenIds] = []
        return self._embed(texts, kept), kept

    def _embed(self, texts: Sequence[str], kept: list[TokenIds] | None) -> FloatMatrix:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        last = self._table.shape[0] - 1
        for row, text in enumerate(texts):
            ids = self._tokenizer.encode(text, add_special_tokens=False).ids
            at = np.clip(np.asarray(ids, dtype=np.intp), 0, last)
            if ids:
                out[row] = self._table[at].mean(axis=0, dtype=np.float32)
            if kept is not None:
                words = at[~self._skip[at]]
                _, first = np.unique(words, return_index=True)
                words = words[np.sort(first)]
                if len(words) > TOKEN_BUDGET:
                    words = words[np.argsort(-self._norms[words], kind="stable")[:TOKEN_BUDGET]]
                kept.append(words.astype(np.uint16))
        return normalise_rows(out)

    def maxsim(self, query: str, memories: Sequence[TokenIds]) -> npt.NDArray[np.float64]:
        """Late interaction (ColBERT's MaxSim) over the table (:func:`table_maxsim`). The query is
        tokenized here (at most MAX_QUERY_CHARS); the memories' tokens come from
        :meth:`embed_with_tokens`."""
        return table_maxsim(self.tokens, query, memories)


def table_maxsim(
    table: TokenTable,
    query: str,
    memories: Sequence[TokenIds],
    widen: Callable[[npt.NDArray[np.intp]], FloatMatrix] | None = None,
) -> npt.NDArray[np.float64]:
    """MaxSim over a token table: for each of the query's word tokens, the best cosine with any of
    a memory's kept tokens, averaged with the tokens' row lengths as weights; 0 for a memory
    without tokens. All the memories at once: each distinct token among them is widened and
    compared with the query once (the candidates of one recall share many), then each memory
    takes the best of its own tokens' columns. Distinct ids are sorted, not np.unique'd, whose
    overhead was most of its time on recall's few hundred ids. ``widen``: the table's rows as
    float32 (MaxSim's reranker keeps them widened; else widened here)."""
    out = np.zeros(len(memories), dtype=np.float64)
    raw = table.tokenizer.encode(query[:MAX_QUERY_CHARS], add_special_tokens=False).ids
    last = table.table.shape[0] - 1
    q = np.array(sorted({min(max(i, 0), last) for i in raw}), dtype=np.intp)
    q = q[~table.skip[q]]
    sizes = np.fromiter(map(len, memories), dtype=np.intp, count=len(memories))
    have = np.flatnonzero(sizes)
    if not q.size or not have.size:
        return out
    w = table.norms[q]
    w = w / w.sum()
    ids = np.concatenate([memories[i] for i in have.tolist()])
    among = distinct(ids)
    rows = among.astype(np.intp)
    rows_of = widen if widen is not None else lambda ids: table.table[ids].astype(np.float32)
    unit = rows_of(q) / np.maximum(table.norms[q], 1e-9)[:, None]
    cosines = _products(unit, rows_of(rows))
    cosines /= np.maximum(table.norms[rows], 1e-9)
    starts = np.zeros(len(have), dtype=np.intp)
    np.cumsum(sizes[have][:-1], out=starts[1:])
    best = np.maximum.reduceat(cosines[:, among.searchsorted(ids)], starts, axis=1)
    # Row by row, not ``w @ best``: BLAS may round one column otherwise than another, and two
    # memories with the same tokens must score the same (ties keep their order).
    out[have] = (best * w[:, None]).sum(axis=0, dtype=np.float64)
    return out


def _products(a: FloatMatrix, b: FloatMatrix) -> FloatMatrix:
    """``a @ b.T`` in blocks of ``b``'s rows, each under BLOCK multiply-adds: OpenBLAS spreads a
    larger product over threads, which on a busy machine wait for a free core."""
    out = np.empty((len(a), len(b)), dtype=np.float32)
    step = max(1, BLOCK // max(1, a.size))
    for start in range(0, len(b), step):
        np.matmul(a, b[start : start + step].T, out=out[:, start : start + step])
    return out


def load(target: str, options: EmbedOptions) -> WordLlamaEmbedder:
    """``wordllama``: the L2 "supercat" table the wheel ships."""
    return WordLlamaEmbedder()
