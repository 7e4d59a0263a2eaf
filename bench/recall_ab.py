#!/usr/bin/env python
"""recall, two versions of memvault in turns, each in its own process: at 10,000 memories, or on
LongMemEval's haystacks.

    git archive <old> memvault | tar -x -C /tmp/old && git archive <new> memvault | tar -x -C /tmp/new
    python bench/recall_ab.py /tmp/old /tmp/new --locomo ../shared/data/locomo --rounds 10
    python bench/recall_ab.py /tmp/old /tmp/new --longmemeval ../shared/data/longmemeval --rounds 10

With ``--locomo``, each version builds a token of N memories (``--memories``, bench/locomo.py's
10,000-memory vault: LoCoMo turns cycled, written as files), waits for its vectors with its own
default configuration, then the two take turns: each round asks 60 LoCoMo questions through the
tool's body (``Recaller.recall``, limit 10). ``--writes``: each call writes a memory first (untimed,
its vector made before the recall), so the rows move between recalls as they do for an agent that
writes and recalls; ``--vault DIR`` keeps each version's vault in DIR/old and DIR/new and reuses it
(copy one vault there for both: the writes stay in it).

With ``--longmemeval``, each version loads every LongMemEval question's haystack into a token of its
own as bench/recall_bench.py does (``--units``: one memory per session, the default, or per turn;
written through ``Store.write`` with the store's clock at the session's date), waits for its
vectors, and each round asks every question once, with the clock at the question's date. The two
versions' answers are compared round by round (in both modes): the memories listed, in order, and
their scores.

Per version: the median of the rounds' p50 and p95 wall time and the process CPU per call; and the
median of the per-round ratios new / old, which a noisy machine affects alike. ``--profile FILE``
writes a cProfile of the new version's rounds (``python -m pstats FILE``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
written = [0.0]  # with --writes: when the last write ended (perf_counter), read by the timing loop
LOCOMO_ROUND = 60  # questions per round at 10,000 memories


async def locomo_questions(
    root: Path, locomo: Path, memories: int, writes: bool
) -> tuple[Any, Any, list[Any]]:
    """The 10,000-memory token of LoCoMo turns, and one call per question (no clock); with
    ``writes``, each call writes a memory (a LoCoMo turn, untimed, its vector made) before its
    recall: the rows move between recalls, as they do for an agent that writes and recalls."""
    import locomo as bench
    from opening import open_store

    from memvault.config import Settings
    from memvault.search import embeddings
    from memvault.search.rerankers import Reranking

    embeddings.WORKER_DUTY_PAUSE = 0.0  # nothing else waits for the CPU while the vectors come
    conversations = [bench.load_conversation(p) for p in bench.conversation_files([locomo])]
    questions = [q.text for c in conversations for q in c.questions]
    if not (root / "scale").is_dir():  # a kept vault (--vault) is reused as it is
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
    asked = [0]
    turns = [t for c in conversations for t in c.turns]
    store = opened.store

    async def one() -> Any:
        q = questions[asked[0] % len(questions)]
        asked[0] += 1
        if writes:
            turn = turns[asked[0] % len(turns)]
            await store.write("scale", title=f"{turn.title} w{asked[0]}", content=turn.text)
            # Its vector made before the recall, in both versions alike (else a race decides
            # whether the new memory can be found by meaning).
            await asyncio.to_thread(opened.embeddings.wait_idle, 60)
            written[0] = time.perf_counter()  # the write's time is left out of the call's
        return await recaller.recall("scale", q, limit=10)

    return opened, recaller, [one] * LOCOMO_ROUND


async def longmemeval_questions(
    root: Path, data: Path, unit: str, haystacks: int
) -> tuple[Any, Any, list[Any]]:
    """Every LongMemEval question's haystack in a token of its own, and one call per question
    (the store's clock at the question's date)."""
    import recall_bench as bench
    from opening import open_store

    from memvault.search import embeddings
    from memvault.search.rerankers import Reranking

    loaded = bench.load_longmemeval([data], unit)
    loaded = loaded[:haystacks] if haystacks else loaded
    embeddings.WORKER_DUTY_PAUSE = 0.0  # nothing else waits for the CPU while the vectors come
    clock = bench.Clock()
    settings = bench.bench_settings(root)
    opened = open_store(settings, clock=clock)
    recaller = opened.recaller(reranking=Reranking(settings.reranker))
    for h, hay in enumerate(loaded):
        for u in hay.units:
            clock.now = u.created
            await opened.store.write(f"h{h}", title=u.title, content=u.content)
    while True:
        await asyncio.to_thread(opened.embeddings.wait_idle, 600)
        if opened.embeddings.pending() == 0:
            break
        await asyncio.sleep(0.2)

    def asking(token: str, q: Any) -> Callable[[], Awaitable[Any]]:
        def one() -> Awaitable[Any]:
            clock.now = q.now
            return recaller.recall(token, q.text, limit=bench.LIMIT)

        return one

    calls = [asking(f"h{h}", q) for h, hay in enumerate(loaded) for q in hay.questions]
    for one in calls:  # once, to warm up
        await one()
    return opened, recaller, calls


def profiled(profile: cProfile.Profile, work: Callable[..., Any]) -> Callable[..., Any]:
    def run(*args: Any) -> Any:
        profile.enable()
        try:
            return work(*args)
        finally:
            profile.disable()

    return run


async def worker(args: argparse.Namespace) -> None:
    """Build the vault, then time one round per line on stdin; each round's answers go to stdout."""
    sys.path.insert(0, str(HERE))
    with contextlib.ExitStack() as stack:
        if args.vault:
            root = args.vault
            root.mkdir(parents=True, exist_ok=True)
        else:
            shm = "/dev/shm" if Path("/dev/shm").is_dir() else None
            root = Path(stack.enter_context(tempfile.TemporaryDirectory(dir=shm)))
        if args.longmemeval:
            opened, recaller, calls = await longmemeval_questions(
                root, args.longmemeval, args.units, args.haystacks
            )
        else:
            opened, recaller, calls = await locomo_questions(root, args.locomo, args.memories, args.writes)
        print("ready", flush=True)
        if args.profile:
            profile = cProfile.Profile()
            # recall's work runs in a worker thread (or on the loop): profile it where it runs.
            recaller._recall_sync = profiled(profile, recaller._recall_sync)
        for _ in sys.stdin:
            wall = []
            answers = []
            cpu = time.process_time()
            for one in calls:
                written[0] = 0.0
                started = time.perf_counter()
                found = await one()
                wall.append(time.perf_counter() - max(started, written[0]))
                answers.append([[hit.memory.id, hit.score] for hit in found.results])
            used = (time.process_time() - cpu) / len(calls) * 1000
            wall.sort()
            print(
                json.dumps(
                    {
                        "p50": statistics.median(wall) * 1000,
                        "p95": wall[min(len(wall) - 1, int(0.95 * len(wall)))] * 1000,
                        "cpu": used,
                        "answers": answers,
                    }
                ),
                flush=True,
            )
        if args.profile:
            profile.dump_stats(args.profile)
        await opened.close()


