"""What the benchmarks share: a server on a loopback port in this process, the official MCP client,
the statistics (one percentile), the machine they ran on, and their sections of RESULTS.md."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
import re
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvicorn
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from memvault import __version__
from memvault.config import Settings
from memvault.server.app import create_app

RESULTS_HEADER = "# Benchmark results\n\nSee bench/README.md for how to run each benchmark.\n"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.asynccontextmanager
async def serving(app: Any, port: int) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1:``port`` in this event loop; yields the base URL."""
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    task = asyncio.create_task(server.serve())
    try:
        deadline = time.monotonic() + 20
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("server exited before it started")
            if time.monotonic() > deadline:
                raise RuntimeError("server did not start within 20 s")
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)


@contextlib.asynccontextmanager
async def client(url: str) -> AsyncIterator[ClientSession]:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


async def call(session: ClientSession, tool: str, args: dict[str, Any]) -> tuple[float, str]:
    """Call a tool; (seconds, reply text). A tool error raises RuntimeError."""
    start = time.perf_counter()
    result = await session.call_tool(tool, args)
    elapsed = time.perf_counter() - start
    text = "\n".join(getattr(c, "text", "") for c in getattr(result, "content", []))
    if getattr(result, "is_error", False):
        raise RuntimeError(f"{tool}({args}) failed: {text[:300]}")
    return elapsed, text


class AsgiTimer:
    """Wraps the server's ASGI app and times each POST from its arrival to the hand-over of the last
    non-empty chunk of its response body (the SSE stream may close later): the server's share of a
    call, everything but uvicorn's HTTP parsing and the client."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.last = 0.0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def timed_send(message: Any) -> None:
            # Set before the bytes go out, so the figure is there by the time the client has them.
            if message["type"] == "http.response.body" and message.get("body"):
                self.last = time.perf_counter() - start
            await send(message)

        await self.app(scope, receive, timed_send)


@dataclass
class Server:
    url: str
    app: Any
    timer: AsgiTimer | None  # set when served with timed=True


@contextlib.asynccontextmanager
async def serve(settings: Settings, *, timed: bool = False) -> AsyncIterator[Server]:
    """memvault's app with ``settings`` on a free loopback port in this event loop."""
    port = free_port()
    app = create_app(settings.replace(port=port))
    timer = AsgiTimer(app) if timed else None
    async with serving(timer or app, port) as url:
        yield Server(url, app, timer)


def pct(values: Sequence[float], q: float) -> float:
    """The q-quantile by nearest rank (p50 of [1, 2, 3, 4] is 2): the one percentile of every report."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def cpu_ticks(stat: Path = Path("/proc/stat")) -> tuple[int, int] | None:
    """(steal, total) CPU ticks of this machine since boot, None where /proc/stat says nothing."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        fields = [int(x) for x in stat.read_text().split("\n", 1)[0].split()[1:]]
        # user nice system idle iowait irq softirq steal guest guest_nice; guest time is in user too
        return fields[7], sum(fields[:8])
    return None


def steal_share(before: tuple[int, int] | None, after: tuple[int, int] | None) -> float | None:
    """The share of this machine's CPU time its host gave to others between two cpu_ticks(): a
    shared machine's noise, which hits whatever runs in that window and not the others."""
    if before is None or after is None or after[1] <= before[1]:
        return None
    return (after[0] - before[0]) / (after[1] - before[1])


def ms(seconds: float) -> str:
    value = seconds * 1000
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:,.0f}"


def machine() -> dict[str, str]:
    cpu = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    ram = "unknown"
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                ram = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
                break
    nproc = str(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
    import mcp

    mcp_version = getattr(mcp, "__version__", None)
    if mcp_version is None:
        from importlib.metadata import version

        mcp_version = version("mcp")
    git = "unknown"
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        root = Path(__file__).resolve().parent.parent
        out = subprocess.run(
            ["git", "-C", str(root), "describe", "--always", "--dirty"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        git = out.stdout.strip() or "unknown"
    return {
        "git": git,
        "nproc": nproc,
        "cpu": cpu,
        "ram": ram,
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
        "mcp": mcp_version,
        "memvault": __version__,
    }


def fs_type(path: Path) -> str:
    best, kind = "", "unknown"
    with contextlib.suppress(OSError):
        target = str(path.resolve())
        for line in Path("/proc/mounts").read_text().splitlines():
            parts = line.split()
            if len(parts) >= 3 and (target == parts[1] or target.startswith(parts[1].rstrip("/") + "/")):
                if len(parts[1]) >= len(best):
                    best, kind = parts[1], parts[2]
    return kind


def machine_line() -> str:
    """The machine in one line, for a report's header."""
    info = machine()
    return (
        f"{info['nproc']} CPUs ({info['cpu']}), {info['ram']} RAM, Python {info['python']}, {info['os']}, "
        f"mcp {info['mcp']}, memvault {info['memvault']} (git {info['git']})"
    )


def update_results(path: Path, section: str, command: str, start: str, end: str, *, grouped: bool) -> None:
    """Add this run's section between the ``start``/``end`` markers; a previous section from the
    same command is replaced. A new command's section goes before the first section of its kind
    when ``grouped``, else at the end. Other benchmarks' sections are left as they are."""
    text = path.read_text(encoding="utf-8") if path.exists() else RESULTS_HEADER
    block = f"{start}\n<!-- command: {command} -->\n{section}{end}\n"
    pattern = re.compile(
        re.escape(f"{start}\n<!-- command: {command} -->\n") + r".*?" + re.escape(end) + r"\n", re.DOTALL
    )
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text, count=1)
    elif grouped and start in text:
        i = text.index(start)
        text = text[:i] + block + "\n" + text[i:]
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.write_text(text, encoding="utf-8")
