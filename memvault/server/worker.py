"""A server process of ``serve --processes N``: uvicorn serving the connections the router hands over.

It has no listening socket of its own. The router passes each accepted socket over the channel
(:mod:`memvault.server.router`); the process serves it with ``loop.connect_accepted_socket`` and
the protocol factory uvicorn's own listener would use (same protocol class, same server state,
same lifespan state), so uvicorn's shutdown closes these connections as its own. It tells the
router when it serves, and how many handed connections it has closed since it last said, so the
router can bound the whole server's connections. The router's end closing (the router is gone)
stops the process as a signal would.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Any

import uvicorn

from memvault.server.router import READY

__all__ = ["HandedServer"]

# The router sends one descriptor a message; a few more fit, so nothing is ever truncated.
_MOST_FDS = 16
_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0)  # helpers we start never inherit a client
_RETRY_SECONDS = 0.05


class HandedServer(uvicorn.Server):
    """uvicorn's server, fed by the router's ``channel`` instead of a listener."""

    def __init__(self, config: uvicorn.Config, channel: socket.socket) -> None:
        super().__init__(config)
        self.channel = channel
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

    def _create_protocol(self) -> asyncio.Protocol:
        """What uvicorn's ``startup`` gives its listener as the protocol factory."""
        assert self._protocol is not None
        return self._protocol(  # type: ignore[call-arg]
            config=self.config, server_state=self.server_state, app_state=self.lifespan.state
        )

    def _reporting(self, base: type[asyncio.Protocol]) -> type[asyncio.Protocol]:
        note = self._note_closed

        class HandedProtocol(base):  # type: ignore[valid-type,misc]
            def connection_lost(self, exc: Exception | None) -> None:
                try:
                    super().connection_lost(exc)
                finally:
                    note()

        return HandedProtocol

    def _receive(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(self.channel, 16, _MOST_FDS, _CLOEXEC)
            except BlockingIOError:
                return
            except OSError:
                message, fds = b"", []
            if not message and not fds:  # the router is gone: stop as on a signal
                loop.remove_reader(self.channel.fileno())
                self.should_exit = True
                return
            for fd in fds:
                task = loop.create_task(self._adopt(socket.socket(fileno=fd)))
                self._adopting.add(task)
                task.add_done_callback(self._adopting.discard)

    async def _adopt(self, sock: socket.socket) -> None:
        try:
            await asyncio.get_running_loop().connect_accepted_socket(self._create_protocol, sock)
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
