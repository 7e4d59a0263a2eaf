#!/usr/bin/env python
"""Cold start of a large vault, versions in turns: wall, server CPU and helper CPU to the first answer.

    python bench/bench_cold.py --root DIR --token scale --query WORD --package old=/tmp/old \\
        --package new=/tmp/new --rounds 5 [--out bench/RESULTS.md]

DIR is a memvault root holding one large token folder (bench_scale.py --keep, or corpus.write_vault).
Each round starts every version once, in an order that rotates: the token's `.memvault/` is deleted,
`python -m memvault serve` starts with PYTHONPATH at the version's folder (from `git archive`), the
official MCP client calls `read_memory` as soon as the port accepts, and at its answer the server's
own CPU (utime + stime) and its reaped children's (cutime + cstime: the loader helpers, which have
all finished by then) are read from /proc. Then a few more `read_memory` answers are taken, and
`--reads` timed ones (while the token's vectors are computed), and the server is killed (SIGKILL:
no shutdown snapshot). Every version's answers to the queries must be byte-identical.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from harness import machine_line
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

CLK_TCK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def cpu(pid: int) -> tuple[float, float]:
    """(the process's own CPU s, its reaped children's CPU s)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK, (int(fields[13]) + int(fields[14])) / CLK_TCK


def text_of(result: object) -> str:
    return "\n".join(getattr(c, "text", "") for c in getattr(result, "content", []))


