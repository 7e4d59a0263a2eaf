"""The HTTP surface: one Starlette app with /healthz and MCP (streamable HTTP and legacy SSE) per token."""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memvault import __version__
from memvault.config import Settings
from memvault.errors import InvalidArgument, MemvaultError
from memvault.store import Clock, Store
from memvault.tools import build_server
from memvault.vault import utcnow, valid_token
from memvault.watcher import Watcher

log = logging.getLogger("memvault")

SESSION_HEADER = b"mcp-session-id"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """Host/Origin checks against DNS rebinding: localhost always, more hosts by configuration."""
    extra = list(settings.allowed_hosts)
    if "*" in extra:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts = [h for name in LOCAL_HOSTS for h in (name, f"{name}:*")] + extra
    origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins)


def load_allowlist(path: Path | None) -> frozenset[str] | None:
    if path is None:
        return None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise InvalidArgument(f"MEMVAULT_TOKENS_FILE cannot be read ({exc.strerror}).") from None
    tokens = frozenset(t for t in (line.split("#", 1)[0].strip() for line in lines) if t)
    bad = [t for t in tokens if not valid_token(t)]
    if bad:
        raise InvalidArgument(f"MEMVAULT_TOKENS_FILE holds {len(bad)} invalid token(s); see the token rules in README.")
    return tokens


def _error(status: int, message: str) -> Response:
    return JSONResponse({"error": message}, status_code=status)


class TokenGuard:
    """In front of every /mcp/{token} route: token rules, allowlist, body cap, session binding.

    It answers before any file system access, and refuses a streamable HTTP session id that was
    created under another token (the SDK's session manager is shared by all tokens).
    """

    def __init__(self, app: ASGIApp, settings: Settings, sessions: dict[str, str]) -> None:
        self.app = app
        self.settings = settings
        self.sessions = sessions
        self.allowlist = load_allowlist(settings.tokens_file)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = scope.get("path_params", {}).get("token", "")
        if not valid_token(token):
            await _error(404, "Not found: invalid token.")(scope, receive, send)
            return
        if self.allowlist is not None and token not in self.allowlist:
            await _error(403, "This token is not allowed on this server.")(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        length = headers.get(b"content-length")
        limit = self.settings.max_body_bytes
        if length is not None and (not length.isdigit() or int(length) > limit):
            await _error(413, f"Request body too large (limit {limit:,} bytes).")(scope, receive, send)
            return
        session = headers.get(SESSION_HEADER)
        if session is not None:
            owner = self.sessions.get(session.decode("latin-1"))
            if owner is not None and owner != token:
                await _error(404, "Session not found for this token; start a new session.")(scope, receive, send)
                return
        # A chunked body past the cap is answered 413 by the SDK's RequestBodyLimitMiddleware (both
        # transports get the same limit in create_app); cutting the stream here turned it into a 500.
        await self.app(scope, receive, self._binding(send, token))

    def _binding(self, send: Send, token: str) -> Send:
        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                for key, value in message.get("headers", []):
                    if key.lower() == SESSION_HEADER:
                        self.sessions[value.decode("latin-1")] = token
            await send(message)

        return wrapped


class SseApps:
    """Legacy HTTP+SSE: one SDK transport per token, so a session id only works under its own token."""

    def __init__(self, server: MCPServer, security: TransportSecuritySettings, max_body: int) -> None:
        self.server = server
        self.security = security
        self.max_body = max_body
        self.apps: dict[str, ASGIApp] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = scope["path_params"]["token"]
        app = self.apps.get(token)
        if app is None:
            app = self.apps[token] = self.server.sse_app(
                sse_path="/sse",
                message_path="/messages/",
                transport_security=self.security,
                max_request_body_size=self.max_body,
            )
        await app(scope, receive, send)


def create_app(settings: Settings, *, clock: Clock = utcnow, force_polling: bool = False) -> Starlette:
    """The whole server. Build a new one per test: the SDK's session manager runs only once."""
    store = Store(settings, clock=clock)
    server = build_server(store, settings)
    security = transport_security(settings)
    # JSON responses to POSTs: our tools stream nothing mid-call, and a plain JSON body saves the
    # SDK's per-request SSE stream and task group (bench/RESULTS.md: ~1.3 ms of ~5 ms per call).
    # Server-initiated messages still flow over the GET stream.
    server.streamable_http_app(
        transport_security=security,
        max_request_body_size=settings.max_body_bytes,
        host=settings.host,
        json_response=True,
    )
    manager = server.session_manager
    sessions: dict[str, str] = {}
    watcher = Watcher(
        settings.root, store.apply_changes, enabled=settings.watch, poll_interval=settings.poll_interval_seconds
    )
    started = time.monotonic()

    async def healthz(request: Request) -> Response:
        body: dict[str, Any] = {
            "status": "ok" if watcher.state() in ("inotify", "polling") else "degraded",
            "version": __version__,
            "uptime_seconds": round(time.monotonic() - started, 1),
            "tokens_loaded": sum(1 for s in store.tokens.values() if s.loaded),
            "watcher": watcher.state(),
            "tools": list(settings.tools),
        }
        return Response(json.dumps(body), media_type="application/json")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        settings.root.mkdir(parents=True, exist_ok=True)
        async with manager.run():
            await watcher.start(force_polling=force_polling)
            log.info("memvault %s serving %s (watcher: %s)", __version__, settings.root, watcher.state())
            try:
                yield
            finally:
                await watcher.stop()
                await store.close()

    mcp_http = TokenGuard(StreamableHTTPASGIApp(manager), settings, sessions)
    mcp_sse = TokenGuard(SseApps(server, security, settings.max_body_bytes), settings, sessions)
    app = Starlette(
        routes=[
            Route("/healthz", healthz, methods=["GET"]),
            Route("/mcp/{token}", endpoint=mcp_http, methods=["GET", "POST", "DELETE"]),
            Mount("/mcp/{token}", app=mcp_sse),
        ],
        lifespan=lifespan,
        exception_handlers={MemvaultError: _memvault_error},
    )
    app.state.store = store
    app.state.watcher = watcher
    app.state.server = server
    return app


async def _memvault_error(request: Request, exc: Exception) -> Response:
    return _error(400, str(exc))
