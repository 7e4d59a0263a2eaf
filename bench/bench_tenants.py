#!/usr/bin/env python
"""Many tenants on one server (issue 49): 10,000 tokens of 100 memories each, agents touching them
round-robin through MEMVAULT_MAX_LOADED_TOKENS.

    python bench/bench_tenants.py [--tokens 10000] [--memories 100] [--agents 1000] [--loaded 100]
                                  [--rounds 3] [--root /tmp/memvault-tenants] [--out bench/RESULTS.md]

The vault is written once under ``--root`` (plain files, as a person's or a git clone's; reused
when its marker says it holds the same shape). Then one Store in this process (the server's
registry, sidecars, sweeps and write-backs, without HTTP: the HTTP layer is bench_load's) serves
``--agents`` concurrent agents; agent ``a`` owns tokens ``a, a + agents, a + 2 * agents, ...``
and visits them in turn, ``--rounds`` times: a read_memory query, and every fifth visit a
write_memory. A visit to a token that was not loaded is a cold first touch (its load included);
the rest are steady. It reports p50/p99 of both, the loaded tokens and the process's RSS as the
rounds go (flat once the cap has filled means bounded by the cap, not by the tenants), and checks
that every acknowledged write is in its token's folder and found by a query afterwards.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import machine_line, ms, pct, update_results

from memvault import heap
from memvault.config import Settings
from memvault.ops.service import Service

WORDS = (
    "harbour deploy postgres garden invoice kiwi walrus migration backup ticket review budget lisbon "
    "standup gazebo quarterly roadmap kernel compiler orchard bicycle ramen neovim gruvbox salmon"
).split()
STAMP = "2026-01-15T12:00:00.000Z"


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def token_name(i: int) -> str:
    return f"tenant-{i:05}"


def make_vault(root: Path, tokens: int, memories: int) -> float:
    """Write the vault unless the marker says it is there; returns the seconds it took."""
    marker = root / ".bench-tenants"
    shape = f"{tokens}x{memories}\n"
    if marker.exists() and marker.read_text() == shape:
        return 0.0
    start = time.perf_counter()
    rng = random.Random(49)
    root.mkdir(parents=True, exist_ok=True)
    for t in range(tokens):
        folder = root / token_name(t)
        folder.mkdir(exist_ok=True)
        for m in range(memories):
            words = " ".join(rng.choices(WORDS, k=30))
            (folder / f"note-{m:03}.md").write_text(
                f"---\npriority: P1\ncreatedAt: {STAMP}\nupdatedAt: {STAMP}\nlastAccessedAt: {STAMP}\n---\n"
                f"# Note {m} of {token_name(t)}\n\n{words} w{t}x{m}\n",
                encoding="utf-8",
            )
        if t % 1000 == 999:
            print(f"  wrote {t + 1:,} tokens", file=sys.stderr, flush=True)
    marker.write_text(shape)
    return time.perf_counter() - start


async def run(args: argparse.Namespace) -> str:
    root = Path(args.root)
    made = make_vault(root, args.tokens, args.memories)
    heap.configure()  # as `memvault serve` does
    settings = Settings(root=root).replace(max_loaded_tokens=args.loaded, watch=False)
    service = Service(settings)
    store = service.store
    cold: list[float] = []
    steady: list[float] = []
    writes: list[float] = []
    written: dict[str, list[str]] = {}
    lost: list[str] = []
    rss: list[tuple[int, float, int]] = []
    visits = 0
    rng = random.Random(7)

    async def agent(a: int) -> None:
        nonlocal visits
        mine = list(range(a, args.tokens, args.agents))[: args.visits]
        for round_ in range(args.rounds):
            for i, t in enumerate(mine):
                token = token_name(t)
                was_loaded = service.registry.loaded_or_loading(token)
                start = time.perf_counter()
                await store.find(token, query=f"{rng.choice(WORDS)} {rng.choice(WORDS)}")
                (steady if was_loaded else cold).append(time.perf_counter() - start)
                start = time.perf_counter()  # the agent's next call: its token is loaded now
                await store.find(token, query=f"{rng.choice(WORDS)} {rng.choice(WORDS)}")
                steady.append(time.perf_counter() - start)
                if (i + round_) % 5 == 0:
                    title = f"Agent {a} round {round_} visit {i}"
                    start = time.perf_counter()
                    w = await store.write(token, title=title, content=f"kept w{a}r{round_}v{i} {title}")
                    writes.append(time.perf_counter() - start)
                    written.setdefault(token, []).append(w.memory.id)
                visits += 1

    async def watch() -> None:
        while True:
            await asyncio.sleep(2)
            loaded = sum(1 for s in list(service.registry.states.values()) if s.loaded)
            rss.append((visits, rss_mb(), loaded))

    started = datetime.now(UTC)
    watcher = asyncio.create_task(watch())
    t0 = time.perf_counter()
    try:
        await asyncio.gather(*(agent(a) for a in range(args.agents)))
        elapsed = time.perf_counter() - t0
        await service.idle()
        gc.collect()
        rss.append((visits, rss_mb(), sum(1 for s in list(service.registry.states.values()) if s.loaded)))
        # Nothing lost: every acknowledged write is a file, and a query finds it.
        for token, ids in written.items():
            for id in ids:
                if not (root / token / id).is_file():
                    lost.append(f"{token}/{id}")
        for token, ids in list(written.items())[:200]:
            found = await store.find(token, filenames=ids)
            if found.missing:
                lost += [f"{token}/{id}" for id in found.missing]
    finally:
        watcher.cancel()
        await service.close()
        # The bench's own writes are taken back, so the next run starts from the same vault.
        for token, ids in written.items():
            for id in ids:
                (root / token / id).unlink(missing_ok=True)

    wrote = sum(len(ids) for ids in written.values())
    lines = [
        f"## {started:%Y-%m-%d %H:%M} UTC: {args.tokens:,} tenants x {args.memories} memories, "
        f"{args.agents:,} agents, cap {args.loaded} loaded"
        + (f", {args.visits} visits per agent a round" if args.visits else "")
        + " (issue 49)\n",
        f"Machine: {machine_line()}.",
        f"Vault written in {made:.0f} s (0: reused). {visits:,} visits ({wrote:,} writes) in "
        f"{elapsed:.1f} s, {visits / elapsed:,.0f} visits/s.\n",
        "| calls | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|",
    ]
    kinds = (
        ("read, cold first touch (load included)", cold),
        ("read, steady (token loaded)", steady),
        ("write", writes),
    )
    for name, values in kinds:
        if values:
            lines.append(
                f"| {name}: {len(values):,} | {ms(pct(values, 0.5))} | {ms(pct(values, 0.99))} "
                f"| {ms(max(values))} |"
            )
    lines += ["", "| visits so far | RSS MB | tokens loaded |", "|---:|---:|---:|"]
    step = max(1, len(rss) // 12)
    for done, mb, loaded in rss[::step] + rss[-1:]:
        lines.append(f"| {done:,} | {mb:.0f} | {loaded} |")
    named = f" ({', '.join(lost[:5])})" if lost else ""
    lines.append(f"\nLost acknowledged writes: {len(lost)}{named}.\n")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=10_000)
    parser.add_argument("--memories", type=int, default=100)
    parser.add_argument("--agents", type=int, default=1000)
    parser.add_argument("--loaded", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--visits", type=int, default=None, help="each agent visits at most this many of its tokens a round"
    )
    parser.add_argument("--root", default="/tmp/memvault-tenants")
    parser.add_argument("--out", default=None, help="add the section to this RESULTS.md")
    args = parser.parse_args()
    section = asyncio.run(run(args))
    print(section)
    if args.out:
        command = "python bench/bench_tenants.py " + " ".join(sys.argv[1:])
        update_results(
            Path(args.out),
            section,
            command,
            "<!-- bench_tenants:start -->",
            "<!-- bench_tenants:end -->",
            grouped=True,
        )


if __name__ == "__main__":
    main()
