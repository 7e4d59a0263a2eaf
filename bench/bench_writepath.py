#!/usr/bin/env python
"""write_memory and update_memory, CPU per call by thread, two versions in turns (issue 49).

    git archive <old> memvault | tar -x -C /tmp/old && git archive <new> memvault | tar -x -C /tmp/new
    python bench/bench_writepath.py /tmp/old /tmp/new --memories 10000 --locomo ../shared/data/locomo
    python bench/bench_writepath.py --cprofile /tmp/new --op update ...   (one version, cProfiled)

Each folder holds a ``memvault`` package; each runs in its own process (``--worker``) with one
token of N memories built as bench_load builds one, the whole service around the store (the
watcher on inotify, the embedding worker, the access recorder), every vector made first. Then the
versions take turns: each round makes ``--calls`` writes, then as many updates (a tag each, of
existing memories), ``--pace`` seconds apart (as agents' calls come, so the watcher's batches and
the embedder's gathering see what they see in a server), through the store without MCP, and waits
until the watcher and the embedder are idle. Per call: the process's CPU (every thread, the
background ones too), the event loop's, each other thread's (from /proc, 10 ms ticks: read the
medians), and the calls' median wall time. Taking turns gives both sides a noisy machine alike.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent


def thread_cpu() -> dict[str, float]:
    """CPU seconds of each of this process's threads, by a short name of the thread."""
    tick = os.sysconf("SC_CLK_TCK")
    names = {
        t.native_id: t.name if not t.name.startswith("Thread-") else type(t).__name__
        for t in threading.enumerate()
    }
    out: dict[str, float] = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        name = names.get(int(tid), "other")
        name = "loop" if name == "MainThread" else "anyio" if name.startswith("AnyIO") else name
        name = "embedder" if "embed" in name else "watchdog" if name.startswith(("Inotify", "_")) else name
        out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


async def setup(args: argparse.Namespace) -> tuple[Any, Any, list[str], list[str]]:
    sys.path.insert(0, str(HERE))
    import bench_load
    import corpus

    from memvault.config import Settings
    from memvault.ops.service import Service

    n = args.memories
    docs = corpus.locomo_docs(args.locomo, n + 500) if args.locomo else corpus.synthetic_docs(n + 500, 1)
    root = Path(tempfile.mkdtemp(prefix="bench-writepath-"))
    names = bench_load.write_tokens(root, 1, docs, n, 1)[0]
    words = [w for d in docs for w in d.content.split() if w.isalpha() and len(w) > 5][:5000]
    service = Service(Settings(root=root, capacity=10**9, embedder=args.embedder))
    watcher = service.watcher()
    await service.start()
    await service.store.find("agent00", query="hello")
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and service.embeddings.pending():
        await asyncio.sleep(0.1)
    await asyncio.sleep(2)
    return service, watcher, names, words


async def settle(service: Any, watcher: Any) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (watcher.idle and not service.embeddings.pending()):
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.4)


async def worker(args: argparse.Namespace) -> None:
    service, watcher, names, words = await setup(args)
    store, rng, counter = service.store, random.Random(3), [0]

    async def write() -> None:
        counter[0] += 1
        title = f"Load note {counter[0]} {rng.choice(words)}"
        await store.write(
            "agent00", title=title, content=f"About {rng.choice(words)} and {rng.choice(words)}."
        )

    async def update() -> None:
        await store.update("agent00", rng.choice(names), tags=[rng.choice(words)[:20]])

    unread = names[:]
    random.Random(5).shuffle(unread)
    state = await store.state("agent00")

    async def read() -> None:  # a memory last read days ago: its lastAccessedAt is written back
        found = await store.find("agent00", filenames=[unread.pop()])
        await store.touch("agent00", found.memories)

    async def written_back() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and (state.pending.files or state.pending.draining):
            await asyncio.sleep(0.01)
        await settle(service, watcher)

    ops = [("write_memory", write), ("update_memory", update), ("read_writeback", read)]
    print("ready", flush=True)
    for _ in sys.stdin:
        out = []
        for name, op in ops[: 3 if args.writeback else 2]:
            await written_back()
            threads, process, loop = thread_cpu(), time.process_time(), time.thread_time()
            walls = []
            for _ in range(args.calls):
                started = time.perf_counter()
                await op()
                walls.append(time.perf_counter() - started)
                await asyncio.sleep(args.pace)
            loop = time.thread_time() - loop
            await written_back()
            process, after = time.process_time() - process, thread_cpu()
            per = 1000 / args.calls
            out += [f"{name} process={process * per:.4f}", f"{name} loop={loop * per:.4f}"]
            out += [f"{name} {k}={(after[k] - threads.get(k, 0.0)) * per:.4f}" for k in after if k != "loop"]
            out.append(f"{name} wall={statistics.median(walls) * 1000:.4f}")
        print("\t".join(out), flush=True)
    await service.close()


async def profile(args: argparse.Namespace) -> None:
    service, _, names, words = await setup(args)
    rng, prof = random.Random(3), cProfile.Profile()
    for i in range(args.calls):
        if args.op == "write":
            call = service.store.write(
                "agent00", title=f"Note {i} {rng.choice(words)}", content=rng.choice(words)
            )
        else:
            call = service.store.update("agent00", rng.choice(names), tags=[rng.choice(words)[:20]])
        prof.enable()
        await call
        prof.disable()
        await asyncio.sleep(args.pace)
    await service.close()
    pstats.Stats(prof).sort_stats("tottime").print_stats(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sides", nargs="*", type=Path, help="folders each holding a memvault package")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--locomo", type=Path, help="LoCoMo conversations (else synthetic prose)")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=150, help="writes, then updates, a round")
    parser.add_argument("--pace", type=float, default=0.01, help="seconds between calls")
    parser.add_argument("--embedder", default="hash")
    parser.add_argument("--cprofile", type=Path, help="cProfile this version's calls instead")
    parser.add_argument("--op", choices=["write", "update"], default="write")
    parser.add_argument(
        "--writeback", action="store_true", help="also read_memory of memories last read days ago"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.locomo:
        args.locomo = args.locomo.resolve()
    if args.worker:
        asyncio.run(worker(args))
        return 0
    if args.cprofile:
        sys.path.insert(0, str(args.cprofile.resolve()))
        asyncio.run(profile(args))
        return 0
    command = [
        sys.executable,
        __file__,
        "--worker",
        "--memories",
        str(args.memories),
        "--calls",
        str(args.calls),
    ]
    command += ["--pace", str(args.pace), "--embedder", args.embedder]
    command += ["--locomo", str(args.locomo)] if args.locomo else []
    command += ["--writeback"] if args.writeback else []
    sys.path.insert(0, str(HERE))
    import workers

    results = workers.rounds(command, list(args.sides), args.rounds)
    print(
        f"CPU ms per call (wall: median ms), medians of {args.rounds} rounds in turns, "
        f"load {os.getloadavg()[0]:.1f}"
    )
    print("| call, thread | " + " | ".join(side.name for side in args.sides) + " |")
    print("|---|" + "---:|" * len(args.sides))
    for name in results[0]:
        cells = [f"{statistics.median(r.get(name, [0.0])):.2f}" for r in results]
        print(f"| {name} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
