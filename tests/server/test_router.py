"""`memvault serve --processes 2`: the router hands each vault's connections to one server process.

The real console script in a subprocess, driven by the official MCP client over streamable HTTP
(both protocol eras), the legacy SSE transport and bearer keys; which process serves a vault is
read from /proc (the token folders a process has files open in), never from the server's answers.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest
from commands import MEMVAULT, START_TIMEOUT, Server, clean_env, free_port, http, serving, wait_until
from conftest import keyed, wait_for
from mcp.client.client import Client
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client

from memvault.server import keys
from memvault.server.shard import shard_of

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not Path("/proc/self/fd").exists(), reason="needs /proc")]


def split_pair(prefix: str) -> tuple[str, str]:
    """Two names the router sends to different processes of two."""
    names = [f"{prefix}{i}" for i in range(50)]
    first = names[0]
    return first, next(n for n in names if shard_of(n, 2) != shard_of(first, 2))


def children(pid: int) -> set[int]:
    """The server's processes: the router's children running `serve --child`."""
    found = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        fields = stat.rpartition(")")[2].split()
        if int(fields[1]) == pid and fields[0] != "Z" and b"--child" in cmdline:
            found.add(int(entry.name))
    return found


def vaults_open_in(pid: int, root: Path) -> set[str]:
    """The token folders under ``root`` a process has a file open in."""
    found = set()
    try:
        fds = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return found
    for fd in fds:
        try:
            target = Path(os.readlink(fd))
        except OSError:
            continue
        if target.is_relative_to(root):
            found.add(target.relative_to(root).parts[0])
    return found


@contextmanager
def two_processes(tmp_path: Path, **env: str) -> Iterator[tuple[Server, Path]]:
    root = (tmp_path / "memories").resolve()
    port = free_port()
    argv = [str(MEMVAULT), "serve", "--processes", "2", "--port", str(port), "--root", str(root)]
    with serving(tmp_path, argv, clean_env(**env), port) as server:
        server.wait_healthy()
        yield server, root


async def tool(client: Client | ClientSession, name: str, **args: Any) -> str:
    result = await client.call_tool(name, args)
    text = "\n".join(c.text for c in result.content if hasattr(c, "text"))
    assert not result.is_error, text
    return text


@asynccontextmanager
async def sse_session(url: str, headers: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    async with sse_client(url, headers=headers) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        yield session


@pytest.mark.anyio
async def test_two_processes_serve_every_transport_each_vault_on_one_process(tmp_path: Path) -> None:
    alice, bob = split_pair("agent")  # by path token
    carol_key, dave_key = "", ""
    keys_file = tmp_path / "keys.txt"
    while not carol_key or shard_of(carol_key, 2) == shard_of(dave_key, 2):  # keys are random
        keys_file.unlink(missing_ok=True)
        carol_key = keys.add(keys_file, "carol", "carol", read_only=False)
        dave_key = keys.add(keys_file, "dave", "dave", read_only=False)
    env = {"MEMVAULT_KEYS_FILE": str(keys_file), "MEMVAULT_PATH_TOKENS": "on"}
    with two_processes(tmp_path, **env) as (server, root):
        assert "(2 processes)" in server.stdout.read_text()
        url = server.url
        # Streamable HTTP, both eras: each writes, the other era reads it back.
        async with Client(f"{url}/mcp/{alice}", mode="legacy") as client:
            await tool(client, "write_memory", title="Tide", content=f"walrus of {alice}")
        async with Client(f"{url}/mcp/{bob}") as client:
            await tool(client, "write_memory", title="Tide", content=f"walrus of {bob}")
            assert f"walrus of {bob}" in await tool(client, "read_memory", query="walrus")
        async with Client(f"{url}/mcp/{alice}") as client:
            assert f"walrus of {alice}" in await tool(client, "read_memory", query="walrus")
        async with Client(f"{url}/mcp/{bob}", mode="legacy") as client:
            assert f"walrus of {bob}" in await tool(client, "read_memory", query="walrus")
        # The legacy SSE transport: its stream and its posts reach the vault's process.
        async with sse_session(f"{url}/mcp/{alice}/sse") as session:
            assert f"walrus of {alice}" in await tool(session, "read_memory", query="walrus")
            await tool(session, "write_memory", title="Reef", content="coral over sse")
        # Bearer keys, over streamable HTTP and SSE.
        for name, key in (("carol", carol_key), ("dave", dave_key)):
            async with keyed(url, key) as session:
                await tool(session, "write_memory", title="Via key", content=f"owl of {name}")
            bearer = {"Authorization": f"Bearer {key}"}
            async with sse_session(f"{url}/sse", headers=bearer) as session:
                assert f"owl of {name}" in await tool(session, "read_memory", query="owl")
        # Each vault was served by one process, and the two of a pair by different ones.
        pids = children(server.process.pid)
        assert len(pids) == 2, pids
        served = {pid: vaults_open_in(pid, root) for pid in pids}
        for pair in ((alice, bob), ("carol", "dave")):
            owners = [[pid for pid in pids if name in served[pid]] for name in pair]
            assert all(len(o) == 1 for o in owners) and owners[0] != owners[1], served
        assert server.stop() == 0, server.logs()[-3000:]
        assert not any(Path(f"/proc/{pid}").exists() for pid in pids)  # reaped: none is left
    assert "coral over sse" in (root / alice / "reef.md").read_text(encoding="utf-8")


@pytest.mark.anyio
async def test_a_killed_process_is_replaced_and_its_vaults_keep_answering(tmp_path: Path) -> None:
    alice, bob = split_pair("agent")
    with two_processes(tmp_path) as (server, root):
        for name in (alice, bob):
            async with Client(f"{server.url}/mcp/{name}") as client:
                await tool(client, "write_memory", title="Tide", content=f"walrus of {name}")
        pids = children(server.process.pid)
        victim = next(pid for pid in pids if alice in vaults_open_in(pid, root))
        os.kill(victim, signal.SIGKILL)
        await wait_for(lambda: len(children(server.process.pid) - {victim}) == 2, timeout=START_TIMEOUT)
        assert "server process" in server.logs() and "starting another" in server.logs()
        for name in (alice, bob):  # the new process serves the vault (initializing anew)
            async with Client(f"{server.url}/mcp/{name}") as client:
                assert f"walrus of {name}" in await tool(client, "read_memory", query="walrus")
        assert server.stop() == 0, server.logs()[-3000:]


def test_hostile_heads_neither_hang_nor_spin_the_router(tmp_path: Path) -> None:
    env = {"MEMVAULT_HEADER_TIMEOUT_SECONDS": "1", "MEMVAULT_MAX_CONNECTIONS": "30"}
    with two_processes(tmp_path, **env) as (server, _):
        port = server.port
        cpu_before = cpu_seconds(server.process.pid)
        started = time.monotonic()
        partial = []
        for n in range(20):  # heads that never end, half of them still in the request line
            sock = socket.create_connection(("127.0.0.1", port), timeout=10)
            sock.sendall(b"GET /mcp/alice HTT" if n % 2 else b"POST /mcp HTTP/1.1\r\nAuthorization: Be")
            partial.append(sock)
        huge = socket.create_connection(("127.0.0.1", port), timeout=10)
        huge.sendall(b"POST /mcp HTTP/1.1\r\n" + b"X-Pad: " + b"p" * 40_000)
        assert all(closed(s) for s in partial)  # closed after the header timeout
        waited = time.monotonic() - started
        # Waiting on partial heads is no busy loop: the router used a small share of that time.
        assert cpu_seconds(server.process.pid) - cpu_before < 0.5 * waited
        reply = answer(huge)  # a process answered it, or closed it
        assert reply == b"" or reply.startswith(b"HTTP/1.1 4"), reply[:100]
        # The bound on connections holds across the processes: handed ones count.
        held = [keep_alive(port) for _ in range(30)]
        busy = socket.create_connection(("127.0.0.1", port), timeout=10)
        assert b" 503 " in busy.recv(1024)
        for sock in held:
            sock.close()
        wait_until(lambda: http(f"{server.url}/healthz", timeout=2)[0] == 200, START_TIMEOUT, "healthz")
        for sock in [*partial, huge, busy]:
            sock.close()
        assert server.stop() == 0, server.logs()[-3000:]


def post(
    conn: HTTPConnection, token: str, message: dict[str, Any], session: str | None = None
) -> tuple[int, str, Any]:
    """One JSON-RPC message over ``conn`` (kept alive): status, session id, reply."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    if session is not None:
        headers |= {"Mcp-Session-Id": session, "Mcp-Protocol-Version": "2025-11-25"}
    conn.request("POST", f"/mcp/{token}", json.dumps(message), headers)
    response = conn.getresponse()
    body = response.read()
    return response.status, response.getheader("mcp-session-id") or "", json.loads(body) if body else None


