from __future__ import annotations

import math
import random
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memvault.ops.eviction import Candidate, Eviction, Limits, plan, sweep_due

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
ROOMY = Limits(capacity=1000)


def ago(days: float) -> datetime:
    return NOW - timedelta(days=days)


def ids(evictions: list[Eviction]) -> list[str]:
    return [e.id for e in evictions]


# --- TTL ---------------------------------------------------------------------------------------


def test_p0_is_never_evicted_however_old() -> None:
    ancient = Candidate("p0.md", "P0", ago(100 * 365))
    assert plan([ancient], NOW, ROOMY) == []
    assert plan([ancient], NOW, Limits(capacity=0)) == []


def test_p1_kept_at_89_days_and_evicted_at_91() -> None:
    kept = Candidate("kept.md", "P1", ago(89))
    gone = Candidate("gone.md", "P1", ago(91))
    assert ids(plan([kept, gone], NOW, ROOMY)) == ["gone.md"]


def test_ttl_is_exceeded_only_strictly_after_the_limit() -> None:
    exactly = Candidate("edge.md", "P1", ago(90))
    assert plan([exactly], NOW, ROOMY) == []
    assert ids(plan([Candidate("edge.md", "P1", ago(90) - timedelta(seconds=1))], NOW, ROOMY)) == ["edge.md"]


def test_p2_kept_at_29_days_and_evicted_at_31() -> None:
    kept = Candidate("kept.md", "P2", ago(29))
    gone = Candidate("gone.md", "P2", ago(31))
    p1_same_age = Candidate("p1.md", "P1", ago(31))
    assert ids(plan([kept, gone, p1_same_age], NOW, ROOMY)) == ["gone.md"]


def test_ttls_come_from_limits() -> None:
    memories = [Candidate("a.md", "P1", ago(10)), Candidate("b.md", "P2", ago(3))]
    assert ids(plan(memories, NOW, Limits(ttl_p1_days=5, ttl_p2_days=2, capacity=1000))) == ["a.md", "b.md"]
    assert plan(memories, NOW, Limits(ttl_p1_days=math.inf, ttl_p2_days=math.inf, capacity=1000)) == []


def test_unknown_priority_is_treated_as_p2() -> None:
    memories = [Candidate("odd.md", "urgent", ago(31)), Candidate("blank.md", "", ago(31))]
    evictions = plan(memories, NOW, ROOMY)
    assert sorted(ids(evictions)) == ["blank.md", "odd.md"]
    assert all(e.reason.startswith("P2,") for e in evictions)


def test_lowercase_p0_stays_protected() -> None:
    assert plan([Candidate("p0.md", " p0 ", ago(1000))], NOW, Limits(capacity=0)) == []


def test_ttl_evictions_come_oldest_first() -> None:
    memories = [
        Candidate("b.md", "P2", ago(40)),
        Candidate("a.md", "P1", ago(200)),
        Candidate("c.md", "P2", ago(35)),
        Candidate("d.md", "P1", ago(120)),
    ]
    assert ids(plan(memories, NOW, ROOMY)) == ["a.md", "d.md", "b.md", "c.md"]


def test_pinned_and_important_memories_survive_ttl() -> None:
    memories = [
        Candidate("pinned.md", "P2", ago(500), pinned=True),
        Candidate("important.md", "P2", ago(500), importance=0.9),
        Candidate("ordinary.md", "P2", ago(500), importance=0.89),
    ]
    assert ids(plan(memories, NOW, ROOMY)) == ["ordinary.md"]


def test_future_last_access_counts_as_fresh() -> None:
    assert plan([Candidate("skew.md", "P2", NOW + timedelta(days=400))], NOW, ROOMY) == []


# --- capacity ----------------------------------------------------------------------------------


def test_capacity_evicts_p2_before_p1_least_recently_accessed_first() -> None:
    memories = [
        Candidate("p1-old.md", "P1", ago(20)),
        Candidate("p2-new.md", "P2", ago(1)),
        Candidate("p2-old.md", "P2", ago(5)),
        Candidate("p2-mid.md", "P2", ago(3)),
        Candidate("p1-new.md", "P1", ago(2)),
    ]
    limits = Limits(capacity=2)
    assert ids(plan(memories, NOW, limits)) == ["p2-old.md", "p2-mid.md", "p2-new.md"]
    assert ids(plan(memories, NOW, Limits(capacity=1))) == [
        "p2-old.md",
        "p2-mid.md",
        "p2-new.md",
        "p1-old.md",
    ]


