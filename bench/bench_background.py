#!/usr/bin/env python
"""Background work against requests (issue 49): the same load with memvault's background idle and working.

    python bench/bench_background.py [--agents 8,32] [--memories 1000] [--seconds 20] [--rounds 3]
                                     [--locomo DIR] [--out bench/RESULTS.md]

For each agent count N, one vault of N tokens x M memories, in two states that take turns, a fresh
copy and a fresh `python -m memvault serve` per turn (bench_load's light client and call mix, each
agent on its own token, for --seconds right after the tokens loaded):

- idle: every vector computed (the copy's sidecar holds them; the run starts once /healthz reports
  none pending), every memory read today (no access write-back is due), nothing stale and the
  capacity out of reach, and each token's last sweep recorded as just now (no lazy sweep runs);
- working: the same files and names, but no vector computed (a backlog for the embedding worker),
  every memory last read days ago (so the first read of each writes lastAccessedAt back), a
  share past the P2 TTL and another over MEMVAULT_CAPACITY (so each token's first read starts a
  lazy sweep that archives both).

Calls by filename (reads and updates) go to memories no sweep archives, so both states take the
same calls. Reported per state: the median over the rounds of calls/s, p50/p95/p99, and the
median of the per-round ratios working / idle; with what the background did in the window
(vectors pending before and after, the embedding worker's CPU, files archived, write-backs).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
from bench_load import (
    cpu_seconds,
    drive,
    embedding_state,
    memvault_plan,
    report,
    start,
    stop,
    write_tokens,
)
from harness import cpu_ticks, free_port, machine_line, ms, steal_share, update_results

from memvault.ops.sweeps import LAST_EVICTION
from memvault.records.sidecar import DB_NAME, SIDECAR_DIR, Sidecar

MARK_START = "<!-- bench_background:start -->"
MARK_END = "<!-- bench_background:end -->"
STATES = ("idle", "working")


@dataclass(frozen=True)
class Layout:
    """Which memories of a token are stale (past the P2 TTL), which go over capacity, which stay."""

    memories: int
    stale: float
    over: float

    @property
    def n_stale(self) -> int:
        return int(self.memories * self.stale)

    @property
    def n_over(self) -> int:
        return int(self.memories * self.over)

    @property
    def capacity(self) -> int:
        """The working state's MEMVAULT_CAPACITY: what is left once both shares are archived."""
        return self.memories - self.n_stale - self.n_over

    def kept(self, i: int) -> bool:
        return i >= self.n_stale + self.n_over

    def fields(self, working: bool) -> Any:
        """bench_load.write_tokens' fields_for: P2 for the shares a sweep may archive (stale ones
        last read 31-60 days ago, over-capacity ones 10-20 days ago), P1 last read 1-9 days ago for
        the rest; in the idle state every memory was read today."""

        def fields_for(i: int, now: datetime, rng: random.Random) -> dict[str, Any]:
            days = 31, 60
            if i >= self.n_stale:
                days = (10, 20) if i < self.n_stale + self.n_over else (1, 9)
            ago = timedelta(days=rng.uniform(*days))
            priority = "P1" if self.kept(i) else "P2"
            return {"priority": priority, "lastAccessedAt": now if not working else now - ago}

        return fields_for


PARTS = ("embed", "writeback", "sweep")


def env_for(
    base: dict[str, str], root: Path, port: int, state: str, layout: Layout, parts: set[str]
) -> dict[str, str]:
    """The server's settings; in the working state, a part left out of ``parts`` is switched off
    (no write-back; no sweep that archives anything)."""
    working = state == "working"
    env = {
        **base,
        "MEMVAULT_ROOT": str(root),
        "MEMVAULT_PORT": str(port),
        "MEMVAULT_CAPACITY": str(layout.capacity if working and "sweep" in parts else 1_000_000_000),
        "MEMVAULT_LOG_LEVEL": "warning",
    }
    if working and "sweep" not in parts:
        env["MEMVAULT_TTL_P2_DAYS"] = "100000"
    if working and "writeback" not in parts:
        env["MEMVAULT_ACCESS_WRITEBACK"] = "never"
    return env


def load_all(port: int, tokens: int) -> float:
    """Load every token (one list_memory_titles each, which reads no memory); the seconds it took."""
    urls = [f"http://127.0.0.1:{port}/mcp/agent{t:02d}" for t in range(tokens)]
    listing = ("list_memory_titles", {})
    t0 = time.monotonic()
    asyncio.run(drive(urls, 0, lambda i, rng: listing, warm=lambda i: listing))
    return time.monotonic() - t0


