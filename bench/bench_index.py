#!/usr/bin/env python
"""Index.search and Index.scores(every=False): an earlier search/index.py against this tree's, in turns.

    git show <old>:memvault/search/index.py > /tmp/old_index.py
    python bench/bench_index.py /tmp/old_index.py --locomo ../shared/data/locomo --memories 10000 100000

One index of N LoCoMo memories (bench/corpus.py's, seed 7) per size, built once and restored from
its snapshot by both versions (the old module's other imports are this tree's). Per round, every
query of corpus.pick_queries (all kinds) through both versions, the order swapped each round:
search as read_memory calls it (limit 10) and scores as recall does (every=False, near="missing",
limit 500). CPU per call (process time), median over calls and rounds; the answers of both must
be the same, scores bit for bit.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import corpus  # noqa: E402

from memvault.search.index import Index  # noqa: E402


def module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    found = importlib.util.module_from_spec(spec)
    sys.modules[name] = found  # dataclasses look their module up
    spec.loader.exec_module(found)
    return found


def cpu_us(call: Any) -> tuple[float, Any]:
    start = time.process_time_ns()
    out = call()
    return (time.process_time_ns() - start) / 1000, out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="an earlier memvault/search/index.py")
    parser.add_argument("--locomo", type=Path, default=None, help="LoCoMo data (else synthetic prose)")
    parser.add_argument("--memories", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--queries", type=int, default=50, help="queries per kind")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    old_index = module(args.old, "old_index")
    for n in args.memories:
        docs = corpus.docs(args.locomo, n, 7)
        built = Index()
        for i, doc in enumerate(docs):
            built.upsert(f"m/{i}.md", title=doc.title, body=doc.content)
        arrays = built.snapshot().arrays()
        versions = {"old": old_index.Index.from_snapshot(arrays), "new": Index.from_snapshot(arrays)}
        queries = [q for qs in corpus.pick_queries(docs, args.queries, 7).values() for q in qs]
        calls = {
            "search": lambda ix, q: ix.search(q, limit=10),
            "scores": lambda ix, q: ix.scores(q, limit=500, every=False, near="missing"),
        }
        times: dict[tuple[str, str], list[float]] = {(c, v): [] for c in calls for v in versions}
        for r in range(args.rounds):
            order = list(versions) if r % 2 == 0 else list(versions)[::-1]
            for q in queries:
                for c, call in calls.items():
                    out = {}
                    for v in order:
                        us, out[v] = cpu_us(lambda ix=versions[v], call=call, q=q: call(ix, q))
                        times[c, v].append(us)
                    if c == "search":
                        hits = {v: [(h.id, h.score, h.matched_all) for h in out[v][0]] for v in out}
                        assert hits["old"] == hits["new"] and out["old"][1] == out["new"][1], q
                    else:
                        assert out["old"][0] == out["new"][0], q
                        assert np.array_equal(out["old"][1].view(np.uint32), out["new"][1].view(np.uint32)), q
        print(f"{n} memories, {len(queries)} queries x {args.rounds} rounds: CPU per call, median (us)")
        for c in calls:
            old, new = statistics.median(times[c, "old"]), statistics.median(times[c, "new"])
            print(f"  {c:7s} old {old:8.1f}  new {new:8.1f}  ({old / new:.1f}x)")


if __name__ == "__main__":
    main()
