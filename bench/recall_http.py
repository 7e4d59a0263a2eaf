#!/usr/bin/env python
"""recall over HTTP, two versions of memvault side by side: a server each, the same vault, in turns.

    git archive <old> memvault | tar -x -C /tmp/old && git archive <new> memvault | tar -x -C /tmp/new
    python bench/recall_http.py /tmp/old /tmp/new --locomo ../shared/data/locomo --memories 10000 --writes

Builds one token of N memories (bench/locomo.py's latency vault: LoCoMo turns cycled, written as
files), copies it for each version, and starts `python -m memvault serve` for each (with PYTHONPATH
at its package, every MEMVAULT_* variable cleared but MEMVAULT_CAPACITY, as bench_scale.py does).
Once both have their vectors, the two take turns: each round asks ``--calls`` LoCoMo questions of
one server, then the same of the other, through the official MCP client (`recall`, limit 10).
``--writes``: each recall follows a write_memory (untimed; the server's vectors made before the
recall, so both versions rank the same rows), as an agent that writes and recalls does. ``--spy
FILE``: py-spy (on PATH) records the new version's server through the rounds.

Per version: the median of the rounds' p50 and p95 over HTTP, the server's CPU per recall (from
/proc, summed over the recalls alone), and the median of the per-round ratios new / old. The
answers are compared question by question: the memories listed, in order.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx2
from harness import call, client, free_port, pct

HERE = Path(__file__).resolve().parent
TOKEN = "scale"
CLK_TCK = os.sysconf("SC_CLK_TCK")
LINE = re.compile(r"^(\S+\.md) \| ")


class Server:
    """One version's `memvault serve` on a copy of the vault."""

    def __init__(self, name: str, package: Path, root: Path) -> None:
        self.name, self.root = name, root
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
        env |= {"MEMVAULT_CAPACITY": "1000000000", "PYTHONPATH": str(package.resolve())}
        self.log = open(root.parent / f"{name}.log", "wb")  # closed in stop()
        command = [sys.executable, "-m", "memvault", "serve", "--root", str(root), "--port", str(self.port)]
        self.proc = subprocess.Popen(command, stdout=self.log, stderr=subprocess.STDOUT, env=env)

    def cpu(self) -> float:
        """The server's user + system CPU seconds, all threads."""
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    async def vectors_done(self, http: httpx2.AsyncClient, timeout: float = 1800.0) -> None:
        """Wait until the server answers and no memory waits for a vector."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                embeddings = (await http.get(self.base + "/healthz")).json()["embeddings"]
                if embeddings["pending"] == 0 and embeddings["dim"]:
                    return
            except (httpx2.HTTPError, ValueError, KeyError):
                pass
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{self.name}: vectors still pending after {timeout:.0f} s")

    async def answers(self, http: httpx2.AsyncClient, timeout: float = 120.0) -> None:
        """Wait until /healthz answers."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx2.HTTPError):
                if (await http.get(self.base + "/healthz")).status_code == 200:
                    return
            await asyncio.sleep(0.05)
        raise TimeoutError(f"{self.name}: no answer after {timeout:.0f} s")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


async def one_round(
    server: Server,
    session: Any,
    http: httpx2.AsyncClient,
    asks: list[tuple[str, str]],
    writes: bool,
    wait: bool = True,
) -> dict[str, Any]:
    """``asks``: (question, text to write first); the recalls' seconds, CPU and answers."""
    wall, cpu, answers = [], 0.0, []
    for question, content in asks:
        if writes:
            await call(session, "write_memory", {"title": content[:60], "content": content})
            if wait:
                await server.vectors_done(http)
        before = server.cpu()
        elapsed, reply = await call(session, "recall", {"query": question, "limit": 10})
        cpu += server.cpu() - before
        wall.append(elapsed)
        answers.append([m.group(1) for line in reply.splitlines() if (m := LINE.match(line))])
    return {
        "p50": statistics.median(wall),
        "p95": pct(wall, 0.95),
        "cpu": cpu / len(asks),
        "answers": answers,
    }


