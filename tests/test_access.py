"""Tests for access recording (memvault.access): queued accesses stay visible until committed."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from memvault.access import Pending, flush_records, recorded
from memvault.sidecar import Sidecar

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