def test_a_connection_carrying_two_vaults_reaches_each_vaults_process(tmp_path: Path) -> None:
    """A proxy's pooled connection, or one client with two tokens, sends several vaults' requests
    over one connection: each reaches its vault's process, so a session works on any connection."""
    alice, bob = split_pair("pooled")
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}
    with two_processes(tmp_path) as (server, root):
        shared = HTTPConnection("127.0.0.1", server.port, timeout=30)
        sessions = {}
        for token in (alice, bob, alice):  # both sessions begin on the one connection
            status, sessions[token], _ = post(
                shared, token, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
            )
            assert status == 200
            post(shared, token, {"jsonrpc": "2.0", "method": "notifications/initialized"}, sessions[token])
        others = [HTTPConnection("127.0.0.1", server.port, timeout=30) for _ in range(2)]
        for n in range(12):  # each session's calls over every connection, a body of 90 KB now and then
            token, conn = (alice, bob)[n % 2], [shared, *others][n % 3]
            words = "word " * (18_000 if n % 5 == 0 else 20)
            call = {"name": "write_memory", "arguments": {"title": f"note {n} of {token}", "content": words}}
            status, _, reply = post(
                conn,
                token,
                {"jsonrpc": "2.0", "id": 10 + n, "method": "tools/call", "params": call},
                sessions[token],
            )
            assert status == 200 and not reply["result"]["isError"], reply
        for conn in [shared, *others]:
            conn.close()
        pids = children(server.process.pid)
        for token in (alice, bob):  # each vault was served by one process only
            assert len([pid for pid in pids if token in vaults_open_in(pid, root)]) == 1
        assert len(list((root / alice).glob("note-*.md"))) == len(list((root / bob).glob("note-*.md"))) == 6
        assert server.stop() == 0, server.logs()[-3000:]


