"""The embedder seam, the hash embedder, fallbacks, and vectors kept in step with the memories."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
import subprocess
import sys
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path

import httpx2
import numpy as np
import pytest

from memvault import heap
from memvault.config import Settings, check_spec
from memvault.disk.markdown import Memory
from memvault.errors import InvalidArgument
from memvault.ops.service import Service
from memvault.records.sidecar import Sidecar, StoredVector
from memvault.search.embedders import (
    EmbedderUnavailable,
    FloatMatrix,
    HashEmbedder,
    WordLlamaEmbedder,
    crowds,
    load_embedder,
    normalise_rows,
)
from memvault.search.embeddings import Embeddings
from memvault.search.vectors import TokenVectors, embed_text, matvec, quantize, text_hash

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Callback with id .* already exists for watch:RuntimeWarning"),
]


# ---------------------------------------------------------------------------- the hash embedder


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
        "import hashlib, sys; from memvault.search.embedders import HashEmbedder; "
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


# ---------------------------------------------------------------------------- specs and fallbacks


def test_unknown_embedder_kind_is_a_configuration_error():
    with pytest.raises(InvalidArgument, match="MEMVAULT_EMBEDDER"):
        check_spec("word2vec:/x")
    with pytest.raises(InvalidArgument, match="needs a model"):
        check_spec("model2vec")
    with pytest.raises(InvalidArgument, match="MEMVAULT_EMBEDDER"):
        Settings.from_env({"MEMVAULT_EMBEDDER": "bogus"})
    settings = Settings.from_env({"MEMVAULT_EMBEDDER": "openai", "MEMVAULT_EMBED_KEY": "sk-secret"})
    assert settings.embedder == "openai"
    assert "sk-secret" not in repr(settings)


@pytest.mark.parametrize("spec", ["model2vec:/no/such/model", "sentence-transformers:/no/such/model"])
def test_a_model_that_cannot_load_falls_back_to_hash_with_one_log_line(spec, caplog):
    caplog.set_level(logging.WARNING, logger="memvault")
    embeddings = Embeddings(spec)
    embedder = embeddings.load()
    assert embedder.name == "hash-512"
    assert embeddings.load() is embedder  # loaded once
    status = embeddings.status()
    assert status.name == "hash-512" and status.dim == 512
    assert status.fallback is not None and spec.split(":")[0] in status.fallback
    lines = [r for r in caplog.records if "could not load" in r.getMessage()]
    assert len(lines) == 1
    assert "falling back to hash-512" in lines[0].getMessage()


def test_an_unreachable_openai_endpoint_falls_back(free_url: str):
    embeddings = Embeddings("openai", url=free_url, key="k", model="m")
    assert embeddings.load().name == "hash-512"
    assert "openai" in (embeddings.status().fallback or "")


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
    assert crowds(embedder)  # a transformer's cosines: recall counts them from the vault's lower quartile


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
    assert crowds(load_embedder("sentence-transformers:intfloat/e5-small-v2"))
    assert not crowds(load_embedder("model2vec:minishlab/potion-base-8M"))
    assert not crowds(HashEmbedder()) and not crowds(WordLlamaEmbedder())


@pytest.fixture
def free_url() -> str:
    from conftest import free_port

    return f"http://127.0.0.1:{free_port()}/v1"


async def test_fallback_shows_in_healthz_and_never_blocks_the_handshake(server_factory):
    async with server_factory(embedder="sentence-transformers:/no/such/model") as srv:
        async with srv.session("tok") as session:
            is_error, reply = await srv.call(
                session, "write_memory", title="Note", content="Deploy on Fridays."
            )
            assert not is_error, reply
            assert await asyncio.to_thread(srv.app.state.service.embeddings.wait_idle, 20)
            is_error, reply = await srv.call(session, "recall", query="deploy")
            assert not is_error and "note.md" in reply
        async with httpx2.AsyncClient() as client:
            health = (await client.get(srv.url + "/healthz")).json()
    assert health["embeddings"]["name"] == "hash-512"
    assert health["embeddings"]["dim"] == 512
    assert health["embeddings"]["pending"] == 0
    assert "sentence-transformers" in health["embeddings"]["fallback"]
    assert "/no/such/model" in health["embeddings"]["fallback"]


# ---------------------------------------------------------------------------- vectors follow the memories


class Counting:
    """A small deterministic embedder that counts what it embeds (and can be renamed)."""

    def __init__(self, name: str = "counting-v1") -> None:
        self.name = name
        self.dim = 16
        self.texts: list[str] = []

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        self.texts += texts
        return HashEmbedder(16).embed(texts)


def make_service(settings: Settings, embedder: Counting) -> Service:
    return Service(settings, embeddings=Embeddings(loader=lambda: embedder))


async def settle(service: Service) -> None:
    assert await asyncio.to_thread(service.embeddings.wait_idle, 20)


def stored_vectors(root: Path, token: str) -> dict[str, StoredVector]:
    with Sidecar.open(root / token) as sidecar:
        with sidecar.snapshot() as conn:
            ids = [row[0] for row in conn.execute("SELECT id FROM vectors")]
        return sidecar.get_vectors(ids)


async def test_vectors_are_computed_after_a_write_and_recomputed_on_change(
    make_settings: Callable[..., Settings],
):
    settings = make_settings()
    embedder = Counting()
    service = make_service(settings, embedder)
    store = service.store
    try:
        memory = (await store.write("t", title="Deploy", content="Blue/green on Fridays.")).memory
        await settle(service)
        rows = stored_vectors(settings.root, "t")
        assert list(rows) == ["deploy.md"]
        stored = rows["deploy.md"]
        model, dim, digest, blob = stored.model, stored.dim, stored.hash, stored.vec
        assert (model, dim, len(blob)) == ("counting-v1", 16, 64)
        assert digest == text_hash(embed_text(memory))
        assert len(embedder.texts) == 1

        # An access (lastAccessedAt, priority) is not a change of text: nothing is re-embedded.
        await store.update("t", "deploy.md", priority="P1")
        await settle(service)
        assert len(embedder.texts) == 1

        await store.update("t", "deploy.md", content="Canary releases on Tuesdays.")
        await settle(service)
        assert len(embedder.texts) == 2 and "Canary" in embedder.texts[-1]
        assert stored_vectors(settings.root, "t")["deploy.md"].hash != digest
        state = await store.state("t")
        assert state.vectors.counts() == (1, 1)
    finally:
        await service.close()


async def test_vectors_are_removed_on_delete_and_follow_archive_moves(make_settings: Callable[..., Settings]):
    settings = make_settings()
    embedder = Counting()
    service = make_service(settings, embedder)
    store = service.store
    try:
        await store.write("t", title="Keep", content="Kept memory.")
        await store.write("t", title="Gone", content="Deleted memory.")
        await settle(service)
        await store.delete("t", "gone.md")
        await settle(service)
        assert list(stored_vectors(settings.root, "t")) == ["keep.md"]
        state = await store.state("t")
        assert "gone.md" not in state.vectors.snapshot().rows

        # Archiving moves the vector to archive/keep.md without embedding the same text again.
        service.sweeps.limits = dataclasses.replace(service.sweeps.limits, capacity=0, grace_hours=0)
        evicted = await store.evict("t")
        assert [e.id for e in evicted] == ["keep.md"]
        await settle(service)
        assert list(stored_vectors(settings.root, "t")) == ["archive/keep.md"]
        assert len(embedder.texts) == 2
    finally:
        await service.close()


async def test_outside_edits_are_re_embedded(make_settings: Callable[..., Settings]):
    settings = make_settings(watch=False)
    embedder = Counting()
    service = make_service(settings, embedder)
    store = service.store
    try:
        await store.write("t", title="Hand", content="Written by the server.")
        await settle(service)
        path = settings.root / "t" / "hand.md"
        path.write_text(
            path.read_text(encoding="utf-8").replace("by the server", "by a person"), encoding="utf-8"
        )
        await asyncio.to_thread(service.apply_changes, "t", [path], False)
        await settle(service)
        assert "by a person" in embedder.texts[-1]
        (settings.root / "t" / "new.md").write_text("# New\n\nAdded in an editor.\n", encoding="utf-8")
        await asyncio.to_thread(service.apply_changes, "t", [settings.root / "t" / "new.md"], False)
        await settle(service)
        assert set(stored_vectors(settings.root, "t")) == {"hand.md", "new.md"}
    finally:
        await service.close()


async def test_a_restart_reuses_stored_vectors_and_a_model_change_re_embeds(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
):
    settings = make_settings()
    first = Counting()
    service = make_service(settings, first)
    store = service.store
    for i in range(5):
        await store.write("t", title=f"Note {i}", content=f"Memory number {i}.")
    await settle(service)
    await service.close()
    assert len(first.texts) == 5

    same = Counting()
    service = make_service(settings, same)
    store = service.store
    by_text: list[list[str]] = []
    lookup = Sidecar.vectors_by_hash

    def recording(self: Sidecar, model: str, hashes: Sequence[str]) -> dict[str, bytes]:
        by_text.append(list(hashes))
        return lookup(self, model, hashes)

    monkeypatch.setattr(Sidecar, "vectors_by_hash", recording)
    await store.state("t")
    await settle(service)
    assert same.texts == []  # all five came from the sidecar
    assert not any(by_text)  # each under its own key: nothing looked up by its text
    assert (await store.state("t")).vectors.counts() == (5, 5)
    await service.close()

    other = Counting("counting-v2")
    service = make_service(settings, other)
    store = service.store
    await store.state("t")
    await settle(service)
    assert len(other.texts) == 5
    assert {row.model for row in stored_vectors(settings.root, "t").values()} == {"counting-v2"}
    await service.close()


@pytest.mark.slow
async def test_a_failing_embedder_is_retried_without_losing_work(make_settings: Callable[..., Settings]):
    class Flaky(Counting):
        failures = 1

        def embed(self, texts: Sequence[str]) -> FloatMatrix:
            if self.failures:
                self.failures -= 1
                raise EmbedderUnavailable("endpoint down")
            return super().embed(texts)

    service = make_service(make_settings(), Flaky())

    store = service.store
    try:
        await store.write("t", title="Retry", content="Embedded on the second try.")
        await settle(service)
        assert (await store.state("t")).vectors.counts() == (1, 1)
    finally:
        await service.close()


def test_without_the_recall_tools_nothing_is_embedded(tmp_path: Path):
    service = Service(Settings(root=tmp_path, tools=("memories",)))
    store = service.store
    assert not service.embeddings.enabled

    async def go() -> None:
        await store.write("alice", title="A note", content="words to embed")
        assert service.embeddings.pending() == 0
        assert service.embeddings._thread is None  # no worker was ever started
        await service.close()

    asyncio.run(go())


def test_the_worker_waits_while_a_token_loads(tmp_path: Path):
    from memvault.disk.markdown import parse_memory
    from memvault.search.vectors import TokenVectors

    embeddings = Embeddings()
    vectors = TokenVectors()
    memory = parse_memory(b"# T\n\nsome words", "t.md")
    with embeddings.paused():
        embeddings.attach(vectors, lambda: None, [memory])
        assert not embeddings.wait_idle(timeout=0.3)  # held: the vector is not computed meanwhile
        assert vectors.pending == 1
    assert embeddings.wait_idle(timeout=20)
    assert vectors.pending == 0
    embeddings.close()


def test_a_preloaded_model_makes_way_for_requests_until_someone_waits_for_it():
    import threading
    import time

    loads: list[float] = []
    loaded = threading.Event()

    def loader() -> HashEmbedder:
        loads.append(time.monotonic())
        loaded.set()
        return HashEmbedder()

    embeddings = Embeddings("wordllama", loader=loader)
    embeddings.preload()  # as a server does at start: its first calls come right after
    for _ in range(10):  # requests keep coming (Tokens.using marks each)
        embeddings.last_request = time.monotonic()
        assert not loaded.wait(0.05)
    assert embeddings.status().name is None  # still "(loading)" in /healthz
    assert embeddings.wait_idle(timeout=20)  # a caller that needs the vectors has it loaded now,
    assert loaded.wait(20)  # however busy the process
    assert len(loads) == 1
    embeddings.close()


# ---------------------------------------------------------------------------- int8 vectors


def test_quantized_vectors_keep_dot_products_within_one_percent():
    rng = np.random.default_rng(7)
    vectors = normalise_rows(rng.normal(size=(300, 512)))
    query = normalise_rows(rng.normal(size=(1, 512)))[0]
    tv = TokenVectors()
    for i in range(300):
        tv.changed(Memory(id=f"m{i}.md", title="t", content=f"c{i}"))
    work, _ = tv.take(1000)
    tv.install("hash-512", [(w, "h", vectors[int(w.key[1:-3])]) for w in work])
    view = tv.snapshot()
    assert view.matrix is not None and view.matrix.dtype == np.int8
    exact = np.array([vectors[int(k[1:-3])] @ query for k in view.keys if k])
    got = view.similarity(query, len(exact))
    assert got is not None
    assert np.abs(got - exact).max() < 0.01 * np.abs(exact).max()
    rows = np.array([view.rows["m5.md"], view.rows["m9.md"]])
    back = view.matrix[rows] * view.scale[rows, None]
    assert np.abs(back - vectors[[5, 9]]).max() < 0.01


def test_rows_without_a_vector_score_zero_and_a_zero_vector_quantizes_to_zero():
    q, scale = quantize(np.zeros(8, dtype=np.float32))
    assert not q.any() and scale == 0
    tv = TokenVectors()
    tv.changed(Memory(id="a.md", title="t", content="a"))
    tv.changed(Memory(id="b.md", title="t", content="b"))
    work, _ = tv.take(1)
    tv.install("hash-16", [(work[0], "h", normalise_rows(np.ones((1, 16)))[0])])
    view = tv.snapshot()
    got = view.similarity(normalise_rows(np.ones((1, 16)))[0], 2)
    assert got is not None
    assert sorted(got.round(3).tolist()) == [0.0, 1.0]
    assert view.similarity(np.ones(8, dtype=np.float32), 2) is None  # another dimension


def test_matvec_of_an_int8_matrix_equals_the_float_product():
    rng = np.random.default_rng(3)
    matrix = rng.integers(-127, 128, size=(2000, 96)).astype(np.int8)
    vector = rng.normal(size=96).astype(np.float32)
    assert np.allclose(matvec(matrix, vector), matrix.astype(np.float32) @ vector, rtol=1e-5, atol=1e-3)


def test_vector_matrix_grows_with_the_rows_not_faster():
    """Issue 9, 1: the matrix doubled at every quarter's growth of the rows (5,000 writes -> GBs)."""
    tv = TokenVectors()
    vector = normalise_rows(np.ones((1, 16)))[0]
    for i in range(5000):
        tv.changed(Memory(id=f"m{i}.md", title="t", content=f"c{i}"))
        work, _ = tv.take(10)
        tv.install("hash-16", [(w, f"h{i}", vector) for w in work])
    view = tv.snapshot()
    assert view.matrix is not None
    rows = len(view.keys)
    assert rows == 5000
    # Capacity stays within the growth step (a quarter, at least 64) of the rows in use.
    assert len(view.matrix) == len(view.has_vector) <= rows * 1.25 + 64
    assert view.matrix.nbytes < 200_000  # 5,000 x 16 int8 plus slack, not megabytes


