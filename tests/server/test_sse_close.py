"""Clients that go away: legacy SSE streams that end (closed by their client, or by a Ctrl-C),
messages on their way to them, POSTs cut short on either transport: never a traceback in the log."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from anyio.abc import SocketAttribute, SocketStream
from commands import INITIALIZE
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


PING = b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}'


async def open_stream(port: int, token: str) -> tuple[SocketStream, str]:
    """A legacy SSE stream on a raw socket, and the session id its endpoint event names."""
    stream = await anyio.connect_tcp("127.0.0.1", port)
    await stream.send(f"GET /mcp/{token}/sse HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
    received = b""
    while not (found := re.search(rb"session_id=([0-9a-f]{32})", received)):
        received += await stream.receive()
    return stream, found[1].decode()


def message(port: int, token: str, session: str, body: bytes, length: int | None = None) -> bytes:
    """A POST of ``body`` to a session; a ``length`` above the body's announces a message cut short."""
    head = (
        f"POST /mcp/{token}/messages/?session_id={session} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body) if length is None else length}\r\n\r\n"
    )
    return head.encode() + body


async def post(port: int, request: bytes) -> int:
    """Send one request on its own connection; its answer's status."""
    async with await anyio.connect_tcp("127.0.0.1", port) as conn:
        await conn.send(request)
        reply = b""
        while b"\r\n" not in reply:
            reply += await conn.receive()
    return int(reply.split()[1])


def reset(stream: SocketStream) -> None:
    """Make the next close a reset (RST), as a killed client or a dropped network does."""
    sock = stream.extra(SocketAttribute.raw_socket)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


async def test_messages_to_a_stream_its_client_closed_log_no_traceback(
    server_factory: Callable[..., Any],
) -> None:
    async def close_while_posting(port: int, i: int) -> None:
        token = f"agent{i % 3}"
        stream, session = await open_stream(port, token)
        if i % 2:
            reset(stream)
        await stream.aclose()
        # Its messages are still on their way: sent until the server no longer knows the session.
        while await post(port, message(port, token, session, PING)) == 202:
            pass

    async with server_factory() as srv:
        port = srv.settings.port
        with server_log() as records:
            async with anyio.create_task_group() as group:
                for i in range(20):
                    group.start_soon(close_while_posting, port, i)
            await wait_for(lambda: not srv.app.state.sse_apps.streams, timeout=10)
    tracebacks = [r for r in records if r.exc_info]
    assert not tracebacks, [r.getMessage() for r in tracebacks[:3]]
    assert len([r for r in records if r.levelno >= logging.WARNING]) <= 20


async def test_a_message_whose_client_goes_away_midway_logs_no_traceback(
    server_factory: Callable[..., Any],
) -> None:
    async with server_factory() as srv:
        port = srv.settings.port
        with server_log() as records:
            stream, session = await open_stream(port, "agent")
            for i in range(10):
                conn = await anyio.connect_tcp("127.0.0.1", port)
                await conn.send(message(port, "agent", session, PING[:10], length=len(PING)))
                if i % 2:
                    reset(conn)
                await conn.aclose()
            # Its session still stands, so each message cut short got as far as reading its body.
            assert await post(port, message(port, "agent", session, PING)) == 202
            await stream.aclose()
            await wait_for(lambda: not srv.app.state.sse_apps.streams, timeout=10)
    tracebacks = [r for r in records if r.exc_info]
    assert not tracebacks, [r.getMessage() for r in tracebacks[:3]]
    assert len([r for r in records if r.levelno >= logging.WARNING]) <= 10


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


async def test_a_streamable_http_post_whose_client_goes_away_midway_logs_no_traceback(
    server_factory: Callable[..., Any], caplog: pytest.LogCaptureFixture
) -> None:
    # The same for the streamable HTTP transport: the SDK logged "Error handling POST request" with
    # its traceback for each POST whose body never arrived whole.
    caplog.set_level(logging.DEBUG, logger="memvault")  # where a quiet end is noted
    async with server_factory() as srv:
        port = srv.settings.port
        head = (
            f"POST /mcp/agent HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nContent-Length: {len(INITIALIZE)}\r\n\r\n"
        ).encode()
        with server_log() as records:
            for i in range(10):
                conn = await anyio.connect_tcp("127.0.0.1", port)
                await conn.send(head + INITIALIZE[:20])
                if i % 2:
                    reset(conn)
                await conn.aclose()

            def ended() -> int:  # requests the server has seen end, quietly or not
                return len([r for r in records if "went away" in r.getMessage() or r.exc_info])

            await wait_for(lambda: ended() >= 10, timeout=10)
            # A whole request still works, and is answered as before.
            assert await post(port, head + INITIALIZE) == 200
    tracebacks = [r for r in records if r.exc_info]
    assert not tracebacks, [r.getMessage() for r in tracebacks[:3]]


async def test_requests_that_meet_their_sessions_end_get_404_and_log_no_traceback(
    server_factory: Callable[..., Any],
) -> None:
    """A client ends its streamable HTTP session (DELETE) while its calls are in flight: each call
    gets its answer, or 404 (the session ended: start a new one); the log gets no traceback (the
    SDK logged two per such call and answered 500)."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    initialize = json.loads(INITIALIZE)
    statuses: list[int] = []
    bodies: list[str] = []
    async with server_factory() as srv, httpx2.AsyncClient(timeout=10) as client:
        url = srv.mcp_url("racer")
        with server_log() as records:
            for round_ in range(40):
                response = await client.post(url, json=initialize, headers=headers)
                assert response.status_code == 200, response.text
                session = {
                    **headers,
                    "mcp-session-id": response.headers["mcp-session-id"],
                    "mcp-protocol-version": "2025-06-18",
                }
                initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
                assert (await client.post(url, json=initialized, headers=session)).status_code == 202

                async def call(i: int, session: dict[str, str] = session, round_: int = round_) -> None:
                    arguments = {"title": f"Note {round_} {i}", "content": "words " * 500}
                    request = {
                        "jsonrpc": "2.0",
                        "id": 10 + i,
                        "method": "tools/call",
                        "params": {"name": "write_memory", "arguments": arguments},
                    }
                    answer = await client.post(url, json=request, headers=session)
                    statuses.append(answer.status_code)
                    bodies.append(answer.text)

                async def end(session: dict[str, str] = session, round_: int = round_) -> None:
                    await anyio.sleep(0.001 * (round_ % 10))
                    assert (await client.delete(url, headers=session)).status_code == 200

                async with anyio.create_task_group() as group:
                    for i in range(8):
                        group.start_soon(call, i)
                    group.start_soon(end)
                if statuses.count(404) >= 3:
                    break
    assert set(statuses) <= {200, 404}, sorted(set(statuses))
    assert statuses.count(404) >= 3, "no call met the end of its session: the race was not exercised"
    ended = [body for status, body in zip(statuses, bodies, strict=True) if status == 404]
    assert all("start a new session" in body for body in ended), ended[:1]
    assert not [r for r in records if r.exc_info], [r.getMessage() for r in records if r.exc_info][:3]
    assert not [r for r in records if r.levelno >= logging.WARNING], [r.getMessage() for r in records][:3]
