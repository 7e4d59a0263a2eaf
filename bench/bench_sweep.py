#!/usr/bin/env python
"""Reads during a large sweep (issue 12): what a user moving from mem-mcp sees on the first read.

    python bench/bench_sweep.py [--memories 10000] [--locomo DIR] [--out bench/RESULTS.md]

Writes N memories for one token, P2 and last read 40-60 days ago (past the 30-day TTL), as a
mem-mcp vault would hold them; starts the server in this process (default settings, capacity 50)
and makes the first read, which starts the background sweep that archives nearly all of them.
While it runs, one client reads (`read_memory` with a query, back to back) and every latency is
kept; reported: how long the sweep took, how many files it moved, and the reads' p50/p95/p99/max
during it.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
from harness import call, client, machine_line, ms, pct, serve, update_results

from memvault.config import Settings
from memvault.disk.markdown import render_new
from memvault.disk.names import slugify

TOKEN = "migrated"
MARK_START = "<!-- bench_sweep:start -->"
MARK_END = "<!-- bench_sweep:end -->"


def write_old_vault(folder: Path, docs: list[corpus.Doc], seed: int) -> None:
    rng = random.Random(seed)
    now = datetime.now(UTC)
    folder.mkdir(parents=True)
    for i, doc in enumerate(docs):
        created = now - timedelta(days=rng.uniform(60, 120))
        accessed = now - timedelta(days=rng.uniform(40, 60))
        fields = {"priority": "P2", "createdAt": created, "updatedAt": created, "lastAccessedAt": accessed}
        (folder / f"{slugify(doc.title)[:60]}-{i}.md").write_text(
            render_new(doc.title, doc.content, fields), encoding="utf-8"
        )


async def run(root: Path, words: list[str], limit: float) -> dict[str, float]:
    async with serve(Settings(root=root)) as server:
        service = server.app.state.service
        store = service.store
        async with client(f"{server.url}/mcp/{TOKEN}") as session:
            t0 = time.monotonic()
            first, _ = await call(session, "read_memory", {"query": words[0]})
            state = await store.state(TOKEN)
            latencies: list[float] = []
            rng = random.Random(1)
            # Until the sweep itself ends: the reads' own background work (writing lastAccessedAt
            # back into what they found) goes on as long as they come.
            while state.evicting and time.monotonic() - t0 < limit:
                elapsed, _ = await call(session, "read_memory", {"query": rng.choice(words)})
                latencies.append(elapsed)
            swept = time.monotonic() - t0
            await service.idle()
        archived = (
            sum(1 for _ in (root / TOKEN / "archive").iterdir()) if (root / TOKEN / "archive").exists() else 0
        )
    return {
        "first": first,
        "swept": swept,
        "archived": archived,
        "reads": len(latencies),
        "p50": pct(latencies, 0.5) if latencies else 0.0,
        "p95": pct(latencies, 0.95) if latencies else 0.0,
        "p99": pct(latencies, 0.99) if latencies else 0.0,
        "max": max(latencies, default=0.0),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--locomo", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--limit", type=float, default=600.0, help="stop reading after this many seconds")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="memvault-sweep-"))
    try:
        docs = corpus.docs(args.locomo, args.memories, args.seed)
        write_old_vault(work / "vault" / TOKEN, docs, args.seed)
        words = [w for d in docs[:2000] for w in d.content.split() if w.isalpha() and len(w) > 5][:2000]
        result = asyncio.run(run(work / "vault", words, args.limit))
        print(result)
        if args.out:
            command = f"python bench/bench_sweep.py --memories {args.memories}"
            command += (" --locomo ../shared/data/locomo" if args.locomo else "") + " --out bench/RESULTS.md"
            stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
            section = "\n".join(
                [
                    f"## {stamp}: reads during a sweep of {args.memories:,} stale memories (issue 12)",
                    "",
                    f"Command: `{command}`",
                    "",
                    f"Machine: {machine_line()}. Server and client in one process (the client's CPU counts "
                    "against the server's: a conservative figure).",
                    "",
                    f"The first read took {ms(result['first'])} ms and started the sweep; it archived "
                    f"{result['archived']:,} files in {result['swept']:.1f} s (a memory read since the "
                    f"sweep's plan stays hot). Meanwhile {result['reads']:,} reads, back to back:",
                    "",
                    "| p50 ms | p95 ms | p99 ms | max ms |",
                    "|---:|---:|---:|---:|",
                    "| " + " | ".join(ms(result[k]) for k in ("p50", "p95", "p99", "max")) + " |",
                    "",
                ]
            )
            update_results(args.out, section, command, MARK_START, MARK_END, grouped=False)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
