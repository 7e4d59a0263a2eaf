"""The embedder seam: what an embedder is, what recall may ask of it, and what all of them share.

An embedder turns texts into L2-normalised float32 rows. Beside its vectors, recall asks it a few
questions through its ``traits`` (an embedder without them gets the defaults): whether a query's
vector costs next to nothing, whether its cosines crowd together, below which cosine a match is
chance, and whether it keeps each text's token ids for MaxSim (a :class:`TokenEmbedder`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import numpy as np
import numpy.typing as npt

FloatMatrix = npt.NDArray[np.float32]
TokenIds = npt.NDArray[np.uint16]

MAX_EMBED_CHARS = 8000  # models see at most this much of a memory (title and tags first)
TOKEN_BUDGET = 128  # a memory's most telling distinct word tokens a token embedder keeps (uint16 each)


@dataclass(frozen=True, slots=True)
class Traits:
    """What recall asks of an embedder beside its vectors; the defaults suit a model of unknown make.

    ``quick``: a query's vector costs next to nothing (a hash, a table lookup), so recall may run on
    the event loop. ``crowds``: a transformer whose cosines may crowd together (E5 puts any two
    texts at 0.7-0.9); recall measures crowded ones from the vault's lower quartile
    (memvault.search.ranking.fuse). ``noise``: cosines below this are chance collisions and count
    nothing. ``tokens``: it is a :class:`TokenEmbedder`, keeping each text's token ids for MaxSim."""

    quick: bool = False
    crowds: bool = False
    noise: float = 0.0
    tokens: bool = False


class Embedder(Protocol):
    """Turns texts into vectors. ``name`` identifies the model: vectors of another name are redone.
    An embedder may also have ``traits`` (:class:`Traits`)."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        """One L2-normalised float32 row per text (all-zero for a text with nothing to embed)."""
        ...


class TokenEmbedder(Embedder, Protocol):
    """An embedder that also keeps, per text, its most telling token ids (at most TOKEN_BUDGET) for
    MaxSim: they come from the tokenizing the vector needs anyway, so recall never tokenizes a
    memory. Its ``traits.tokens`` is True."""

    def embed_with_tokens(self, texts: Sequence[str]) -> tuple[FloatMatrix, list[TokenIds]]: ...

    def maxsim(self, query: str, memories: Sequence[TokenIds]) -> npt.NDArray[np.float64]: ...


@dataclass(frozen=True, slots=True)
class EmbedOptions:
    """What a setting beside MEMVAULT_EMBEDDER adds: an endpoint, its key and a model name
    (MEMVAULT_EMBED_URL, _KEY, _MODEL; only an embedder that calls a service reads them)."""

    url: str | None = None
    key: str | None = None
    model: str | None = None


class EmbedderUnavailable(Exception):
    """A configured model could not be loaded or used; the reason is safe to show."""


DEFAULT_TRAITS = Traits()


def traits(embedder: object) -> Traits:
    """What ``embedder`` says of itself; the defaults if it says nothing."""
    found = getattr(embedder, "traits", None)
    return found if isinstance(found, Traits) else DEFAULT_TRAITS


def token_embedder(embedder: object) -> TokenEmbedder | None:
    """``embedder`` if it keeps token ids for MaxSim, else None."""
    return cast(TokenEmbedder, embedder) if embedder is not None and traits(embedder).tokens else None


def normalise_rows(matrix: npt.ArrayLike) -> FloatMatrix:
    rows = np.asarray(matrix, dtype=np.float32)
    if rows.ndim != 2:
        raise EmbedderUnavailable(f"the model returned an array of shape {rows.shape}, not one row per text")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: FloatMatrix = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return out


class ModelEmbedder:
    """Shared shape of the model-backed embedders: a name, a dimension found by a probe, embed().
    ``crowds``: the model is a transformer, whose cosines may crowd together (see :class:`Traits`)."""

    def __init__(self, name: str, encode: Callable[[list[str]], Any], *, crowds: bool = True) -> None:
        self._name = name
        self._encode = encode
        self.traits = Traits(crowds=crowds)
        probe = self._call(["memvault"])
        self._dim = int(probe.shape[1])

    @property
    def name(self) -> str:
        return self._name

    @property
    def dim(self) -> int:
        return self._dim

    def _call(self, texts: list[str]) -> FloatMatrix:
        rows = normalise_rows(self._encode(texts))
        if rows.shape[0] != len(texts):
            raise EmbedderUnavailable(f"the model returned {rows.shape[0]} vectors for {len(texts)} texts")
        return rows

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        rows = self._call([t[:MAX_EMBED_CHARS] or " " for t in texts])
        if rows.shape[1] != self._dim:
            raise EmbedderUnavailable(f"the model changed dimension from {self._dim} to {rows.shape[1]}")
        return rows
