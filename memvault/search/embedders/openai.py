"""An OpenAI-compatible embeddings endpoint (MEMVAULT_EMBED_URL, _KEY, _MODEL)."""

from __future__ import annotations

from memvault.search.embedders.base import Embedder, EmbedderUnavailable, EmbedOptions, ModelEmbedder

DEFAULT_OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"


def load(target: str, options: EmbedOptions) -> Embedder:
    """``openai`` or ``openai:<model>``: MEMVAULT_EMBED_MODEL, then the target, then the default."""
    import httpx2  # ships with mcp; imported here so the other embedders need nothing of it

    endpoint = (options.url or DEFAULT_OPENAI_URL).rstrip("/") + "/embeddings"
    model_name = options.model or target or DEFAULT_OPENAI_MODEL
    headers = {"Authorization": f"Bearer {options.key}"} if options.key else {}
    client = httpx2.Client(timeout=60.0)

    def encode(texts: list[str]) -> list[list[float]]:
        try:
            response = client.post(endpoint, json={"model": model_name, "input": texts}, headers=headers)
        except httpx2.HTTPError as exc:
            raise EmbedderUnavailable(
                f"the embeddings endpoint did not answer ({type(exc).__name__})"
            ) from None
        if response.status_code != 200:
            raise EmbedderUnavailable(f"the embeddings endpoint answered HTTP {response.status_code}")
        try:
            data = sorted(response.json()["data"], key=lambda item: item["index"])
            return [item["embedding"] for item in data]
        except (ValueError, KeyError, TypeError):
            raise EmbedderUnavailable(
                "the embeddings endpoint's answer is not in the OpenAI format"
            ) from None

    return ModelEmbedder(f"openai:{model_name}", encode)
