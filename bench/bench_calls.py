#!/usr/bin/env python
"""Server CPU per call, tool by tool, for two (or more) versions of memvault in turns.

    git archive <old> memvault | tar -x -C /tmp/old
    python bench/bench_calls.py --package old=/tmp/old --package new=. --locomo ../shared/data/locomo \
        [--tokens 32] [--memories 1000] [--seconds 6] [--rounds 3] [--tool read_memory ...]
        [--profile FILE] [--spy FILE]

Builds bench_load's vault once (N tokens x M memories, last read 1-20 days ago); then, each round,
each version in turn: a copy of the vault, `python -m memvault serve` with PYTHONPATH at the
version's folder (the hash embedder, so the embedding worker is done before the timing starts),
every token loaded, then for each tool bench_load's clients (one per token, one keep-alive
connection each, raw JSON-RPC) call it alone for --seconds. Reported per version and tool: the
median over rounds of the server's CPU per call (the whole process, and its event-loop thread
alone), calls/s and p50; and the median of the per-round ratios against the first version.
CPU per call, not wall time: the machine is shared, and a busy neighbour slows both sides' wall
clocks alike but not the CPU a call costs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
from bench_load import cpu_seconds, drive, memvault_plan, start, stop, write_tokens
from harness import free_port, machine_line, pct

TOOLS = ("read_memory", "list_memory_titles")
# With --profile: the server under this wrapper, cProfile on its event-loop thread (the main
# thread, where Python runs signal handlers) from SIGUSR1 to SIGUSR2, which writes the stats.
PROFILED = """
import cProfile, os, signal, sys
profile, done = cProfile.Profile(), [0]
def begin(*_):
    profile.enable()
def end(*_):
    profile.disable()
    done[0] += 1
    profile.dump_stats(os.environ["BENCH_PROFILE"] + f".{done[0]}.tmp")
    os.rename(os.environ["BENCH_PROFILE"] + f".{done[0]}.tmp", os.environ["BENCH_PROFILE"] + f".{done[0]}")
    profile.clear()
signal.signal(signal.SIGUSR1, begin)
signal.signal(signal.SIGUSR2, end)
from memvault.cli.main import main
sys.exit(main(["serve"]))
"""
PROFILED_FLOOR = PROFILED.replace(
    'from memvault.cli.main import main\nsys.exit(main(["serve"]))',
    "import runpy\nsys.argv = sys.argv[1:]\nrunpy.run_path(sys.argv[0], run_name='__main__')",
)


def settle(port: int, deadline: float = 120.0) -> None:
    """Wait until the server's embedding worker has nothing pending (its /healthz)."""
    import json

    end = time.monotonic() + deadline
    while time.monotonic() < end:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as reply:
            if int(json.loads(reply.read()).get("embeddings", {}).get("pending", 0)) == 0:
                return
        time.sleep(0.2)


def wait_for(path: Path, deadline: float = 30.0) -> None:
    end = time.monotonic() + deadline
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.05)


