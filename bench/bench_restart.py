#!/usr/bin/env python
"""Issue 49: a restart's first answer and resident memory, two memvault packages in turns on one vault.

    python bench/bench_restart.py --vault /tmp/restart-vault --memories 100000 \
        --locomo /work/shared/data/locomo --package old=/tmp/restart-old --package new=. --turns 5

The vault (N memories of one token, bench_scale's generator) is written once and reused. Each
package gets its own `.memvault/` (sidecar with every vector, snapshot), made once by a server of
that package (from another package's state, or a cold start that computes the vectors) and copied
back into the vault before each of its runs, so every run restarts from the same state. A run:
`python -m memvault serve` with PYTHONPATH=<package> (MEMVAULT_ACCESS_WRITEBACK=never, so the
files never change); process start -> first read_memory answer (wall, server CPU, VmRSS); then,
once its background work is done (memories built, vectors read back), rounds of read_memory and
recall; VmRSS and VmHWM after them; SIGTERM. The packages take turns; medians per package, and the
median of the per-turn ratios. The answers of all packages are compared (byte for byte, the
rounds' calls in order).
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_scale
import corpus
from bench_scale import TOKEN, ServerProc, Start, first_answer, pending_vectors, recall_questions, settle
from harness import call, client

STATE = ".memvault"


@dataclass
class Run:
    package: str
    answer_s: float = 0.0
    up_s: float = 0.0
    cpu_s: float = 0.0  # server CPU to the first answer
    load_s: float = 0.0  # /healthz -> first answer: the token's load (and the call itself)
    load_cpu_s: float = 0.0  # server CPU in that time
    rss_first: float = 0.0
    settle_s: float = 0.0
    settle_cpu_s: float = 0.0
    rss: float = 0.0  # VmRSS after the rounds
    hwm: float = 0.0
    answers: str = ""  # digest of every answer text, in order
    texts: list[str] = field(default_factory=list)


def env_for(package: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    env["MEMVAULT_CAPACITY"] = "1000000000"
    env["MEMVAULT_ACCESS_WRITEBACK"] = "never"
    env["PYTHONPATH"] = str(package)
    return env


def use(package: Path) -> None:
    """The servers started from now on run this package (bench_scale's ServerProc reads server_env)."""
    bench_scale.server_env = lambda: env_for(package)


def which(package: Path, cwd: Path) -> str:
    out = subprocess.run(
        [sys.executable, "-c", "import memvault; print(memvault.__file__)"],
        env=env_for(package),
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


async def first_answer_from_up(server: ServerProc, query: str, label: str) -> tuple[Start, float]:
    """bench_scale's first_answer, and the server's CPU time when /healthz first answered."""
    cpu_up = 0.0
    real_mem = server.mem

    def mem_and_cpu() -> dict[str, float]:  # first_answer reads the memory right after /healthz
        nonlocal cpu_up, real_mem
        if not cpu_up:
            cpu_up = server.cpu()
        return real_mem()

    server.mem = mem_and_cpu  # type: ignore[method-assign]
    try:
        start = await first_answer(server, query, label)
    finally:
        server.mem = real_mem  # type: ignore[method-assign]
    return start, cpu_up


async def wait_vectors(server: ServerProc, deadline_s: float = 3600.0) -> None:
    start = time.perf_counter()
    while True:
        pending = await asyncio.to_thread(pending_vectors, server)
        if pending == 0:
            return
        if time.perf_counter() - start > deadline_s or not server.alive():
            raise RuntimeError(f"vectors not done ({pending} pending):\n{server.log_tail()}")
        await asyncio.sleep(2.0)


async def make_state(label: str, package: Path, folder: Path, keep: Path, logs: Path, query: str) -> None:
    """Run a server of ``package`` on the vault as it is until its vectors and snapshot are done,
    stop it (SIGTERM writes the snapshot) and keep its .memvault/."""
    use(package)
    server = ServerProc(folder.parent, logs, f"make-{label}")
    try:
        start = await first_answer(server, query, f"make-{label}", deadline_s=1800)
        print(f"[{label}] state: first answer after {start.answer_s:.1f} s", file=sys.stderr, flush=True)
        await wait_vectors(server)
        await settle(server, start)
        server.stop(signal.SIGTERM, timeout=600)
    finally:
        server.ensure_dead()
    shutil.copytree(folder / STATE, keep, symlinks=True)


async def rounds(
    server: ServerProc, queries: dict[str, list[str]], questions: list[str], n: int
) -> list[str]:
    texts = []
    async with client(server.url) as session:
        for i in range(n):
            for kind in corpus.KINDS:
                pool = queries[kind]
                texts.append((await call(session, "read_memory", {"query": pool[i % len(pool)]}))[1])
            question = questions[i % len(questions)]
            texts.append((await call(session, "recall", {"query": question, "limit": 10}))[1])
    return texts


async def one_run(
    label: str, package: Path, folder: Path, keep: Path, logs: Path, query: str, args: argparse.Namespace,
    queries: dict[str, list[str]], questions: list[str], turn: int,
) -> Run:  # fmt: skip
    shutil.rmtree(folder / STATE, ignore_errors=True)
    shutil.copytree(keep, folder / STATE, symlinks=True)
    use(package)
    server = ServerProc(folder.parent, logs, f"{label}-{turn}", args.py_spy)
    run = Run(label)
    try:
        start, cpu_up = await first_answer_from_up(server, query, f"{label}-{turn}")
        run.answer_s, run.up_s, run.cpu_s = start.answer_s, start.up_s, start.cpu_s
        run.load_s, run.load_cpu_s = start.answer_s - start.up_s, start.cpu_s - cpu_up
        run.rss_first = start.mem.get("VmRSS", 0.0)
        if args.first_only:
            server.stop(signal.SIGTERM, timeout=300)
            return run
        await wait_vectors(server)
        await settle(server, start)
        run.settle_s, run.settle_cpu_s = start.settle_s or 0.0, start.settle_cpu_s or 0.0
        run.texts = await rounds(server, queries, questions, args.rounds)
        mem = server.mem()
        run.rss, run.hwm = mem.get("VmRSS", 0.0), mem.get("VmHWM", 0.0)
        server.stop(signal.SIGTERM, timeout=300)
    finally:
        server.ensure_dead()
    run.answers = hashlib.sha256("\x00".join(run.texts).encode()).hexdigest()[:12]
    return run


def med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def table(runs: list[Run], labels: list[str]) -> str:
    cols = (
        ("first answer s", "answer_s"), ("up (/healthz) s", "up_s"), ("/healthz to answer s", "load_s"),
        ("server CPU to answer s", "cpu_s"), ("of it after /healthz s", "load_cpu_s"),
        ("RSS at answer MB", "rss_first"), ("settle CPU s", "settle_cpu_s"), ("RSS after rounds MB", "rss"),
        ("peak MB", "hwm"),
    )  # fmt: skip
    lines = ["| package | runs | " + " | ".join(c for c, _ in cols) + " |"]
    lines.append("|---|---:|" + "---:|" * len(cols))
    for label in labels:
        mine = [r for r in runs if r.package == label]
        cells = [f"{med([getattr(r, a) for r in mine]):.2f}" for _, a in cols]
        lines.append(f"| {label} | {len(mine)} | " + " | ".join(cells) + " |")
    if len(labels) == 2:
        a, b = ([r for r in runs if r.package == x] for x in labels)
        ratios = []
        for _, attr in cols:
            pairs = zip(a, b, strict=False)
            per_turn = [getattr(y, attr) / getattr(x, attr) for x, y in pairs if getattr(x, attr)]
            ratios.append(f"{med(per_turn):.2f}")
        lines.append(f"| {labels[1]} / {labels[0]} (median of turns) | | " + " | ".join(ratios) + " |")
    return "\n".join(lines)


async def main_async(args: argparse.Namespace) -> int:
    base = args.vault.resolve()
    folder = base / "vault" / TOKEN
    logs = base / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    docs = corpus.docs(args.locomo, args.memories, args.seed)
    if not folder.is_dir():
        print(f"writing a vault of {len(docs):,} memories", file=sys.stderr, flush=True)
        corpus.write_vault(folder, docs, args.seed)
        os.sync()
    queries = corpus.pick_queries(docs, args.rounds + 4, args.seed)
    questions = recall_questions(args.locomo, queries)
    first = queries["body word"]
    packages = [(label, Path(path).resolve()) for label, _, path in (p.partition("=") for p in args.package)]
    os.chdir(base)  # `python -m` puts the working folder first on sys.path: not a memvault checkout
    for label, package in packages:
        compileall.compile_dir(package / "memvault", quiet=1)
        print(f"[{label}] runs {which(package, base)}", file=sys.stderr, flush=True)
    for label, package in packages:
        keep = base / f"state-{label}"
        if label in args.fresh:
            shutil.rmtree(keep, ignore_errors=True)
        if not keep.is_dir():
            await make_state(label, package, folder, keep, logs, first[0])
    runs: list[Run] = []
    load = [os.getloadavg()[0]]
    for turn in range(args.turns):
        for k, (label, package) in enumerate(packages if turn % 2 == 0 else packages[::-1]):
            keep = base / f"state-{label}"
            run = await one_run(
                label, package, folder, keep, logs, first[1 + (turn + k) % 3], args, queries, questions, turn
            )
            runs.append(run)
            load.append(os.getloadavg()[0])
            print(
                f"[{label} {turn}] answer {run.answer_s:.2f} s (up {run.up_s:.2f}), cpu {run.cpu_s:.2f} s "
                f"({run.load_cpu_s:.2f} after up), "
                f"settle cpu {run.settle_cpu_s:.2f} s, rss {run.rss_first:.0f} -> {run.rss:.0f} MB "
                f"(peak {run.hwm:.0f}), answers {run.answers}, load {load[-1]:.1f}",
                file=sys.stderr,
                flush=True,
            )
    labels = [label for label, _ in packages]
    print(table(runs, labels))
    print(f"\nload average (1 min) during the runs: {min(load):.1f}-{max(load):.1f}")
    digests = {label: {r.answers for r in runs if r.package == label} for label in labels}
    listed = json.dumps({k: sorted(v) for k, v in digests.items()})
    print(f"answers per package (digest of the rounds' texts): {listed}")
    same = len({d for ds in digests.values() for d in ds}) == 1
    if not same:
        a, b = (next(r for r in runs if r.package == x) for x in labels[:2])
        for i, (x, y) in enumerate(zip(a.texts, b.texts, strict=False)):
            if x != y:
                print(f"first difference, call {i}:")
                print(f"--- {labels[0]}\n{x[:1500]}\n--- {labels[1]}\n{y[:1500]}")
                break
    print(f"answers identical across packages and runs: {same}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--vault", type=Path, required=True, help="folder for the vault and the kept states (reused)"
    )
    parser.add_argument("--memories", type=int, default=100_000)
    parser.add_argument("--locomo", type=Path, help="a LoCoMo folder or .json file for realistic prose")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--package", action="append", required=True, metavar="LABEL=PATH",
        help="a folder holding a memvault package (e.g. old=/tmp/restart-old, new=.); twice for a comparison",
    )  # fmt: skip
    parser.add_argument("--turns", type=int, default=3, help="runs per package, in turns (default 3)")
    parser.add_argument("--rounds", type=int, default=20, help="rounds of 4 reads and a recall (default 20)")
    parser.add_argument(
        "--fresh", action="append", default=[], metavar="LABEL", help="make LABEL's state again"
    )
    parser.add_argument(
        "--py-spy", type=Path, metavar="DIR", help="record each server with py-spy (raw stacks into DIR)"
    )
    parser.add_argument(
        "--first-only", action="store_true", help="stop each server after its first answer (no rounds)"
    )
    args = parser.parse_args()
    if args.py_spy is not None:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    return asyncio.run(main_async(args))


if __name__ == "__main__":
    raise SystemExit(main())
