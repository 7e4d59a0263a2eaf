"""Legacy HTTP+SSE, one SDK transport per token; and the shape of every HTTP error memvault writes."""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import INTERNAL_ERROR, INVALID_REQUEST
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

CLOSED = (anyio.ClosedResourceError, anyio.BrokenResourceError)


def error_response(status: int, message: str) -> Response:
    """Every HTTP error memvault writes has the SDK's shape: a JSON-RPC error without an id."""
    code = INVALID_REQUEST if status < 500 else INTERNAL_ERROR
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}}
    return JSONResponse(body, status_code=status)


class SseApps:
    """Legacy HTTP+SSE: one SDK transport per token, so a session id only works under its own token.

    A token's transport lives while it has an open stream (GET .../sse): its sessions exist only
    then. A message to a token without one is answered 404 and leaves nothing behind (one app per
    token name ever posted to once grew without bound with made-up names).
    """

    def __init__(self, server: MCPServer, security: TransportSecuritySettings, max_body: int) -> None:
        self.server = server
        self.security = security
        self.max_body = max_body
        self.apps: dict[str, ASGIApp] = {}
        self.streams: dict[str, int] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = scope["path_params"]["token"]
        stream = scope.get("method") == "GET" and scope.get("path", "").rstrip("/").endswith("/sse")
        app = self.apps.get(token)
        if app is None:
            if not stream:
                await error_response(
                    404, "No open SSE stream for this token; open GET /mcp/<token>/sse first."
                )(scope, receive, send)
                return
            app = self.apps[token] = self.server.sse_app(
                sse_path="/sse",
                message_path="/messages/",
                transport_security=self.security,
                max_request_body_size=self.max_body,
            )
        if not stream:
            await self._message(app, scope, receive, send)
            return
        self.streams[token] = self.streams.get(token, 0) + 1
        answered = complete = False

        async def sending(message: Message) -> None:
            # When a stream ends (its client went away, or the server stops), the SDK's endpoint
            # answers again with an empty response: uvicorn refused the second start and logged an
            # 86-line traceback per stream. The stream was the answer: its second start is dropped,
            # and its empty body ends the stream's chunked body, unless that body ended already.
            nonlocal answered, complete
            if message["type"] == "http.response.start":
                if answered:
                    return
                answered = True
            elif message["type"] == "http.response.body":
                if complete:
                    return
                complete = not message.get("more_body", False)
            await send(message)

        try:
            await app(scope, receive, sending)
        except ValueError as exc:
            # The SDK answers a refused Host or Origin (421/403, logged as one line) and then
            # raises: a 70-line traceback per request, a log flood anyone could trigger.
            if not answered or "validation failed" not in str(exc):
                raise
        finally:
            self.streams[token] -= 1
            if not self.streams[token]:
                del self.streams[token]
                self.apps.pop(token, None)

    @staticmethod
    async def _message(app: ASGIApp, scope: Scope, receive: Receive, send: Send) -> None:
        """A message POSTed for one of the token's sessions, whose stream may be ending (a client that
        went away before its body arrived was answered by TokenGuard)."""
        answered = False

        async def sending(message: Message) -> None:
            nonlocal answered
            answered = answered or message["type"] == "http.response.start"
            await send(message)

        try:
            await app(scope, receive, sending)
        except CLOSED:
            # The SDK answers 202, then hands the message to its session. A session whose stream
            # ended (its client went away) keeps its closed inbox registered while it winds down,
            # and a message that meets it there cannot be handed over: uvicorn logged a traceback
            # per such message. Its sender has its answer, and no one is left to read a reply.
            if not answered:
                raise
