"""The HTTP surface: one Starlette app with /healthz and MCP (streamable HTTP and legacy SSE) per token."""

from __future__ import annotations

import contextlib
import json
import logging
import re
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable, Container
from pathlib import Path
from typing import Any

import anyio
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memvault import __version__
from memvault.clock import Clock, utcnow
from memvault.config import Settings
from memvault.disk.names import valid_token
from memvault.errors import InvalidArgument, MemvaultError
from memvault.git.running import OFF as SYNC_OFF
from memvault.logs import OncePer
from memvault.ops.service import Service
from memvault.server.keys import KeyRing
from memvault.server.revocation import Opened
from memvault.server.sse import CLOSED, SseApps, error_response
from memvault.tools import build_server, sdk

log = logging.getLogger("memvault")

SESSION_HEADER = b"mcp-session-id"
LOCAL_HOSTS = ("127.0.0.1", "localhost", "[::1]")
MAX_BOUND_SESSIONS = 10_000
URL_HINT = (
    "The MCP endpoint is /mcp/<token> (legacy SSE: /mcp/<token>/sse); a token is 1 to 128 letters, "
    "digits, '.', '_' or '-', starting with a letter or digit."
)
KEY_HINT = (
    "This server takes a key, not a token in the URL: connect to /mcp (legacy SSE: /sse) and send "
    "'Authorization: Bearer <key>' with every request. The server's owner makes a key with "
    "'memvault keys add'."
)
NO_OAUTH = "This server does not use OAuth, so there is nothing to discover or register here."
# The probes of a client that tries OAuth (MCP authorization: RFC 9728 and RFC 8414 metadata, then
# the default endpoints of the 2025-03-26 revision). A server without OAuth answers them 404.
OAUTH_PATHS = (
    "/.well-known/oauth-protected-resource{rest:path}",
    "/.well-known/oauth-authorization-server{rest:path}",
    "/.well-known/openid-configuration{rest:path}",
    "/register",
    "/authorize",
    "/token",
)
_LOCAL_ORIGIN = re.compile(r"https?://(?:127\.0\.0\.1|localhost|\[::1\])(?::\d+)?")


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """Host/Origin checks against DNS rebinding: localhost always, more hosts by configuration.

    With MEMVAULT_ALLOWED_HOSTS=* the SDK's checks are off (it has no wildcard host) and
    TokenGuard checks the Origin itself, so a web page still cannot reach the server.
    """
    extra = list(settings.allowed_hosts)
    if "*" in extra:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts = [h for name in LOCAL_HOSTS for h in (name, f"{name}:*")] + extra
    origins = [f"{scheme}://{h}" for h in hosts for scheme in ("http", "https")]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


class SessionOwners:
    """Which token each streamable HTTP session was created under (bounded, least recently used out).

    A session id this map does not know is refused: every session is created through TokenGuard,
    so an unknown id is forged, ended, or so long idle that its binding was dropped (the client
    then starts a new session, as the protocol expects after a 404).
    """

    def __init__(self, capacity: int = MAX_BOUND_SESSIONS) -> None:
        self.capacity = capacity
        self._owners: OrderedDict[str, str] = OrderedDict()
        self._clients: dict[str, str] = {}  # session -> client address that opened it

    def bind(self, session: str, token: str, client: str = "") -> None:
        self._owners[session] = token
        self._clients[session] = client
        self._owners.move_to_end(session)
        while len(self._owners) > self.capacity:
            dropped, _ = self._owners.popitem(last=False)
            self._clients.pop(dropped, None)

    def owner(self, session: str) -> str | None:
        token = self._owners.get(session)
        if token is not None:
            self._owners.move_to_end(session)
        return token

    def oldest_first(self, *, token: str | None = None, client: str | None = None) -> list[str]:
        """Sessions of a token or of a client address, least recently used first."""
        return [
            s
            for s, t in self._owners.items()
            if (token is None or t == token) and (client is None or self._clients.get(s) == client)
        ]

    def forget_all_but(self, live: Container[str]) -> None:
        """Drop the bindings of sessions that ended (idle timeout, crash) without a DELETE."""
        for session in [s for s in self._owners if s not in live]:
            self.release(session)

    def release(self, session: str) -> None:
        self._owners.pop(session, None)
        self._clients.pop(session, None)

    def __len__(self) -> int:
        return len(self._owners)


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
        raise InvalidArgument(
            f"MEMVAULT_TOKENS_FILE holds {len(bad)} invalid token(s); see the token rules in README."
        )
    return tokens


