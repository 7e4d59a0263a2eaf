"""The sweep's plan over a vault decides what the straightforward algorithm decides (issue 49).

The plan now builds candidates only for memories a rule can touch; the reference below builds one
for every memory and runs the policy as it was, and on random vaults both must agree exactly:
the same evictions, in the same order, with the same reasons, and the same conflicted ones held.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st
from strategies import PROPS

from memvault.disk.markdown import Memory
from memvault.ops.eviction import Eviction, Limits
from memvault.ops.sweeps import CONFLICT_HELD, Evicted, plan_memories

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


# ---------------------------------------------------------------------------- the reference


@dataclasses.dataclass(frozen=True)
class Ref:
    id: str
    priority: str
    last_access: datetime
    importance: float | None
    pinned: bool
    written: datetime | None


def ref_rank(priority: str) -> str:
    p = priority.strip().upper()
    return p if p in ("P0", "P1") else "P2"


def ref_policy(refs: Sequence[Ref], now: datetime, limits: Limits) -> list[Eviction]:
    """Every memory a candidate; TTL evictions oldest first, then capacity, P2 before P1."""

    def protected(r: Ref) -> bool:
        important = r.importance is not None and r.importance >= limits.protect_importance
        return r.pinned or ref_rank(r.priority) == "P0" or important

    def fresh(r: Ref) -> bool:
        return r.written is not None and (now - r.written) / timedelta(hours=1) < limits.grace_hours

    ttl = {"P1": limits.ttl_p1_days, "P2": limits.ttl_p2_days}
    evictable = sorted(
        (r for r in refs if not protected(r) and not fresh(r)), key=lambda r: (r.last_access, r.id)
    )
    out: list[Eviction] = []
    kept: list[Ref] = []
    for r in evictable:
        rank, age = ref_rank(r.priority), now - r.last_access
        if age / DAY > ttl[rank]:
            since = r.last_access.astimezone(UTC).date().isoformat()
            out.append(
                Eviction(
                    r.id, f"{rank}, not accessed for {age // DAY} days since {since} (TTL {ttl[rank]:g} days)"
                )
            )
        else:
            kept.append(r)
    hot = len(refs) - len(out)
    for r in sorted(kept, key=lambda r: (ref_rank(r.priority) != "P2", r.last_access, r.id)):
        if hot <= limits.capacity:
            break
        last = r.last_access.astimezone(UTC).date().isoformat()
        out.append(
            Eviction(
                r.id,
                f"over capacity ({hot} hot > {limits.capacity}): least recently accessed "
                f"{ref_rank(r.priority)}, last accessed {last}",
            )
        )
        hot -= 1
    return out


def reference(
    memories: Sequence[Memory], recorded: Mapping[str, datetime], now: datetime, limits: Limits
) -> tuple[list[Eviction], list[Evicted]]:
    refs = []
    for m in memories:
        accessed = m.last_accessed_at
        seen = recorded.get(m.id)
        if seen is not None and (accessed is None or seen >= accessed):
            accessed = seen
        if accessed is None:
            accessed = m.updated_at or m.created_at or now
        known = [t for t in (m.created_at, m.updated_at) if t is not None]
        written = max(known) if known else None
        refs.append(
            Ref(m.id, m.priority, accessed, m.importance, m.conflicted or not m.has_frontmatter, written)
        )
    plan = ref_policy(refs, now, limits)
    conflicted = {m.id for m in memories if m.conflicted and m.has_frontmatter}
    freed = [dataclasses.replace(r, pinned=r.pinned and r.id not in conflicted) for r in refs]
    held = [Evicted(e.id, CONFLICT_HELD, None) for e in ref_policy(freed, now, limits) if e.id in conflicted]
    return plan, held


# ---------------------------------------------------------------------------- random vaults

# Whole hours keep ties and TTL edges common; a microsecond either side tests the edges themselves.
times = st.one_of(
    st.none(),
    st.builds(
        lambda h, us: NOW - timedelta(hours=h, microseconds=us),
        st.integers(-48, 24 * 200),
        st.sampled_from([0, 0, 1, -1, 500, 999_999]),
    ),
)
memory = st.builds(
    lambda priority, created, updated, accessed, importance, frontmatter, conflicted: dict(
        priority=priority,
        created_at=created,
        updated_at=updated,
        last_accessed_at=accessed,
        importance=importance,
        has_frontmatter=frontmatter,
        conflicted=conflicted,
    ),
    st.sampled_from(["P0", "P1", "P2", "p1", " p0 ", "other", ""]),
    times,
    times,
    times,
    st.one_of(st.none(), st.sampled_from([0.0, 0.5, 0.89, 0.9, 1.0]), st.just(math.nan)),
    st.sampled_from([True, True, True, False]),
    st.sampled_from([False, False, False, True]),
)


@st.composite
def vaults(draw: st.DrawFn) -> tuple[list[Memory], dict[str, datetime]]:
    fields = draw(st.lists(memory, max_size=60))
    memories = [Memory(id=f"m{i:03}.md", title="t", content="", **f) for i, f in enumerate(fields)]
    recorded = {}
    for m in memories:
        seen = draw(times)
        if seen is not None:
            recorded[m.id] = seen
    return memories, recorded


days = st.one_of(
    st.integers(0, 150).map(float), st.sampled_from([0.5, 29.99, 90.25, 1e-9, 1e12]), st.just(math.inf)
)
limits_st = st.builds(
    Limits,
    ttl_p1_days=days,
    ttl_p2_days=days,
    capacity=st.integers(0, 70),
    protect_importance=st.sampled_from([0.0, 0.5, 0.9, 1.0]),
    grace_hours=st.one_of(
        st.integers(0, 72).map(float), st.sampled_from([0.5, 1e-9, 1e15]), st.just(math.inf)
    ),
)


@st.composite
def vaults_and_limits(draw: st.DrawFn) -> tuple[list[Memory], dict[str, datetime], Limits]:
    """Capacity is mostly near the vault's size, where whether it bites is decided."""
    memories, recorded = draw(vaults())
    limits = draw(limits_st)
    near = draw(st.one_of(st.integers(-4, 2).map(lambda d: max(0, len(memories) + d)), st.just(None)))
    if near is not None:
        limits = dataclasses.replace(limits, capacity=near)
    return memories, recorded, limits