async def run(args: argparse.Namespace, root: Path) -> None:
    sys.path.insert(0, str(HERE))
    import locomo as bench

    conversations = [bench.load_conversation(p) for p in bench.conversation_files([args.locomo])]
    questions = [q.text for c in conversations for q in c.questions]
    turns = [t for c in conversations for t in c.turns]
    bench.write_scale_vault(root / "template" / TOKEN, conversations, args.memories)
    servers = []
    for name, package in (("old", args.old), ("new", args.new)):
        shutil.copytree(root / "template", root / name)
        servers.append(Server(name, package, root / name))
    rounds: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    load = []
    try:
        async with contextlib.AsyncExitStack() as stack:
            http = await stack.enter_async_context(httpx2.AsyncClient(timeout=30))
            sessions = {}
            for server in servers:
                await server.answers(http)
                session = await stack.enter_async_context(client(f"{server.base}/mcp/{TOKEN}"))
                sessions[server.name] = session
                await call(session, "recall", {"query": "warm up", "limit": 10})
                await server.vectors_done(http)
                for question in questions[:5]:
                    await call(session, "recall", {"query": question, "limit": 10})
            spy = spying(servers[1], args.spy) if args.spy else None
            for r in range(args.rounds):
                picks = [(r * args.calls + i) for i in range(args.calls)]
                asks = [(questions[i % len(questions)], f"w{i} {turns[i % len(turns)].text}") for i in picks]
                load.append(os.getloadavg()[0])
                for server in servers if r % 2 == 0 else servers[::-1]:
                    rounds[server.name].append(
                        await one_round(
                            server, sessions[server.name], http, asks, args.writes, not args.no_wait
                        )
                    )
            if spy is not None:
                spy.send_signal(signal.SIGINT)
                spy.wait(60)
    finally:
        for server in servers:
            server.stop()
    report(args, rounds, load)


def spying(server: Server, out: Path) -> subprocess.Popen[bytes]:
    """py-spy on ``server`` while the rounds run (collapsed stacks, every thread, idle ones left out)."""
    command = ["py-spy", "record", "--pid", str(server.proc.pid), "--rate", "250", "--threads"]
    command += ["--format", "raw", "--output", str(out)]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def report(args: argparse.Namespace, rounds: dict[str, list[dict[str, Any]]], load: list[float]) -> None:
    writes = ", a write before each" if args.writes else ""
    print(
        f"recall over HTTP at {args.memories:,} memories, {args.calls} LoCoMo questions a round{writes}, "
        f"{args.rounds} rounds in turns; load average {min(load):.1f}-{max(load):.1f}"
    )
    print("| version | p50 ms | p95 ms | server CPU ms per recall |")
    print("|---|---:|---:|---:|")
    for name in ("old", "new"):
        cells = [statistics.median(r[k] for r in rounds[name]) * 1000 for k in ("p50", "p95", "cpu")]
        print(f"| {name} ({getattr(args, name)}) | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    pairs = list(zip(rounds["old"], rounds["new"], strict=True))
    for k in ("p50", "cpu"):
        ratios = [b[k] / a[k] for a, b in pairs if a[k] > 0]
        print(f"new / old {k}, median of the rounds: {statistics.median(ratios):.2f}")
    differ = sum(x != y for a, b in pairs for x, y in zip(a["answers"], b["answers"], strict=True))
    print(f"answers: {differ} of {args.calls * args.rounds} lists differ (memories or order)")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("old", type=Path, help="a folder holding the memvault package to compare against")
    parser.add_argument("new", type=Path, help="a folder holding the memvault package to measure")
    parser.add_argument("--locomo", type=Path, required=True, help="a LoCoMo folder or .json file")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--calls", type=int, default=50, help="recalls per server a round (default 50)")
    parser.add_argument("--writes", action="store_true", help="a write_memory (untimed) before each recall")
    parser.add_argument(
        "--spy", type=Path, help="py-spy the new version's server during the rounds, into SPY"
    )
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="with --writes, recall while the write's vector is made (as bench_scale does; lists may differ)",
    )
    parser.add_argument("--dir", type=Path, help="parent folder for the vaults (default: system temp)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="recall-http-", dir=args.dir))
    try:
        asyncio.run(run(args, root))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
