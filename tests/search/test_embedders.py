"""embedders: each kind found by name, what it makes of texts, and what it says of itself."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from collections.abc import Sequence

import httpx2
import numpy as np
import pytest

from memvault import heap
from memvault.config import Settings
from memvault.errors import InvalidArgument
from memvault.kinds import EMBEDDERS, embedder_kind
from memvault.search.embedders import (
    EmbedderUnavailable,
    Traits,
    load_embedder,
    normalise_rows,
    token_embedder,
    traits,
)
from memvault.search.embedders.hash import HashEmbedder
from memvault.search.embedders.wordllama import WordLlamaEmbedder
from memvault.search.embeddings import Embeddings


def test_hash_embedder_rows_are_unit_length_with_its_dimension():
    embedder = HashEmbedder()
    rows = embedder.embed(["deploy the postgres database", "Katzenfutter", "工作安排 下周", ""])
    assert rows.dtype == np.float32
    assert rows.shape == (4, embedder.dim) == (4, 512)
    assert np.allclose(np.linalg.norm(rows[:3], axis=1), 1.0, atol=1e-5)
    assert not rows[3].any()  # nothing to embed: a zero row, never NaN
    assert embedder.name == "hash-512"
    assert HashEmbedder(64).embed(["x y z"]).shape == (1, 64)


def test_wordllama_embeds_offline_from_the_files_its_package_ships():
    embedder = load_embedder("wordllama")
    rows = embedder.embed(
        ["I bought a Fender Stratocaster", "musical instruments", "the cat eats salmon", ""]
    )
    assert rows.dtype == np.float32 and rows.shape == (4, embedder.dim)
    assert np.allclose(np.linalg.norm(rows[:3], axis=1), 1.0, atol=1e-5)
    assert not rows[3].any()
    assert rows[0] @ rows[1] > rows[2] @ rows[1]  # meaning, not shared words
    assert embedder.name.startswith("wordllama")


def test_maxsim_reads_past_the_function_words_search_leaves_out():
    # One list of function words for BM25 and MaxSim: "she" is no evidence of a match.
    embedder = load_embedder("wordllama")
    _, kept = embedder.embed_with_tokens(["Melanie painted a sunset over the lake", "she she she"])
    assert embedder.maxsim("what did she paint", kept) == pytest.approx(embedder.maxsim("paint", kept))
    assert embedder.maxsim("could she", kept).tolist() == [0.0, 0.0]


def test_maxsim_weighs_each_query_words_best_match_in_each_memory():
    # Forty candidates at once, as recall asks: some empty, some sharing tokens, some alike.
    embedder = load_embedder("wordllama")
    table = embedder.tokens
    rng = np.random.default_rng(7)
    usable = np.flatnonzero(~table.skip)
    kept = [rng.choice(usable, size=n, replace=False).astype(np.uint16) for n in rng.integers(0, 129, 36)]
    guitar = np.array(table.tokenizer.encode("guitar", add_special_tokens=False).ids, dtype=np.uint16)
    kept += [np.zeros(0, np.uint16), kept[1].copy(), np.concatenate([kept[2][:5], guitar]), guitar]
    query = "Which guitar did Melanie buy for the concert in Berlin last summer?"
    ids = np.asarray(table.tokenizer.encode(query, add_special_tokens=False).ids)
    q = np.unique(ids)
    q = q[~table.skip[q]]

    def unit(rows: np.ndarray) -> np.ndarray:
        return table.table[rows].astype(np.float64) / table.norms[rows][:, None]

    w = table.norms[q] / table.norms[q].sum()
    plain = [float(w @ (unit(q) @ unit(d.astype(int)).T).max(axis=1)) if len(d) else 0.0 for d in kept]
    scores = embedder.maxsim(query, kept)
    assert scores == pytest.approx(plain, rel=1e-5)
    assert scores[-4] == 0.0 and scores[-3] == scores[1]


def test_hash_embedder_puts_related_words_closer_than_unrelated_ones():
    rows = HashEmbedder().embed(
        ["we deployed postgres", "postgres deployment checklist", "the cat eats salmon"]
    )
    assert rows[0] @ rows[1] > 0.3
    assert abs(rows[0] @ rows[2]) < 0.15


@pytest.mark.slow
def test_hash_embedder_is_deterministic_across_processes():
    texts = ["Deploy notes: blue/green on Fridays", "工作安排", "café au lait"]
    here = hashlib.sha256(HashEmbedder().embed(texts).tobytes()).hexdigest()
    code = (
        "import hashlib, sys; from memvault.search.embedders.hash import HashEmbedder; "
        f"print(hashlib.sha256(HashEmbedder().embed({texts!r}).tobytes()).hexdigest())"
    )
    # A different PYTHONHASHSEED would change Python's hash(): the embedder must not depend on it.
    for seed in ("1", "2"):
        out = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={"PYTHONHASHSEED": seed},
        )
        assert out.stdout.strip() == here


def test_normalise_rows_leaves_zero_rows_alone():
    rows = normalise_rows([[3.0, 4.0], [0.0, 0.0]])
    assert np.allclose(rows, [[0.6, 0.8], [0.0, 0.0]])


def test_unknown_embedder_kind_is_a_configuration_error():
    with pytest.raises(InvalidArgument, match="MEMVAULT_EMBEDDER"):
        embedder_kind("word2vec:/x")
    with pytest.raises(InvalidArgument, match="needs a model"):
        embedder_kind("model2vec")
    with pytest.raises(InvalidArgument, match="MEMVAULT_EMBEDDER"):
        Settings.from_env({"MEMVAULT_EMBEDDER": "bogus"})
    settings = Settings.from_env({"MEMVAULT_EMBEDDER": "openai", "MEMVAULT_EMBED_KEY": "sk-secret"})
    assert settings.embedder == "openai"
    assert "sk-secret" not in repr(settings)


def test_openai_embedder_speaks_the_openai_format(monkeypatch: pytest.MonkeyPatch):
    seen: list[dict] = []

    def handler(request: httpx2.Request) -> httpx2.Response:
        body = __import__("json").loads(request.content)
        seen.append({"url": str(request.url), "auth": request.headers.get("authorization"), **body})
        data = [{"index": i, "embedding": [float(len(t)), 1.0, 0.0]} for i, t in enumerate(body["input"])]
        return httpx2.Response(200, json={"data": list(reversed(data))})

    real_client = httpx2.Client
    monkeypatch.setattr(
        httpx2, "Client", lambda **kw: real_client(transport=httpx2.MockTransport(handler), **kw)
    )
    embedder = load_embedder("openai", url="http://llm.local/v1/", key="sk-1", model="tiny")
    assert embedder.name == "openai:tiny" and embedder.dim == 3
    rows = embedder.embed(["ab", "abcd"])
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0)
    assert rows[1][0] > rows[0][0]  # rows come back in input order although the server reversed them
    assert seen[-1]["url"] == "http://llm.local/v1/embeddings"
    assert seen[-1]["auth"] == "Bearer sk-1" and seen[-1]["model"] == "tiny"
    assert traits(
        embedder
    ).crowds  # a transformer's cosines: recall counts them from the vault's lower quartile


def test_a_static_tables_cosines_are_not_said_to_crowd_a_transformers_are(monkeypatch: pytest.MonkeyPatch):
    class Model:
        def encode(self, texts: Sequence[str], **options: object) -> np.ndarray:
            return np.ones((len(texts), 3))

    class StaticModel:
        @staticmethod
        def from_pretrained(target: str) -> Model:
            return Model()

    static = type(sys)("model2vec")
    static.StaticModel = StaticModel  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "model2vec", static)
    transformers = type(sys)("sentence_transformers")
    transformers.SentenceTransformer = lambda target, **options: Model()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", transformers)
    assert traits(load_embedder("sentence-transformers:intfloat/e5-small-v2")).crowds
    assert not traits(load_embedder("model2vec:minishlab/potion-base-8M")).crowds
    assert not traits(HashEmbedder()).crowds and not traits(WordLlamaEmbedder()).crowds


def test_wordllama_does_not_grow_with_every_new_word_it_embeds():
    # The tokenizer's word cache lives outside Python (tracemalloc cannot see it): glibc's count
    # of bytes in use can. A server that embeds ever new words (names, numbers) must level off.
    if heap.counts() is None:
        pytest.skip("glibc's mallinfo2 is not available here")
    embedder = load_embedder("wordllama")
    for i in range(1500):  # more new words than the cache holds
        embedder.embed([f"warm{i}qx zz{i}kw"])
    before = heap.counts()
    for i in range(3000):
        embedder.embed([f"new{i}qx yy{i}kw"])
    after = heap.counts()
    assert before is not None and after is not None
    per_text = (after.in_use - before.in_use) / 3000
    assert per_text < 400, per_text  # about 1,600 bytes a text while a 10,000-word cache filled


# ---------------------------------------------------------------------------- the registry


@pytest.fixture
def free_url() -> str:
    from conftest import free_port

    return f"http://127.0.0.1:{free_port()}/v1"


def test_every_kind_in_the_table_loads_by_name_or_says_why_not(
    free_url: str, monkeypatch: pytest.MonkeyPatch
):
    # Neither optional package is installed here, and no endpoint answers: each kind either
    # loads or raises EmbedderUnavailable with a reason, never an ImportError or AttributeError.
    for package in ("model2vec", "sentence_transformers"):
        monkeypatch.setitem(sys.modules, package, None)
    loaded = {}
    for kind in EMBEDDERS:
        spec = f"{kind.name}:/models/some-model" if kind.required else kind.name
        try:
            embedder = load_embedder(spec, url=free_url, key="k")
        except EmbedderUnavailable as exc:
            assert str(exc) and "Traceback" not in str(exc)
            loaded[kind.name] = None
        else:
            rows = embedder.embed(["the cat eats salmon"])
            assert rows.shape == (1, embedder.dim)
            loaded[kind.name] = embedder.name
    assert loaded["hash"] == "hash-512" and (loaded["wordllama"] or "").startswith("wordllama")
    assert (
        loaded["model2vec"] is None and loaded["sentence-transformers"] is None and loaded["openai"] is None
    )


def test_a_kind_is_read_whatever_its_case_and_spaces():
    assert load_embedder(" Hash : 64").dim == 64
    assert embedder_kind("WordLlama").name == "wordllama"


def test_the_settings_name_every_kind_the_table_offers():
    with pytest.raises(InvalidArgument) as caught:
        Settings.from_env({"MEMVAULT_EMBEDDER": "word2vec"})
    for kind in EMBEDDERS:
        assert kind.name in str(caught.value)
    assert "model2vec:<name-or-path>" in str(caught.value)  # what must follow the colon, said


@pytest.mark.parametrize("package", ["model2vec", "sentence_transformers"])
def test_a_hub_model_that_cannot_be_fetched_falls_back_cleanly(package: str, monkeypatch: pytest.MonkeyPatch):
    # The hubs are unreachable here, as on many servers: the library raises (OSError, or its own
    # error), and the embedding worker falls back to hash with a reason that names no path.
    def unreachable(target: str, **options: object) -> None:
        raise OSError(f"We couldn't connect to the hub to load this file: {target} (/root/.cache/x)")

    fake = type(sys)(package)
    fake.StaticModel = type("StaticModel", (), {"from_pretrained": staticmethod(unreachable)})  # type: ignore[attr-defined]
    fake.SentenceTransformer = unreachable  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, package, fake)
    kind = package.replace("_", "-")
    with pytest.raises(EmbedderUnavailable, match="could not load 'org/model' \\(OSError\\)"):
        load_embedder(f"{kind}:org/model")
    embeddings = Embeddings(f"{kind}:org/model")
    assert embeddings.load().name == "hash-512"
    fallback = embeddings.status().fallback or ""
    assert kind in fallback and "/root" not in fallback


def test_what_each_embedder_says_of_itself():
    hashed = traits(HashEmbedder())
    assert hashed.quick and hashed.noise > 0 and not hashed.tokens and not hashed.crowds
    table = WordLlamaEmbedder()
    assert traits(table).quick and traits(table).tokens
    assert token_embedder(table) is table and token_embedder(HashEmbedder()) is None

    class Plain:  # a third party's embedder that says nothing: it gets the defaults
        name, dim = "plain", 2

        def embed(self, texts: Sequence[str]) -> np.ndarray:
            return np.ones((len(texts), 2), dtype=np.float32)

    assert traits(Plain()) == Traits() and token_embedder(Plain()) is None
    assert token_embedder(None) is None and traits(None) == Traits()
