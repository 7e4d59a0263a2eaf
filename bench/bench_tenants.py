#!/usr/bin/env python
"""Many tenants on one server (issue 49): 10,000 tokens of 100 memories each, agents touching them
round-robin through MEMVAULT_MAX_LOADED_TOKENS.

    python bench/bench_tenants.py [--tokens 10000] [--memories 100] [--agents 1000] [--loaded 100]
                                  [--rounds 3] [--visits N] [--rate R] [--root /tmp/memvault-tenants]
                                  [--package LABEL=DIR ... --turns N] [--out bench/RESULTS.md]

The vault is written once under ``--root`` (plain files, as a person's or a git clone's; reused
when its marker says it holds the same memories per token and at least as many tokens). Then one
Store in this process (the server's registry, sidecars, sweeps and write-backs, without HTTP: the
HTTP layer is bench_load's) serves ``--agents`` agents; agent ``a`` owns tokens ``a, a + agents,
a + 2 * agents, ...`` (at most ``--visits`` of them) and visits them in turn, ``--rounds`` times:
a read_memory query, a second query (the agent's next call), and every fifth visit a
write_memory. A visit to a token that was not loaded is a cold first touch (its load included);
the rest are steady. The process is set up as `memvault serve` sets itself up (glibc, the GIL's
switch interval, the start-up's objects frozen), with the embedding model loaded before the clock
starts.

Two ways to drive it:

- closed loop (the default): every agent calls back to back, all at once. With 10,000 tokens
  under a cap of 100 every visit is a load, so this is a saturation test: a cold first touch waits
  behind the other agents' loads, and its latency is the queue (agents / loads per second).
- open loop (``--rate R``): visits arrive at R per second across all agents (exponential gaps,
  fixed seed: a Poisson stream), in the closed loop's order, each started on time whether or not
  the earlier ones are done; latency is counted from the arrival, so it is the latency at a
  stated load. The section gives the rate the server sustained (visits done per second) and the
  most visits in flight; a backlog that grows means R is past what the server sustains.

It reports p50/p99 of each kind of call, the process's CPU per visit, the loaded tokens and the
process's RSS as the visits go (flat once the cap has filled means bounded by the cap, not by the
tenants), the load average, and checks that every acknowledged write is in its token's folder and
found by a query afterwards (the bench's own writes are removed afterwards).

``--package LABEL=DIR`` (repeat; DIR holds a ``memvault`` package, e.g. from ``git archive <rev>
memvault | tar -x -C DIR``, or ``.`` for the installed one) runs each version ``--turns`` times
in its own process, taking turns in a rotating order, and reports each one's medians over its
runs and the median of the per-turn ratios of the last version to the first.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

WORDS = (
    "harbour deploy postgres garden invoice kiwi walrus migration backup ticket review budget lisbon "
    "standup gazebo quarterly roadmap kernel compiler orchard bicycle ramen neovim gruvbox salmon"
).split()
STAMP = "2026-01-15T12:00:00.000Z"
KINDS = (
    ("cold", "read, cold first touch (load included)"),
    ("steady", "read, steady (token loaded)"),
    ("write", "write"),
)


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def token_name(i: int) -> str:
    return f"tenant-{i:05}"


def make_vault(root: Path, tokens: int, memories: int) -> float:
    """Write the vault unless the marker says it is there; returns the seconds it took."""
    marker = root / ".bench-tenants"
    if marker.exists():
        had, _, per = marker.read_text().strip().partition("x")
        if per == str(memories) and had.isdigit() and int(had) >= tokens:
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
    marker.write_text(f"{tokens}x{memories}\n")
    return time.perf_counter() - start


def pct(values: list[float], q: float) -> float:
    from harness import pct as nearest_rank

    return nearest_rank(values, q)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    """One run in this process: the figures, in seconds and MB."""
    from memvault import heap
    from memvault.config import Settings
    from memvault.ops.service import Service
    from memvault.server import limits

    root = Path(args.root)
    made = make_vault(root, args.tokens, args.memories)
    # As `memvault serve` starts: glibc's threshold, the GIL's switch interval, the imports and
    # the service kept out of the collector's way, and (before the clock starts) the embedding
    # model loaded, which a server does in its first pause.
    heap.configure()
    limits.favour_the_event_loop()
    settings = Settings(root=root).replace(max_loaded_tokens=args.loaded, watch=False)
    service = Service(settings)
    store = service.store
    heap.keep()
    await asyncio.to_thread(service.embeddings.load)
    times: dict[str, list[float]] = {"cold": [], "steady": [], "write": []}
    written: dict[str, list[str]] = {}
    lost: list[str] = []
    rss: list[tuple[int, float, int]] = []
    visits = 0
    in_flight = 0
    most_in_flight = 0
    rng = random.Random(7)
    per_agent = [list(range(a, args.tokens, args.agents))[: args.visits] for a in range(args.agents)]

    async def visit(a: int, round_: int, i: int, arrived: float | None = None) -> None:
        """One agent's visit to its i-th token; ``arrived``: when it was due (open loop)."""
        nonlocal visits, in_flight, most_in_flight
        in_flight += 1
        most_in_flight = max(most_in_flight, in_flight)
        token = token_name(per_agent[a][i])
        was_loaded = service.registry.loaded_or_loading(token)
        start = time.perf_counter() if arrived is None else arrived
        await store.find(token, query=f"{rng.choice(WORDS)} {rng.choice(WORDS)}")
        times["steady" if was_loaded else "cold"].append(time.perf_counter() - start)
        start = time.perf_counter()  # the agent's next call: its token is loaded now
        await store.find(token, query=f"{rng.choice(WORDS)} {rng.choice(WORDS)}")
        times["steady"].append(time.perf_counter() - start)
        if (i + round_) % 5 == 0:
            title = f"Agent {a} round {round_} visit {i}"
            start = time.perf_counter()
            w = await store.write(token, title=title, content=f"kept w{a}r{round_}v{i} {title}")
            times["write"].append(time.perf_counter() - start)
            written.setdefault(token, []).append(w.memory.id)
        visits += 1
        in_flight -= 1

    async def closed_loop() -> None:
        async def agent(a: int) -> None:
            for round_ in range(args.rounds):
                for i in range(len(per_agent[a])):
                    await visit(a, round_, i)

        await asyncio.gather(*(agent(a) for a in range(args.agents)))

    backlog_at_last_arrival = 0

    async def open_loop() -> None:
        """Visits arrive as a Poisson stream of ``args.rate`` a second, in the closed loop's order
        (round by round, each agent's i-th token before any agent's next)."""
        nonlocal backlog_at_last_arrival
        arrivals = random.Random(11)
        order = [
            (a, round_, i)
            for round_ in range(args.rounds)
            for i in range(max(len(mine) for mine in per_agent))
            for a in range(args.agents)
            if i < len(per_agent[a])
        ]
        tasks: set[asyncio.Task[None]] = set()
        due = time.perf_counter()
        for a, round_, i in order:
            due += arrivals.expovariate(args.rate)
            wait = due - time.perf_counter()
            if wait > 0:
                await asyncio.sleep(wait)
            task = asyncio.create_task(visit(a, round_, i, arrived=due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        backlog_at_last_arrival = in_flight
        await asyncio.gather(*list(tasks))

    async def watch() -> None:
        while True:
            await asyncio.sleep(2)
            loaded = sum(1 for s in list(service.registry.states.values()) if s.loaded)
            rss.append((visits, rss_mb(), loaded))

    started = datetime.now(UTC)
    loads = [load_average()]
    watcher = asyncio.create_task(watch())
    cpu0 = cpu_seconds()
    t0 = time.perf_counter()
    try:
        await (open_loop() if args.rate else closed_loop())
        elapsed = time.perf_counter() - t0
        cpu = cpu_seconds() - cpu0
        loads.append(load_average())
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

    # RSS once the cap has filled: from the first sample with the cap's tokens loaded.
    full = next((k for k, (_, _, loaded) in enumerate(rss) if loaded >= args.loaded), len(rss) - 1)
    after_fill = [mb for _, mb, _ in rss[full:]]
    return {
        "started": started.isoformat(),
        "made": made,
        "visits": visits,
        "writes": sum(len(ids) for ids in written.values()),
        "elapsed": elapsed,
        "cpu": cpu,
        "rate": args.rate,
        "most_in_flight": most_in_flight,
        "backlog_at_last_arrival": backlog_at_last_arrival,
        "loads": loads,
        "times": times,
        "rss": rss,
        "rss_after_fill": [min(after_fill), max(after_fill)] if after_fill else None,
        "unloads": service.registry.unloads,
        "lost": lost,
        "memvault": str(Path(sys.modules["memvault"].__file__ or "").parent),
    }


def shape(args: argparse.Namespace) -> str:
    return (
        f"{args.tokens:,} tenants x {args.memories} memories, {args.agents:,} agents, "
        f"cap {args.loaded} loaded"
        + (f", {args.visits} visits per agent a round" if args.visits else "")
        + (f", {args.rounds} rounds" if args.rounds != 1 else ", 1 round")
        + (f", open loop at {args.rate:g} visits/s" if args.rate else ", closed loop")
    )


def section(args: argparse.Namespace, figures: dict[str, Any]) -> str:
    from harness import machine_line, ms

    started = datetime.fromisoformat(figures["started"])
    visits, elapsed = figures["visits"], figures["elapsed"]
    lines = [
        f"## {started:%Y-%m-%d %H:%M} UTC: {shape(args)} (issue 49)\n",
        f"Machine: {machine_line()}. Load average (1/5/15 min) {figures['loads'][0]} at the start, "
        f"{figures['loads'][1]} at the end.",
        f"Vault written in {figures['made']:.0f} s (0: reused). {visits:,} visits ({figures['writes']:,} "
        f"writes) in {elapsed:.1f} s: **{visits / elapsed:,.1f} visits/s sustained**"
        + (f" (offered {args.rate:g}/s" if args.rate else "")
        + (
            f"; at most {figures['most_in_flight']:,} in flight, "
            f"{figures['backlog_at_last_arrival']:,} when the last one arrived)"
            if args.rate
            else ""
        )
        + f"; process CPU {1000 * figures['cpu'] / max(1, visits):.1f} ms per visit; "
        f"{figures['unloads']:,} unloads.\n",
        "| calls | p50 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|",
    ]
    for kind, name in KINDS:
        values = figures["times"][kind]
        if values:
            lines.append(
                f"| {name}: {len(values):,} | {ms(pct(values, 0.5))} | {ms(pct(values, 0.99))} "
                f"| {ms(max(values))} |"
            )
    lines += ["", "| visits so far | RSS MB | tokens loaded |", "|---:|---:|---:|"]
    rss = figures["rss"]
    step = max(1, len(rss) // 12)
    for done, mb, loaded in rss[::step] + rss[-1:]:
        lines.append(f"| {done:,} | {mb:.0f} | {loaded} |")
    if figures["rss_after_fill"]:
        low, high = figures["rss_after_fill"]
        lines.append(f"\nRSS once the cap had filled: {low:.0f}-{high:.0f} MB.")
    lost = figures["lost"]
    named = f" ({', '.join(lost[:5])})" if lost else ""
    lines.append(f"\nLost acknowledged writes: {len(lost)}{named}.\n")
    return "\n".join(lines) + "\n"


def summary(figures: dict[str, Any]) -> dict[str, float]:
    """The figures compared across versions (ms, visits/s, MB)."""
    out = {
        "visits/s": figures["visits"] / figures["elapsed"],
        "CPU ms/visit": 1000 * figures["cpu"] / max(1, figures["visits"]),
    }
    for kind, _ in KINDS:
        values = figures["times"][kind]
        if values:
            out[f"{kind} p50"] = 1000 * pct(values, 0.5)
            out[f"{kind} p99"] = 1000 * pct(values, 0.99)
    if figures["rss_after_fill"]:
        out["RSS max after fill"] = figures["rss_after_fill"][1]
    out["lost"] = len(figures["lost"])
    return out


def in_turns(args: argparse.Namespace, argv: list[str]) -> str:
    """Each --package's version in its own process, --turns times, in a rotating order."""
    from harness import machine_line

    packages = [spec.partition("=")[::2] for spec in args.package]
    child_args: list[str] = []
    skip = False
    for arg in argv:  # this command without --package, --turns and --out
        if skip:
            skip = False
            continue
        if arg in ("--package", "--turns", "--out"):
            skip = True
            continue
        if arg.startswith(("--package=", "--turns=", "--out=")):
            continue
        child_args.append(arg)
    runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _ in packages}
    loads = [load_average()]
    started = datetime.now(UTC)
    for turn in range(args.turns):
        order = packages[turn % len(packages) :] + packages[: turn % len(packages)]
        for label, folder in order:
            env = dict(os.environ)
            if folder not in ("", "."):
                env["PYTHONPATH"] = str(Path(folder).resolve())
            with tempfile.NamedTemporaryFile(suffix=".json") as out:
                cmd = [sys.executable, str(HERE / "bench_tenants.py"), *child_args, "--json", out.name]
                subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
                figures = json.loads(Path(out.name).read_text())
            runs[label].append(figures)
            s = summary(figures)
            print(
                f"turn {turn + 1} {label} ({figures['memvault']}): "
                + ", ".join(f"{k} {v:,.2f}" for k, v in s.items())
                + f"; load {figures['loads'][0]}",
                file=sys.stderr,
                flush=True,
            )
    loads.append(load_average())
    summaries = {label: [summary(f) for f in figs] for label, figs in runs.items()}
    first, last = packages[0][0], packages[-1][0]
    keys = list(summaries[first][0])
    lines = [
        f"## {started:%Y-%m-%d %H:%M} UTC: {shape(args)}, "
        + " against ".join(label for label, _ in packages)
        + f", {args.turns} turns (issue 49)\n",
        f"Machine: {machine_line()}. Load average (1/5/15 min) {loads[0]} at the start, {loads[1]} at "
        "the end. Each version in its own process, in turns (rotating order); medians over its runs, "
        f"and the median of the per-turn ratios {last} / {first}.\n",
        "| figure | " + " | ".join(label for label, _ in packages) + f" | {last} / {first} |",
        "|---|" + "---:|" * (len(packages) + 1),
    ]
    for key in keys:
        medians = [
            statistics.median([s[key] for s in summaries[label] if key in s] or [0.0])
            for label, _ in packages
        ]
        ratios = [
            b[key] / a[key]
            for a, b in zip(summaries[first], summaries[last], strict=True)
            if a.get(key) and key in b
        ]
        ratio = f"{statistics.median(ratios):.2f}" if ratios else "-"
        lines.append(f"| {key} | " + " | ".join(f"{m:,.2f}" for m in medians) + f" | {ratio} |")
    per_run = "; ".join(
        f"{label}: " + ", ".join(f"{s['cold p99']:,.0f}" for s in summaries[label] if "cold p99" in s)
        for label, _ in packages
    )
    lines.append(f"\nCold first touch p99 per run (ms), {per_run}.\n")
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
    parser.add_argument(
        "--rate",
        type=float,
        default=None,
        help="open loop: visits arriving per second across all agents (default: closed loop)",
    )
    parser.add_argument("--root", default="/tmp/memvault-tenants")
    parser.add_argument(
        "--package",
        action="append",
        help="LABEL=DIR: a version to run (DIR holds its memvault package; . for the installed one); "
        "repeat for several, taking turns",
    )
    parser.add_argument("--turns", type=int, default=3, help="runs of each --package version")
    parser.add_argument("--json", default=None, help=argparse.SUPPRESS)  # a turn's figures, for the parent
    parser.add_argument("--out", default=None, help="add the section to this RESULTS.md")
    args = parser.parse_args()
    if args.package:
        make_vault(Path(args.root), args.tokens, args.memories)  # once, before the turns
        text = in_turns(args, sys.argv[1:])
    else:
        figures = asyncio.run(run(args))
        if args.json:
            Path(args.json).write_text(json.dumps(figures))
            return
        text = section(args, figures)
    print(text)
    if args.out:
        from harness import update_results

        command = "python bench/bench_tenants.py " + " ".join(sys.argv[1:])
        update_results(
            Path(args.out),
            text,
            command,
            "<!-- bench_tenants:start -->",
            "<!-- bench_tenants:end -->",
            grouped=True,
        )


if __name__ == "__main__":
    main()
