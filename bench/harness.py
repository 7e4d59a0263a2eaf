"""What the benchmarks share: a server on a loopback port in this process, the official MCP client,
and their sections of RESULTS.md."""

from __future__ import annotations

import asyncio
import contextlib
import re
import socket
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import uvicorn
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

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