async def test_wordllama_keeps_maxsim_token_ids_and_an_older_vector_without_them_is_embedded_once(
    make_settings: Callable[..., Settings],
):
    import sqlite3

    settings = make_settings()  # WordLlama, the default
    service = Service(settings)
    store = service.store
    for i in range(3):
        await store.write("t", title=f"Note {i}", content=f"The guitar lesson number {i} was fun.")
    await store.state("t")
    await settle(service)
    await service.close()
    kept = stored_vectors(settings.root, "t")
    assert len(kept) == 3 and all(v.tokens for v in kept.values())
    ids = np.frombuffer(next(iter(kept.values())).tokens or b"", dtype=np.uint16)
    assert 0 < len(ids) <= 128 and len(set(ids.tolist())) == len(ids)

    with Sidecar.open(settings.root / "t") as sidecar:
        path = sidecar.path
    with closing(sqlite3.connect(path)) as conn:  # as an older memvault left them
        conn.execute("UPDATE vectors SET tokens = NULL")
        conn.commit()
    for expected in (3, 0):  # embedded again once, then found with their ids
        service = Service(settings)
        store = service.store
        await store.state("t")
        await settle(service)
        assert service.embeddings.embedded == expected
        await service.close()
    assert all(v.tokens for v in stored_vectors(settings.root, "t").values())


def test_a_row_without_token_ids_yet_has_none_and_a_changed_text_drops_them():
    tv = TokenVectors()
    for name in ("a", "b", "c"):
        tv.changed(Memory(id=f"{name}.md", title="t", content=name))
    work, _ = tv.take(2)
    vector = np.ones(16, dtype=np.float32) / 4
    tv.install("wordllama-l2-16", [(w, "h", vector) for w in work], [np.array([7, 9], np.uint16), None])
    view = tv.snapshot()
    got = view.tokens_of(view.rows["a.md"])
    assert got is not None and got.tolist() == [7, 9]
    assert view.tokens_of(view.rows["b.md"]) is None  # a vector without ids: no MaxSim score
    assert view.tokens_of(view.rows["c.md"]) is None  # pending: no vector, no ids
    tv.dropped("a.md")
    assert tv.snapshot().tokens_of(view.rows["a.md"]) is None


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
