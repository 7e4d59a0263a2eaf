"""The embedders and rerankers a setting may name: each kind, its module and what follows its colon.

One table per seam, read by the settings (an unknown name is a configuration error at start-up) and
by the seam's package, which imports a kind's module only when that kind is loaded
(memvault.search.embedders, memvault.search.rerankers). Adding a kind is one line here and one
module in the seam's package; nothing else names it.
"""

from __future__ import annotations

from dataclasses import dataclass

from memvault.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class Choice:
    """One kind a setting offers. ``name``: as MEMVAULT_EMBEDDER or MEMVAULT_RERANKER says it,
    before any colon; ``module``: the module under the seam's package that loads it (None: nothing
    to load); ``target``: what may follow the colon, as the error message shows it ("" for
    nothing); ``required``: whether it must."""

    name: str
    module: str | None
    target: str = ""
    required: bool = False

    def usage(self) -> str:
        return f"{self.name}:{self.target}" if self.target and self.required else self.name


EMBEDDERS: tuple[Choice, ...] = (
    Choice("wordllama", "wordllama"),
    Choice("hash", "hash", "<dimensions>"),
    Choice("model2vec", "model2vec", "<name-or-path>", required=True),
    Choice("sentence-transformers", "sentence_transformers", "<name-or-path>", required=True),
    Choice("openai", "openai", "<model>"),
)

RERANKERS: tuple[Choice, ...] = (
    Choice("off", None),
    Choice("maxsim", "maxsim"),
    Choice("cross-encoder", "cross_encoder", "<model folder>", required=True),
)


def split(spec: str) -> tuple[str, str]:
    """A setting's kind (lower case) and what follows its colon (stripped)."""
    kind, _, target = spec.partition(":")
    return kind.strip().lower(), target.strip()


def kind_of(spec: str, kinds: tuple[Choice, ...], setting: str) -> Choice:
    """The kind ``spec`` names among ``kinds``; an unknown kind or a missing target is a
    configuration error naming ``setting`` and the kinds on offer."""
    name, target = split(spec)
    for kind in kinds:
        if kind.name == name:
            if kind.required and not target:
                raise InvalidArgument(f"{setting}={kind.name} needs a model: {kind.name}:{kind.target}.")
            return kind
    names = [kind.usage() for kind in kinds]
    raise InvalidArgument(f"{setting} must be {', '.join(names[:-1])} or {names[-1]}, not {spec!r}.")


def embedder_kind(spec: str) -> Choice:
    """The embedder kind of a MEMVAULT_EMBEDDER value."""
    return kind_of(spec, EMBEDDERS, "MEMVAULT_EMBEDDER")


def reranker_kind(spec: str) -> Choice:
    """The reranker kind of a MEMVAULT_RERANKER value."""
    return kind_of(spec, RERANKERS, "MEMVAULT_RERANKER")
