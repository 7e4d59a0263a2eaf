#!/usr/bin/env python
"""Read and write latency of memvault over MCP streamable HTTP, against a naive scan-all-files search.

    python bench/bench_read.py --memories 10000 [--locomo ../shared/data/locomo] [--out bench/RESULTS.md]

Builds a vault of N memories for one token in a temporary folder (LoCoMo turns, or synthetic prose
from a fixed-seed word generator), starts the real server in this process (memvault.server.app.create_app
under uvicorn on a free loopback port), drives it with the official MCP client, and in the same
process runs a mem-mcp-like baseline that reads and parses every file for every query.

The client and the server share one process and one event loop, so each latency below includes
the client's own work (JSON-RPC framing, pydantic validation) as well as the server's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import random
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import frontmatter
from corpus import KINDS, Doc, locomo_docs, pick_queries, synthetic_docs, write_vault
from harness import Server, call, client, fs_type, machine, ms, pct, update_results
from harness import serve as harness_serve
from mcp.client.session import ClientSession
from rapidfuzz import fuzz

from memvault.config import Settings
from memvault.tools.memories import render_found

TOKEN = "bench"
EMPTY_TOKEN = "bench-empty"
MARK_START = "<!-- bench_read:start -->"
MARK_END = "<!-- bench_read:end -->"


# ---------------------------------------------------------------------------- baseline


def naive_search(folder: Path, query: str) -> str:
    """What mem-mcp does for one query: read and parse every file, match, return every match in full.

    A memory matches when every query word occurs in its title + content (case-insensitive
    substring), or, like a Fuse.js search anchored at the start of the text, when the query is
    a close partial match (rapidfuzz partial_ratio >= 80) of the first 100 characters.
    """
    q = query.lower()
    words = q.split()
    out: list[str] = []
    for path in sorted(folder.glob("*.md")):
        raw = path.read_text(encoding="utf-8")
        post = frontmatter.loads(raw)
        text = post.content.lower()
        if all(w in text for w in words) or fuzz.partial_ratio(q, text[:100]) >= 80:
            out.append(raw)
    return "\n\n".join(out)


# ---------------------------------------------------------------------------- server and client


@contextlib.asynccontextmanager
async def serve(settings: Settings) -> AsyncIterator[Server]:
    async with harness_serve(settings, timed=True) as server:
        yield server


# ---------------------------------------------------------------------------- stats


@dataclass
class Results:
    n: int
    source: str
    build_s: float = 0.0
    raw_read_s: float = 0.0
    init_s: float = 0.0
    cold_s: float = 0.0
    reads: dict[str, list[float]] = field(default_factory=dict)
    cpu: dict[str, float] = field(default_factory=dict)  # process CPU seconds per call, client + server
    direct: dict[str, list[float]] = field(default_factory=dict)
    server: dict[str, list[float]] = field(default_factory=dict)  # ASGI time of each timed call
    reply_chars: dict[str, list[int]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    writes: list[float] = field(default_factory=list)
    floor: list[float] = field(default_factory=list)
    titles_s: float = 0.0
    titles_chars: int = 0
    titles_lines: int = 0
    base_times: list[float] = field(default_factory=list)
    base_chars: list[int] = field(default_factory=list)
    base_ours_chars: list[int] = field(default_factory=list)
    base_ours_times: list[float] = field(default_factory=list)
    fsync: list[float] = field(default_factory=list)
    load: list[tuple[float, float, float]] = field(default_factory=list)


# ---------------------------------------------------------------------------- the run


async def run(args: argparse.Namespace, vault_root: Path, docs: list[Doc], res: Results) -> None:
    """All measures of one run. Timed calls go round-robin over the measures (one call of each per
    round), so a burst of load from elsewhere on a shared machine hits every measure alike."""
    queries = pick_queries(docs, args.calls + args.warmup, args.seed)
    folder = vault_root / TOKEN
    settings = Settings(root=vault_root, capacity=10**9, log_level="warning")

    # Time to merely read every file once (page cache warm: the files were just written).
    start = time.perf_counter()
    for entry in os.scandir(folder):
        with open(entry.path, "rb") as handle:
            handle.read()
    res.raw_read_s = time.perf_counter() - start

    async with serve(settings) as srv:
        service = srv.app.state.service
        store = service.store
        url = f"{srv.url}/mcp/{TOKEN}"
        async with client(url) as session, client(f"{srv.url}/mcp/{EMPTY_TOKEN}") as empty:
            first = queries["title word"][0]
            res.cold_s, _ = await call(session, "read_memory", {"query": first})
            await service.idle()  # the first read starts the lazy eviction sweep

            async def tool_body(q: str) -> None:
                # The read_memory tool's body without MCP: store.find + render + touch.
                found = await store.find(TOKEN, query=q)
                render_found(found, settings, what="hot", query=q)
                await store.touch(TOKEN, found.memories, hit=True)

            sizes: dict[str, list[int]] = {kind: [] for kind in KINDS}
            hits = dict.fromkeys(KINDS, 0)
            floor_cpu: list[float] = []
            read_cpu: dict[str, list[float]] = {kind: [] for kind in KINDS}
            for kind in (*KINDS, "floor", "write"):
                res.reads[kind], res.direct[kind], res.server[kind] = [], [], []
            for i in range(args.warmup + args.calls):
                timed = i >= args.warmup
                for kind in KINDS:
                    q = queries[kind][i]
                    cpu = time.process_time()
                    elapsed, text = await call(session, "read_memory", {"query": q})
                    cpu = time.process_time() - cpu
                    asgi = srv.timer.last
                    start = time.perf_counter()
                    await tool_body(q)
                    body = time.perf_counter() - start
                    if timed:
                        res.reads[kind].append(elapsed)
                        res.server[kind].append(asgi)
                        read_cpu[kind].append(cpu)
                        res.direct[kind].append(body)
                        sizes[kind].append(len(text))
                        hits[kind] += not text.startswith("No hot memories")
                # Per-call floor: a trivial tool on an empty token (no files, nothing to search).
                cpu = time.process_time()
                elapsed, _ = await call(empty, "list_memory_titles", {})
                if timed:
                    res.floor.append(elapsed)
                    res.server["floor"].append(srv.timer.last)
                    floor_cpu.append(time.process_time() - cpu)
            for kind in KINDS:
                res.cpu[kind] = statistics.mean(read_cpu[kind])
            res.cpu["floor"] = statistics.mean(floor_cpu)
            res.reply_chars, res.hits = sizes, hits

            if args.profile:
                await profile_reads(session, queries["body word"][args.warmup :], args.profile)

            res.titles_s, text = await call(session, "list_memory_titles", {})
            res.titles_chars, res.titles_lines = len(text), text.count("\n") + 1

            # Baseline, same process: a few queries of each kind, each followed by memvault's answer.
            per_kind = max(1, args.baseline_queries // len(KINDS))
            base_queries = [q for kind in KINDS for q in queries[kind][args.warmup : args.warmup + per_kind]]
            naive_search(folder, base_queries[0])  # warm-up
            for q in base_queries:
                start = time.perf_counter()
                text = naive_search(folder, q)
                res.base_times.append(time.perf_counter() - start)
                res.base_chars.append(len(text))
                elapsed, ours = await call(session, "read_memory", {"query": q})
                res.base_ours_times.append(elapsed)
                res.base_ours_chars.append(len(ours))

            # Writes (distinct titles, prose bodies; each fsyncs the file and its folder), each
            # followed by the disk's own floor for a durable create in the same folder.
            rng = random.Random(args.seed + 3)
            write_cpu: list[float] = []
            for i in range(args.warmup + args.calls):
                doc = docs[rng.randrange(len(docs))]
                title = f"Bench write {i} {doc.title}"[:180]
                cpu = time.process_time()
                elapsed, _ = await call(
                    session, "write_memory", {"title": title, "content": doc.content, "priority": "P1"}
                )
                cpu = time.process_time() - cpu
                disk = fsync_once(folder, i)
                if i >= args.warmup:
                    res.writes.append(elapsed)
                    res.server["write"].append(srv.timer.last)
                    write_cpu.append(cpu)
                    res.fsync.append(disk)
            res.cpu["write"] = statistics.mean(write_cpu)

        # Initialize time of a fresh session (the token is loaded by now).
        start = time.perf_counter()
        async with client(url):
            res.init_s = time.perf_counter() - start


def fsync_once(folder: Path, i: int) -> float:
    """What the disk alone costs a durable create: write + fsync a temp file, link it, fsync the folder."""
    tmp, final = folder / f".fsync-{i}.tmp", folder / f".fsync-floor-{i}"
    start = time.perf_counter()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, b"x" * 600)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.link(tmp, final)
    os.unlink(tmp)
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
    elapsed = time.perf_counter() - start
    final.unlink()
    return elapsed


async def profile_reads(session: ClientSession, queries: Sequence[str], out: Path) -> None:
    """cProfile of the event-loop thread (client, SDK, HTTP, tool glue) over a batch of reads.

    The search itself runs in worker threads (anyio.to_thread), which cProfile does not see;
    the "tool body only" figures cover it.
    """
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.enable()
    for q in queries:
        await call(session, "read_memory", {"query": q})
    profiler.disable()
    profiler.dump_stats(out)
    stats = pstats.Stats(profiler, stream=sys.stderr)
    print(f"profile of {len(queries)} read_memory calls (loop thread), saved to {out}:", file=sys.stderr)
    stats.sort_stats("tottime").print_stats(25)
    stats.sort_stats("cumulative").print_stats(40)


# ---------------------------------------------------------------------------- report


def report(res: Results, args: argparse.Namespace, command: str, vault_fs: str) -> str:
    info = machine()
    base_p50 = statistics.median(res.base_times)
    ours_p50 = statistics.median(res.base_ours_times)
    all_reads = statistics.median([t for kind in KINDS for t in res.reads[kind]])
    lines = [
        f"## {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}: read_memory / write_memory, "
        f"{res.n:,} memories ({res.source})",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {info['nproc']} CPUs ({info['cpu']}), {info['ram']} RAM, Python {info['python']}, "
        f"{info['os']}, mcp {info['mcp']}, memvault {info['memvault']} (git {info['git']}); "
        f"vault on {vault_fs}. "
        "Client and server in one process (one event loop), over HTTP on 127.0.0.1. "
        "Shared, noisy machine: compare medians and ratios. Timed calls go round-robin (one read of each "
        "kind, one tool-body-only read of each kind, one floor call per round; one write then one disk-floor "
        "create per round), so load from elsewhere hits every measure alike.",
        "",
        f"Vault: {res.n:,} memories in one token, written in {res.build_s:.1f} s; reading every file once "
        f"(page cache warm) takes {ms(res.raw_read_s)} ms.",
        "",
        f"Load average (1 min) before / after the run: {res.load[0][0]:.2f} / {res.load[-1][0]:.2f} "
        f"on {info['nproc']} CPUs. CPU ms/call is this process's CPU time (client + server, all threads) "
        "divided by the calls: less sensitive to other load than wall-clock latency.",
        "",
        "| measure | p50 ms | p95 ms | CPU ms/call | target p50 | calls | mean reply chars "
        "| non-empty replies |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for kind in KINDS:
        t = res.reads[kind]
        ok = "met" if statistics.median(t) <= 0.005 else "MISSED"
        lines.append(
            f"| read_memory, {kind} | {ms(statistics.median(t))} | {ms(pct(t, 0.95))} "
            f"| {ms(res.cpu[kind])} | <= 5 ({ok}) | {len(t)} "
            f"| {statistics.mean(res.reply_chars[kind]):,.0f} | {res.hits[kind]}/{len(t)} |"
        )
    w = res.writes
    ok = "met" if statistics.median(w) <= 0.010 else "MISSED"
    lines += [
        f"| write_memory (fsync) | {ms(statistics.median(w))} | {ms(pct(w, 0.95))} "
        f"| {ms(res.cpu['write'])} | <= 10 ({ok}) | {len(w)} | | |",
        "| disk floor: write + fsync a file, link, fsync folder (no server) "
        f"| {ms(statistics.median(res.fsync))} | {ms(pct(res.fsync, 0.95))} | | | {len(res.fsync)} | | |",
        f"| call floor: list_memory_titles, empty token | {ms(statistics.median(res.floor))} | "
        f"{ms(pct(res.floor, 0.95))} | {ms(res.cpu['floor'])} | | {len(res.floor)} | | |",
        f"| list_memory_titles, {res.n:,} memories (once) | {ms(res.titles_s)} | | | | 1 | "
        f"{res.titles_chars:,} ({res.titles_lines:,} lines) | |",
        "",
        "Cold load (first answer after start, empty sidecar: the first read_memory on the token, which "
        f"loads and indexes all {res.n:,} files): **{res.cold_s:.2f} s**. "
        f"A new client session (initialize) then takes {ms(res.init_s)} ms.",
        "",
        "Where a call's time goes (p50 ms): the whole call over HTTP as the client sees it; the server's "
        "share (from the POST reaching the ASGI app to the last byte of its response: the MCP SDK, Starlette "
        "and memvault, but not uvicorn's HTTP parsing nor the client); the tool's body called in this "
        "process without MCP (store.find + render + touch, same queries, same rounds); and the difference "
        "between the first and the third (MCP SDK, HTTP, client).",
        "",
        "| call | over HTTP | server only (ASGI) | tool body only | SDK + HTTP + client |",
        "|---|---:|---:|---:|---:|",
    ]
    for kind in KINDS:
        http, body = statistics.median(res.reads[kind]), statistics.median(res.direct[kind])
        asgi = statistics.median(res.server[kind])
        lines.append(f"| read_memory, {kind} | {ms(http)} | {ms(asgi)} | {ms(body)} | {ms(http - body)} |")
    floor, asgi = statistics.median(res.floor), statistics.median(res.server["floor"])
    lines.append(f"| call floor (empty token) | {ms(floor)} | {ms(asgi)} | | |")
    write, asgi = statistics.median(res.writes), statistics.median(res.server["write"])
    lines.append(f"| write_memory | {ms(write)} | {ms(asgi)} | | |")
    lines += [
        "",
        f"Baseline (naive scan of every file, parsed with python-frontmatter, substring or near-start fuzzy "
        f"match, every match returned in full), {len(res.base_times)} queries "
        f"({len(res.base_times) // len(KINDS)} of each kind), same process:",
        "",
        "| | p50 ms | mean reply chars | max reply chars |",
        "|---|---:|---:|---:|",
        f"| naive scan | {ms(base_p50)} | {statistics.mean(res.base_chars):,.0f} | {max(res.base_chars):,} |",
        f"| memvault read_memory, same queries | {ms(ours_p50)} "
        f"| {statistics.mean(res.base_ours_chars):,.0f} | {max(res.base_ours_chars):,} |",
        "",
        f"Ratio of medians, baseline / memvault on the same queries: **{base_p50 / ours_p50:,.0f}x** "
        "(each memvault call comes right after a scan, with caches cold, so this is the conservative "
        f"figure); against the read p50 of all timed rounds ({ms(all_reads)} ms): "
        f"{base_p50 / all_reads:,.0f}x.",
    ]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--memories", type=int, default=10_000, help="memories in the vault (default 10000)")
    parser.add_argument("--locomo", type=Path, help="a LoCoMo folder or .json file for realistic prose")
    parser.add_argument("--out", type=Path, help="add the results to this markdown file (bench/RESULTS.md)")
    parser.add_argument("--calls", type=int, default=200, help="timed calls per measure (default 200)")
    parser.add_argument("--warmup", type=int, default=5, help="untimed calls before each measure (default 5)")
    parser.add_argument("--baseline-queries", type=int, default=20, help="naive-scan queries (default 20)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--dir", type=Path, help="parent folder for the temporary vault (default: system temp)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the vault folder afterwards")
    parser.add_argument("--profile", type=Path, help="also cProfile a batch of reads; pstats file to write")
    args = parser.parse_args(argv)
    # As `memvault serve` does, configure logging before the SDK would (its default is INFO, which
    # here would also log every client request); warnings only, so the console costs nothing.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if args.memories < 50:
        parser.error("--memories must be at least 50")
    command = (
        shlex.join(["python", *sys.argv])
        if argv is None
        else shlex.join(["python", "bench/bench_read.py", *argv])
    )

    source = f"LoCoMo turns from {args.locomo.name}/" if args.locomo else f"synthetic prose, seed {args.seed}"
    start = time.perf_counter()
    docs = (
        locomo_docs(args.locomo, args.memories) if args.locomo else synthetic_docs(args.memories, args.seed)
    )
    root = Path(tempfile.mkdtemp(prefix="memvault-bench-", dir=args.dir))
    res = Results(n=len(docs), source=source)
    try:
        write_vault(root / TOKEN, docs, args.seed)
        res.build_s = time.perf_counter() - start
        res.load.append(os.getloadavg())
        asyncio.run(run(args, root, docs, res))
        res.load.append(os.getloadavg())
        section = report(res, args, command, fs_type(root))
    finally:
        if args.keep:
            print(f"vault kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(section)
    if args.out:
        update_results(args.out, section, command, MARK_START, MARK_END, grouped=True)
        print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
