#!/usr/bin/env python
"""The eviction plan's cost per token, old against new (issue 49).

    python bench/bench_plan.py [--sizes 1000,10000] [--runs 15]

Times ``sweeps.plan_memories`` (candidates only for what a rule can touch) against the plan as it
was (a candidate for every memory, then the policy), on the same in-memory vaults, pure Python, no
I/O; prints the median of ``--runs`` runs per case and the ratio. Cases, default limits
(capacity 50, TTL 90/30 days, grace 24 hours) unless said:

- just written: every memory written in the last hours (a load run's tokens, the 32-agent bench);
- under capacity: capacity raised to the vault's size, accesses 0-45 days ago (a few P2 expire);
- stale import: every memory 40-400 days old, past the grace period (nearly all archived): the
  case the prefilter cannot help, there to show it costs nothing.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memvault.disk.markdown import Memory
from memvault.ops import eviction
from memvault.ops.access import last_access
from memvault.ops.sweeps import CONFLICT_HELD, Evicted, plan_memories

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def old_plan(
    memories: Sequence[Memory], recorded: dict[str, datetime], now: datetime, limits: eviction.Limits
) -> tuple[list[eviction.Eviction], list[Evicted]]:
    """The plan before issue 49: a candidate for every memory (Sweeps._plan as it was)."""
    candidates = [
        eviction.Candidate(
            id=m.id,
            priority=m.priority,
            last_access=last_access(m, recorded.get(m.id)) or now,
            importance=m.importance,
            pinned=m.conflicted or not m.has_frontmatter,
            written=_later(m.created_at, m.updated_at),
        )
        for m in memories
    ]
    plan = eviction.plan(candidates, now, limits)
    conflicted = {m.id for m in memories if m.conflicted and m.has_frontmatter}
    held: list[Evicted] = []
    if conflicted:
        freed = [
            eviction.Candidate(**{**_fields(c), "pinned": c.id not in conflicted and c.pinned})
            for c in candidates
        ]
        held = [
            Evicted(e.id, CONFLICT_HELD, None)
            for e in eviction.plan(freed, now, limits)
            if e.id in conflicted
        ]
    return plan, held


def _fields(c: eviction.Candidate) -> dict[str, object]:
    return {name: getattr(c, name) for name in eviction.Candidate.__slots__}


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    if a is None or b is None:
        return a or b
    return max(a, b)


def vault(size: int, case: str, rnd: random.Random) -> tuple[list[Memory], dict[str, datetime]]:
    memories = []
    recorded: dict[str, datetime] = {}
    for i in range(size):
        priority = rnd.choice(["P0", "P1", "P1", "P2", "P2", "P2"])
        if case == "just written":
            written = NOW - timedelta(minutes=rnd.uniform(0, 600))
            accessed = written
        elif case == "under capacity":
            written = NOW - timedelta(days=rnd.uniform(1, 400))
            accessed = NOW - timedelta(days=rnd.uniform(0, 45))
        else:  # stale import
            written = NOW - timedelta(days=rnd.uniform(40, 400))
            accessed = written
        memories.append(
            Memory(
                id=f"memory-{i:05}.md",
                title=f"Memory {i}",
                content="",
                priority=priority,
                created_at=written,
                updated_at=written,
                last_accessed_at=accessed,
                importance=rnd.choice([None, None, 0.5, 0.95]),
            )
        )
        if rnd.random() < 0.3:
            recorded[f"memory-{i:05}.md"] = accessed + timedelta(hours=1)
    return memories, recorded


def median_ms(fn: Callable[..., object], args: tuple[object, ...], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn(*args)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    print("| memories | case | old ms | new ms | old / new | evicted |")
    print("|---:|---|---:|---:|---:|---:|")
    for size in (int(s) for s in args.sizes.split(",")):
        for case in ("just written", "under capacity", "stale import"):
            memories, recorded = vault(size, case, random.Random(size))
            limits = eviction.Limits(capacity=size if case == "under capacity" else 50)
            old = old_plan(memories, recorded, NOW, limits)
            new = plan_memories(memories, recorded, NOW, limits)
            assert old == new, f"plans differ: {case}, {size}"
            inputs = (memories, recorded, NOW, limits)
            old_ms = median_ms(old_plan, inputs, args.runs)
            new_ms = median_ms(plan_memories, inputs, args.runs)
            ratio = old_ms / new_ms
            print(
                f"| {size:,} | {case} | {old_ms:.2f} | {new_ms:.2f} | {ratio:.1f}x | {len(new[0]):,} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