def test_capacity_never_touches_p0_pinned_or_important() -> None:
    memories = [
        Candidate("p0.md", "P0", ago(29)),
        Candidate("pinned.md", "P2", ago(29), pinned=True),
        Candidate("important.md", "P1", ago(29), importance=0.95),
        Candidate("plain.md", "P2", ago(1)),
    ]
    assert ids(plan(memories, NOW, Limits(capacity=0))) == ["plain.md"]


def test_protected_memories_count_toward_capacity() -> None:
    memories = [Candidate(f"p0-{i}.md", "P0", ago(1)) for i in range(3)]
    memories.append(Candidate("fresh.md", "P2", ago(0)))
    # Four hot, capacity three: the only evictable memory goes although it is the freshest.
    assert ids(plan(memories, NOW, Limits(capacity=3))) == ["fresh.md"]
    assert plan(memories, NOW, Limits(capacity=4)) == []


def test_ttl_evictions_count_against_the_overflow() -> None:
    memories = [
        Candidate("stale.md", "P2", ago(60)),
        Candidate("a.md", "P2", ago(2)),
        Candidate("b.md", "P2", ago(1)),
    ]
    # After the TTL eviction two remain, which fits capacity 2: no capacity eviction.
    assert ids(plan(memories, NOW, Limits(capacity=2))) == ["stale.md"]


def test_ttl_evictions_come_before_capacity_evictions() -> None:
    memories = [
        Candidate("cap.md", "P2", ago(10)),
        Candidate("ttl.md", "P2", ago(31)),
        Candidate("keep.md", "P2", ago(1)),
    ]
    evictions = plan(memories, NOW, Limits(capacity=1))
    assert ids(evictions) == ["ttl.md", "cap.md"]
    assert "TTL" in evictions[0].reason
    assert "capacity" in evictions[1].reason


def test_equal_access_times_are_broken_by_id() -> None:
    memories = [Candidate(name, "P2", ago(1)) for name in ("c.md", "a.md", "b.md")]
    assert ids(plan(memories, NOW, Limits(capacity=1))) == ["a.md", "b.md"]


def test_plan_is_deterministic_whatever_the_input_order() -> None:
    memories = [Candidate(f"m{i:02}.md", ("P1", "P2")[i % 2], ago(i % 7 + 25)) for i in range(30)]
    limits = Limits(capacity=10)
    expected = plan(memories, NOW, limits)
    assert plan(list(reversed(memories)), NOW, limits) == expected
    assert plan(memories[::3] + memories[1::3] + memories[2::3], NOW, limits) == expected


# --- reasons -----------------------------------------------------------------------------------


def test_ttl_reason_names_priority_days_date_and_ttl() -> None:
    (eviction,) = plan([Candidate("a.md", "P2", ago(41))], NOW, ROOMY)
    assert eviction.reason == "P2, not accessed for 41 days since 2026-01-19 (TTL 30 days)"
    (eviction,) = plan([Candidate("b.md", "P1", ago(100.5))], NOW, Limits(ttl_p1_days=90.5, capacity=9))
    assert eviction.reason == "P1, not accessed for 100 days since 2025-11-21 (TTL 90.5 days)"


def test_capacity_reason_names_counts_priority_and_date() -> None:
    memories = [Candidate(f"p0-{i}.md", "P0", ago(1)) for i in range(60)]
    memories += [Candidate("old.md", "P2", datetime(2026, 2, 2, 23, 0, tzinfo=UTC))]
    memories += [Candidate("new.md", "P1", ago(2))]
    evictions = plan(memories, NOW, Limits())
    assert [e.reason for e in evictions] == [
        "over capacity (62 hot > 50): least recently accessed P2, last accessed 2026-02-02",
        "over capacity (61 hot > 50): least recently accessed P1, last accessed 2026-02-27",
    ]


def test_reason_dates_are_in_utc() -> None:
    tokyo = timezone(timedelta(hours=9))
    last = datetime(2026, 1, 3, 5, 0, tzinfo=tokyo)  # 2026-01-02 20:00 UTC
    (eviction,) = plan([Candidate("a.md", "P2", last)], NOW, ROOMY)
    assert "since 2026-01-02" in eviction.reason


# --- bad input ---------------------------------------------------------------------------------