READ_ONLY_STATE = "memvault_read_only"
SESSION_ENDED = "The session ended while this request was in flight; start a new session."


class _SessionEndFilter(logging.Filter):
    """The SDK logs "Error handling POST request" with a traceback when a request cannot be handed
    to its session because the session ended meanwhile (TokenGuard._in_session answers the client):
    that record becomes one debug line. Any other failure is logged as the SDK logs it."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if record.msg == "Error handling POST request" and isinstance(exc, CLOSED):
            record.levelno, record.levelname = logging.DEBUG, "DEBUG"
            record.msg = "a request met the end of its session"
            record.exc_info = record.exc_text = None
            return logging.getLogger(record.name).isEnabledFor(logging.DEBUG)
        return True


_SESSION_END_FILTER = _SessionEndFilter()


class BearerAuth:
    """In front of /mcp when a keys file is set: the bearer key names the vault (put where the
    token of a path would be, so TokenGuard and the tools work unchanged) and its scope."""

    def __init__(self, app: ASGIApp, keyring: KeyRing, opened: Opened | None = None) -> None:
        self.app = app
        self.keyring = keyring
        self.opened = opened  # what each key opened, ended when it is revoked

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        header = dict(scope.get("headers", [])).get(b"authorization", b"").decode("latin-1")
        scheme, _, key = header.partition(" ")
        key = key.strip()
        grant = self.keyring.find(key) if scheme.lower() == "bearer" and key else None
        if grant is None:
            await _unauthorized(sent=bool(header))(scope, receive, send)
            return
        params = {**scope.get("path_params", {}), "token": grant.token}
        state = {**scope.get("state", {}), READ_ONLY_STATE: grant.read_only}
        scope = {**scope, "path_params": params, "state": state}
        if self.opened is None:
            await self.app(scope, receive, send)
        else:
            await self.opened.run(grant, self.app, scope, receive, send)


def _unauthorized(*, sent: bool) -> Response:
    why = "the key sent is unknown or revoked" if sent else "none was sent"
    response = error_response(
        401,
        f"This server needs a key: send 'Authorization: Bearer <key>' ({why}). Ask its owner "
        "for one (they make it with 'memvault keys add').",
    )
    # RFC 6750, as the MCP authorization spec asks of a resource server.
    error = ', error="invalid_token"' if sent else ""
    response.headers["WWW-Authenticate"] = f'Bearer realm="memvault"{error}'
    return response


async def _whole_body(scope: Scope, receive: Receive, send: Send, limit: int) -> Receive | None:
    """Read a POST's body before the SDK does, and hand it the body from memory; None when the
    request is over: its client went away before the body arrived (the SDK's transports logged a
    traceback, or raised ClientDisconnect, for each such request), or the body grew past ``limit``
    (answered 413 here)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            log.debug("a request's client went away before its body arrived")
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            await error_response(413, f"Request body too large (limit {limit:,} bytes).")(
                scope, receive, send
            )
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    body: Message | None = {"type": "http.request", "body": b"".join(chunks), "more_body": False}

    async def replay() -> Message:
        nonlocal body
        if body is None:
            return await receive()  # after the body: the client's disconnect, when it comes
        message, body = body, None
        return message

    return replay


