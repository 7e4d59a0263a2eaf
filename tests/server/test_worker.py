"""A server process of `serve --processes N` on its own: connections handed over its channel, and a
request for another process's vault handed back with the bytes read of it.

The test plays the router: it holds the other end of the channel and a real client socket.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import uvicorn

from memvault.server import limits
from memvault.server.router import HANDED, MESSAGE_MOST, MOVED, MOVED_MOST, READY, channel_pair
from memvault.server.shard import shard_of
from memvault.server.worker import HandedServer

pytestmark = pytest.mark.skipif(not hasattr(socket, "send_fds"), reason="needs descriptor passing")


def token_of(shard: int) -> str:
    """A token the hash sends to process ``shard`` of two."""
    return next(f"t{i}" for i in range(100) if shard_of(f"t{i}", 2) == shard)


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """Answers every request with its path and the length of its body."""
    if scope["type"] != "http":
        return
    size = 0
    while True:
        message = await receive()
        size += len(message.get("body", b""))
        if not message.get("more_body"):
            break
    body = f"{scope['path']} {size}".encode()
    headers = [(b"content-type", b"text/plain"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def process_zero() -> AsyncIterator[socket.socket]:
    """Process 0 of 2 serving ``app``; yields the router's end of its channel."""
    mine, theirs = channel_pair()
    config = uvicorn.Config(app, lifespan="off", log_level="warning", http=limits.guarded_protocol(100, 5.0))
    server = HandedServer(config, theirs, 0, 2)
    task = asyncio.create_task(server.serve())
    mine.setblocking(False)
    loop = asyncio.get_running_loop()
    assert await asyncio.wait_for(loop.sock_recv(mine, 64), 30) == READY
    try:
        yield mine
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 30)
        mine.close()
        theirs.close()


async def hand(channel: socket.socket, message: bytes = HANDED) -> socket.socket:
    """A new client connection handed to the process; returns the client's end."""
    ours, client = socket.socketpair()
    socket.send_fds(channel, [message], [ours.fileno()])
    ours.close()
    client.setblocking(False)
    return client


async def reply(client: socket.socket) -> bytes:
    """One whole response (content-length framed)."""
    loop = asyncio.get_running_loop()
    data = b""
    while True:
        head, _, body = data.partition(b"\r\n\r\n")
        length = [line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
        if length and len(body) >= int(length[0].split(b":")[1]):
            return data
        chunk = await asyncio.wait_for(loop.sock_recv(client, 65536), 30)
        assert chunk, data
        data += chunk


async def handed_back(channel: socket.socket) -> tuple[bytes, socket.socket]:
    """What the process sent the router: the bytes it read, and the connection."""
    deadline = asyncio.get_running_loop().time() + 30
    while True:
        try:
            message, fds, _, _ = socket.recv_fds(channel, MESSAGE_MOST, 4)
        except BlockingIOError:
            assert asyncio.get_running_loop().time() < deadline, "nothing was handed back"
            await asyncio.sleep(0.01)
            continue
        if fds:
            assert message.startswith(MOVED) and len(fds) == 1
            return message[len(MOVED) :], socket.socket(fileno=fds[0])


def request(token: str, body: bytes = b"{}") -> bytes:
    head = f"POST /mcp/{token} HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


@pytest.mark.anyio
async def test_a_request_for_its_own_vault_is_served_and_anothers_is_handed_back_with_its_bytes() -> None:
    mine, other = token_of(0), token_of(1)
    async with process_zero() as channel:
        client = await hand(channel)
        client.sendall(request(mine))
        assert (await reply(client)).endswith(f"/mcp/{mine} 2".encode())
        # The next request on the same connection names a vault of process 1: handed back whole.
        sent = request(other, b'{"a": 1}')
        head, body = sent[:20], sent[20:]
        client.sendall(head)  # in two pieces: the process waits for the whole request line
        await asyncio.sleep(0.05)
        client.sendall(body)
        read, conn = await handed_back(channel)
        assert read == sent
        # The connection itself came back: what is written to it reaches the client.
        conn.sendall(b"HTTP/1.1 204 No Content\r\n\r\n")
        assert (await asyncio.wait_for(asyncio.get_running_loop().sock_recv(client, 100), 30)).startswith(
            b"HTTP/1.1 204"
        )
        conn.close()
        client.close()


@pytest.mark.anyio
async def test_a_connection_handed_with_bytes_read_starts_with_them() -> None:
    mine = token_of(0)
    async with process_zero() as channel:
        sent = request(mine, b"x" * 1000)
        client = await hand(channel, MOVED + sent[:300])  # another process read these
        client.sendall(sent[300:])  # the rest is still on the connection
        assert (await reply(client)).endswith(f"/mcp/{mine} 1000".encode())
        client.sendall(request(mine, b"yy"))  # and it stays this process's, kept alive
        assert (await reply(client)).endswith(f"/mcp/{mine} 2".encode())
        client.close()


@pytest.mark.anyio
async def test_requests_without_a_vault_or_too_large_to_hand_back_are_served_here() -> None:
    other = token_of(1)
    async with process_zero() as channel:
        client = await hand(channel)
        client.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert (await reply(client)).endswith(b"/healthz 0")
        big = request(other, b"z" * (MOVED_MOST + 10))
        client.sendall(big)
        assert (await reply(client)).endswith(f"/mcp/{other} {MOVED_MOST + 10}".encode())
        with pytest.raises(BlockingIOError):  # nothing was handed back
            socket.recv_fds(channel, MESSAGE_MOST, 4)
        client.close()
