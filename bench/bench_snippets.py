#!/usr/bin/env python
"""Recall's snippets on LongMemEval's long sessions: an earlier snippets module against this tree's, in turns.

    git archive <old> memvault | tar -x -C /tmp/old
    python bench/bench_snippets.py /tmp/old --longmemeval ../shared/data/longmemeval [--rounds 3]

For each LongMemEval question, the terms recall looks for (the question's, less the question words)
and ten of its haystack's sessions at random (fixed seed), each session as one text, as recall
shows them: one snippet per session, ten a recall. Each round times both modules over every
question, CPU per recall, twice: as new queries (every cache of compiled patterns emptied before
each question, as an agent's questions are new) and repeated (the caches kept). The snippets of
both are compared: they must be the same.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import statistics
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from memvault.ops.recall import QUESTION_WORDS  # noqa: E402
from memvault.search.text import terms_of  # noqa: E402


def module(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    found = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(found)
    return found


def cases(folder: Path, seed: int) -> list[tuple[set[str], list[str]]]:
    rng = random.Random(seed)
    out = []
    for path in sorted(folder.glob("*.json")):
        question = json.loads(path.read_text(encoding="utf-8"))
        haystack = question["haystack_sessions"]
        sessions = [" ".join(f"{t['role']}: {t['content']}" for t in s) for s in haystack]
        terms = set(terms_of(question["question"])) - QUESTION_WORDS
        out.append((terms, rng.sample(sessions, min(10, len(sessions)))))
    return out


def timed(snippets: ModuleType, work: list[tuple[set[str], list[str]]], new: bool) -> tuple[float, list[Any]]:
    """CPU seconds per recall (ten snippets), and the snippets."""
    caches = [getattr(snippets, n) for n in dir(snippets) if hasattr(getattr(snippets, n), "cache_clear")]
    made = []
    start = time.process_time()
    for terms, texts in work:
        if new:
            re.purge()
            for cache in caches:
                cache.cache_clear()
        made.append([snippets.snippet(text, terms) for text in texts])
    return (time.process_time() - start) / len(work), made


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("old", type=Path, help="a folder holding the memvault package to compare against")
    parser.add_argument("--longmemeval", type=Path, required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    versions = {
        "old": module(args.old / "memvault" / "search" / "snippets.py", "old_snippets"),
        "new": module(ROOT / "memvault" / "search" / "snippets.py", "new_snippets"),
    }
    work = cases(args.longmemeval, args.seed)
    cpu: dict[tuple[str, bool], list[float]] = {}
    made: dict[str, list[Any]] = {}
    for turn in range(args.rounds):
        order = list(versions) if turn % 2 == 0 else list(reversed(versions))
        for name in order:
            for new in (True, False):
                seconds, made[name] = timed(versions[name], work, new)
                cpu.setdefault((name, new), []).append(seconds)
    print(f"{len(work)} questions, 10 sessions each, {args.rounds} rounds in turns")
    print("| version | new queries: CPU ms a recall | repeated: CPU ms a recall |")
    print("|---|---:|---:|")
    for name in versions:
        new_q, rep = (1000 * statistics.median(cpu[name, flag]) for flag in (True, False))
        print(f"| {name} | {new_q:.2f} | {rep:.2f} |")
    print(f"the same snippets: {made['old'] == made['new']}")
    return 0 if made["old"] == made["new"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