class TokenGuard:
    """In front of every /mcp/{token} route: token rules, allowlist, body cap, session binding.

    It answers before any file system access, and refuses a streamable HTTP session id that was
    created under another token (the SDK's session manager is shared by all tokens).
    """

    def __init__(
        self,
        app: ASGIApp,
        settings: Settings,
        sessions: SessionOwners | None,
        manager: StreamableHTTPSessionManager | None = None,
        warm: Callable[[str], None] | None = None,
    ) -> None:
        self.app = app
        self.warm = warm  # Tokens.warm: a token's load begins with its client's first request
        self.settings = settings
        self.sessions = sessions  # None for the legacy SSE transport, which binds per token itself
        self.manager = manager
        self._closing_note = OncePer(lambda record: True)
        self.allowlist = load_allowlist(settings.tokens_file)
        self.check_origin = "*" in settings.allowed_hosts
        self.origins = {f"{scheme}://{h}" for h in settings.allowed_hosts for scheme in ("http", "https")}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        token = scope.get("path_params", {}).get("token", "")
        if not valid_token(token):
            await error_response(404, f"Not found: invalid token. {URL_HINT}")(scope, receive, send)
            return
        if self.allowlist is not None and token not in self.allowlist:
            await error_response(403, "This token is not allowed on this server.")(scope, receive, send)
            return
        headers = dict(scope.get("headers", []))
        length = headers.get(b"content-length")
        limit = self.settings.max_body_bytes
        if length is not None and (not length.isdigit() or int(length) > limit):
            await error_response(413, f"Request body too large (limit {limit:,} bytes).")(
                scope, receive, send
            )
            return
        origin = headers.get(b"origin")
        if self.check_origin and origin is not None:
            text = origin.decode("latin-1")
            if not _LOCAL_ORIGIN.fullmatch(text) and text not in self.origins:
                await error_response(403, "Origin not allowed.")(scope, receive, send)
                return
        session = headers.get(SESSION_HEADER)
        if session is not None and self.sessions is not None:
            if self.sessions.owner(session.decode("latin-1")) != token:
                await error_response(404, "Session not found for this token; start a new session.")(
                    scope, receive, send
                )
                return
        if self.warm is not None and scope.get("method") != "DELETE":  # an ending session needs no load
            self.warm(token)
        # Either transport's POST body is read whole here, a chunked one past the cap answered 413.
        if scope.get("method") == "POST":
            whole = await _whole_body(scope, receive, send, limit)
            if whole is None:
                return
            receive = whole
        if self.sessions is None:
            await self.app(scope, receive, send)
            return
        client = (scope.get("client") or ("", 0))[0]
        if session is None and scope.get("method") == "POST":
            await self._make_room(token, client)
        ending = (
            session.decode("latin-1") if session is not None and scope.get("method") == "DELETE" else None
        )
        sending = self._binding(send, token, ending, client)
        if session is None or scope.get("method") != "POST":
            await self.app(scope, receive, sending)
            return
        await self._in_session(scope, receive, sending, session.decode("latin-1"))

    async def _in_session(self, scope: Scope, receive: Receive, send: Send, session: str) -> None:
        """A POST to a live session, which may end while the request is in flight (its client's
        DELETE, a least recently used session closed, an idle timeout). The SDK then fails to hand
        the request over: it logged a traceback, answered 500 "Error handling POST request" and
        raised, and uvicorn logged a second traceback. The client is told what the MCP spec says
        of an ended session (404: start a new one), and the log gets one debug line."""
        held: Message | None = None
        answered = False

        def ended() -> bool:
            live = self._live()
            return live is not None and session not in live

        async def sending(message: Message) -> None:
            nonlocal held, answered
            if message["type"] == "http.response.start":
                answered = True
                if message.get("status") == 500 and ended():
                    held = message  # replaced below, with the body that follows it
                    return
            elif held is not None:
                if not message.get("more_body", False):
                    held = None
                    await error_response(404, SESSION_ENDED)(scope, receive, send)
                return
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except CLOSED:
            if not answered:
                raise
            log.debug("a request met the end of its session")

    async def _make_room(self, token: str, client: str) -> None:
        """Before a new session: if this token or this client address holds its most sessions, close
        its own least recently used ones. One client that never ends its sessions cannot fill the
        SDK's cap (10,000, then 503 for every token for 30 minutes); it only recycles its own."""
        sessions, manager, live = self.sessions, self.manager, self._live()
        if sessions is None or manager is None or live is None:
            return
        # Sessions that ended without a DELETE (idle timeout) are dropped from ours, so counts stay true.
        sessions.forget_all_but(live)
        for limit, kind, names in (
            (self.settings.max_sessions_per_token, "MEMVAULT_MAX_SESSIONS_PER_TOKEN", {"token": token}),
            (self.settings.max_sessions_per_client, "MEMVAULT_MAX_SESSIONS_PER_CLIENT", {"client": client}),
        ):
            held = sessions.oldest_first(**names)
            for old in held[: max(0, len(held) - limit + 1)]:
                sessions.release(old)
                await sdk.discard_session(manager, old)
                self._closing_note.note(log, logging.INFO, f"closed least recently used sessions ({kind})")

    def _live(self) -> dict[str, Any] | None:
        """The SDK's live streamable HTTP sessions, by id: a private map of its session manager
        (mcp 2.x; the tests of session caps and ended sessions cover it)."""
        return None if self.manager is None else sdk.live_sessions(self.manager)

    def _binding(self, send: Send, token: str, ending: str | None, client: str = "") -> Send:
        sessions = self.sessions
        assert sessions is not None

        async def wrapped(message: Message) -> None:
            if message["type"] == "http.response.start":
                for key, value in message.get("headers", []):
                    if key.lower() == SESSION_HEADER:
                        sessions.bind(value.decode("latin-1"), token, client)
                if ending is not None and message.get("status") == 200:
                    sessions.release(ending)
            await send(message)

        return wrapped


