"""MaxSim, the default reranker: late interaction over WordLlama's token table, from kept token ids."""

from __future__ import annotations

from collections.abc import Sequence

from memvault.search.embedders import TokenEmbedder, TokenIds
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

    def score(self, query: str, texts: Sequence[str]) -> FloatArray:
        raise RerankerUnavailable("maxsim scores token ids, not texts")

    def score_tokens(self, embedder: TokenEmbedder, query: str, tokens: Sequence[TokenIds]) -> FloatArray:
        return embedder.maxsim(query, tokens)


def load(target: str) -> MaxSim:
    return MaxSim()
