"""A sentence-transformers CrossEncoder from a local model folder (optional: sentence-transformers)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from memvault.search.rerankers.base import FloatArray, RerankerUnavailable

MODEL = True  # loading reads a model: only recall loads it, in its worker thread
MAX_RERANK_CHARS = 2000  # a cross-encoder reads at most this much of a memory


class CrossEncoder:
    def __init__(self, target: str) -> None:
        try:
            from sentence_transformers import CrossEncoder as Model  # type: ignore[import-not-found]
        except ImportError:
            raise RerankerUnavailable(
                "the sentence-transformers package is not installed (pip install sentence-transformers)"
            ) from None
        try:
            self._model = Model(target, device="cpu")
        except Exception as exc:
            raise RerankerUnavailable(f"could not load the cross-encoder ({type(exc).__name__})") from None
        self._name = f"cross-encoder:{target}"

    @property
    def name(self) -> str:
        return self._name

    def score(self, query: str, texts: Sequence[str]) -> FloatArray:
        pairs = [(query, text[:MAX_RERANK_CHARS]) for text in texts]
        try:
            raw = self._model.predict(pairs, show_progress_bar=False, convert_to_numpy=True)
        except Exception as exc:  # the model's own errors: recall must go on without it
            raise RerankerUnavailable(f"the cross-encoder failed ({type(exc).__name__})") from None
        return np.asarray(raw, dtype=np.float64).reshape(len(texts), -1)[:, 0]


def load(target: str) -> CrossEncoder:
    """``cross-encoder:<model folder>``."""
    return CrossEncoder(target)
