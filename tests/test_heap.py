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
