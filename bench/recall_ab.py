#!/usr/bin/env python
"""recall at 10,000 memories, two versions of memvault in turns, each in its own process.

    git archive <old> memvault | tar -x -C /tmp/old && git archive <new> memvault | tar -x -C /tmp/new
    python bench/recall_ab.py /tmp/old /tmp/new --locomo ../shared/data/locomo --rounds 10

Each version builds a token of N memories (``--memories``, bench/locomo.py's 10,000-memory vault:
LoCoMo turns cycled, written as files), waits for its vectors with its own default
configuration, then the two take turns: each round asks 60 LoCoMo questions through the tool's
body (``Recaller.recall``, limit 10). Per version: the median of the rounds' p50 wall time and the
process CPU per call; and the median of the per-round ratios new / old, which a noisy machine
affects alike.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


async def worker(locomo: Path, memories: int) -> None:
    sys.path.insert(0, str(HERE))
    import locomo as bench
    from opening import open_store

    from memvault.config import Settings
    from memvault.search.rerankers import Reranking

    conversations = [bench.load_conversation(p) for p in bench.conversation_files([locomo])]
    questions = [q.text for c in conversations for q in c.questions]
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        bench.write_scale_vault(root / "scale", conversations, memories)
        settings = Settings(root=root, capacity=10**9)
        opened = open_store(settings)
        # As the recall tool builds it: the configured reranker (MaxSim with WordLlama by default).
        recaller = opened.recaller(reranking=Reranking(settings.reranker))
        await recaller.recall("scale", "warm up", limit=10)
        while opened.embeddings.pending():
            await asyncio.sleep(0.2)
        for question in questions[:20]:
            await recaller.recall("scale", question, limit=10)
        print("ready", flush=True)
        asked = 0
        for _ in sys.stdin:
            wall = []
            cpu = time.process_time()
            for _ in range(60):
                started = time.perf_counter()
                await recaller.recall("scale", questions[asked % len(questions)], limit=10)
                wall.append(time.perf_counter() - started)
                asked += 1
            p50 = statistics.median(wall) * 1000
            print(json.dumps({"p50": p50, "cpu": (time.process_time() - cpu) / 60 * 1000}), flush=True)
        await opened.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("old", type=Path, help="a folder holding the memvault package to compare against")
    parser.add_argument("new", type=Path, help="a folder holding the memvault package to measure")
    parser.add_argument("--locomo", type=Path, required=True)
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args.locomo, args.memories))
        return 0
    procs = {}
    for name, folder in (("old", args.old), ("new", args.new)):
        env = {**os.environ, "PYTHONPATH": str(folder.resolve())}
        command = [
            sys.executable,
            __file__,
            str(folder),
            str(folder),
            "--worker",
            "--locomo",
            str(args.locomo),
        ]
        command += ["--memories", str(args.memories)]
        procs[name] = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
    for proc in procs.values():
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in procs}
    for _ in range(args.rounds):
        for name, proc in procs.items():
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            rounds[name].append(json.loads(proc.stdout.readline()))
    print(f"recall at {args.memories:,} memories, {args.rounds} rounds of 60 questions in turns")
    print("| version | p50 ms (median of rounds) | CPU ms per call |")
    print("|---|---:|---:|")
    for name, proc in procs.items():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
        p50 = statistics.median(r["p50"] for r in rounds[name])
        cpu = statistics.median(r["cpu"] for r in rounds[name])
        print(f"| {name} ({getattr(args, name)}) | {p50:.1f} | {cpu:.1f} |")
    ratio = statistics.median(b["p50"] / a["p50"] for a, b in zip(rounds["old"], rounds["new"], strict=True))
    print(f"new / old p50, median of the rounds: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
