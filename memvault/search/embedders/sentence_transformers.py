"""sentence-transformers models (optional: pip install sentence-transformers), by name or local folder."""

from __future__ import annotations

from memvault.search.embedders.base import Embedder, EmbedderUnavailable, EmbedOptions, ModelEmbedder


def load(target: str, options: EmbedOptions) -> Embedder:
    """``sentence-transformers:<name-or-path>``: a transformer, from a local folder or the hub."""
    try:
        from sentence_transformers import SentenceTransformer  # type: ignore[import-not-found]
    except ImportError:
        raise EmbedderUnavailable(
            "the sentence-transformers package is not installed (pip install sentence-transformers)"
        ) from None
    try:
        model = SentenceTransformer(target, device="cpu")
    except Exception as exc:
        raise EmbedderUnavailable(
            f"sentence-transformers could not load {target!r} ({type(exc).__name__})"
        ) from None
    return ModelEmbedder(
        f"sentence-transformers:{target}",
        lambda texts: model.encode(texts, convert_to_numpy=True, show_progress_bar=False),
    )
