"""The reranker seam: what a reranker is (:class:`Reranker`), and the kind that reads token ids.

A reranker takes a second look at recall's best candidates, scoring (query, text) pairs together,
which a cross-encoder does better than comparing two separately made vectors. One that scores the
token ids a token embedder kept beside each vector (MaxSim) is a :class:`TokenReranker` and says so
with ``reads_tokens``; recall then hands it ids rather than texts. A reranker may also say how many
candidates it looks at (``top``) and the weight of its normalised score (``weight``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, cast

import numpy as np
import numpy.typing as npt

from memvault.search.embedders import TokenEmbedder, TokenIds

FloatArray = npt.NDArray[np.float64]


class Reranker(Protocol):
    @property
    def name(self) -> str: ...

    def score(self, query: str, texts: Sequence[str]) -> FloatArray:
        """One relevance score per text, higher is better (any scale)."""
        ...


class TokenReranker(Reranker, Protocol):
    """A reranker that scores the token ids a :class:`TokenEmbedder` kept per memory; its
    ``reads_tokens`` is True. Recall runs without it under an embedder that keeps none."""

    def score_tokens(self, embedder: TokenEmbedder, query: str, tokens: Sequence[TokenIds]) -> FloatArray: ...


class RerankerUnavailable(Exception):
    """A configured reranker could not be loaded or used; the reason is safe to show."""


def token_reranker(reranker: object) -> TokenReranker | None:
    """``reranker`` if it scores token ids rather than texts, else None."""
    reads = reranker is not None and bool(getattr(reranker, "reads_tokens", False))
    return cast(TokenReranker, reranker) if reads else None
