"""Long words and long queries cost what their start costs; umlauts match either spelling."""

from __future__ import annotations

import random
import string
import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from memvault.errors import TooLarge
from memvault.ops.service import Service
from memvault.search.embedders.hash import HashEmbedder
from memvault.search.text import terms_of

pytestmark = pytest.mark.anyio


def word(length: int, seed: int = 0) -> str:
    chars = random.Random(seed)
    return "".join(chars.choice(string.ascii_lowercase) for _ in range(length))


async def test_queries_longer_than_2048_characters_are_refused_with_advice(
    server_factory: Callable[..., Any],
) -> None:
    query = "harbour " * 300
    async with server_factory() as srv, srv.session("alice") as s:
        for tool, args in (
            ("read_memory", {"query": query}),
            ("search_archive", {"query": query}),
            ("recall", {"query": query}),
        ):
            error, reply = await srv.call(s, tool, **args)
            assert error and "2,048" in reply and "few words" in reply, (tool, reply)
        error, reply = await srv.call(s, "read_memory", query="harbour " * 200)
        assert not error, reply  # 1,600 characters are still a query


async def test_a_memory_made_of_one_huge_word_is_found_by_the_words_start(make_settings) -> None:
    huge = word(90_000)
    service = Service(make_settings())
    store = service.store
    try:
        await store.write("alice", title="Blob", content=huge)
        found = await store.find("alice", query=huge[:2000])
        assert [m.id for m in found.memories] == ["blob.md"]
        with pytest.raises(TooLarge):
            await store.find("alice", query=huge[:3000])
    finally:
        await service.close()


def test_terms_are_bounded_whatever_the_word() -> None:
    for text in (word(99_000), "ü" * 99_000, word(70) + "s", "x" + "é" * 5000):
        terms = terms_of(text)
        assert len(terms) == 1 and 0 < len(terms[0]) <= 64, text[:20]


def kept_after_embedding(embedder: HashEmbedder, texts: list[str]) -> int:
    """Bytes the embedder still holds after embedding ``texts`` one by one."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for text in texts:
            embedder.embed([text])
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def test_the_hash_embedders_word_cache_is_bounded_by_bytes() -> None:
    embedder = HashEmbedder(cache_bytes=1_000_000)
    texts = [" ".join(word(60, seed) for seed in range(start, start + 50)) for start in range(0, 4000, 50)]
    kept = kept_after_embedding(embedder, texts)
    # 4,000 distinct long words: their features are about 10 MB; the cache keeps at most 1 MB.
    assert kept < 3_000_000, kept


def test_texts_of_one_huge_word_each_leave_the_hash_embedder_holding_less_than_their_letters() -> None:
    # Issue 35: each memory that was one huge word left the word's features, which grow with its
    # length, in the embedder's cache. The default embedder, as the server builds it.
    texts = [word(99_000, seed) for seed in range(12)]
    kept = kept_after_embedding(HashEmbedder(), texts)
    assert kept < sum(map(len, texts)), kept


async def test_recalls_with_a_huge_new_word_leave_the_server_holding_less_than_the_word(
    server_factory: Callable[..., Any],
) -> None:
    # Issue 35: each recall with a new huge word left that word's features in the embedder's cache.
    first, *queries = [word(300_000, seed) for seed in range(4)]
    async with server_factory(embedder="hash") as srv, srv.session("alice") as s:
        await srv.call(s, "write_memory", title="Harbour", content="The harbour opens at dawn.")
        await srv.call(s, "recall", query="harbour")  # the vault loaded, the embedder built
        tracemalloc.start()
        try:
            # The server holds on to its last request's body while the next one comes: the first
            # huge query sets that, and its successors each take its place.
            await srv.call(s, "recall", query=first)
            before = tracemalloc.get_traced_memory()[0]
            for query in queries:
                await srv.call(s, "recall", query=query)
            kept = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    assert kept < len(first), kept


async def test_mueller_and_koeln_find_mueller_and_koeln_with_umlauts(make_settings) -> None:
    service = Service(make_settings())
    store = service.store
    try:
        await store.write("alice", title="Visit", content="Frau Müller wohnt in Köln, nahe der Straße.")
        for query in ("Mueller Koeln", "Müller Köln", "MÜLLER", "Strasse"):
            found = await store.find("alice", query=query)
            assert [m.id for m in found.memories] == ["visit.md"] and found.matched_all, query
    finally:
        await service.close()
