#!/usr/bin/env python
"""Start to first answer: `memvault serve` and `memvault stdio` on a small vault, beside a bare SDK server.

    python bench/bench_coldstart.py --rounds 9 --out bench/RESULTS.md
    python bench/bench_coldstart.py --package old=/tmp/old --package new=/tmp/new

Each case starts its server as a fresh process and times, from just before the spawn, the first
answer of an MCP client (the official one, imported before the clock starts): `initialize`, then
one tool call (memvault: `read_memory` of a word of the vault; the floor: its `echo`). Over HTTP
the client connects as soon as the port accepts (polled every 2 ms); over stdio the client's own
spawn is timed. Bytecode is cached, as in an installed wheel (PYTHONDONTWRITEBYTECODE is dropped
and a warm-up run of every case writes it). Cases: the floor (`bench/floor_server.py`, HTTP and
`--stdio`); memvault with its derived state deleted (start) and kept from the previous run
(restart), for each `--package` version (a folder holding a `memvault` package, e.g. from `git
archive`) or the installed one; with `--official`, the official memory server (stdio, node). The
cases take turns within each round, in an order that rotates, so that the shared machine's noise
hits them alike; read medians and the ratio to the floor.
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
from collections.abc import Callable, Coroutine, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from corpus import synthetic_docs, write_vault
from harness import cpu_ticks, machine_line, ms, pct, steal_share, update_results
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

START = "<!-- bench_coldstart:start -->"
END = "<!-- bench_coldstart:end -->"
HERE = Path(__file__).resolve().parent
TOKEN = "coldstart"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def clean_env(root: Path) -> dict[str, str]:
    # Bytecode cached, as a user's installed wheel has it (an editable install under
    # PYTHONDONTWRITEBYTECODE compiles every module at each start: a fifth of a second here).
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MEMVAULT_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env["MEMVAULT_ROOT"] = str(root)
    env["MEMVAULT_LOG_LEVEL"] = "warning"
    return env


def first_text(result: Any) -> str:
    return "\n".join(getattr(c, "text", "") for c in getattr(result, "content", []))


async def first_answer(session: ClientSession, tool: str, args: dict[str, Any]) -> tuple[float, str]:
    """initialize, then one call; (seconds since the clock's start when initialize answered, text)."""
    await session.initialize()
    init = time.perf_counter()
    result = await session.call_tool(tool, args)
    if getattr(result, "is_error", False):
        raise RuntimeError(f"{tool} failed: {first_text(result)[:200]}")
    return init, first_text(result)


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system, every thread) a process has used: what a start costs, which a
    machine shared with others changes far less than the wall time."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_child() -> int:
    """The one server process this one has running (stdio_client does not say which it spawned)."""
    me = os.getpid()
    children = [
        int(pid)
        for task in Path(f"/proc/{me}/task").iterdir()
        for pid in (task / "children").read_text().split()
    ]
    if len(children) != 1:
        raise RuntimeError(f"expected one server process, found {len(children)}")
    return children[0]


async def wait_port(port: int, proc: subprocess.Popen[bytes], deadline: float) -> None:
    while True:
        with contextlib.suppress(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode} before it listened")
        if time.perf_counter() > deadline:
            raise RuntimeError("server did not listen within 30 s")
        await asyncio.sleep(0.002)


async def http_case(
    cmd: list[str],
    env: dict[str, str],
    port: int,
    path: str,
    tool: str,
    args: dict[str, Any],
    cwd: str | None = None,
):
    start = time.perf_counter()
    quiet = None if os.environ.get("BENCH_STDERR") else subprocess.DEVNULL  # BENCH_STDERR=1: see the log
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=quiet)
    try:
        await wait_port(port, proc, start + 30)
        listening = time.perf_counter()
        async with (
            streamable_http_client(f"http://127.0.0.1:{port}{path}") as (read, write),
            ClientSession(read, write) as session,
        ):
            init, text = await first_answer(session, tool, args)
            answered = time.perf_counter()
            cpu = cpu_seconds(proc.pid)
        return listening - start, init - start, answered - start, cpu, text
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


async def stdio_case(
    cmd: list[str], env: dict[str, str], tool: str, args: dict[str, Any], cwd: str | None = None
):
    params = StdioServerParameters(command=cmd[0], args=cmd[1:], env=env, cwd=cwd)
    start = time.perf_counter()
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as (read, write),
            ClientSession(read, write) as session,
        ):
            init, text = await first_answer(session, tool, args)
            answered = time.perf_counter()
            cpu = cpu_seconds(server_child())
    return None, init - start, answered - start, cpu, text


