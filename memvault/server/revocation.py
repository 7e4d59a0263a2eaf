"""What a key opened, ended when the key is revoked: its open streams and its MCP sessions.

A revoked key's new requests are refused by the key ring at once (a stat per lookup). What it
opened before lives on without a request: the streamable HTTP GET stream, a 2026-07-28
``subscriptions/listen`` stream, the legacy SSE stream, and the streamable HTTP sessions it
created (whose resource subscriptions speak over their GET stream). ``Opened`` keeps these per
grant, and ``watch`` looks at the key ring a few times a second: a grant gone from it (revoked,
or changed by hand: another vault or scope) has its streams cancelled and its sessions ended, so
its subscriptions end with them and it hears nothing more.

A request that is not a stream (a tool call in flight when the key is revoked) is left to
finish: it was admitted, and cutting a write short helps no one. If its answer turns out to be
an event stream, that stream is cut as soon as it starts.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Container
from dataclasses import dataclass, field

import anyio
import anyio.abc
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memvault.server.keys import Grant, KeyRing

log = logging.getLogger("memvault")

CHECK_INTERVAL = 0.25  # seconds between looks at the key ring: a revoked key's streams end within this
SESSION_HEADER = b"mcp-session-id"
EVENT_STREAM = b"text/event-stream"


DISCONNECT: Message = {"type": "http.disconnect"}
GRACE = 0.5  # seconds a revoked stream has to wind down as if its client left, before it is cut


@dataclass(eq=False, slots=True)
class Request:
    """One request admitted with a key, for as long as it runs."""

    stream: bool  # a GET, or an answer that is an event stream: ended when the key goes
    cut: anyio.CancelScope = field(default_factory=anyio.CancelScope)
    ending: anyio.Event = field(default_factory=anyio.Event)  # set: its receive answers "disconnect"
    revoked: bool = False  # its key was revoked while it ran
    body_read: bool = False
    started: bool = False
    finished: bool = False

    def end(self) -> None:
        """Wind the stream down the way a client's leaving does (the SDK's streams close behind
        it); from now on nothing more is sent on it."""
        self.ending.set()

    async def receive(self, receive: Receive) -> Message:
        """The client's next message; a disconnect once the stream is ending."""
        if self.ending.is_set():
            return DISCONNECT
        if not self.body_read:
            message = await receive()
            self.body_read = message["type"] != "http.request" or not message.get("more_body", False)
            return message
        # After the body only the client's disconnect can come: wait for it or for the end.
        got: list[Message] = []
        async with anyio.create_task_group() as group:

            async def real() -> None:
                got.append(await receive())
                group.cancel_scope.cancel()

            async def ended() -> None:
                await self.ending.wait()
                group.cancel_scope.cancel()

            group.start_soon(real)
            group.start_soon(ended)
        return got[0] if got else DISCONNECT


@dataclass(slots=True)
class Opened:
    """Per grant: the requests it has in flight and the streamable HTTP sessions it created."""

    keyring: KeyRing
    refused: Callable[[], ASGIApp]  # the answer to a stream ended before it started (401)
    end_session: Callable[[str], Awaitable[None]] | None = None
    live_sessions: Callable[[], Container[str] | None] | None = None  # the live session ids
    requests: dict[Grant, set[Request]] = field(default_factory=dict)
    sessions: dict[Grant, set[str]] = field(default_factory=dict)
    group: anyio.abc.TaskGroup | None = None  # while watching: where a stream's grace runs out

    async def run(self, grant: Grant, app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """Run ``app`` for one request admitted with ``grant``, ended if the grant is revoked."""
        request = Request(stream=scope.get("method") == "GET")
        mine = self.requests.setdefault(grant, set())
        mine.add(request)

        async def receiving() -> Message:
            return await request.receive(receive)

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = message.get("headers", [])
                if any(k.lower() == b"content-type" and v.startswith(EVENT_STREAM) for k, v in headers):
                    request.stream = True
                for key, value in headers:
                    if key.lower() == SESSION_HEADER:
                        self.sessions.setdefault(grant, set()).add(value.decode("latin-1"))
                if request.revoked and request.stream and not request.ending.is_set():
                    self._end(request)  # revoked while it was being answered: never starts
            if request.ending.is_set() and request.stream:
                return  # a revoked key hears nothing more, not even what was under way
            if message["type"] == "http.response.start":
                request.started = True
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                request.finished = True
            await send(message)

        try:
            with request.cut:
                await app(scope, receiving, sending)
        finally:
            mine.discard(request)
            if not mine and self.requests.get(grant) is mine:
                del self.requests[grant]
        if request.ending.is_set() and not request.finished:
            await self._close(request, scope, receive, send)

    async def _close(self, request: Request, scope: Scope, receive: Receive, send: Send) -> None:
        """An ended stream ends its body (a server that returns mid-body leaves the client waiting
        and logs an error); one ended before it started is answered 401."""
        with contextlib.suppress(OSError, anyio.ClosedResourceError, anyio.BrokenResourceError):
            if request.started:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
                return
            await self.refused()(scope, receive, send)

    def _end(self, request: Request) -> None:
        request.end()
        if self.group is None:
            request.cut.cancel()
            return

        async def cut_after_grace() -> None:
            await anyio.sleep(GRACE)
            request.cut.cancel()  # it did not wind down: cut (a no-op once it has ended)

        self.group.start_soon(cut_after_grace)

    async def check(self) -> int:
        """End what revoked grants opened; returns how many grants were ended."""
        kept = set(self.keyring.grants())
        self._forget_ended_sessions()
        gone = [g for g in {*self.requests, *self.sessions} if g not in kept]
        for grant in gone:
            for request in self.requests.pop(grant, set()):
                request.revoked = True
                if request.stream:
                    self._end(request)
            for session in self.sessions.pop(grant, set()):
                if self.end_session is not None:
                    await self.end_session(session)
        if gone:
            log.info("ended what %d revoked key(s) had open: streams, sessions, subscriptions", len(gone))
        return len(gone)

    def _forget_ended_sessions(self) -> None:
        live = self.live_sessions() if self.live_sessions is not None else None
        if live is None:
            return
        for grant in list(self.sessions):
            kept = {s for s in self.sessions[grant] if s in live}
            if kept:
                self.sessions[grant] = kept
            else:
                del self.sessions[grant]

    @contextlib.asynccontextmanager
    async def watching(self, interval: float = CHECK_INTERVAL) -> AsyncIterator[None]:
        """Look at the key ring every ``interval`` seconds while the server runs."""

        async def watch() -> None:
            while True:
                await anyio.sleep(interval)
                try:
                    await self.check()
                except Exception:  # the next look tries again; the server goes on
                    log.exception("checking for revoked keys failed")

        async with anyio.create_task_group() as group:
            self.group = group
            group.start_soon(watch)
            try:
                yield
            finally:
                self.group = None
                group.cancel_scope.cancel()
