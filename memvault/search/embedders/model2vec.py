"""model2vec's static models (optional: pip install model2vec), by name or local folder."""

from __future__ import annotations

from memvault.search.embedders.base import Embedder, EmbedderUnavailable, EmbedOptions, ModelEmbedder


def load(target: str, options: EmbedOptions) -> Embedder:
    """``model2vec:<name-or-path>``: a static model, from a local folder or the hub."""
    try:
        from model2vec import StaticModel  # type: ignore[import-not-found]
    except ImportError:
        raise EmbedderUnavailable("the model2vec package is not installed (pip install model2vec)") from None
    try:
        model = StaticModel.from_pretrained(target)
    except Exception as exc:
        raise EmbedderUnavailable(f"model2vec could not load {target!r} ({type(exc).__name__})") from None
    return ModelEmbedder(f"model2vec:{target}", lambda texts: model.encode(texts), crowds=False)