def make_cases(
    args: argparse.Namespace, root: Path, word: str
) -> dict[str, Callable[[], Coroutine[Any, Any, Any]]]:
    py = sys.executable
    env = clean_env(root)
    read = ("read_memory", {"query": word})
    echo = ("echo", {"text": word})

    def version(label: str, folder: Path | None) -> dict[str, Callable[[], Coroutine[Any, Any, Any]]]:
        """memvault's four cases, from the installed package or (``folder``) another version's, each
        version on its own copy of the vault, so a restart finds its own derived state."""
        vault = root / (label or "installed")
        if not vault.exists():
            shutil.copytree(root / "vault", vault)
        venv = clean_env(vault)
        cwd: str | None = None
        if folder is not None:  # PYTHONPATH alone decides the package (not the current folder)
            venv["PYTHONPATH"] = str(folder.resolve())
            cwd = tempfile.gettempdir()
        tag = f" [{label}]" if label else ""

        def run(kind: str, cold: bool) -> Callable[[], Coroutine[Any, Any, Any]]:
            async def go():  # type: ignore[no-untyped-def]
                if cold:
                    shutil.rmtree(vault / TOKEN / ".memvault", ignore_errors=True)
                if kind == "serve":
                    port = free_port()
                    cmd = [py, "-m", "memvault", "serve", "--port", str(port)]
                    return await http_case(cmd, venv, port, f"/mcp/{TOKEN}", *read, cwd=cwd)
                cmd = [py, "-m", "memvault", "stdio", "--token", TOKEN]
                return await stdio_case(cmd, venv, *read, cwd=cwd)

            return go

        return {
            f"memvault serve{tag}, start (no .memvault/)": run("serve", True),
            f"memvault serve{tag}, restart": run("serve", False),
            f"memvault stdio{tag}, start (no .memvault/)": run("stdio", True),
            f"memvault stdio{tag}, restart": run("stdio", False),
        }

    async def floor_http():  # type: ignore[no-untyped-def]
        port = free_port()
        cmd = [py, str(HERE / "floor_server.py"), "--port", str(port)]
        return await http_case(cmd, env, port, f"/mcp/{TOKEN}", *echo)

    async def floor_stdio():  # type: ignore[no-untyped-def]
        return await stdio_case([py, str(HERE / "floor_server.py"), "--stdio"], env, *echo)

    cases: dict[str, Callable[[], Coroutine[Any, Any, Any]]] = {
        "floor HTTP (bare SDK, uvicorn)": floor_http,
        "floor stdio (bare SDK)": floor_stdio,
    }
    for spec in args.package or [""]:
        label, _, folder = spec.partition("=")
        cases.update(version(label, Path(folder) if folder else None))
    if args.official:
        graph = root / "official-memory.jsonl"
        official_env = {**env, "MEMORY_FILE_PATH": str(graph)}

        async def official():  # type: ignore[no-untyped-def]
            cmd = args.official.split()
            return await stdio_case(cmd, official_env, "search_nodes", {"query": word})

        cases["official memory server, stdio (node)"] = official
    return cases


def import_times(argv: Sequence[str], env: dict[str, str]) -> float:
    """Seconds of `python -X importtime -c ...` imports, by the interpreter's own count."""
    out = subprocess.run([sys.executable, "-X", "importtime", *argv], env=env, capture_output=True, text=True)
    total = 0
    for line in out.stderr.splitlines():
        parts = line.split("|")
        if (
            line.startswith("import time:")
            and len(parts) == 3
            and parts[2].strip()
            and parts[0].split(":")[1].strip().isdigit()
        ):
            if len(parts[2]) - len(parts[2].lstrip()) == 1:  # top-level imports only
                total += int(parts[1])
    return total / 1e6


