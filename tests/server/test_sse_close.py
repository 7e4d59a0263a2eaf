"""Legacy SSE streams that end (closed by their client, or by a Ctrl-C): never a traceback in the log."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import free_port, wait_for

pytestmark = pytest.mark.anyio


@contextlib.contextmanager
def server_log() -> Iterator[list[logging.LogRecord]]:
    """Every record uvicorn and memvault log meanwhile (uvicorn's loggers do not reach the root)."""
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record)

    handler = Keep(logging.DEBUG)
    loggers = [logging.getLogger(name) for name in ("uvicorn.error", "memvault", "mcp")]
    for logger in loggers:
        logger.addHandler(handler)
    try:
        yield records
    finally:
        for logger in loggers:
            logger.removeHandler(handler)


async def open_and_drop(url: str) -> None:
    """Open a legacy SSE stream, wait for its endpoint event, then go away."""
    async with httpx2.AsyncClient(timeout=10) as client:
        async with client.stream("GET", url, headers={"Accept": "text/event-stream"}) as response:
            assert response.status_code == 200
            async for line in response.aiter_lines():
                if line.startswith("data:"):
                    break


async def test_closed_sse_streams_log_no_traceback(server_factory: Callable[..., Any]) -> None:
    async with server_factory() as srv:
        with server_log() as records:
            async with anyio.create_task_group() as group:
                for i in range(30):
                    group.start_soon(open_and_drop, f"{srv.url}/mcp/agent{i % 3}/sse")
            await wait_for(lambda: not srv.app.state.sse_apps.streams, timeout=10)
    problems = [r for r in records if r.levelno >= logging.WARNING or r.exc_info]
    assert len(problems) <= 30, [r.getMessage() for r in problems[:3]]
    assert not [r for r in records if r.exc_info], [r.getMessage() for r in records if r.exc_info][:3]


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout}s: {what}")
        time.sleep(0.02)
    return result


def test_ctrl_c_with_open_streams_stops_serve_without_a_traceback(tmp_path: Path) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    argv = [sys.executable, "-m", "memvault", "serve", "--root", str(tmp_path / "m"), "--port", str(port)]
    err = tmp_path / "stderr"
    with err.open("wb") as stderr:  # its own process group, as a terminal's foreground job
        process = subprocess.Popen(argv, env=env, stdout=stderr, stderr=stderr, start_new_session=True)
    streams: list[socket.socket] = []
    try:
        for token in ("alice", "bob"):  # a legacy SSE stream each, left open
            sock = wait_until(lambda: _connected(port), 30, "the server listens")
            sock.sendall(f"GET /mcp/{token}/sse HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
            received = b""
            while b"data:" not in received:
                chunk = sock.recv(4096)
                assert chunk, err.read_text()
                received += chunk
            streams.append(sock)
        os.killpg(process.pid, signal.SIGINT)  # Ctrl-C
        assert process.wait(30) == 0, err.read_text()
    finally:
        for sock in streams:
            sock.close()
        if process.poll() is None:
            process.kill()
            process.wait()
    log = err.read_text()
    assert "Traceback" not in log and "Exception in ASGI application" not in log, log


def _connected(port: int) -> socket.socket | None:
    sock = socket.socket()
    sock.settimeout(10)
    if sock.connect_ex(("127.0.0.1", port)) == 0:
        return sock
    sock.close()
    return None
