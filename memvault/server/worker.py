"""A server process of ``serve --processes N``: uvicorn serving the connections the router hands over.

It has no listening socket of its own. The router passes each accepted socket over the channel
(:mod:`memvault.server.router`); the process serves it with ``loop.connect_accepted_socket`` and
the protocol factory uvicorn's own listener would use (same protocol class, same server state,
same lifespan state), so uvicorn's shutdown closes these connections as its own. It tells the
router when it serves, and how many handed connections it has closed since it last said, so the
router can bound the whole server's connections. The router's end closing (the router is gone)
stops the process as a signal would.

Between two requests of a connection the next head is read before the parser sees it: a request
for another process's vault hands the connection back to the router with the bytes read of it
(``MOVED``), so a connection that carries several vaults' requests reaches each vault's process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from typing import Any

import uvicorn

from memvault.server.router import CLOEXEC, MESSAGE_MOST, MOVED, MOVED_MOST, READY
from memvault.server.shard import WAIT, key_of, shard_of

__all__ = ["HandedServer"]

# The router sends one descriptor a message; a few more fit, so nothing is ever truncated.
_MOST_FDS = 16
_RETRY_SECONDS = 0.05


class HandedServer(uvicorn.Server):
    """uvicorn's server, fed by the router's ``channel`` instead of a listener."""

    def __init__(
        self, config: uvicorn.Config, channel: socket.socket, index: int = 0, count: int = 1
    ) -> None:
        super().__init__(config)
        self.channel = channel
        self.index, self.count = index, count  # this process, of how many
        self.closed = 0  # handed connections closed and not yet reported
        self._flushing = False
        self._adopting: set[asyncio.Task[Any]] = set()
        self._protocol: type[asyncio.Protocol] | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=[])  # the lifespan, and no listener
        if not self.started:
            return
        self._protocol = self._reporting(self.config.http_protocol_class)
        self.channel.setblocking(False)
        self.channel.set_inheritable(False)
        asyncio.get_running_loop().add_reader(self.channel.fileno(), self._receive)
        self._send(READY)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        with contextlib.suppress(OSError, ValueError):
            asyncio.get_running_loop().remove_reader(self.channel.fileno())
        await super().shutdown(sockets=None)

    def _create_protocol(self, read: bytes = b"") -> asyncio.Protocol:
        """What uvicorn's ``startup`` gives its listener as the protocol factory; ``read``: the
        bytes another process read of the connection (it starts with them)."""
        assert self._protocol is not None
        protocol = self._protocol(  # type: ignore[call-arg]
            config=self.config, server_state=self.server_state, app_state=self.lifespan.state
        )
        protocol.read_before = read
        return protocol

    def elsewhere(self, key: str | object | None) -> bool:
        """Whether a request head's shard key (``key_of``) names a vault another process serves."""
        return isinstance(key, str) and shard_of(key, self.count) != self.index

    def hand_back(self, transport: asyncio.Transport, read: bytes) -> bool:
        """Pass the connection, with the bytes read of it, to the router (which hands it to the
        process of its request's vault); False if it cannot (this process then serves it)."""
        sock = transport.get_extra_info("socket")
        if len(read) > MOVED_MOST or sock is None:
            return False
        try:
            fd = os.dup(sock.fileno())
        except OSError:
            return False
        try:
            socket.send_fds(self.channel, [MOVED + read], [fd])
        except OSError:  # the router is busy or gone
            return False
        finally:
            os.close(fd)
        return True

    def _reporting(self, base: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
        counting, server = self._counting(base), self
        if not hasattr(base, "on_message_begin"):  # pragma: no cover - h11 (httptools is a dependency)
            return counting

        class HandedProtocol(counting):  # type: ignore[valid-type,misc]
            _head = b""  # the next request's head so far, between requests
            _between = True  # the last request was read and answered: the next bytes start a head
            _reading = False  # a request is being read (its head or body)

            def start_with(self, read: bytes) -> None:
                self._between = False
                super().start_with(read)

            def data_received(self, data: bytes) -> None:
                if not self._between:
                    super().data_received(data)
                    return
                head = self._head + data
                key = key_of(head)
                if key is WAIT:  # (at most MAX_HEAD; the keep-alive timeout still runs)
                    self._head = head
                    return
                self._head, self._between = b"", False
                if server.elsewhere(key) and server.hand_back(self.transport, head):
                    self.moved = True
                    self.transport.abort()  # the router holds the connection now: no FIN is sent
                    return
                super().data_received(head)

            def on_message_begin(self) -> None:
                self._reading = True
                super().on_message_begin()

            def on_message_complete(self) -> None:
                self._reading = False
                super().on_message_complete()
                self._settle()

            def on_response_complete(self) -> None:
                super().on_response_complete()
                self._settle()

            def _settle(self) -> None:
                answering = self.cycle is not None and not self.cycle.response_complete
                self._between = not (self._reading or self.pipeline or answering)

        return HandedProtocol

    def _counting(self, base: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
        """``base`` starting with the bytes another process read, and reporting closed connections."""
        note = self._note_closed

        class CountingProtocol(base):  # type: ignore[valid-type,misc]
            read_before = b""  # bytes of the connection another process read (they come first)
            moved = False  # handed back: still open, so not reported closed

            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                super().connection_made(transport)
                read, self.read_before = self.read_before, b""
                if read and not transport.is_closing():  # (closing: refused, over the cap)
                    self.start_with(read)

            def start_with(self, read: bytes) -> None:
                self.data_received(read)

            def connection_lost(self, exc: Exception | None) -> None:
                try:
                    super().connection_lost(exc)
                finally:
                    if not self.moved:
                        note()

        return CountingProtocol

    def _receive(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(self.channel, MESSAGE_MOST, _MOST_FDS, CLOEXEC)
            except BlockingIOError:
                return
            except OSError:
                message, fds = b"", []
            if not message and not fds:  # the router is gone: stop as on a signal
                loop.remove_reader(self.channel.fileno())
                self.should_exit = True
                return
            read = message[len(MOVED) :] if message.startswith(MOVED) else b""
            for fd in fds:
                task = loop.create_task(self._adopt(socket.socket(fileno=fd), read))
                self._adopting.add(task)
                task.add_done_callback(self._adopting.discard)

    async def _adopt(self, sock: socket.socket, read: bytes) -> None:
        try:
            loop = asyncio.get_running_loop()
            await loop.connect_accepted_socket(lambda: self._create_protocol(read), sock)
        except (OSError, ValueError):  # closed by the client meanwhile, or not a stream socket
            sock.close()
            self._note_closed()

    def _note_closed(self) -> None:
        self.closed += 1
        if not self._flushing:
            self._flushing = True
            asyncio.get_running_loop().call_soon(self._flush)

    def _flush(self) -> None:
        count, self.closed = self.closed, 0
        try:
            self.channel.send(count.to_bytes(4, "big"))
        except BlockingIOError:  # the router is busy: say it a little later
            self.closed += count
            asyncio.get_running_loop().call_later(_RETRY_SECONDS, self._flush)
            return
        except OSError:  # the router is gone
            pass
        self._flushing = False

    def _send(self, message: bytes) -> None:
        with contextlib.suppress(OSError):
            self.channel.send(message)