def test_naive_datetimes_are_rejected() -> None:
    naive = datetime(2026, 1, 1)
    with pytest.raises(ValueError, match="timezone-aware"):
        plan([Candidate("a.md", "P2", naive)], NOW, ROOMY)
    with pytest.raises(ValueError, match="timezone-aware"):
        plan([], naive, ROOMY)
    with pytest.raises(ValueError, match="timezone-aware"):
        sweep_due(naive, NOW, 24)


def test_duplicate_ids_are_rejected() -> None:
    with pytest.raises(ValueError, match="duplicate"):
        plan([Candidate("a.md", "P2", ago(1)), Candidate("a.md", "P1", ago(2))], NOW, ROOMY)


@pytest.mark.parametrize(
    "kwargs",
    [{"capacity": -1}, {"ttl_p1_days": -1}, {"ttl_p2_days": math.nan}, {"protect_importance": math.nan}],
)
def test_limits_reject_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        Limits(**kwargs)  # type: ignore[arg-type]


# --- sweep_due ---------------------------------------------------------------------------------


def test_sweep_is_due_when_never_run() -> None:
    assert sweep_due(None, NOW, 24)


def test_sweep_is_not_due_within_the_interval() -> None:
    assert not sweep_due(NOW - timedelta(hours=23, minutes=59), NOW, 24)
    assert not sweep_due(NOW, NOW, 24)


def test_sweep_is_due_once_the_interval_has_passed() -> None:
    assert sweep_due(NOW - timedelta(hours=24), NOW, 24)
    assert sweep_due(NOW - timedelta(days=30), NOW, 24)
    assert sweep_due(NOW - timedelta(minutes=31), NOW, 0.5)


def test_sweep_is_due_when_last_run_is_in_the_future() -> None:
    assert sweep_due(NOW + timedelta(minutes=1), NOW, 24)
    assert sweep_due(NOW + timedelta(days=365), NOW, 24)


def test_sweep_compares_instants_across_time_zones() -> None:
    tokyo = timezone(timedelta(hours=9))
    last_run = (NOW - timedelta(hours=1)).astimezone(tokyo)
    assert not sweep_due(last_run, NOW, 24)


# --- properties --------------------------------------------------------------------------------

PRIORITIES = st.sampled_from(["P0", "P1", "P2", "p1", "other"])
# Whole hours keep ties common, so the id tie-break gets exercised.
LAST_ACCESS = st.integers(min_value=-24, max_value=24 * 200).map(lambda h: NOW - timedelta(hours=h))
IMPORTANCE = st.one_of(st.none(), st.floats(min_value=0, max_value=1), st.just(math.nan))

candidate_lists = st.lists(
    st.builds(
        Candidate,
        id=st.text(alphabet="abcdef", min_size=1, max_size=4),
        priority=PRIORITIES,
        last_access=LAST_ACCESS,
        importance=IMPORTANCE,
        pinned=st.booleans(),
    ),
    max_size=40,
    unique_by=lambda c: c.id,
)
limits_strategy = st.builds(
    Limits,
    ttl_p1_days=st.one_of(st.integers(0, 150).map(float), st.just(math.inf)),
    ttl_p2_days=st.one_of(st.integers(0, 150).map(float), st.just(math.inf)),
    capacity=st.integers(0, 45),
    protect_importance=st.floats(min_value=0, max_value=1),
)


def unevictable(c: Candidate, limits: Limits) -> bool:
    rank = c.priority.strip().upper()
    important = c.importance is not None and c.importance >= limits.protect_importance
    return rank == "P0" or c.pinned or important


def rank(c: Candidate) -> str:
    r = c.priority.strip().upper()
    return r if r in ("P0", "P1") else "P2"


@pytest.mark.slow
@given(candidate_lists, limits_strategy)
def test_never_evicts_p0_pinned_or_protected(candidates: list[Candidate], limits: Limits) -> None:
    evicted = set(ids(plan(candidates, NOW, limits)))
    assert not any(unevictable(c, limits) for c in candidates if c.id in evicted)


@given(candidate_lists, limits_strategy)
def test_evicted_ids_are_unique_and_drawn_from_candidates(
    candidates: list[Candidate], limits: Limits
) -> None:
    evicted = ids(plan(candidates, NOW, limits))
    assert len(evicted) == len(set(evicted))
    assert set(evicted) <= {c.id for c in candidates}


@given(candidate_lists, limits_strategy)
def test_capacity_is_met_unless_only_unevictable_remain(candidates: list[Candidate], limits: Limits) -> None:
    evicted = set(ids(plan(candidates, NOW, limits)))
    remaining = [c for c in candidates if c.id not in evicted]
    assert len(remaining) <= limits.capacity or all(unevictable(c, limits) for c in remaining)


