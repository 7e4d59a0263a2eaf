"""Tests for access recording (memvault.ops.access): queued accesses stay visible until committed."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from memvault.ops import access, background
from memvault.ops.access import flush_records, recorded
from memvault.ops.service import Service
from memvault.records.sidecar import Sidecar
from memvault.registry.state import Pending

T0 = datetime(2026, 2, 10, 10, 30, tzinfo=UTC)


def test_an_access_is_visible_while_its_transaction_runs(tmp_path: Path) -> None:
    """A listing right after a read raced the flush: the record had left the queue and was not yet
    in the sidecar, so the listing showed the old access time (seen as a flaky e2e test)."""
    seen: list[dict[str, datetime]] = []
    with Sidecar.open(tmp_path / "tok") as sidecar:
        state = SimpleNamespace(pending=Pending(), sidecar=sidecar, dir=tmp_path / "tok")
        state.ensure_sidecar = lambda: sidecar
        commit = sidecar.record_batch

        def record_batch(records, searches):  # type: ignore[no-untyped-def]
            seen.append(recorded(state))  # type: ignore[arg-type]  # mid-flush, before the commit
            commit(records, searches)
            seen.append(recorded(state))  # type: ignore[arg-type]  # committed, still queued

        sidecar.record_batch = record_batch  # type: ignore[method-assign]
        state.pending.add(["a.md"], T0, hit=True)
        assert recorded(state) == {"a.md": T0}  # type: ignore[arg-type]
        flush_records(state)  # type: ignore[arg-type]
        assert seen == [{"a.md": T0}, {"a.md": T0}]
        assert state.pending.latest() == {}
        assert recorded(state) == {"a.md": T0}  # type: ignore[arg-type]  # now from the sidecar alone


def test_committed_records_leave_the_queue(tmp_path: Path) -> None:
    pending = Pending()
    pending.add(["a.md"], T0, hit=False)
    records, _ = pending.take_records()
    assert pending.latest() == {"a.md": T0}
    pending.committed(records)
    assert pending.latest() == {}


@pytest.mark.slow
@pytest.mark.anyio
async def test_access_write_backs_make_way_while_requests_come_in(make_settings, monkeypatch) -> None:
    """Issue 12: a batch of write-backs rests as long as it took, and 19 times that while requests
    come in (in a thread, each of its system calls waited for the GIL the requests held)."""
    service = Service(make_settings(access_writeback="always"))
    store = service.store
    rests: list[tuple[float, bool]] = []
    rest_after = background.rest_after

    def noted(took: float, busy: bool) -> float:
        rests.append((took, busy))
        return rest_after(took, busy)

    try:
        for i in range(4):
            await store.write("t", title=f"Note {i}", content="to be read")
        state = await store.state("t")
        monkeypatch.setattr(background, "rest_after", noted)
        for busy in (False, True):
            await service.idle()  # nothing of the writes' own left in the background
            memories = state.hot.in_order()
            state.pending.add([m.id for m in memories], T0 + timedelta(days=1), hit=True, due=memories)
            service.embeddings.last_request = time.monotonic() if busy else 0.0
            await service.recorder._write_some(state)
            assert not state.pending.files
            assert rests[-1][1] is busy and rests[-1][0] > 0
        assert [busy for _, busy in rests] == [False, True]
        text = (state.dir / "note-0.md").read_text(encoding="utf-8")
        assert "lastAccessedAt: 2026-02-11" in text
    finally:
        await service.close()


def test_last_access_is_the_later_record_else_the_last_change() -> None:
    day = datetime(2026, 3, 1, tzinfo=UTC)
    created, updated, read, later = day, day + timedelta(1), day + timedelta(2), day + timedelta(3)

    def memory(accessed: datetime | None, updated_at: datetime | None = updated) -> SimpleNamespace:
        return SimpleNamespace(last_accessed_at=accessed, updated_at=updated_at, created_at=created)

    last = access.last_access
    assert last(memory(None), None) == updated  # never accessed: its last change
    assert last(memory(None, None), None) == created
    assert last(memory(read), None) == read  # only the file's lastAccessedAt
    assert last(memory(None), read) == read  # only the sidecar's record
    assert last(memory(read), later) == later  # both: the later one, whichever holds it
    assert last(memory(later), read) == later