def report(
    timings: dict[str, list[tuple[float | None, float, float, float]]],
    imports: dict[str, list[float]],
    args: argparse.Namespace,
    command: str,
    load: tuple[str, str],
    steal: float | None,
) -> str:
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    floors = {"HTTP": "floor HTTP (bare SDK, uvicorn)", "stdio": "floor stdio (bare SDK)"}
    lines = [
        f"## Cold start: start to first answer ({when})",
        "",
        f"`{command}`",
        "",
        f"Machine: {machine_line()}. Shared with other engineers' test runs: load average "
        f"{load[0]} before, {load[1]} after"
        + (f"; the host took {steal:.0%} of the CPU (steal)" if steal is not None else "")
        + ". Read medians and ratios.",
        "",
        f"A vault of {args.memories} memories; {args.rounds} rounds, the cases in turns (rotating order). "
        "Times from just before the spawn: `listen` when the port accepts, `init` when `initialize` "
        "answered, `answer` when the first tool call (memvault `read_memory`, the floor `echo`, the "
        "official server `search_nodes`) answered; `CPU` the server process's CPU time (all threads) "
        "by then, which other processes' load changes far less than the wall time. Ratios: median "
        "answer (CPU) / the floor's on the same transport.",
        "",
        "| case | listen p50 | init p50 | answer p50 | answer p90 | answer min | vs floor | CPU p50 "
        "| CPU vs floor |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, runs in timings.items():
        listen = [r[0] for r in runs if r[0] is not None]
        answer = [r[2] for r in runs]
        floor = floors["stdio" if "stdio" in name else "HTTP"]
        ratio = statistics.median(answer) / statistics.median([r[2] for r in timings[floor]])
        cpu = statistics.median([r[3] for r in runs])
        cpu_ratio = cpu / statistics.median([r[3] for r in timings[floor]])
        lines.append(
            f"| {name} | {ms(statistics.median(listen)) if listen else '-'} | "
            f"{ms(statistics.median([r[1] for r in runs]))} | {ms(statistics.median(answer))} | "
            f"{ms(pct(answer, 0.9))} | {ms(min(answer))} | {ratio:.2f} | {ms(cpu)} | {cpu_ratio:.2f} |"
        )
    if imports:
        lines += [
            "",
            "Imports alone (`python -X importtime`, top-level modules summed, median of "
            f"{len(next(iter(imports.values())))}):",
            "",
        ]
        lines += [f"- {name}: {ms(statistics.median(v))} ms" for name, v in imports.items()]
    lines.append("")
    return "\n".join(lines) + "\n"


async def run(
    args: argparse.Namespace, root: Path
) -> dict[str, list[tuple[float | None, float, float, float]]]:
    docs = synthetic_docs(args.memories, args.seed)
    write_vault(root / "vault" / TOKEN, docs, args.seed)
    word = next(w.strip(".,").lower() for w in docs[0].content.split() if len(w) > 6)
    cases = make_cases(args, root, word)
    timings: dict[str, list[tuple[float | None, float, float, float]]] = {name: [] for name in cases}
    names = list(cases)
    for name in names:  # warm the OS caches and pyc files once
        await cases[name]()
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            listen, init, answer, cpu, text = await cases[name]()
            if name.startswith("memvault") and word not in text.lower():
                raise RuntimeError(f"{name}: the first answer lacks {word!r}: {text[:200]}")
            timings[name].append((listen, init, answer, cpu))
        print(
            f"round {r + 1}: " + ", ".join(f"{n.split(' (')[0]} {ms(timings[n][-1][2])}" for n in names),
            flush=True,
        )
    return timings


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memories", type=int, default=30)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--official", help="command of the official memory server (stdio), e.g. 'node .../dist/index.js'"
    )
    parser.add_argument("--imports", type=int, default=3, help="runs of -X importtime per command (0: none)")
    parser.add_argument(
        "--package",
        action="append",
        metavar="LABEL=DIR",
        help="a version to time: DIR holds its memvault package (git archive <rev> memvault | tar -x "
        "-C DIR); repeat for several, taking turns (default: the installed one)",
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    given = list(argv if argv is not None else sys.argv[1:])
    if args.official:  # no absolute path in RESULTS.md
        given = [("'node .../server-memory/dist/index.js'" if a == args.official else a) for a in given]
    command = "python bench/bench_coldstart.py " + " ".join(given)
    load_before = f"{os.getloadavg()[0]:.2f}"
    ticks = cpu_ticks()
    with tempfile.TemporaryDirectory(prefix="memvault-coldstart-") as tmp:
        root = Path(tmp)
        timings = asyncio.run(run(args, root))
        env = clean_env(root)
        imports: dict[str, list[float]] = {}
        probes = {
            "memvault serve's imports (memvault.cli.serve, uvicorn, memvault.server.app)": [
                "-c",
                "import uvicorn, memvault.cli.main, memvault.cli.serve, memvault.server.app",
            ],
            "memvault stdio's imports (memvault.cli.serve, memvault.server.stdio)": [
                "-c",
                "import anyio, memvault.cli.main, memvault.cli.serve, memvault.server.stdio",
            ],
            "the floor's (mcp.server.mcpserver, uvicorn, starlette)": [
                "-c",
                "import uvicorn, mcp.server.mcpserver, starlette.applications",
            ],
        }
        for _ in range(args.imports):
            for name, probe in probes.items():
                imports.setdefault(name, []).append(import_times(probe, env))
    section = report(
        timings,
        imports,
        args,
        command,
        (load_before, f"{os.getloadavg()[0]:.2f}"),
        steal_share(ticks, cpu_ticks()),
    )
    print(section)
    if args.out:
        update_results(args.out, section, command, START, END, grouped=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