def keep_alive(port: int) -> socket.socket:
    """A connection whose first request was answered and which stays open (in a process)."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\n")
    assert sock.recv(65536).startswith(b"HTTP/1.1 200")
    return sock


def answer(sock: socket.socket) -> bytes:
    """What the server sends before it closes (b"" if it reset the connection)."""
    sock.settimeout(15)
    try:
        return sock.recv(1024)
    except ConnectionResetError:
        return b""


def closed(sock: socket.socket) -> bool:
    return answer(sock) == b""


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_a_setting_the_processes_refuse_ends_serve_with_status_2(tmp_path: Path) -> None:
    port = free_port()
    env = clean_env(MEMVAULT_TOKENS_FILE=str(tmp_path / "missing.txt"))
    argv = [str(MEMVAULT), "serve", "--processes", "2", "--port", str(port), "--root", str(tmp_path)]
    with serving(tmp_path, argv, env, port) as server:
        assert server.process.wait(START_TIMEOUT) == 2
        assert "MEMVAULT_TOKENS_FILE cannot be read" in server.logs()
        assert "serving" not in server.stdout.read_text()


def test_the_router_imports_neither_the_sdk_nor_numpy() -> None:
    code = (
        "import sys; from memvault.cli import main, serve; from memvault.server import router; "
        "print(sorted(m for m in ('mcp', 'numpy', 'uvicorn', 'starlette', 'pydantic') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stdout + result.stderr
