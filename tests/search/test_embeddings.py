"""embeddings: the worker that loads the embedder (or falls back) and keeps vectors in step."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from contextlib import closing
from pathlib import Path

import httpx2
import numpy as np
import pytest
from conftest import wait_for

from memvault.config import Settings
from memvault.ops.service import Service
from memvault.records.sidecar import Sidecar, StoredVector
from memvault.search.embedders import EmbedderUnavailable, FloatMatrix
from memvault.search.embedders.hash import HashEmbedder
from memvault.search.embeddings import Embeddings
from memvault.search.vectors import TokenVectors, embed_text, text_hash

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Callback with id .* already exists for watch:RuntimeWarning"),
]


# ---------------------------------------------------------------------------- a model that cannot load


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


def test_while_requests_come_writes_one_at_a_time_are_embedded_in_one_batch(monkeypatch: pytest.MonkeyPatch):
    """A busy server's writes come one by one: the worker gathers them into one batch (each batch
    costs the sidecar's reads and a transaction), and a caller waiting for the vectors ends the
    gathering at once."""
    import threading
    import time

    from memvault.disk.markdown import parse_memory
    from memvault.search import embeddings as module

    monkeypatch.setattr(module, "GATHER_SECONDS", 30.0)
    batches: list[int] = []
    embedded = threading.Event()

    class Batches(Counting):
        def embed(self, texts: Sequence[str]) -> FloatMatrix:
            batches.append(len(texts))
            embedded.set()
            return super().embed(texts)

    embeddings = Embeddings(loader=Batches)
    vectors = TokenVectors()
    embeddings.attach(vectors, lambda: None, [parse_memory(b"# Zero\n\nwords", "zero.md")])
    assert embeddings.wait_idle(timeout=20)  # the worker is waiting for work now
    embedded.clear()
    embeddings.last_request = time.monotonic()  # a request just came
    vectors.changed(parse_memory(b"# One\n\nfirst words", "one.md"))
    assert not embedded.wait(0.3)  # gathering: not embedded alone
    for name in ("two", "three"):
        embeddings.last_request = time.monotonic()
        vectors.changed(parse_memory(f"# {name}\n\nmore words".encode(), f"{name}.md"))
    started = time.monotonic()
    assert embeddings.wait_idle(timeout=20)
    assert time.monotonic() - started < 20  # the gathering ended for the waiter, not by its time
    assert batches == [1, 3]
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


def test_a_preloaded_model_waits_for_a_token_load_to_end(monkeypatch: pytest.MonkeyPatch):
    import threading
    import time

    from memvault.search import embeddings as module

    monkeypatch.setattr(module, "LOAD_PATIENCE", 1.0)
    monkeypatch.setattr(module, "BUSY_SECONDS", 0.1)
    loaded = threading.Event()

    def loader() -> HashEmbedder:
        loaded.set()
        return HashEmbedder()

    embeddings = Embeddings("wordllama", loader=loader)
    with embeddings.paused():  # a cold load of a large token, whose first answer waits for it
        embeddings.preload()
        embeddings.last_request = 0.0  # its request came long ago
        assert not loaded.wait(1.2)  # longer than requests make it wait
    for _ in range(4):  # the requests right after the load have their patience too
        embeddings.last_request = time.monotonic()
        assert not loaded.wait(0.05)
    assert loaded.wait(20)  # loaded once they pause
    embeddings.close()


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


async def test_a_batch_of_a_token_unloaded_meanwhile_is_dropped_without_a_warning(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    import threading

    class Held(Counting):
        """Holds its first batch until released: the batch is in hand while its token unloads."""

        def __init__(self) -> None:
            super().__init__()
            self.entered = threading.Event()
            self.release = threading.Event()

        def embed(self, texts: Sequence[str]) -> FloatMatrix:
            if not self.entered.is_set():
                self.entered.set()
                self.release.wait(30)
            return super().embed(texts)

    caplog.set_level(logging.WARNING, logger="memvault")
    embedder = Held()
    service = make_service(make_settings(max_loaded_tokens=1), embedder)
    store = service.store
    try:
        await store.write("a", title="First", content="Embedded while its token unloads.")
        assert await asyncio.to_thread(embedder.entered.wait, 20)
        await service.idle()  # the write's access is recorded: nothing else holds a
        await store.write("b", title="Second", content="Loads, and a goes: its sidecar is closed.")
        await service.idle()
        assert not service.registry.loaded_or_loading("a")
        embedder.release.set()
        await settle(service)  # b's vector is computed
        assert (await store.state("b")).vectors.counts() == (1, 1)
        assert not [r for r in caplog.records if "embedding batch failed" in r.getMessage()]
    finally:
        embedder.release.set()
        await service.close()


async def test_a_failing_batch_of_a_loaded_token_is_still_reported(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture
) -> None:
    class Failing(Counting):
        def embed(self, texts: Sequence[str]) -> FloatMatrix:
            raise EmbedderUnavailable("endpoint down")

    caplog.set_level(logging.WARNING, logger="memvault")
    service = make_service(make_settings(), Failing())
    try:
        await service.store.write("t", title="Note", content="Never embedded.")
        assert await wait_for(
            lambda: [r for r in caplog.records if "embedding batch failed" in r.getMessage()], timeout=20
        )
    finally:
        await service.close()
