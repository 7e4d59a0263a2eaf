#!/usr/bin/env python
"""Issue 49: parse_memory's CPU per file, this tree's against an earlier commit's, in turns in one process.

    python bench/bench_parse.py --vault /tmp/parse-vault --memories 20000 \
        --locomo /work/shared/data/locomo --before 6de4f9c --rounds 5

The vault (N memories of one token, as bench_scale writes them) is written once and reused. Every
file is read into memory first; each round then parses all of them as a loader helper does
(``keep_meta=False``, the file's stat stamps) with one version, then the other (the order swaps
every round), and takes the process's CPU time per file. ``before`` is memvault/disk/markdown.py
at that commit (``git show``), loaded as a module of its own; every Memory of both versions is
compared field by field (repr) before the rounds. Prints the medians and the median per-round ratio.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus

from memvault.disk import markdown
from memvault.disk.files import file_stamp

Parse = Callable[..., Any]


def module_at(commit: str) -> types.ModuleType:
    """memvault.disk.markdown as it was at ``commit``, imported under another name."""
    source = subprocess.run(
        ["git", "show", f"{commit}:memvault/disk/markdown.py"], capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType("markdown_before")
    sys.modules[module.__name__] = module  # dataclasses looks its module up
    exec(compile(source, f"{commit}:memvault/disk/markdown.py", "exec"), module.__dict__)
    return module


def files_of(folder: Path) -> list[tuple[bytes, str, dict[str, int]]]:
    out = []
    for path in sorted(folder.glob("*.md")):
        with open(path, "rb") as handle:
            out.append((handle.read(), path.name, dict(file_stamp(os.fstat(handle.fileno())))))
    return out


def cpu_per_file(parse: Parse, files: list[tuple[bytes, str, dict[str, int]]]) -> float:
    gc.collect()
    start = time.process_time()
    memories = [parse(raw, id, keep_meta=False, **stamp) for raw, id, stamp in files]
    spent = time.process_time() - start
    del memories
    return spent / len(files) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--vault", type=Path, required=True, help="folder of memory files (written if missing)"
    )
    parser.add_argument("--memories", type=int, default=20_000)
    parser.add_argument("--locomo", type=Path, help="LoCoMo data for a new vault (else synthetic prose)")
    parser.add_argument("--before", required=True, help="the commit to compare with")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    if not args.vault.exists():
        docs = corpus.docs(args.locomo, args.memories, 1)
        corpus.write_vault(args.vault, docs, seed=1)
    files = files_of(args.vault)
    versions: dict[str, Parse] = {
        "before": module_at(args.before).parse_memory,
        "after": markdown.parse_memory,
    }
    for raw, id, stamp in files:
        old, new = (parse(raw, id, keep_meta=False, **stamp) for parse in versions.values())
        if repr(old) != repr(new):
            raise SystemExit(f"{id}: the versions differ\n{old!r}\n{new!r}")
    load = os.getloadavg()[0]
    times: dict[str, list[float]] = {name: [] for name in versions}
    for round in range(args.rounds):
        for name in list(versions)[:: 1 if round % 2 == 0 else -1]:
            times[name].append(cpu_per_file(versions[name], files))
    ratios = [a / b for a, b in zip(times["after"], times["before"], strict=True)]
    print(f"{len(files)} files, {args.rounds} rounds; load average {load:.1f} -> {os.getloadavg()[0]:.1f}")
    print("| version | CPU us per file, median | rounds |")
    print("|---|---:|---|")
    for name, values in times.items():
        print(f"| {name} | {statistics.median(values):.1f} | {', '.join(f'{v:.1f}' for v in values)} |")
    print(f"| after / before, per-round ratio median | {statistics.median(ratios):.2f} | |")


if __name__ == "__main__":
    main()