def create_app(
    settings: Settings, *, clock: Clock = utcnow, force_polling: bool = False, service: Service | None = None
) -> Starlette:
    """The whole server. Build a new one per test: the SDK's session manager runs only once.
    ``service``: one made (and begun) while the server imported, else a new one."""
    service = service if service is not None else Service(settings, clock=clock)
    server = build_server(service, settings)
    security = transport_security(settings)
    # JSON responses to POSTs: our tools stream nothing mid-call, and a plain JSON body saves the
    # SDK's per-request SSE stream and task group, a large share of a call (bench/RESULTS.md).
    # Server-initiated messages still flow over the GET stream.
    server.streamable_http_app(
        transport_security=security,
        max_request_body_size=settings.max_body_bytes,
        host=settings.host,
        json_response=True,
    )
    manager = server.session_manager
    # One filter for the process (addFilter adds it once however many apps are built).
    logging.getLogger("mcp.server.streamable_http").addFilter(_SESSION_END_FILTER)
    sessions = SessionOwners()
    watcher = service.watcher()
    keyring = KeyRing(settings.keys_file) if settings.keys_file is not None else None
    opened = revocations(keyring, manager, sessions) if keyring is not None else None
    # MEMVAULT_SYNC=git: commit, fetch, merge, push on a thread of its own; every write's batch
    # from the watcher asks for a sync a moment later.
    sync = None
    if settings.sync == "git":
        from memvault.git.loop import SyncLoop  # imported only for a vault kept in git

        sync = SyncLoop(settings.root, settings.sync_interval_seconds, clock=clock)
    if sync is not None:
        service.changes.on_batch = lambda token: sync.soon()

    async def healthz(request: Request) -> Response:
        body = service.health()
        body["sync"] = (sync.status() if sync is not None else SYNC_OFF).as_json()
        # 503 when degraded, so a container health check notices a server serving stale results.
        status = 200 if body["status"] == "ok" else 503
        return Response(json.dumps(body), status_code=status, media_type="application/json")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        settings.root.mkdir(parents=True, exist_ok=True)
        async with manager.run():
            await service.start(force_polling=force_polling)  # the watcher, the embedding model's load
            if sync is not None:
                sync.start()
            log.info("memvault %s serving %s (watcher: %s)", __version__, settings.root, watcher.state())
            try:
                async with opened.watching() if opened is not None else contextlib.nullcontext():
                    yield
            finally:
                if sync is not None:
                    await anyio.to_thread.run_sync(sync.stop)  # a write just acknowledged is pushed
                await service.close()  # the watcher first

    warm = service.registry.warm
    mcp_http = TokenGuard(StreamableHTTPASGIApp(manager), settings, sessions, manager, warm=warm)
    sse_apps = SseApps(server, security, settings.max_body_bytes)
    mcp_sse = TokenGuard(sse_apps, settings, None, warm=warm)
    routes: list[Route | Mount] = [Route("/healthz", healthz, methods=["GET"])]
    if keyring is not None:
        routes += [
            Route("/mcp", endpoint=BearerAuth(mcp_http, keyring, opened), methods=["GET", "POST", "DELETE"]),
            # Legacy SSE with a key: the SDK's app under no prefix announces /messages/, so the
            # vault's name is in no URL there either.
            Route("/sse", endpoint=BearerAuth(mcp_sse, keyring, opened), methods=["GET"]),
            Route("/messages/", endpoint=BearerAuth(mcp_sse, keyring, opened), methods=["POST"]),
        ]
    path_tokens = settings.path_tokens == "on" or (settings.path_tokens == "auto" and keyring is None)
    hint = URL_HINT if path_tokens else KEY_HINT
    if path_tokens:
        routes += [
            Route("/mcp/{token}", endpoint=mcp_http, methods=["GET", "POST", "DELETE"]),
            Mount("/mcp/{token}", app=mcp_sse),
        ]
    else:
        # An old client configuration (a token in the URL) learns what to send instead.
        routes.append(Route("/mcp/{rest:path}", endpoint=_answer(404, hint), methods=_ALL_METHODS))
    probe = _oauth_answer(f"{NO_OAUTH} {KEY_HINT if keyring is not None else 'Connect to /mcp/<token>.'}")
    routes += [Route(path, endpoint=probe, methods=_ALL_METHODS) for path in OAUTH_PATHS]

    async def not_found(request: Request, exc: Exception) -> Response:
        return error_response(404, f"Not found. {hint}")

    app = Starlette(
        routes=routes,
        lifespan=lifespan,
        exception_handlers={MemvaultError: _memvault_error, 404: not_found},
    )
    app.state.service = service
    app.state.sessions = sessions
    app.state.sse_apps = sse_apps
    app.state.watcher = watcher
    app.state.server = server
    return app


def revocations(keyring: KeyRing, manager: StreamableHTTPSessionManager, sessions: SessionOwners) -> Opened:
    """What each key opened, and how a revoked key's streamable HTTP session is ended (as
    TokenGuard._make_room ends one: through the SDK's session manager)."""

    async def end_session(session: str) -> None:
        sessions.release(session)
        await sdk.discard_session(manager, session)

    return Opened(
        keyring,
        refused=lambda: _unauthorized(sent=True),
        end_session=end_session,
        live_sessions=lambda: sdk.live_sessions(manager),
    )


_ALL_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


def _answer(status: int, message: str) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return error_response(status, message)

    return endpoint


def _oauth_answer(message: str) -> Callable[[Request], Awaitable[Response]]:
    """404 in OAuth's error shape (RFC 6749 5.2), which clients probing for OAuth read and show."""

    async def endpoint(request: Request) -> Response:
        return JSONResponse({"error": "invalid_request", "error_description": message}, status_code=404)

    return endpoint


async def _memvault_error(request: Request, exc: Exception) -> Response:
    return error_response(400, str(exc))