async def one_start(
    root: Path,
    token: str,
    package: Path | None,
    queries: Sequence[str],
    extra: dict[str, str],
    reads: int,
    spy_to: Path | None = None,
) -> tuple[float, float, float, list[str], list[float]]:
    shutil.rmtree(root / token / ".memvault", ignore_errors=True)
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MEMVAULT_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env.update(MEMVAULT_ROOT=str(root), MEMVAULT_LOG_LEVEL="warning", MEMVAULT_CAPACITY="1000000000")
    env.update(extra)
    cwd = None
    if package is not None:
        env["PYTHONPATH"] = str(package.resolve())
        cwd = tempfile.gettempdir()
    port = free_port()
    start = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memvault", "serve", "--port", str(port)],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=None if os.environ.get("BENCH_STDERR") else subprocess.DEVNULL,
    )
    spy = None
    if spy_to is not None:  # the server and its helpers; py-spy's own CPU makes the times slower
        spy = subprocess.Popen(
            ["py-spy", "record", "--pid", str(proc.pid), "--rate", "250", "--subprocesses", "--threads",
             "--nonblocking",
             "--format", "raw", "--output", str(spy_to)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
    try:
        while True:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}")
            if time.perf_counter() - start > 60:
                raise RuntimeError("server did not listen within 60 s")
            await asyncio.sleep(0.005)
        url = f"http://127.0.0.1:{port}/mcp/{token}"
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            texts = [text_of(await session.call_tool("read_memory", {"query": queries[0]}))]
            wall = time.perf_counter() - start
            own, children = cpu(proc.pid)
            for query in queries[1:]:
                texts.append(text_of(await session.call_tool("read_memory", {"query": query})))
            times = []  # while the token's vectors are computed and its snapshot written
            for i in range(reads):
                began = time.perf_counter()
                await session.call_tool("read_memory", {"query": queries[i % len(queries)]})
                times.append(time.perf_counter() - began)
        return wall, own, children, texts, times
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if spy is not None:
            spy.wait(60)  # it writes its stacks once the server is gone


read_times: dict[str, list[list[float]]] = {}  # per version, per round: the reads after the first answer


async def run(args: argparse.Namespace) -> dict[str, list[tuple[float, float, float]]]:
    versions = {}
    for spec in args.package or ["installed="]:
        label, _, folder = spec.partition("=")
        versions[label] = Path(folder) if folder else None
    extra: dict[str, dict[str, str]] = {name: {} for name in versions}
    for spec in args.env or []:
        label, _, setting = spec.partition(":")
        key, _, value = setting.partition("=")
        extra[label][key] = value
    names = list(versions)
    timings: dict[str, list[tuple[float, float, float]]] = {name: [] for name in names}
    answers: dict[str, list[str]] = {}
    read_times.update({name: [] for name in names})
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            spy_to = args.py_spy / f"py-spy-{name}-{r + 1}.txt" if args.py_spy else None
            wall, own, children, texts, times = await one_start(
                args.root, args.token, versions[name], args.query, extra[name], args.reads, spy_to
            )
            read_times[name].append(times)
            if answers.setdefault(name, texts) != texts:
                raise RuntimeError(f"{name}: answers differ between rounds")
            timings[name].append((wall, own, children))
            load = os.getloadavg()[0]
            print(f"round {r + 1} {name}: wall {wall:.2f} s, server CPU {own:.2f} s, "
                  f"helpers CPU {children:.2f} s (load {load:.1f})", flush=True)  # fmt: skip
    first = answers[names[0]]
    for name in names[1:]:
        if answers[name] != first:
            raise RuntimeError(f"{name}'s answers differ from {names[0]}'s")
    return timings


def report(
    timings: dict[str, list[tuple[float, float, float]]], command: str, load: tuple[float, float]
) -> str:
    names = list(timings)
    lines = [
        f"`{command}` ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC). Machine: {machine_line()}; load average "
        f"{load[0]:.1f} before, {load[1]:.1f} after. Medians of {len(timings[names[0]])} rounds in turns;"
        " answers byte-identical across versions.",
        "",
        "| version | first answer s | server CPU s | helpers CPU s | total CPU s | reads p50 / p99 ms |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, runs in timings.items():
        wall, own, kids = (statistics.median(r[k] for r in runs) for k in range(3))
        total = statistics.median(r[1] + r[2] for r in runs)
        pooled = sorted(t for times in read_times.get(name, []) for t in times)
        reads = (
            f"{statistics.median(pooled) * 1000:.1f} / {pooled[int(0.99 * (len(pooled) - 1))] * 1000:.1f}"
            if pooled
            else "-"
        )
        lines.append(f"| {name} | {wall:.2f} | {own:.2f} | {kids:.2f} | {total:.2f} | {reads} |")
    if len(names) > 1:
        base = timings[names[0]]
        for name in names[1:]:
            ratios = [
                statistics.median(b[k] / a[k] for a, b in zip(base, timings[name], strict=True) if a[k])
                for k in range(3)
            ]
            total = statistics.median(
                (b[1] + b[2]) / (a[1] + a[2]) for a, b in zip(base, timings[name], strict=True)
            )
            lines.append(
                f"| {name} / {names[0]}, per-round ratio median | {ratios[0]:.2f} | {ratios[1]:.2f} | "
                f"{ratios[2]:.2f} | {total:.2f} | |"
            )
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, required=True, help="a memvault root holding the token's folder")
    parser.add_argument("--token", default="scale")
    parser.add_argument(
        "--query", action="append", required=True, help="read_memory queries (the first timed)"
    )
    parser.add_argument("--package", action="append", metavar="LABEL=DIR", help="a version's package folder")
    parser.add_argument("--env", action="append", metavar="LABEL:KEY=VALUE", help="a setting for one version")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reads", type=int, default=0, help="timed reads right after the first answer")
    parser.add_argument("--out", type=Path, help="append the table to this file")
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="py-spy each start (server and helpers), collapsed stacks to DIR/py-spy-LABEL-ROUND.txt",
    )
    args = parser.parse_args(argv)
    command = "python bench/bench_cold.py " + " ".join(
        a if not a.startswith("/") else ".../" + Path(a).name for a in (argv or sys.argv[1:])
    )
    before = os.getloadavg()[0]
    timings = asyncio.run(run(args))
    section = report(timings, command, (before, os.getloadavg()[0]))
    print(section)
    if args.out:
        with args.out.open("a", encoding="utf-8") as handle:
            handle.write("\n" + section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
