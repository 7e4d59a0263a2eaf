"""Embedders: the seam (:class:`Embedder`), the built-in hash embedder and the models.

An :class:`Embedder` turns texts into L2-normalised float32 rows. ``wordllama`` (the default) is a
static table of token vectors whose weights ship in the ``wordllama`` wheel: nothing is downloaded.
``hash`` is built in and offline; ``model2vec:<name-or-path>``, ``sentence-transformers:<name-or-path>``
and ``openai`` are optional. Models are loaded lazily (by the embedding worker, never on the event
loop), and one that cannot load falls back to ``hash`` with one log line (shown in ``/healthz``).
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import numpy as np
import numpy.typing as npt

from memvault.config import check_spec
from memvault.search.text import STOP_WORDS, terms_of

FloatMatrix = npt.NDArray[np.float32]

DEFAULT_OPENAI_URL = "https://api.openai.com/v1"
DEFAULT_OPENAI_MODEL = "text-embedding-3-small"
HASH_DIM = 512
MAX_EMBED_CHARS = 8000  # models see at most this much of a memory (title and tags first)


class Embedder(Protocol):
    """Turns texts into vectors. ``name`` identifies the model: vectors of another name are redone."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        """One L2-normalised float32 row per text (all-zero for a text with nothing to embed)."""
        ...


class EmbedderUnavailable(Exception):
    """A configured model could not be loaded or used; the reason is safe to show."""


def normalise_rows(matrix: npt.ArrayLike) -> FloatMatrix:
    rows = np.asarray(matrix, dtype=np.float32)
    if rows.ndim != 2:
        raise EmbedderUnavailable(f"the model returned an array of shape {rows.shape}, not one row per text")
    norms = np.linalg.norm(rows, axis=1, keepdims=True)
    out: FloatMatrix = np.divide(rows, norms, out=np.zeros_like(rows), where=norms > 0)
    return out


# ---------------------------------------------------------------------------- hash embedder

_WORD_CACHE_MAX = 200_000
# The cache is bounded by its arrays' bytes too: a word's features grow with its length (three
# grams per letter), so a bound on entries alone let long words hold hundreds of megabytes.
WORD_CACHE_BYTES = 32 * 1024 * 1024


class HashEmbedder:
    """Feature hashing of words and their character 3-5-grams into ``dim`` signed buckets.

    Deterministic across processes and machines (blake2b, not Python's salted ``hash``). Words
    are the index's terms (lightly stemmed; CJK as bigrams), so vectors and lexical search agree
    on what a word is; character n-grams make "deploy"/"deployment"/"redeployed" overlap.
    Repeated words count sublinearly; common function words are left out.
    """

    def __init__(self, dim: int = HASH_DIM, *, cache_bytes: int = WORD_CACHE_BYTES) -> None:
        if dim < 16:
            raise ValueError("dim must be at least 16")
        self._dim = dim
        self._cache: dict[str, tuple[npt.NDArray[np.int64], FloatMatrix]] = {}
        self._cache_bytes = 0
        self._max_cache_bytes = cache_bytes
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"hash-{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _bucket(self, feature: str) -> tuple[int, float]:
        digest = int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")
        return digest % self._dim, (1.0 if digest >> 63 else -1.0)

    def _features(self, word: str) -> tuple[npt.NDArray[np.int64], FloatMatrix]:
        found = self._cache.get(word)
        if found is not None:
            return found
        bucket, sign = self._bucket("w:" + word)
        buckets = [bucket]
        weights = [sign]
        if len(word) > 2:
            marked = f"<{word}>"
            grams = [marked[i : i + n] for n in (3, 4, 5) for i in range(len(marked) - n + 1)]
            share = 1.0 / math.sqrt(len(grams))
            for gram in grams:
                bucket, sign = self._bucket("g:" + gram)
                buckets.append(bucket)
                weights.append(sign * share)
        found = (np.asarray(buckets, dtype=np.int64), np.asarray(weights, dtype=np.float32))
        size = found[0].nbytes + found[1].nbytes + len(word)
        with self._lock:
            if len(self._cache) >= _WORD_CACHE_MAX or self._cache_bytes + size > self._max_cache_bytes:
                self._cache.clear()
                self._cache_bytes = 0
            if size <= self._max_cache_bytes and word not in self._cache:
                self._cache[word] = found
                self._cache_bytes += size
        return found

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for row, text in enumerate(texts):
            terms = terms_of(text)
            kept = [t for t in terms if t not in STOP_WORDS] or terms
            if not kept:
                continue
            index_parts = []
            weight_parts = []
            for word, count in Counter(kept).items():
                buckets, weights = self._features(word)
                index_parts.append(buckets)
                weight_parts.append(weights * np.float32(1.0 + math.log(count)))
            out[row] = np.bincount(
                np.concatenate(index_parts), weights=np.concatenate(weight_parts), minlength=self._dim
            )
        return normalise_rows(out)


# ---------------------------------------------------------------------------- WordLlama

WORDLLAMA_TOKENIZER = ("tokenizers", "l2_supercat_tokenizer_config.json")
WORDLLAMA_WEIGHTS = ("weights", "l2_supercat_256.safetensors")
WORD_CACHE = 1000  # distinct words the tokenizer keeps split (see WordLlamaEmbedder)
TOKEN_BUDGET = 128  # a memory's most telling distinct word tokens kept for MaxSim (uint16 each)
MAX_QUERY_CHARS = 2000  # MaxSim tokenizes at most this much of a query, on the request path
TokenIds = npt.NDArray[np.uint16]


class TokenTable(NamedTuple):
    """WordLlama's tokenizer and table as MaxSim reads them: the rows (float16 as shipped), each
    row's length, and the tokens MaxSim leaves out (stop words, pieces with no letter or digit)."""

    tokenizer: Any
    table: npt.NDArray[np.float16]
    norms: npt.NDArray[np.float32]
    skip: npt.NDArray[np.bool_]


class TokenEmbedder(Protocol):
    """An embedder that also keeps, per text, its most telling token ids (for MaxSim): they come
    from the tokenizing the vector needs anyway, so recall never tokenizes a memory."""

    @property
    def name(self) -> str: ...

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> FloatMatrix: ...

    def embed_with_tokens(self, texts: Sequence[str]) -> tuple[FloatMatrix, list[TokenIds]]: ...

    def maxsim(self, query: str, memories: Sequence[TokenIds]) -> npt.NDArray[np.float64]: ...


def crowds(embedder: object) -> bool:
    """Whether ``embedder`` is a transformer (sentence-transformers, openai), whose cosines may
    crowd together: E5 puts any two texts at 0.7-0.9. Recall checks each query's cosines and
    measures crowded ones from the vault's lower quartile (memvault.search.ranking.fuse). A static
    table's (WordLlama, model2vec, hash) are left as they are: they lost by it even where they
    crowd (bench/RESULTS.md)."""
    return bool(getattr(embedder, "crowds", False))


def token_embedder(embedder: object) -> TokenEmbedder | None:
    """``embedder`` if it keeps token ids for MaxSim (WordLlama), else None."""
    return embedder if isinstance(embedder, WordLlamaEmbedder) else None


class WordLlamaEmbedder:
    """WordLlama's L2 "supercat" token table (256 dimensions, MIT licence): a text's vector is the
    mean of its tokens' rows, as WordLlama's own inference computes it.

    The table and the tokenizer are read from the files the ``wordllama`` wheel ships, with the
    ``tokenizers`` and ``safetensors`` packages it depends on: ``WordLlama.load`` would look for the
    tokenizer in a folder the wheel does not have and then go online. Texts are encoded one by one
    (``encode_batch`` would start a thread pool that competes with the event loop for two cores),
    whole: a mean costs one pass over the tokens, so a long memory is not cut at MAX_EMBED_CHARS.
    """

    def __init__(self) -> None:
        try:
            import wordllama  # type: ignore[import-untyped]
            from safetensors import safe_open
            from tokenizers import Tokenizer
        except ImportError:
            raise EmbedderUnavailable(
                "the wordllama package is not installed (pip install wordllama)"
            ) from None
        root = Path(wordllama.__file__).parent
        try:
            tokenizer = Tokenizer.from_file(str(root.joinpath(*WORDLLAMA_TOKENIZER)))
            with safe_open(str(root.joinpath(*WORDLLAMA_WEIGHTS)), framework="np") as f:
                table = np.asarray(f.get_tensor("embedding.weight"))
        except Exception as exc:
            raise EmbedderUnavailable(
                f"wordllama's bundled files could not be read ({type(exc).__name__})"
            ) from None
        tokenizer.no_padding()
        tokenizer.no_truncation()
        # The tokenizer keeps every distinct word it splits, up to 10,000 of them at about 1.5 KB
        # each: a server that embeds new words kept growing by that much per word, to ~15 MB.
        # The common words fit in WORD_CACHE, and embedding was no slower (2,685 LongMemEval
        # turns: 3.0 / 2.7 s with 10,000, 2.2 / 2.7 s with 1,000). A method of tokenizers 0.20+.
        resize = getattr(tokenizer.model, "_resize_cache", None)
        if resize is not None:
            resize(WORD_CACHE)
        self._tokenizer = tokenizer
        self._table = table  # float16 as shipped: half the memory; rows are widened when read
        self._dim = int(table.shape[1])
        if table.shape[0] > 1 << 16:  # token ids are kept as uint16 (32,000 in the shipped table)
            raise EmbedderUnavailable(f"wordllama's table has {table.shape[0]} rows, more than 65,536")
        # MaxSim's view of the table (memvault.search.rerankers): each row's length, WordLlama's own
        # measure of how much a token counts (1.6 for "the", 14-18 for "guitar"), and the tokens
        # it leaves out (stop words, pieces with no letter or digit). Rows are widened when read.
        self._norms = np.concatenate(
            [
                np.linalg.norm(table[i : i + 4096].astype(np.float32), axis=1)
                for i in range(0, table.shape[0], 4096)
            ]
        )
        self._skip = np.zeros(table.shape[0], dtype=bool)
        for piece, i in tokenizer.get_vocab().items():
            if i < table.shape[0]:
                word = piece.replace("\u2581", "").lower()
                self._skip[i] = not word or word in STOP_WORDS or not any(c.isalnum() for c in word)

    @property
    def name(self) -> str:
        return f"wordllama-l2-{self._dim}"

    @property
    def tokens(self) -> TokenTable:
        """The tokenizer and the table as :meth:`maxsim` reads them (bench/recall_bench.py's
        MaxSim variants read the same)."""
        return TokenTable(self._tokenizer, self._table, self._norms, self._skip)

    @property
    def dim(self) -> int:
        return self._dim

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        return self._embed(texts, None)

    def embed_with_tokens(self, texts: Sequence[str]) -> tuple[FloatMatrix, list[TokenIds]]:
        """The vectors, and each text's at most TOKEN_BUDGET most telling distinct word tokens
        (longest rows first once cut; else in the order they first appear), from one tokenizing."""
        kept: list[TokenIds] = []
        return self._embed(texts, kept), kept

    def _embed(self, texts: Sequence[str], kept: list[TokenIds] | None) -> FloatMatrix:
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        last = self._table.shape[0] - 1
        for row, text in enumerate(texts):
            ids = self._tokenizer.encode(text, add_special_tokens=False).ids
            at = np.clip(np.asarray(ids, dtype=np.intp), 0, last)
            if ids:
                out[row] = self._table[at].mean(axis=0, dtype=np.float32)
            if kept is not None:
                words = at[~self._skip[at]]
                _, first = np.unique(words, return_index=True)
                words = words[np.sort(first)]
                if len(words) > TOKEN_BUDGET:
                    words = words[np.argsort(-self._norms[words], kind="stable")[:TOKEN_BUDGET]]
                kept.append(words.astype(np.uint16))
        return normalise_rows(out)

    def maxsim(self, query: str, memories: Sequence[TokenIds]) -> npt.NDArray[np.float64]:
        """Late interaction (ColBERT's MaxSim) over the table: for each of the query's word tokens,
        the best cosine with any of a memory's kept tokens, averaged with the tokens' row lengths
        as weights; 0 for a memory without tokens. The query is tokenized here (at most
        MAX_QUERY_CHARS); the memories' tokens come from :meth:`embed_with_tokens`."""
        out = np.zeros(len(memories), dtype=np.float64)
        raw = self._tokenizer.encode(query[:MAX_QUERY_CHARS], add_special_tokens=False).ids
        q = np.unique(np.clip(np.asarray(raw, dtype=np.intp), 0, self._table.shape[0] - 1))
        q = q[~self._skip[q]]
        if not q.size:
            return out
        w = self._norms[q]
        w = w / w.sum()
        qv = self._unit(q)
        for i, d in enumerate(memories):
            if len(d):
                out[i] = float(w @ (qv @ self._unit(d.astype(np.intp)).T).max(axis=1))
        return out

    def _unit(self, ids: npt.NDArray[np.intp]) -> FloatMatrix:
        rows: FloatMatrix = self._table[ids].astype(np.float32) / np.maximum(self._norms[ids], 1e-9)[:, None]
        return rows


# ---------------------------------------------------------------------------- model embedders


class _ModelEmbedder:
    """Shared shape of the model-backed embedders: a name, a dimension found by a probe, embed().
    ``crowds``: the model is a transformer, whose cosines may crowd together (see :func:`crowds`)."""

    def __init__(self, name: str, encode: Callable[[list[str]], Any], *, crowds: bool = True) -> None:
        self._name = name
        self._encode = encode
        self.crowds = crowds
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


def _model2vec(target: str) -> Embedder:
    try:
        from model2vec import StaticModel  # type: ignore[import-not-found]
    except ImportError:
        raise EmbedderUnavailable("the model2vec package is not installed (pip install model2vec)") from None
    try:
        model = StaticModel.from_pretrained(target)
    except Exception as exc:
        raise EmbedderUnavailable(f"model2vec could not load {target!r} ({type(exc).__name__})") from None
    return _ModelEmbedder(f"model2vec:{target}", lambda texts: model.encode(texts), crowds=False)


def _sentence_transformers(target: str) -> Embedder:
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
    return _ModelEmbedder(
        f"sentence-transformers:{target}",
        lambda texts: model.encode(texts, convert_to_numpy=True, show_progress_bar=False),
    )


def _openai(url: str | None, key: str | None, model: str | None) -> Embedder:
    import httpx2  # ships with mcp; imported here so the hash embedder needs nothing

    endpoint = (url or DEFAULT_OPENAI_URL).rstrip("/") + "/embeddings"
    model_name = model or DEFAULT_OPENAI_MODEL
    headers = {"Authorization": f"Bearer {key}"} if key else {}
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

    return _ModelEmbedder(f"openai:{model_name}", encode)


def load_embedder(
    spec: str, *, url: str | None = None, key: str | None = None, model: str | None = None
) -> Embedder:
    """Load the embedder ``spec`` names; raises :class:`EmbedderUnavailable` if it cannot be used."""
    kind = check_spec(spec)
    target = spec.partition(":")[2].strip()
    if kind == "hash":
        return HashEmbedder(int(target) if target.isdigit() else HASH_DIM)
    if kind == "wordllama":
        return WordLlamaEmbedder()
    if kind == "model2vec":
        return _model2vec(target)
    if kind == "sentence-transformers":
        return _sentence_transformers(target)
    return _openai(url, key, model or target or None)
