#!/usr/bin/env python
"""One agent's latency per tool, through a light client and through the SDK's, beside the SDK floor.

    python bench/bench_latency.py --memories 10000 [--locomo ../shared/data/locomo] [--calls 200]
                                  [--rounds 5] [--out bench/RESULTS.md]

Issue 49 asks for read and write p50 <= 3 ms at 10,000 memories. A call's latency is the client's
work, the loopback HTTP and the server's work; which client is asked changes the first by a
millisecond or more. So this measures both, in one run, on the same servers:

- ``light``: raw JSON-RPC over one keep-alive HTTP/1.1 connection (bench_load.py's client, about a
  sixth of httpx's CPU a call), as a client in any language that keeps its connection does;
- ``sdk``: the official MCP Python client (``ClientSession`` over ``streamable_http_client``).

The servers: ``python -m memvault serve`` on one token of N memories (LoCoMo turns, or synthetic
prose; every vector made before the first timed call; MEMVAULT_CAPACITY=1000000000 so no sweep
moves a file) and bench/floor_server.py (a bare MCP SDK server whose one tool returns its text: the
floor of any call). Each round runs every (client, call) block of --calls / --rounds calls in turn,
one call at a time, so the machine's drift falls on each alike. Per block: the latency of each call
and the server's CPU (from /proc) over the block. Beside them, the disk's own durable create in the
vault's folder (write, fsync, link, fsync the folder): what no write with fsync can go under.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
from bench_load import Client, cpu_seconds, start, stop, write_tokens
from bench_read import fsync_once
from harness import call, client, free_port, machine_line, pct, update_results

MARK_START = "<!-- bench_latency:start -->"
MARK_END = "<!-- bench_latency:end -->"
TOKEN = "agent00"
CALLS = (
    "echo (floor)",
    "list_memory_titles",
    "read_memory (filename)",
    "read_memory (query)",
    "recall",
    "write_memory",
)

Caller = Callable[[str, dict[str, Any]], Awaitable[None]]


def light_caller(c: Client) -> Caller:
    async def go(tool: str, args: dict[str, Any]) -> None:
        why = await c.call(tool, args)
        if why is not None:
            raise RuntimeError(f"{tool} failed: {why}")

    return go


def sdk_caller(session: Any) -> Caller:
    async def go(tool: str, args: dict[str, Any]) -> None:
        await call(session, tool, args)

    return go


def wait_for_vectors(port: int, deadline_s: float) -> int:
    """Wait until the server on ``port`` has no memory waiting for a vector; the number left."""
    deadline = time.monotonic() + deadline_s
    pending = -1
    while time.monotonic() < deadline:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as reply:
            pending = int(json.loads(reply.read()).get("embeddings", {}).get("pending", 0))
        if pending == 0:
            return 0
        time.sleep(0.5)
    return pending


class Plan:
    """The arguments of each call: a random memory to read, a query to recall, a new memory to write."""

    def __init__(self, names: list[str], queries: list[str], seed: int) -> None:
        self.names, self.queries, self.rng, self.n = names, queries, random.Random(seed), 0

    def args(self, what: str) -> tuple[str, dict[str, Any]]:
        self.n += 1
        if what == "echo (floor)":
            return "echo", {"text": "x"}
        if what == "read_memory (filename)":
            return "read_memory", {"filenames": [self.rng.choice(self.names)]}
        if what == "read_memory (query)":  # as bench_scale.py's growth table reads
            return "read_memory", {"query": self.rng.choice(self.queries)}
        if what == "recall":
            return what, {"query": self.rng.choice(self.queries)}
        if what == "write_memory":
            body = " ".join(self.rng.choice(self.queries) for _ in range(3))
            return what, {"title": f"latency note {self.n}", "content": body}
        return what, {}


async def measure(args: argparse.Namespace, floor_port: int, mv_port: int, pids: dict[str, int], plan: Plan):
    """Every (client, call) block in turns; latencies and server CPU seconds per block."""
    lat: dict[tuple[str, str], list[float]] = defaultdict(list)
    cpu: dict[tuple[str, str], list[float]] = defaultdict(list)
    floor_url = f"http://127.0.0.1:{floor_port}/mcp/"
    mv_url = f"http://127.0.0.1:{mv_port}/mcp/{TOKEN}"
    async with contextlib.AsyncExitStack() as stack:
        callers: dict[tuple[str, str], Caller] = {}
        for server, url in (("floor", floor_url), ("memvault", mv_url)):
            light = Client(url)
            await light.start()
            stack.callback(light.http.close)
            callers["light", server] = light_caller(light)
            callers["sdk", server] = sdk_caller(await stack.enter_async_context(client(url)))
        per_block = max(1, args.calls // args.rounds)
        for _ in range(args.rounds):
            for kind in ("light", "sdk"):
                for what in CALLS:
                    server = "floor" if what == "echo (floor)" else "memvault"
                    go = callers[kind, server]
                    for _ in range(args.warmup):
                        await go(*plan.args(what))
                    cpu0 = cpu_seconds(pids[server])
                    for _ in range(per_block):
                        tool, call_args = plan.args(what)
                        t0 = time.perf_counter()
                        await go(tool, call_args)
                        lat[kind, what].append(time.perf_counter() - t0)
                    cpu[kind, what].append((cpu_seconds(pids[server]) - cpu0) / per_block)
    return lat, cpu


def report(args: argparse.Namespace, lat, cpu, disk: list[float], pending: int, command: str) -> str:
    ms = lambda s: f"{1000 * s:.2f}"  # noqa: E731
    lines = [
        f"## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: one agent's latency per tool, "
        f"{args.memories:,} memories, light and SDK clients (issue 49)",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine_line()}. Load average at the end: {os.getloadavg()[0]:.1f}. "
        f"{args.calls} timed calls per row in {args.rounds} rounds taken in turns; vectors pending "
        f"at the first timed call: {pending}.",
        "",
        "| client | call | p50 ms | p95 ms | p99 ms | server CPU ms a call (median of the rounds) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for kind in ("light", "sdk"):
        for what in CALLS:
            xs = lat[kind, what]
            lines.append(
                f"| {kind} | {what} | {ms(pct(xs, 0.5))} | {ms(pct(xs, 0.95))} | {ms(pct(xs, 0.99))} | "
                f"{ms(statistics.median(cpu[kind, what]))} |"
            )
    lines += [
        "",
        f"The disk's own durable create in the vault's folder: p50 {ms(pct(disk, 0.5))} ms, "
        f"p99 {ms(pct(disk, 0.99))} ms ({len(disk)} creates).",
        "",
        "Above the floor's empty call, p50 (the server's and the reply's share of each tool):",
        "",
        "| client | " + " | ".join(CALLS[1:]) + " |",
        "|---|" + "---:|" * (len(CALLS) - 1),
    ]
    for kind in ("light", "sdk"):
        floor = pct(lat[kind, "echo (floor)"], 0.5)
        above = (f"{1000 * (pct(lat[kind, w], 0.5) - floor):+.2f}" for w in CALLS[1:])
        lines.append(f"| {kind} | " + " | ".join(above) + " |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--locomo", type=Path)
    parser.add_argument("--calls", type=int, default=200, help="timed calls per (client, call) row")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3, help="untimed calls before each block")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    here = Path(__file__).resolve().parent
    work = Path(tempfile.mkdtemp(prefix="memvault-latency-"))
    floor = server = None
    try:
        docs = corpus.docs(args.locomo, args.memories, args.seed)
        root = work / "vault"
        names = write_tokens(root, 1, docs, args.memories, args.seed)[0]
        queries = [q for qs in corpus.pick_queries(docs, 100, args.seed).values() for q in qs]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
        floor_port, mv_port = free_port(), free_port()
        floor = start(
            [sys.executable, str(here / "floor_server.py"), "--port", str(floor_port)],
            env,
            floor_port,
            work / "floor.log",
        )
        mv_env = {
            **env,
            "MEMVAULT_ROOT": str(root),
            "MEMVAULT_PORT": str(mv_port),
            "MEMVAULT_CAPACITY": "1000000000",
            "MEMVAULT_LOG_LEVEL": "warning",
        }
        server = start([sys.executable, "-m", "memvault", "serve"], mv_env, mv_port, work / "memvault.log")
        pids = {"floor": floor.pid, "memvault": server.pid}

        async def load() -> None:
            c = Client(f"http://127.0.0.1:{mv_port}/mcp/{TOKEN}")
            await c.start()
            await c.call("list_memory_titles", {})
            c.http.close()

        asyncio.run(load())
        pending = wait_for_vectors(mv_port, 900)
        plan = Plan(names, queries, args.seed)
        lat, cpu = asyncio.run(measure(args, floor_port, mv_port, pids, plan))
        disk = [fsync_once(root / TOKEN, i) for i in range(args.calls)]
        command = "python bench/bench_latency.py " + shlex.join(
            a.replace(str(here.parent) + "/", "") for a in sys.argv[1:]
        )
        text = report(args, lat, cpu, disk, pending, command)
        print(text)
        if args.out:
            update_results(args.out, text, command, MARK_START, MARK_END, grouped=False)
        return 0
    finally:
        for proc in (server, floor):
            if proc is not None:
                stop(proc)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