def compare(old: list[list[list[Any]]], new: list[list[list[Any]]]) -> tuple[int, int, float]:
    """Questions whose lists differ (memories or their order), and the largest score difference
    over the questions whose lists agree."""
    differ = 0
    worst = 0.0
    for a, b in zip(old, new, strict=True):
        if [m for m, _ in a] != [m for m, _ in b]:
            differ += 1
        else:
            worst = max([worst, *(abs(x - y) for (_, x), (_, y) in zip(a, b, strict=True))])
    return differ, len(old), worst


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("old", type=Path, help="a folder holding the memvault package to compare against")
    parser.add_argument("new", type=Path, help="a folder holding the memvault package to measure")
    data = parser.add_mutually_exclusive_group(required=True)
    data.add_argument("--locomo", type=Path, help="LoCoMo: recall at --memories memories in one token")
    data.add_argument("--longmemeval", type=Path, help="LongMemEval: a token per question's haystack")
    parser.add_argument("--memories", type=int, default=10_000)
    parser.add_argument("--units", choices=("session", "turn"), default="session")
    parser.add_argument("--haystacks", type=int, default=0, help="only the first N haystacks (0: all)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--profile", type=Path, help="write a cProfile of the new version's rounds here")
    parser.add_argument(
        "--vault", type=Path, help="LoCoMo: keep each version's vault in VAULT/old, VAULT/new and reuse it"
    )
    parser.add_argument(
        "--writes", action="store_true", help="LoCoMo: write a memory (untimed) before each recall"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args))
        return 0
    procs = {}
    for name, folder in (("old", args.old), ("new", args.new)):
        env = {**os.environ, "PYTHONPATH": str(folder.resolve())}
        command = [sys.executable, __file__, str(folder), str(folder), "--worker"]
        if args.longmemeval:
            command += ["--longmemeval", str(args.longmemeval), "--units", args.units]
            command += ["--haystacks", str(args.haystacks)]
        else:
            command += ["--locomo", str(args.locomo), "--memories", str(args.memories)]
            command += ["--writes"] if args.writes else []
            command += ["--vault", str((args.vault / name).resolve())] if args.vault else []
        if args.profile and name == "new":
            command += ["--profile", str(args.profile.resolve())]
        procs[name] = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
    for proc in procs.values():
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in procs}
    load = []
    for _ in range(args.rounds):
        load.append(os.getloadavg()[0])
        for name, proc in procs.items():
            assert proc.stdin is not None and proc.stdout is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            rounds[name].append(json.loads(proc.stdout.readline()))
    if args.longmemeval:
        what = (
            f"LongMemEval, one memory per {args.units}, {len(rounds['old'][0]['answers'])} questions a round"
        )
    else:
        what = f"{args.memories:,} memories, {LOCOMO_ROUND} LoCoMo questions a round"
    print(f"recall, {what}, {args.rounds} rounds in turns; load average {min(load):.1f}-{max(load):.1f}")
    print("| version | p50 ms | p95 ms | CPU ms per call |")
    print("|---|---:|---:|---:|")
    for name, proc in procs.items():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
        cells = [statistics.median(r[k] for r in rounds[name]) for k in ("p50", "p95", "cpu")]
        print(f"| {name} ({getattr(args, name)}) | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    pairs = list(zip(rounds["old"], rounds["new"], strict=True))
    for k in ("p50", "cpu"):
        ratio = statistics.median(b[k] / a[k] for a, b in pairs)
        print(f"new / old {k}, median of the rounds: {ratio:.2f}")
    differ = [compare(a["answers"], b["answers"]) for a, b in pairs]
    print(
        f"answers: {sum(d for d, _, _ in differ)} of {sum(n for _, n, _ in differ)} lists differ "
        "(memories or order); largest score difference where they agree "
        f"{max(w for _, _, w in differ):.2g}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
