"""heap.release: free memory goes back to the system (glibc), and nothing breaks elsewhere."""

from __future__ import annotations

import threading

import pytest

from memvault import heap


def _rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(not heap.supported(), reason="no malloc_trim (not glibc)")
def test_memory_freed_by_a_thread_goes_back_to_the_system():
    kept: list[bytes] = []

    def churn() -> None:
        # 2 KiB objects come from malloc (not pymalloc), in this thread's arena; keeping every
        # 64th pins the heap so that freeing the rest cannot shrink it from the top.
        blocks = [bytes(2048) for _ in range(60_000)]
        kept.extend(blocks[::64])
        del blocks

    thread = threading.Thread(target=churn)
    thread.start()
    thread.join()
    before = _rss_kb()
    assert heap.release()
    after = _rss_kb()
    assert before - after > 50_000, (before, after)  # of about 120 MB freed
    assert len(kept) == 938


@pytest.mark.skipif(not heap.supported(), reason="no malloc_trim (not glibc)")
def test_the_mmap_threshold_can_be_pinned():
    assert heap.configure()


def test_both_are_harmless_without_glibc(monkeypatch):
    monkeypatch.setattr(heap, "_looked", True)
    monkeypatch.setattr(heap, "_trim", None)
    monkeypatch.setattr(heap, "_mallopt", None)
    assert not heap.supported()
    assert heap.release() is False
    assert heap.configure() is False


@pytest.mark.anyio
async def test_a_loaded_token_is_kept_from_the_cyclic_collector_until_it_unloads(make_settings):
    """After a load, what is alive is frozen (a full collection no longer scans a loaded vault);
    an unload hands everything back to the collector, so nothing stays frozen for good."""
    import gc

    from memvault.ops.service import Service

    gc.unfreeze()
    service = Service(make_settings(max_loaded_tokens=1))
    store = service.store
    try:
        await store.write("alice", title="One", content="kept")
        await service.idle()  # alice's access is recorded: nothing holds it loaded any more
        assert gc.get_freeze_count() > 0
        kept = gc.get_freeze_count()
        gc.unfreeze()
        unkept = []
        original = heap.unkeep

        def spy() -> None:
            unkept.append(gc.get_freeze_count())
            original()

        heap.unkeep = spy  # type: ignore[assignment]
        try:
            gc.freeze()  # as if alice had just loaded
            await store.write("bob", title="Two", content="unloads alice")
        finally:
            heap.unkeep = original  # type: ignore[assignment]
        assert unkept and unkept[0] >= kept // 2  # alice's unload let go of the frozen objects...
        assert gc.get_freeze_count() > 0  # ...and bob's load froze again
    finally:
        await service.close()
        gc.unfreeze()


def test_uncollected_pauses_the_collector_until_the_last_block_ends():
    import gc

    assert gc.isenabled()
    with heap.uncollected():
        assert not gc.isenabled()
        with heap.uncollected():  # a second token's load overlapping the first
            assert not gc.isenabled()
        assert not gc.isenabled()  # the first load still runs
    assert gc.isenabled()
    with pytest.raises(RuntimeError), heap.uncollected():
        raise RuntimeError("a load that fails")
    assert gc.isenabled()


def test_what_an_uncollected_block_made_is_frozen_unless_it_failed():
    import gc

    passes = []

    def watch(phase, info):
        if phase == "stop":
            passes.append(info["generation"])

    gc.collect()
    frozen = gc.get_freeze_count()
    gc.callbacks.append(watch)
    try:
        with heap.uncollected():
            passes.clear()  # (entering collects what died before: none of the block's objects)
            kept = [[i] for i in range(5000)]  # far past the young generation's threshold
        assert gc.get_freeze_count() >= frozen + 5000
        assert passes == []  # nothing collected over the block's objects when it ended
        heap.unkeep()
        frozen = gc.get_freeze_count()
        with pytest.raises(RuntimeError), heap.uncollected():
            failed = [[i] for i in range(5000)]
            raise RuntimeError("a load that fails")
        assert gc.get_freeze_count() == frozen  # a failed load's objects stay collectable
    finally:
        gc.callbacks.remove(watch)
        gc.unfreeze()
    assert len(kept) == len(failed) == 5000


def test_uncollected_leaves_a_collector_that_was_off_off():
    import gc

    gc.disable()
    try:
        with heap.uncollected():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


@pytest.mark.anyio
async def test_a_token_loads_with_the_collector_paused(make_settings, monkeypatch):
    import gc

    from memvault.ops.service import Service
    from memvault.registry.tokens import Tokens

    seen = []
    original = Tokens._load_files

    def spy(self, state, progress=None):
        seen.append(gc.isenabled())
        original(self, state, progress)

    monkeypatch.setattr(Tokens, "_load_files", spy)
    service = Service(make_settings())
    store = service.store
    try:
        await store.write("alice", title="One", content="loaded")
    finally:
        await service.close()
    assert seen == [False]
    assert gc.isenabled()


def test_what_died_before_a_keep_is_not_frozen_with_the_living():
    """Cycles of finished requests, frozen at the next load, were never collected."""
    import gc
    import weakref

    class Node:
        pass

    gc.collect()
    try:
        dead = Node()
        dead.me = dead  # type: ignore[attr-defined]  # a cycle: only the collector frees it
        gone = weakref.ref(dead)
        del dead
        heap.keep()
        assert gone() is None
        dead = Node()
        dead.me = dead  # type: ignore[attr-defined]
        gone = weakref.ref(dead)
        del dead
        with heap.uncollected():
            pass
        assert gone() is None
    finally:
        gc.unfreeze()


def test_counts_see_memory_allocated_outside_python_objects():
    if heap.counts() is None:
        pytest.skip("glibc's mallinfo2 is not available here")
    before = heap.counts()
    blocks = [bytearray(64 * 1024) for _ in range(16)]  # under glibc's mmap threshold: its arenas
    after = heap.counts()
    assert before is not None and after is not None
    assert after.in_use - before.in_use >= 900 * 1024, (before, after)
    del blocks


def test_hand_backs_come_rarer_while_they_find_nothing_and_at_once_again_when_they_do():
    """A hand-back walks every object the process holds: while they find no dead objects the wait
    between two doubles (from a minute), and one that finds some brings the minute back."""
    import gc

    def frozen_garbage() -> None:
        gc.disable()  # no automatic pass finds the cycles before the freeze
        try:
            for _ in range(heap.FEW_FOUND + 100):
                cycle: list[object] = []
                cycle.append(cycle)
            gc.freeze()  # dead but frozen: only a hand-back finds them
        finally:
            gc.enable()

    minute = heap.UNKEEP_EVERY
    t = 1e12  # later than any hand-back before this test
    try:
        gc.collect()
        frozen_garbage()
        assert heap.unkeep(now=t)  # it found the garbage: the wait is a minute again
        assert gc.get_freeze_count() > 0  # and the living are kept again
        gc.collect()
        assert heap.unkeep(now=(t := t + minute + 1))  # found nothing: the wait doubles...
        assert not heap.unkeep(now=t + minute + 1)
        assert heap.unkeep(now=(t := t + 2 * minute + 1))  # ...and doubles again
        assert not heap.unkeep(now=t + 3 * minute)
        frozen_garbage()
        assert heap.unkeep(now=(t := t + 4 * minute + 1))  # found some: back to the minute
        assert heap.unkeep(now=t + minute + 1)
    finally:
        gc.unfreeze()