@pytest.mark.slow
@given(candidate_lists, limits_strategy)
def test_capacity_evicts_no_more_than_needed(candidates: list[Candidate], limits: Limits) -> None:
    evictions = plan(candidates, NOW, limits)
    if any(e.reason.startswith("over capacity") for e in evictions):
        # The last capacity eviction was needed, so the sweep never undershoots capacity.
        assert len(candidates) - len(evictions) >= limits.capacity


@pytest.mark.slow
@given(candidate_lists, limits_strategy)
def test_ttl_evicts_exactly_the_expired(candidates: list[Candidate], limits: Limits) -> None:
    ttl = {"P1": limits.ttl_p1_days, "P2": limits.ttl_p2_days}
    by_ttl = {e.id for e in plan(candidates, NOW, limits) if "(TTL " in e.reason}
    expired = {
        c.id
        for c in candidates
        if not unevictable(c, limits) and (NOW - c.last_access) > timedelta(days=min(ttl[rank(c)], 1e6))
    }
    assert by_ttl == expired


@pytest.mark.slow
@given(candidate_lists, limits_strategy)
def test_capacity_eviction_follows_lru_within_and_across_priorities(
    candidates: list[Candidate], limits: Limits
) -> None:
    evictions = plan(candidates, NOW, limits)
    evicted = {e.id for e in evictions}
    by_capacity = [c for c in candidates if c.id in {e.id for e in evictions if "over capacity" in e.reason}]
    kept = [c for c in candidates if c.id not in evicted and not unevictable(c, limits)]
    for gone in by_capacity:
        for stay in kept:
            if rank(stay) == rank(gone):
                # Never evict a memory fresher than one kept of the same priority.
                assert (gone.last_access, gone.id) < (stay.last_access, stay.id)
            elif rank(gone) == "P1":
                raise AssertionError(f"evicted P1 {gone.id} while P2 {stay.id} stays")


@given(candidate_lists, limits_strategy)
def test_ttl_evictions_precede_capacity_evictions_and_are_oldest_first(
    candidates: list[Candidate], limits: Limits
) -> None:
    evictions = plan(candidates, NOW, limits)
    kinds = ["ttl" if "(TTL " in e.reason else "capacity" for e in evictions]
    assert kinds == sorted(kinds, key=lambda k: k == "capacity")
    by_id = {c.id: c for c in candidates}
    ttl_keys = [(by_id[e.id].last_access, e.id) for e in evictions if "(TTL " in e.reason]
    assert ttl_keys == sorted(ttl_keys)


@pytest.mark.slow
@given(candidate_lists, limits_strategy, st.randoms())
def test_plan_ignores_input_order(candidates: list[Candidate], limits: Limits, rnd: random.Random) -> None:
    shuffled = list(candidates)
    rnd.shuffle(shuffled)
    assert plan(shuffled, NOW, limits) == plan(candidates, NOW, limits)


# ---------------------------------------------------------------------------- grace for fresh memories


def test_memories_written_within_the_grace_period_are_never_archived() -> None:
    """Issue 50: 200 memories written seconds ago, capacity 50: a sweep archived 148 of them."""
    fresh = [Candidate(f"new-{i:03}", "P2", NOW, written=NOW - timedelta(seconds=i)) for i in range(200)]
    assert plan(fresh, NOW, Limits(capacity=50)) == []


def test_a_fresh_import_with_old_access_times_is_kept_from_the_ttl_too() -> None:
    imported = Candidate("imported.md", "P2", ago(400), written=NOW - timedelta(hours=2))
    assert plan([imported], NOW, Limits()) == []
    assert ids(plan([imported], NOW, Limits(grace_hours=1))) == ["imported.md"]


def test_past_the_grace_period_capacity_and_ttl_apply_as_before() -> None:
    old = [Candidate(f"old-{i}", "P2", ago(1), written=NOW - timedelta(hours=25)) for i in range(3)]
    fresh = [Candidate(f"new-{i}", "P2", NOW, written=NOW) for i in range(3)]
    evicted = ids(plan(old + fresh, NOW, Limits(capacity=4)))
    assert sorted(evicted) == ["old-0", "old-1"]  # the fresh ones count, but stay


def test_the_grace_period_is_checked() -> None:
    with pytest.raises(ValueError, match="grace_hours"):
        Limits(grace_hours=-1)
