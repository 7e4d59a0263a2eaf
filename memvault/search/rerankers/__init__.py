"""Rerankers, found by name: MEMVAULT_RERANKER's kind (memvault.kinds.RERANKERS) names a module here.

``off`` adds nothing; ``maxsim`` (the default, :mod:`~memvault.search.rerankers.maxsim`) is late
interaction over WordLlama's token table, from token ids the embedding worker kept per memory (it
does nothing with another embedder); ``cross-encoder:<path>`` loads a sentence-transformers
CrossEncoder from a local model folder the first time recall needs it (in recall's worker thread,
never on the event loop). Each module holds one implementation, a ``load(target)`` that builds it
and ``MODEL``, whether that reads a model. A reranker that cannot load leaves recall as it is, with
one log line; :attr:`Reranking.fallback` says why, and :meth:`Reranking.status` says which reranker
is in effect (for /healthz). What a reranker is: :mod:`memvault.search.rerankers.base`.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import PurePath
from typing import Protocol

from memvault.kinds import Choice, reranker_kind, split
from memvault.search.rerankers.base import (
    Reranker,
    RerankerUnavailable,
    TokenReranker,
    token_reranker,
)

__all__ = [
    "Reranker",
    "RerankerStatus",
    "RerankerUnavailable",
    "Reranking",
    "TokenReranker",
    "load_reranker",
    "shown",
    "token_reranker",
]

log = logging.getLogger(__name__)


class _RerankerModule(Protocol):
    """What a reranker's module offers the registry."""

    MODEL: bool

    def load(self, target: str) -> Reranker: ...


def _module(kind: Choice) -> _RerankerModule:
    module: _RerankerModule = importlib.import_module(f"{__name__}.{kind.module}")
    return module


def load_reranker(spec: str) -> Reranker | None:
    """The reranker ``spec`` names (None for off); raises :class:`RerankerUnavailable` if it cannot load."""
    kind = reranker_kind(spec)
    return None if kind.module is None else _module(kind).load(split(spec)[1])


@dataclass(frozen=True, slots=True)
class RerankerStatus:
    name: str  # the reranker in effect: maxsim, off or cross-encoder:<model>
    fallback: str | None  # why the requested reranker is not the one in effect


def shown(name: str) -> str:
    """A reranker's name fit for /healthz: one named by a path shows its folder's name."""
    kind, sep, target = name.partition(":")
    target = target.strip()
    if not sep:
        return name
    if os.path.isabs(os.path.expanduser(target)) or target.startswith("."):
        target = PurePath(target).name or "model"
    return f"{kind.strip()}:{target}"


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
        if not loaded:
            kind = reranker_kind(self.spec)
            if kind.module is None:
                return RerankerStatus("off", None)
            if _module(kind).MODEL:  # recall loads it when it first needs it, never /healthz
                return RerankerStatus(f"{shown(self.spec)} (not loaded yet)", None)
            reranker = self.get()  # nothing to load (MaxSim)
            if reranker is None:
                return self.status(tokens)
        elif reranker is None:
            return RerankerStatus("off", None)
        if token_reranker(reranker) is not None:
            # It reads a token embedder's ids: with another embedder recall runs without it.
            if tokens is None:
                return RerankerStatus(f"{shown(reranker.name)} (loading)", None)
            return RerankerStatus(shown(reranker.name) if tokens else "off", None)
        return RerankerStatus(shown(reranker.name), None)
