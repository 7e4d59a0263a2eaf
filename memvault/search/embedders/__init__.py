"""Embedders, found by name: MEMVAULT_EMBEDDER's kind (memvault.kinds.EMBEDDERS) names a module here.

Each module holds one implementation and a ``load(target, options)`` that builds it, raising
:class:`EmbedderUnavailable` when it cannot (a package not installed, a model not found, an
endpoint that does not answer); the embedding worker then falls back to ``hash`` with one log line
(shown in ``/healthz``). ``wordllama`` (the default) is a static table whose weights ship in its
wheel: nothing is downloaded. ``hash`` is built in and offline; ``model2vec:<name-or-path>``,
``sentence-transformers:<name-or-path>`` and ``openai`` are optional. A module is imported only
when its kind is loaded, by the embedding worker, never on the event loop. What every embedder
is and what recall may ask of it: :mod:`memvault.search.embedders.base`.
"""

from __future__ import annotations

import importlib
from typing import Protocol

from memvault.kinds import embedder_kind, split
from memvault.search.embedders.base import (
    TOKEN_BUDGET,
    Embedder,
    EmbedderUnavailable,
    EmbedOptions,
    FloatMatrix,
    TokenEmbedder,
    TokenIds,
    Traits,
    normalise_rows,
    token_embedder,
    traits,
)

__all__ = [
    "TOKEN_BUDGET",
    "EmbedOptions",
    "Embedder",
    "EmbedderUnavailable",
    "FloatMatrix",
    "TokenEmbedder",
    "TokenIds",
    "Traits",
    "load_embedder",
    "normalise_rows",
    "token_embedder",
    "traits",
]


class _EmbedderModule(Protocol):
    """What an embedder's module offers the registry."""

    def load(self, target: str, options: EmbedOptions) -> Embedder: ...


def load_embedder(
    spec: str, *, url: str | None = None, key: str | None = None, model: str | None = None
) -> Embedder:
    """Load the embedder ``spec`` names; raises :class:`EmbedderUnavailable` if it cannot be used
    (and InvalidArgument, as the settings do, if no embedder has that name)."""
    kind = embedder_kind(spec)
    assert kind.module is not None  # every embedder kind has its module
    module: _EmbedderModule = importlib.import_module(f"{__name__}.{kind.module}")
    return module.load(split(spec)[1], EmbedOptions(url, key, model))