def one_server(
    args: argparse.Namespace,
    package: Path,
    pristine: Path,
    work: Path,
    names: list[list[str]],
    words: list[str],
) -> dict[str, tuple[float, float, float, float]]:
    """Each tool's (process CPU ms a call, loop CPU ms a call, calls/s, p50 ms) on one server."""
    root = work / "vault"
    shutil.rmtree(root, ignore_errors=True)
    shutil.copytree(pristine, root)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    env |= {
        "BENCH_PROFILE": str(work / "profile"),
        "PYTHONPATH": str(package.resolve()),
        "MEMVAULT_ROOT": str(root),
        "MEMVAULT_PORT": str(port),
        "MEMVAULT_CAPACITY": "1000000000",
        "MEMVAULT_LOG_LEVEL": "warning",
        "MEMVAULT_EMBEDDER": args.embedder,
    }
    floor = package.name == "floor_server.py"
    if floor:
        cmd = [sys.executable, str(package)]
        cmd[1:1] = ["-c", PROFILED_FLOOR] if args.profile else []
    else:
        cmd = (
            [sys.executable, "-c", PROFILED] if args.profile else [sys.executable, "-m", "memvault", "serve"]
        )
    proc = start(
        cmd + (["--port", str(port)] if floor else []), env, port, work / "server.log", cwd=str(work)
    )
    try:
        full = [f"http://127.0.0.1:{port}/mcp/agent{t:02d}" for t in range(args.tokens)]
        empty = [f"http://127.0.0.1:{port}/mcp/empty{t:02d}" for t in range(args.tokens)]
        listing = ("list_memory_titles", {})
        if not floor:
            for urls in (full, empty):
                asyncio.run(drive(urls, 0, lambda i, rng: listing, warm=lambda i: listing))
            settle(port)
        out = {}
        for tool in args.tool:
            urls = empty if tool == "list_empty" else full
            plan = memvault_plan(names, words, "list_memory_titles" if tool == "list_empty" else tool)
            if floor:
                urls = [f"http://127.0.0.1:{port}/mcp/" for _ in range(args.tokens)]
                plan = lambda i, rng: ("echo", {"text": "hi"})  # noqa: E731
            if args.profile:
                os.kill(proc.pid, signal.SIGUSR1)
            spy = None
            if args.spy:
                spy_cmd = ["py-spy", "record", "-p", str(proc.pid), "-d", str(int(args.seconds)), "-r", "250"]
                spy_cmd += ["-f", "raw", "--threads", "-o", f"{args.spy}.{tool}.txt"]
                spy = subprocess.Popen(spy_cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            cpu0, loop0 = cpu_seconds(proc.pid), cpu_seconds(proc.pid, task=proc.pid)
            tally, elapsed = asyncio.run(drive(urls, args.seconds, plan))
            cpu, loop = cpu_seconds(proc.pid) - cpu0, cpu_seconds(proc.pid, task=proc.pid) - loop0
            if args.profile:
                os.kill(proc.pid, signal.SIGUSR2)
                dumped = Path(f"{env['BENCH_PROFILE']}.{len(out) + 1}")
                wait_for(dumped)
                dumped.replace(f"{args.profile}.{tool}.pstats")
            if spy is not None:
                spy.wait(60)
            values = tally.all()
            calls = max(1, len(values))
            if sum(tally.failed.values()):
                print(f"  {tool}: {sum(tally.failed.values())} failed: {dict(tally.reasons)}", flush=True)
            out[tool] = (1000 * cpu / calls, 1000 * loop / calls, calls / elapsed, 1000 * pct(values, 0.5))
        return out
    finally:
        stop(proc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--package",
        action="append",
        required=True,
        help="NAME=DIR (DIR holds memvault/); or 'floor', the bare SDK server (bench/floor_server.py)",
    )
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--memories", type=int, default=1000, help="memories per token")
    parser.add_argument("--seconds", type=float, default=6.0, help="per tool and server")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--tool",
        action="append",
        choices=["read_memory", "list_memory_titles", "list_empty", "recall"],
        help="list_empty: list_memory_titles on empty tokens, the call floor (default: read, list)",
    )
    parser.add_argument("--locomo", type=Path)
    parser.add_argument("--embedder", default="hash", help="MEMVAULT_EMBEDDER for the servers (default hash)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--profile",
        type=Path,
        help="cProfile the event loop while each tool is timed: FILE.<tool>.pstats (CPU figures then "
        "include the profiler's cost; compare them only with each other)",
    )
    parser.add_argument(
        "--spy", type=Path, help="py-spy (raw stacks, 250 Hz) each tool's timed run: FILE.<tool>.txt"
    )
    args = parser.parse_args()
    args.tool = args.tool or list(TOOLS)
    floor = Path(__file__).resolve().parent / "floor_server.py"
    packages = [
        (name, Path(folder) if folder else floor)
        for name, _, folder in (p.partition("=") for p in args.package)
    ]

    work = Path(tempfile.mkdtemp(prefix="memvault-calls-"))
    try:
        n_docs = min(args.tokens * args.memories, 20_000)
        docs = corpus.docs(args.locomo, n_docs, args.seed)
        pristine = work / "pristine"
        names = write_tokens(pristine, args.tokens, docs, args.memories, args.seed)
        words = [w for d in docs[:2000] for w in d.content.split() if w.isalpha() and len(w) > 5][:5000]
        print(machine_line(), flush=True)
        runs: dict[str, list[dict[str, tuple[float, float, float, float]]]] = {n: [] for n, _ in packages}
        for r in range(args.rounds):
            order = packages if r % 2 == 0 else packages[::-1]
            for name, folder in order:
                result = one_server(args, folder, pristine, work, names, words)
                runs[name].append(result)
                load = os.getloadavg()[0]
                for tool, (cpu, loop, rate, p50) in result.items():
                    print(
                        f"round {r + 1} {name:>8} {tool:<20} cpu {cpu:.3f} ms/call, loop {loop:.3f}, "
                        f"{rate:.0f} calls/s, p50 {p50:.1f} ms (load {load:.1f})",
                        flush=True,
                    )
        base = packages[0][0]
        print(f"\n| version | tool | CPU ms/call | loop CPU ms/call | calls/s | p50 ms | CPU / {base} |")
        print("|---|---|---:|---:|---:|---:|---:|")
        for tool in args.tool:
            for name, _ in packages:
                rows = [run[tool] for run in runs[name]]
                ratio = statistics.median(
                    run[tool][0] / b[tool][0] for run, b in zip(runs[name], runs[base], strict=True)
                )
                med: list[Any] = [statistics.median(x[i] for x in rows) for i in range(4)]
                print(
                    f"| {name} | {tool} | {med[0]:.3f} | {med[1]:.3f} | {med[2]:,.0f} | {med[3]:.1f} "
                    f"| {ratio:.2f} |"
                )
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
