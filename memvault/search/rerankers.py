"""Rerankers: an optional second look at recall's best candidates, behind a seam like the embedders'.

A :class:`Reranker` scores (query, text) pairs together, which a cross-encoder does better than
comparing two separately made vectors. ``MEMVAULT_RERANKER=off`` adds nothing; ``maxsim`` (the
default, :class:`MaxSim`) is late interaction over WordLlama's token table, from token ids the
embedding worker kept per memory (it does nothing with another embedder); ``cross-encoder:<path>`` loads
a sentence-transformers CrossEncoder from a local model folder the first time recall needs it
(in recall's worker thread, never on the event loop). A reranker that cannot load leaves recall
as it is, with one log line; :attr:`Reranking.fallback` says why, and :meth:`Reranking.status`
says which reranker is in effect (for /healthz).
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol

import numpy as np
import numpy.typing as npt

from memvault.config import check_reranker
from memvault.search.embedders import TokenEmbedder, TokenIds

log = logging.getLogger(__name__)

MAX_RERANK_CHARS = 2000  # a cross-encoder reads at most this much of a memory

FloatArray = npt.NDArray[np.float64]


class Reranker(Protocol):
    @property
    def name(self) -> str: ...

    def score(self, query: str, texts: Sequence[str]) -> FloatArray:
        """One relevance score per text, higher is better (any scale)."""
        ...


class RerankerUnavailable(Exception):
    """A configured reranker could not be loaded or used; the reason is safe to show."""


@dataclass(frozen=True, slots=True)
class RerankerStatus:
    name: str  # the reranker in effect: maxsim, off or cross-encoder:<model>
    fallback: str | None  # why the requested reranker is not the one in effect


def shown(name: str) -> str:
    """A reranker's name fit for /healthz: a cross-encoder named by a path shows its folder's name."""
    kind, sep, target = name.partition(":")
    target = target.strip()
    if not sep or kind.strip().lower() != "cross-encoder":
        return name
    if os.path.isabs(os.path.expanduser(target)) or target.startswith("."):
        target = PurePath(target).name or "model"
    return f"cross-encoder:{target}"


class MaxSim:
    """Late interaction (ColBERT's MaxSim) over WordLlama's static token table: for each word token
    of the query, the best cosine with any of the memory's at most 128 most telling distinct word
    tokens, averaged with weights by the tokens' row lengths. Chosen by cross-validation over
    LoCoMo and LongMemEval in every fold (bench/RESULTS.md, "MaxSim shipped"). It reads the token
    ids the embedding worker keeps beside each vector (:meth:`score_tokens`): recall never
    tokenizes a memory, only the query. A memory whose ids are not there yet is left out."""

    name = "maxsim"
    top = 40  # candidates it looks at (recall's whole pool at limit 10)
    weight = 0.3  # its min-max normalised score, added to the share of the best

    def score(self, query: str, texts: Sequence[str]) -> FloatArray:
        raise RerankerUnavailable("maxsim scores token ids, not texts")

    def score_tokens(self, embedder: TokenEmbedder, query: str, tokens: Sequence[TokenIds]) -> FloatArray:
        return embedder.maxsim(query, tokens)


class _CrossEncoder:
    def __init__(self, target: str) -> None:
        try:
            from sentence_transformers import CrossEncoder  # type: ignore[import-not-found]
        except ImportError:
            raise RerankerUnavailable(
                "the sentence-transformers package is not installed (pip install sentence-transformers)"
            ) from None
        try:
            self._model = CrossEncoder(target, device="cpu")
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


def load_reranker(spec: str) -> Reranker | None:
    """The reranker ``spec`` names (None for off); raises :class:`RerankerUnavailable` if it cannot load."""
    kind = check_reranker(spec)
    if kind == "off":
        return None
    if kind == "maxsim":
        return MaxSim()
    return _CrossEncoder(spec.partition(":")[2].strip())


class Reranking:
    """The configured reranker, loaded once on first use; a failure is logged once and remembered."""

    def __init__(self, spec: str = "off", loader: Callable[[], Reranker | None] | None = None) -> None:
        self.spec = spec
        self._loader = loader or (lambda: load_reranker(spec))
        self._lock = threading.Lock()
        self._loaded = False
        self._reranker: Reranker | None = None
        self._dropped = False  # it loaded, then failed
        self.fallback: str | None = None

    def get(self) -> Reranker | None:
        if not self._loaded:
            with self._lock:
                if not self._loaded:
                    try:
                        self._reranker = self._loader()
                    except RerankerUnavailable as exc:
                        self.fallback = str(exc)
                        log.warning("reranker %s unavailable, recall goes on without it: %s", self.spec, exc)
                    self._loaded = True
        return self._reranker

    def failed(self, exc: RerankerUnavailable) -> None:
        """A loaded reranker stopped working: recall goes on without it (one log line)."""
        with self._lock:
            self._reranker = None
            self._dropped = True
            self.fallback = str(exc)
        log.warning("reranker %s failed, recall goes on without it: %s", self.spec, exc)

    def status(self, tokens: bool | None) -> RerankerStatus:
        """The reranker in effect; ``tokens``: whether the embedder in use keeps token ids for
        MaxSim (None while it loads). It never loads the reranker."""
        reranker, loaded = self._reranker, self._loaded
        if self.fallback is not None and reranker is None:
            why = "stopped working" if self._dropped else "could not load"
            return RerankerStatus("off", f"{shown(self.spec)} {why}: {self.fallback}")
        if not loaded:  # MaxSim has nothing to load; a cross-encoder loads when recall first needs it
            kind = check_reranker(self.spec)
            if kind == "off":
                return RerankerStatus("off", None)
            if kind == "cross-encoder":
                return RerankerStatus(f"{shown(self.spec)} (not loaded yet)", None)
        elif reranker is None:
            return RerankerStatus("off", None)
        if reranker is None or isinstance(reranker, MaxSim):
            # MaxSim reads WordLlama's token ids: with another embedder recall runs without it.
            if tokens is None:
                return RerankerStatus("maxsim (loading)", None)
            return RerankerStatus("maxsim" if tokens else "off", None)
        return RerankerStatus(shown(reranker.name), None)
