"""Memory follows the loaded tokens: an unloaded token, real or made up, leaves (almost) nothing behind."""

from __future__ import annotations

import gc
import tracemalloc

import anyio.to_thread
import pytest

from memvault.ops.service import Service
from memvault.ops.store import Store

pytestmark = pytest.mark.anyio


async def serve(store: Store, tokens: list[str]) -> None:
    for token in tokens:
        await store.write(token, title="Note", content=f"hello from {token}")
        await store.find(token, query="hello")
        await store.find(f"made-up-{token}", query="hello")  # a token nobody wrote to


async def test_unloaded_tokens_leave_almost_nothing_in_memory(make_settings) -> None:
    service = Service(make_settings(max_loaded_tokens=5))
    store = service.store
    try:
        await serve(store, [f"warm{i}" for i in range(20)])
        await service.idle()
        # The embedding model loads once for the process, when requests pause (or someone waits for
        # vectors): loaded here, so it is not counted as what the tokens below leave behind.
        assert await anyio.to_thread.run_sync(service.embeddings.wait_idle)
        gc.collect()
        tracemalloc.start()
        try:
            await serve(store, [f"a{i}" for i in range(30)])
            await service.idle()
            gc.collect()
            first = tracemalloc.get_traced_memory()[0]
            await serve(store, [f"b{i}" for i in range(80)])
            await service.idle()
            gc.collect()
            second = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert len(service.registry.states) < 20, len(
            service.registry.states
        )  # of 160 served (5 loaded, a few held a moment)
        # 160 more tokens served (80 real, 80 made up): an unloaded token kept about 65 KB.
        assert (second - first) / 160 < 4_000, second - first
    finally:
        await service.close()


async def test_a_repeated_write_is_still_recognised_after_its_token_was_unloaded(make_settings) -> None:
    service = Service(make_settings(max_loaded_tokens=2))
    store = service.store
    try:
        written = await store.write("alice", title="Plan", content="Ship on Friday.")
        first, reused = written.memory, written.reused
        assert not reused
        for i in range(3):  # alice is unloaded and forgotten meanwhile
            await service.idle()  # (a token whose access is being recorded is held loaded)
            await store.write(f"other{i}", title="x", content="y")
        assert "alice" not in service.registry.states or not service.registry.states["alice"].loaded
        written = await store.write("alice", title="Plan", content="Ship on Friday.")
        again, reused = written.memory, written.reused
        assert reused and again.id == first.id
    finally:
        await service.close()