def wait_model(port: int, timeout: float = 120) -> None:
    """Wait until the server on ``port`` has loaded its embedding model (once requests pause, or
    LOAD_PATIENCE after they began): the turn measures the worker's batches, not the model's load."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as reply:
            if "(loading)" not in json.loads(reply.read()).get("embeddings", {}).get("name", ""):
                return
        time.sleep(0.2)
    raise RuntimeError("the embedding model did not load")


def wait_vectors(port: int, timeout: float) -> int:
    """Wait until the server on ``port`` has no memory waiting for a vector; what is left."""
    deadline = time.monotonic() + timeout
    while (pending := embedding_state(port)[0]) and time.monotonic() < deadline:
        time.sleep(0.5)
    return pending


def prepare(
    template: Path,
    base: dict[str, str],
    tokens: int,
    layout: Layout,
    state: str,
    work: Path,
    parts: set[str],
    idle: Path | None = None,
) -> None:
    """Give a template its derived state once (each round starts from a copy): the sidecar's
    parses and the snapshot for both; every vector and a sweep just done for the idle one. The
    working one is served with the built-in hash embedder, so WordLlama finds no vector of its own;
    without "embed" in ``parts`` it starts from the ``idle`` template's sidecar instead (the same
    texts: every vector is found there) and no sweep recorded."""
    embed = state == "idle" or "embed" not in parts
    if embed and state == "working" and idle is not None:
        for t in range(tokens):
            folder = template / f"agent{t:02d}" / SIDECAR_DIR
            folder.mkdir(exist_ok=True)
            shutil.copy2(idle / f"agent{t:02d}" / SIDECAR_DIR / DB_NAME, folder / DB_NAME)
            sidecar = Sidecar.open(template / f"agent{t:02d}")
            try:
                sidecar.set_state(LAST_EVICTION, "")
            finally:
                sidecar.close()
    port = free_port()
    env = env_for(base, template, port, state, layout, parts)
    if not embed:
        env["MEMVAULT_EMBEDDER"] = "hash"
    server = start([sys.executable, "-m", "memvault", "serve"], env, port, work / f"prepare-{state}.log")
    try:
        load_all(port, tokens)
        if embed and wait_vectors(port, 600):
            raise RuntimeError(f"the {state} template's vectors were not all computed in 10 minutes")
    finally:
        stop(server)
    if state == "idle":
        now = datetime.now(UTC).isoformat()
        for t in range(tokens):
            sidecar = Sidecar.open(template / f"agent{t:02d}")
            try:
                sidecar.set_state(LAST_EVICTION, now)
            finally:
                sidecar.close()


READ_TODAY = re.compile(r"^lastAccessedAt: *'?(\d{4}-\d{2}-\d{2})", re.MULTILINE)


def background_done(root: Path, tokens: int) -> tuple[int, int]:
    """Files archived, and hot files whose lastAccessedAt is today (written back, or written)."""
    today = datetime.now(UTC).date().isoformat()
    archived = read_today = 0
    for t in range(tokens):
        folder = root / f"agent{t:02d}"
        archived += sum(1 for _ in (folder / "archive").rglob("*.md")) if (folder / "archive").is_dir() else 0
        for path in folder.glob("*.md"):
            head = path.read_text(encoding="utf-8", errors="replace")[:600]
            match = READ_TODAY.search(head)
            read_today += bool(match and match.group(1) == today)
    return archived, read_today


def one_turn(
    args: argparse.Namespace,
    version: tuple[str, Path | None],
    state: str,
    template: Path,
    base: dict[str, str],
    tokens: int,
    layout: Layout,
    plan: Any,
    work: Path,
) -> dict[str, Any]:
    """A copy of the state's template, a fresh server (of ``version``: its label and the folder
    holding its memvault package, None for the installed one) on it, the tokens loaded, the load."""
    label, folder = version
    root = work / f"run-{state}"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(template, root, symlinks=True)
    _, read_before = background_done(root, tokens)
    port = free_port()
    env = env_for(base, root, port, state, layout, args.parts)
    if folder is not None:  # PYTHONPATH alone decides the package (started outside the repository)
        env["PYTHONPATH"] = str(folder.resolve())
    cmd = [sys.executable, "-m", "memvault", "serve"]
    server = start(cmd, env, port, work / f"serve-{label}-{state}.log", cwd=tempfile.gettempdir())
    try:
        loaded = load_all(port, tokens)
        wait_model(port)
        if (state == "idle" or "embed" not in args.parts) and wait_vectors(port, 300):
            raise RuntimeError(f"the {state} server's vectors were not all loaded in 5 minutes")
        urls = [f"http://127.0.0.1:{port}/mcp/agent{t:02d}" for t in range(tokens)]
        load_avg = os.getloadavg()[0]
        embed0 = embedding_state(port)
        cpu0, loop0, client0 = (
            cpu_seconds(server.pid),
            cpu_seconds(server.pid, task=server.pid),
            time.process_time(),
        )
        ticks = cpu_ticks()
        spy = None
        if args.spy:
            args.spy.mkdir(parents=True, exist_ok=True)
            name = f"{tokens}-{label or 'installed'}-{state}"
            out = args.spy / f"{name}-{len(list(args.spy.glob(name + '-*')))}.txt"
            spy_cmd = [shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy"), "record"]
            spy_cmd += ["-p", str(server.pid), "-d", str(int(args.seconds)), "-r", str(args.spy_rate)]
            spy_cmd += ["-f", "raw", "--threads", "-o", str(out)]
            spy = subprocess.Popen(spy_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        tally, elapsed = asyncio.run(drive(urls, args.seconds, plan))
        if spy is not None:
            spy.wait(60)
        steal = steal_share(ticks, cpu_ticks())
        embed1 = embedding_state(port)
        result = report(tally, elapsed)
        result |= {
            "version": label,
            "state": state,
            "loaded_s": loaded,
            "load_avg": load_avg,
            "steal": steal,
            "server_cpu": (cpu_seconds(server.pid) - cpu0) / elapsed,
            "loop_cpu": (cpu_seconds(server.pid, task=server.pid) - loop0) / elapsed,
            "client_cpu": (time.process_time() - client0) / elapsed,
            "pending": (embed0[0], embed1[0]),
            "embedding_cpu": (embed1[1] - embed0[1]) / elapsed,
        }
        # Counted before the server stops: at shutdown it writes back every access still queued.
        archived, read_after = background_done(root, tokens)
        result["archived"] = archived
        result["read_today"] = read_after - read_before
    finally:
        stop(server)
    shutil.rmtree(root, ignore_errors=True)
    return result


def run_size(
    args: argparse.Namespace,
    versions: list[tuple[str, Path | None]],
    agents: int,
    docs: list[corpus.Doc],
    words: list[str],
    work: Path,
) -> list[dict[str, Any]]:
    """Every (version, state) turn, ``--rounds`` times, the order turning by one each round."""
    layout = Layout(args.memories, args.stale, args.over)
    base = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    if args.embedder:
        base["MEMVAULT_EMBEDDER"] = args.embedder
    templates: dict[str, Path] = {}
    names: list[list[str]] = []
    for state in STATES:
        templates[state] = work / f"template-{agents}-{state}"
        t0 = time.monotonic()
        names = write_tokens(
            templates[state], agents, docs, args.memories, args.seed, layout.fields(state == "working")
        )
        prepare(templates[state], base, agents, layout, state, work, args.parts, templates.get("idle"))
        print(f"{agents} agents, {state} template: {time.monotonic() - t0:.1f} s", flush=True)
    kept = [[name for i, name in enumerate(mine) if layout.kept(i)] for mine in names]
    turns = [(version, state) for version in versions for state in STATES]
    runs: list[dict[str, Any]] = []
    for r in range(args.rounds):
        shift = r % len(turns)
        for version, state in turns[shift:] + turns[:shift]:
            # Every turn the same calls: the same seeds, the same counter for new titles.
            plan = memvault_plan(kept, words)
            result = one_turn(args, version, state, templates[state], base, agents, layout, plan, work)
            result["round"] = r
            runs.append(result)
            print(
                f"{agents} agents, round {r + 1}, {version[0] or 'installed'} {state}: "
                f"{result['rate']:.0f} calls/s, p50 {ms(result['p50'])} p99 {ms(result['p99'])} ms, "
                f"failed {result['failed']}, pending {result['pending']}, archived {result['archived']}, "
                f"written back {result['read_today']}, load {result['load_avg']:.2f}",
                flush=True,
            )
    for template in templates.values():
        shutil.rmtree(template, ignore_errors=True)
    return runs


def summarize(runs: list[dict[str, Any]], label: str) -> dict[str, Any]:
    """One version's figures: per state the median over rounds; the median of the per-round
    ratios working / idle."""
    out: dict[str, Any] = {}
    runs = [r for r in runs if r["version"] == label]
    for state in STATES:
        mine = [r for r in runs if r["state"] == state]
        out[state] = {
            key: statistics.median(r[key] for r in mine)
            for key in ("rate", "p50", "p95", "p99", "server_cpu", "loop_cpu", "embedding_cpu", "load_avg")
        }
        out[state]["failed"] = sum(r["failed"] for r in mine)
        out[state]["archived"] = statistics.median(r["archived"] for r in mine)
        out[state]["read_today"] = statistics.median(r["read_today"] for r in mine)
        out[state]["pending"] = (
            statistics.median(r["pending"][0] for r in mine),
            statistics.median(r["pending"][1] for r in mine),
        )
        out[state]["per_tool"] = {
            tool: (
                statistics.median(r["per_tool"][tool][1] for r in mine if tool in r["per_tool"]),
                statistics.median(r["per_tool"][tool][2] for r in mine if tool in r["per_tool"]),
            )
            for tool in sorted({t for r in mine for t in r["per_tool"]})
        }
    pairs = [
        (i, w)
        for i in runs
        if i["state"] == "idle"
        for w in runs
        if w["state"] == "working" and w["round"] == i["round"]
    ]
    out["ratio"] = {
        key: statistics.median(w[key] / i[key] for i, w in pairs) for key in ("rate", "p50", "p95", "p99")
    }
    out["ratio_p99_rounds"] = [w["p99"] / i["p99"] for i, w in pairs]
    return out


def write_section(args: argparse.Namespace, summaries: dict[tuple[int, str], dict[str, Any]]) -> None:
    command = (
        f"python bench/bench_background.py --agents {args.agents} --memories {args.memories} "
        f"--seconds {args.seconds:g} --rounds {args.rounds}"
        + "".join(f" --package {spec.split('=')[0]}=..." for spec in args.package or [])
        + (" --locomo ../shared/data/locomo" if args.locomo else "")
        + (f" --embedder {args.embedder}" if args.embedder else "")
        + (f" --parts {','.join(p for p in PARTS if p in args.parts)}" if args.parts != set(PARTS) else "")
        + " --out bench/RESULTS.md"
    )
    layout = Layout(args.memories, args.stale, args.over)
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    several = len(args.package or []) > 1
    lines = [
        f"## {stamp}: background work against requests (issue 49), {args.agents} agents x "
        f"{args.memories:,} memories",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine_line()}. The load average column is the machine's 1-minute load when "
        "each turn began (median over the rounds); other engineers' work shares these two cores.",
        "",
        f"Each agent on its own token, for {args.seconds:g} s right after the tokens loaded, bench_load's "
        "mix (55% read_memory, 15% recall, 10% list_memory_titles, 12% write_memory, 8% update_memory), "
        f"{args.rounds} rounds, "
        + ("each version in " if several else "")
        + "the two states in turns (the order turning by one each round), a fresh copy of the vault and "
        "a fresh server each turn. Idle: every vector in the sidecar (the turn starts once /healthz "
        "reports none pending), every memory read today, the last sweep just done. Both start once the "
        "embedding model is loaded. Working: no vector computed, memories last read 1-60 days ago "
        f"(first reads write lastAccessedAt back), {layout.n_stale} of each token's memories past the "
        f"P2 TTL and {layout.n_over} more over MEMVAULT_CAPACITY={layout.capacity} (each token's first "
        "read starts a lazy sweep that archives them). Medians over the rounds; the ratios are the "
        "medians of the per-round ratios working / idle. Target: p99 working <= 1.2 x idle."
        + (
            ""
            if args.parts == set(PARTS)
            else " In this run the working state does only: " + ", ".join(sorted(args.parts)) + " (the "
            "rest as in idle: vectors from the sidecar, MEMVAULT_ACCESS_WRITEBACK=never, nothing a "
            "sweep archives)."
        ),
        "",
        "| agents | version | state | calls/s | p50 ms | p95 ms | p99 ms | write p99 ms | failed "
        "| server cores | loop core | embedding core | vectors pending (start -> end) | archived "
        "| lastAccessedAt written | load avg |",
        "|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|",
    ]
    for (agents, label), summary in summaries.items():
        for state in STATES:
            s = summary[state]
            write_p99 = s["per_tool"].get("write_memory", (0.0, 0.0))[1]
            lines.append(
                f"| {agents} | {label or 'installed'} | {state} | {s['rate']:,.0f} | {ms(s['p50'])} "
                f"| {ms(s['p95'])} | {ms(s['p99'])} | {ms(write_p99)} | {s['failed']} "
                f"| {s['server_cpu']:.2f} | {s['loop_cpu']:.2f} | {s['embedding_cpu']:.3f} "
                f"| {s['pending'][0]:,.0f} -> {s['pending'][1]:,.0f} | {s['archived']:,.0f} "
                f"| {s['read_today']:,.0f} | {s['load_avg']:.2f} |"
            )
    lines += [
        "",
        "| agents | version | working / idle: calls/s | p50 | p95 | p99 | p99 per round |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    for (agents, label), summary in summaries.items():
        ratio = summary["ratio"]
        rounds = ", ".join(f"{x:.2f}" for x in summary["ratio_p99_rounds"])
        lines.append(
            f"| {agents} | {label or 'installed'} | {ratio['rate']:.2f} | {ratio['p50']:.2f} "
            f"| {ratio['p95']:.2f} | **{ratio['p99']:.2f}** | {rounds} |"
        )
    lines.append("")
    update_results(args.out, "\n".join(lines), command, MARK_START, MARK_END, grouped=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", default="8,32", help="agent counts, one token each (comma-separated)")
    parser.add_argument("--memories", type=int, default=1000, help="memories per token")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stale", type=float, default=0.1, help="share of each token past the P2 TTL")
    parser.add_argument("--over", type=float, default=0.1, help="share of each token over capacity")
    parser.add_argument("--embedder", help="MEMVAULT_EMBEDDER for both states (default: memvault's)")
    parser.add_argument("--locomo", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", type=Path, help="also write every turn's figures to this file")
    parser.add_argument(
        "--spy", type=Path, help="py-spy each turn's server (--threads, raw stacks) into this folder"
    )
    parser.add_argument(
        "--parts",
        default=",".join(PARTS),
        help="the background work the working state does, of " + ", ".join(PARTS) + " (the rest idle)",
    )
    parser.add_argument("--spy-rate", type=int, default=100, help="py-spy's samples a second")
    parser.add_argument(
        "--package",
        action="append",
        metavar="LABEL=DIR",
        help="a version to serve: DIR holds its memvault package (git archive <rev> memvault | tar -x "
        "-C DIR); repeat for several, taking turns with each other (default: the installed one)",
    )
    args = parser.parse_args()
    counts = [int(x) for x in args.agents.split(",")]
    args.parts = {p for p in args.parts.split(",") if p}
    if not args.parts <= set(PARTS):
        parser.error(f"--parts takes {', '.join(PARTS)}")
    versions: list[tuple[str, Path | None]] = [("", None)]
    if args.package:
        versions = [(spec.partition("=")[0], Path(spec.partition("=")[2])) for spec in args.package]

    work = Path(tempfile.mkdtemp(prefix="memvault-background-"))
    try:
        n_docs = min(max(counts) * args.memories, 20_000)
        docs = corpus.docs(args.locomo, n_docs, args.seed)
        words = [w for d in docs[:2000] for w in d.content.split() if w.isalpha() and len(w) > 5][:5000]
        runs = {agents: run_size(args, versions, agents, docs, words, work) for agents in counts}
        summaries = {
            (agents, label): summarize(r, label) for agents, r in runs.items() for label, _ in versions
        }
        for (agents, label), summary in summaries.items():
            ratio = summary["ratio"]
            print(
                f"{agents} agents, {label or 'installed'}: p99 idle {ms(summary['idle']['p99'])} ms, working "
                f"{ms(summary['working']['p99'])} ms, working / idle p99 {ratio['p99']:.2f} "
                f"(rounds {', '.join(f'{x:.2f}' for x in summary['ratio_p99_rounds'])}), "
                f"calls/s {ratio['rate']:.2f}"
            )
        if args.json:
            args.json.write_text(json.dumps(runs, indent=1, default=str))
        if args.out:
            write_section(args, summaries)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