@PROPS
@given(vaults_and_limits())
def test_the_plan_decides_what_the_straightforward_algorithm_decides(
    case: tuple[list[Memory], dict[str, datetime], Limits],
) -> None:
    memories, recorded, limits = case
    assert plan_memories(memories, recorded, NOW, limits) == reference(memories, recorded, NOW, limits)


def test_a_stale_vault_over_capacity_is_planned_in_full() -> None:
    old = NOW - timedelta(days=40)
    memories = [
        Memory(id=f"m{i:03}.md", title="t", content="", priority="P2", created_at=old, last_accessed_at=old)
        for i in range(120)
    ]
    plan, held = plan_memories(memories, {}, NOW, Limits(capacity=50))
    assert plan == reference(memories, {}, NOW, Limits(capacity=50))[0]
    assert len(plan) == 120 and held == []


def test_a_conflicted_memory_is_reported_held_whichever_rule_would_move_it() -> None:
    old = NOW - timedelta(days=40)
    memories = [
        Memory(id="c.md", title="t", content="", priority="P2", last_accessed_at=old, conflicted=True)
    ]
    memories += [
        Memory(id=f"m{i}.md", title="t", content="", priority="P0", last_accessed_at=NOW) for i in range(3)
    ]
    assert plan_memories(memories, {}, NOW, Limits()) == ([], [Evicted("c.md", CONFLICT_HELD, None)])
    fresh = [dataclasses.replace(memories[0], last_accessed_at=NOW), *memories[1:]]
    assert plan_memories(fresh, {}, NOW, Limits(capacity=3)) == ([], [Evicted("c.md", CONFLICT_HELD, None)])
