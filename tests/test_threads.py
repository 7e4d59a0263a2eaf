"""threads: a look tries the event loop, never waiting there, and moves to a worker thread if it must."""

from __future__ import annotations

import threading

import anyio
import pytest

from memvault.threads import IN_THREAD, ON_LOOP, NeedsThread, Threads, Where, held, look

pytestmark = pytest.mark.anyio


def test_on_the_loop_a_free_lock_is_taken_and_given_back() -> None:
    lock = threading.Lock()
    with held(lock, ON_LOOP):
        assert lock.locked()
    assert not lock.locked()


def test_on_the_loop_a_busy_lock_is_never_waited_for() -> None:
    lock = threading.Lock()
    with lock, pytest.raises(NeedsThread):
        with held(lock, ON_LOOP):
            pytest.fail("the block ran without the lock")


def test_in_a_thread_a_busy_lock_is_waited_for() -> None:
    lock = threading.Lock()
    lock.acquire()
    entered = threading.Event()

    def worker() -> None:
        with held(lock, IN_THREAD):
            entered.set()

    thread = threading.Thread(target=worker)
    thread.start()
    assert not entered.wait(0.05)  # still waiting for the lock
    lock.release()
    thread.join(timeout=10)
    assert entered.is_set()


async def test_a_look_that_needs_nothing_stays_on_the_loop(thread_hops: list[str]) -> None:
    calls: list[tuple[str, Where]] = []

    def work(name: str, where: Where) -> str:
        calls.append((name, where))
        return f"looked at {name}"

    assert await look(work, "notes") == "looked at notes"
    assert calls == [("notes", ON_LOOP)]
    assert thread_hops == []


async def test_a_look_that_must_wait_runs_again_in_a_worker_thread(thread_hops: list[str]) -> None:
    lock = threading.Lock()
    holding, release = threading.Event(), threading.Event()
    loop_thread = threading.get_ident()
    calls: list[tuple[Where, bool]] = []

    def hold() -> None:  # as a worker thread's transaction would
        with lock:
            holding.set()
            release.wait(10)

    def work(where: Where) -> int:
        calls.append((where, threading.get_ident() == loop_thread))
        if where is IN_THREAD:
            release.set()  # the holder lets go once the look has moved to a thread
        with held(lock, where):
            return 42

    holder = threading.Thread(target=hold)
    holder.start()
    assert holding.wait(10)
    assert await look(work) == 42
    holder.join(10)
    assert calls == [(ON_LOOP, True), (IN_THREAD, False)]
    assert thread_hops == ["work"]


def test_threads_gives_each_event_loop_its_own_limiter_of_the_same_size() -> None:
    threads = Threads(3)

    async def twice() -> tuple[anyio.CapacityLimiter, anyio.CapacityLimiter]:
        return threads.limiter(), threads.limiter()

    first, again = anyio.run(twice)
    assert first is again and first.total_tokens == 3
    other, _ = anyio.run(twice)  # a second loop (the CLI, another test) gets a limiter of its own
    assert other is not first and other.total_tokens == 3
