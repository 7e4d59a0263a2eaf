#!/usr/bin/env python
"""What one change buys per operation: two versions of memvault, side by side, in turns.

    python bench/bench_ops.py OLD NEW [--locomo DIR] [--rounds 15] [--writes]

OLD and NEW are folders that each hold a ``memvault`` package, for example two commits unpacked
with ``git archive <commit> memvault | tar -x -C <folder>``. Each runs in its own long-lived
process (``--worker``) on its own 1,000-memory token built as bench_load builds one (LoCoMo turns
with ``--locomo``, else synthetic prose), with every vector embedded.
Then the two take turns, ``--rounds`` times: each round times 100 recalls (bench_load's queries),
100 read_memory searches, 100 read_memory by filename and, with ``--writes``, 30 write_memory and
30 update_memory, through the store (no MCP), as CPU time of the calling thread per operation
(background threads are left out: they make a process-wide clock noisy). Reported per operation:
the minimum and median of each side and the median of the per-round ratios NEW / OLD. Turns keep
a shared machine's moods on both sides; a ratio of 1.00 +- 0.03 is noise here.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


async def worker(locomo: Path | None, writes: bool) -> None:
    """Build a token, wait for its vectors, then time one round per line on stdin."""
    sys.path.insert(0, str(HERE))
    import bench_load
    import corpus
    from opening import open_store

    from memvault.config import Settings

    docs = corpus.locomo_docs(locomo, 2000) if locomo else corpus.synthetic_docs(2000, 1)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        names = bench_load.write_tokens(root, 1, docs, 1000, 1)[0]
        words = [w for d in docs for w in d.content.split() if w.isalpha() and len(w) > 5][:5000]
        settings = Settings(root=root, capacity=10**9)
        opened = open_store(settings)
        store = opened.store
        # As the recall tool builds it: the configured reranker (MaxSim with WordLlama by default).
        try:
            from memvault.search.rerankers import Reranking

            recaller = opened.recaller(reranking=Reranking(settings.reranker))
        except ImportError:  # a version from before rerankers
            recaller = opened.recaller()
        await recaller.recall("agent00", "warm up", limit=10)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and opened.embeddings.pending():
            await asyncio.sleep(0.1)
        await asyncio.sleep(5)  # the worker's last clean-up (heap release)
        rng = random.Random(3)
        counter = [0]

        async def write(_: object) -> None:
            counter[0] += 1
            word = rng.choice(words)
            await store.write("agent00", title=f"Load note {counter[0]}", content=f"About {word}.")

        async def update(_: object) -> None:
            await store.update("agent00", rng.choice(names), tags=[rng.choice(words)[:20]])

        ops: dict[str, tuple[Callable[[Any], Awaitable[object]], list[Any]]] = {
            "recall": (
                lambda q: recaller.recall("agent00", q, limit=10),
                [f"what did they say about {rng.choice(words)}?" for _ in range(100)],
            ),
            "read_memory (query)": (
                lambda q: store.find("agent00", query=q),
                [rng.choice(words) for _ in range(100)],
            ),
            "read_memory (filename)": (
                lambda f: store.find("agent00", filenames=f),
                [[rng.choice(names)] for _ in range(100)],
            ),
        }
        if writes:
            ops["write_memory"] = (write, list(range(30)))
            ops["update_memory"] = (update, list(range(30)))
        print("ready", flush=True)
        for _ in sys.stdin:
            timings = []
            for name, (op, arguments) in ops.items():
                started = time.thread_time()
                for argument in arguments:
                    await op(argument)
                timings.append(f"{name}={(time.thread_time() - started) / len(arguments) * 1000:.4f}")
            print("\t".join(timings), flush=True)
        await opened.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path, help="a folder holding the memvault package to compare against")
    parser.add_argument("new", type=Path, help="a folder holding the memvault package to measure")
    parser.add_argument("--locomo", type=Path, help="LoCoMo conversations (else synthetic prose)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--writes", action="store_true", help="also write_memory and update_memory")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args.locomo, args.writes))
        return 0
    sides = [args.old.resolve(), args.new.resolve()]
    for side in sides:
        if not (side / "memvault" / "__init__.py").is_file():
            parser.error(f"{side} holds no memvault package")
    command = [sys.executable, __file__, "--worker", "x", "x"]  # x: the folders, unused by a worker
    command += ["--locomo", str(args.locomo.resolve())] if args.locomo else []
    command += ["--writes"] if args.writes else []
    sys.path.insert(0, str(HERE))
    import workers

    results = workers.rounds(command, sides, args.rounds)
    print(f"CPU ms per operation (calling thread), {args.rounds} rounds in turns")
    print(f"old: {sides[0].name}, new: {sides[1].name}")
    print("| operation | old min | old median | new min | new median | new / old (median of rounds) |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, old in results[0].items():
        new = results[1][name]
        ratio = statistics.median(b / a for a, b in zip(old, new, strict=True))
        print(
            f"| {name} | {min(old):.3f} | {statistics.median(old):.3f} | {min(new):.3f} | "
            f"{statistics.median(new):.3f} | {ratio:.2f} |"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
