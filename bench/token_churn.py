#!/usr/bin/env python
"""Memory under token churn, in one process (issue 35): does it follow the loaded tokens only?

    python bench/token_churn.py [--tokens 4000] [--loaded 25] [--every 500] [--reranker maxsim]

A server's store with ``--loaded`` tokens kept loaded serves ``--tokens`` new tokens one after another:
each is written once (a short note with a word of its own), searched and recalled, so it is
loaded and, later, unloaded. Every ``--every`` tokens, after the store is idle and a collection,
prints the process's RSS and glibc's own counts (``mallinfo2``: bytes in use and free in its
arenas, bytes in mmapped blocks), which see what lives outside Python (SQLite, tokenizers) that
tracemalloc cannot. Memory that follows the loaded tokens is flat once ``--loaded`` are loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import random
import tempfile
from pathlib import Path

from memvault import heap
from memvault.config import Settings
from memvault.ops.recall import Recaller
from memvault.ops.service import Service

WORDS = "harbour deploy postgres garden invoice kiwi walrus migration backup ticket review budget".split()


def rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def run(args: argparse.Namespace) -> None:
    if heap.counts() is None:
        raise SystemExit("glibc's mallinfo2 is not available here")
    root = Path(tempfile.mkdtemp(prefix="memvault-churn-")) / "vault"
    root.mkdir()
    heap.configure()  # as `memvault serve` does
    service = Service(Settings(root=root).replace(max_loaded_tokens=args.loaded, reranker=args.reranker))
    store = service.store
    recaller = Recaller(store, service.registry, service.embeddings)
    rng = random.Random(35)
    print("| tokens served | RSS MB | glibc in use MB | glibc free MB | glibc mmapped MB | loaded |")
    print("|---:|---:|---:|---:|---:|---:|")
    try:
        for i in range(args.tokens + 1):
            token = f"t{i}"
            words = " ".join(rng.choices(WORDS, k=20))
            await store.write(token, title=f"note {rng.choice(WORDS)}", content=f"{words} w{i}x")
            await store.find(token, query=rng.choice(WORDS))
            await recaller.recall(token, " ".join(rng.choices(WORDS, k=3)))
            if i % args.every == 0:
                await service.idle()
                gc.collect()
                info = heap.counts()
                assert info is not None
                loaded = sum(1 for s in service.registry.states.values() if s.loaded)
                print(
                    f"| {i:,} | {rss_mb():.1f} | {info.in_use / 2**20:.1f} | {info.free / 2**20:.1f} "
                    f"| {info.mapped / 2**20:.1f} | {loaded} |",
                    flush=True,
                )
    finally:
        await service.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument("--loaded", type=int, default=25)
    parser.add_argument("--every", type=int, default=500)
    parser.add_argument("--reranker", default="maxsim")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
