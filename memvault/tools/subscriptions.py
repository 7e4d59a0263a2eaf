"""Resource subscriptions in both protocol eras: who hears of which vault's changes, bounded per client.

- Handshake era (up to 2025-11-25): ``resources/subscribe`` and ``resources/unsubscribe``; the
  notifications go over the connection's own stream (streamable HTTP's GET stream, the SSE stream,
  stdio), for as long as the connection lives.
- 2026-07-28: ``subscriptions/listen``; the notifications ride the listen request's response stream.

Either way a client listens to the vault of its own request only (memvault.ops.changes keeps
listeners per token). Subscribing to memvault://vault means every change in it: the changed
resource's URI is sent (a sub-resource of the vault), and memvault://vault itself when the list of
resources changed. What a client has yet to be sent is a set of URIs, so a slow reader holds at most
MAX_PENDING of them: past that they collapse into one "memvault://vault changed".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import (
    SUBSCRIPTION_ID_META_KEY,
    ResourcesListChanged,
    ResourceUpdated,
    ServerEvent,
    event_to_notification,
)
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    EmptyResult,
    SubscribeRequestParams,
    SubscriptionFilter,
    SubscriptionsAcknowledgedNotification,
    SubscriptionsAcknowledgedNotificationParams,
    SubscriptionsListenRequestParams,
    SubscriptionsListenResult,
    UnsubscribeRequestParams,
)

from memvault.errors import InvalidArgument, MemvaultError
from memvault.ops.changes import Change, Changes
from memvault.tools.common import request_token
from memvault.tools.resources import VAULT_URI, parse_uri, rejected, uri_of_key

log = logging.getLogger("memvault")

MAX_URIS = 1_000  # resources one client (a connection, or a listen stream) may subscribe to
MAX_PENDING = 256  # URIs one client has yet to be sent; past it, one "the vault changed" instead
MAX_CLIENTS_PER_TOKEN = 256  # subscribing connections plus listen streams, per vault
MAX_CLIENTS = 10_000  # the same, for the whole server

Send = Callable[[ServerEvent], Awaitable[None]]


class Subscriber:
    """One client's subscriptions to one vault, and what it has yet to be told."""

    def __init__(self, token: str, send: Send, *, listing: bool) -> None:
        self.token = token
        self.send = send
        self.listing = listing  # wants notifications/resources/list_changed
        self.by_key: dict[str, str] = {}  # change key -> the URI as the client subscribed to it
        self.whole_vault = False
        self.pending: dict[str | None, None] = {}  # URIs to send in order; None: the list changed
        self.wake = asyncio.Event()

    def add(self, uri: str) -> None:
        key = parse_uri(uri).key
        if key is None:
            self.whole_vault = True
            return
        if key not in self.by_key and len(self.by_key) >= MAX_URIS:
            raise InvalidArgument(
                f"A client may subscribe to at most {MAX_URIS:,} resources; subscribe to {VAULT_URI} "
                "to hear of every change in the vault instead."
            )
        self.by_key[key] = uri

    def remove(self, uri: str) -> None:
        key = parse_uri(uri).key
        if key is None:
            self.whole_vault = False
        else:
            self.by_key.pop(key, None)

    def changed(self, change: Change) -> None:
        """A change to this vault (on the loop): queue what this client asked to hear of."""
        uris: list[str | None] = []
        if change.listing and self.listing:
            uris.append(None)
        if change.everything:
            uris += self.by_key.values()  # a rescan: each may have changed
        else:
            uris += [self.by_key[key] for key in change.keys if key in self.by_key]
        if self.whole_vault:
            if change.listing or change.everything:
                uris.append(VAULT_URI)
            uris += [uri_of_key(key) or VAULT_URI for key in change.keys if key not in self.by_key]
        for uri in uris:
            self.pending[uri] = None
        if len(self.pending) > MAX_PENDING:
            # A slow reader, or a git pull of thousands of files: tell it "everything", once.
            self.pending = dict.fromkeys([None, VAULT_URI] if self.listing else [VAULT_URI])
        if uris:
            self.wake.set()

    async def deliver(self) -> None:
        """Send what is pending, for as long as the client is there (cancelled when it goes)."""
        while True:
            await self.wake.wait()
            self.wake.clear()
            while self.pending:
                uri = next(iter(self.pending))
                del self.pending[uri]
                await self.send(ResourcesListChanged() if uri is None else ResourceUpdated(uri=uri))


def connection_key(ctx: ServerRequestContext[Any]) -> Any:
    """What identifies the client's connection across its requests. The SDK gives a handler a new
    session object per request and keeps the connection private (mcp 2.3; the tests cover it)."""
    return getattr(ctx.session, "_connection", ctx.session)


class Subscriptions:
    """The handlers of resources/subscribe, resources/unsubscribe and subscriptions/listen."""

    def __init__(self, changes: Changes) -> None:
        self.changes = changes
        self.legacy: dict[tuple[int, str], tuple[Subscriber, asyncio.Task[None], Callable[[], None]]] = {}
        self.streams = 0  # listen streams open now
        self.per_token: dict[str, int] = {}

    def _admit(self, token: str) -> None:
        if (
            len(self.legacy) + self.streams >= MAX_CLIENTS
            or self.per_token.get(token, 0) >= MAX_CLIENTS_PER_TOKEN
        ):
            raise MCPError(
                code=INTERNAL_ERROR,
                message="Too many clients are subscribed to this server now; try again later, or "
                "unsubscribe another client of this vault.",
            )
        self.per_token[token] = self.per_token.get(token, 0) + 1

    def _release(self, token: str) -> None:
        left = self.per_token.get(token, 1) - 1
        if left:
            self.per_token[token] = left
        else:
            self.per_token.pop(token, None)

    # ---- handshake era

    async def subscribe(self, ctx: ServerRequestContext[Any], params: SubscribeRequestParams) -> EmptyResult:
        try:
            token = request_token(ctx.request)
            parse_uri(str(params.uri))  # refuse what is not ours before anything is kept
            connection = connection_key(ctx)
            entry = self.legacy.get((id(connection), token))
            if entry is None:
                entry = self._start(ctx, connection, token)
            entry[0].add(str(params.uri))
        except (MemvaultError, UnicodeDecodeError) as exc:
            raise rejected(exc, "resources/subscribe") from None
        return EmptyResult()

    async def unsubscribe(
        self, ctx: ServerRequestContext[Any], params: UnsubscribeRequestParams
    ) -> EmptyResult:
        try:
            token = request_token(ctx.request)
            target = (id(connection_key(ctx)), token)
            entry = self.legacy.get(target)
            if entry is not None:
                entry[0].remove(str(params.uri))
                if not entry[0].whole_vault and not entry[0].by_key:
                    self._stop(target)  # nothing left to hear of: no list changes either
        except (MemvaultError, UnicodeDecodeError) as exc:
            raise rejected(exc, "resources/unsubscribe") from None
        return EmptyResult()

    def _start(
        self, ctx: ServerRequestContext[Any], connection: Any, token: str
    ) -> tuple[Subscriber, asyncio.Task[None], Callable[[], None]]:
        self._admit(token)
        session = ctx.session  # its connection-wide channel outlives this request

        async def send(event: ServerEvent) -> None:
            if isinstance(event, ResourceUpdated):
                await session.send_resource_updated(event.uri)
            else:
                await session.send_resource_list_changed()

        subscriber = Subscriber(token, send, listing=True)
        target = (id(connection), token)

        async def deliver() -> None:
            try:
                await subscriber.deliver()
            except Exception:  # the connection broke: nobody is there to tell any more
                log.debug("a subscribed connection went away", exc_info=True)
                self._stop(target)

        task = asyncio.get_running_loop().create_task(deliver())
        entry = (subscriber, task, self.changes.listen(token, subscriber.changed))
        self.legacy[target] = entry
        stack = getattr(connection, "exit_stack", None)
        if isinstance(stack, contextlib.AsyncExitStack):
            stack.callback(self._stop, target)  # the connection ends: so do its subscriptions
        return entry

    def _stop(self, target: tuple[int, str]) -> None:
        entry = self.legacy.pop(target, None)
        if entry is None:
            return
        _, task, unlisten = entry
        unlisten()
        task.cancel()
        self._release(target[1])

    # ---- 2026-07-28

    async def listen(
        self, ctx: ServerRequestContext[Any], params: SubscriptionsListenRequestParams
    ) -> SubscriptionsListenResult:
        """One listen stream: the acknowledgement first, then the vault's changes until the client
        goes (which cancels this handler)."""
        if ctx.request_id is None:
            raise MCPError(code=INVALID_PARAMS, message="subscriptions/listen needs a request id.")
        wanted = params.notifications
        try:
            token = request_token(ctx.request)
            uris = list(dict.fromkeys(wanted.resource_subscriptions or ()))
            subscriber = Subscriber(
                token, self._stream_sender(ctx), listing=bool(wanted.resources_list_changed)
            )
            for uri in uris:
                subscriber.add(uri)
        except (MemvaultError, UnicodeDecodeError) as exc:
            raise rejected(exc, "subscriptions/listen") from None
        self._admit(token)
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
        honored = SubscriptionFilter(
            tools_list_changed=True if wanted.tools_list_changed else None,
            prompts_list_changed=True if wanted.prompts_list_changed else None,
            resources_list_changed=True if wanted.resources_list_changed else None,
            resource_subscriptions=uris or None,
        )
        unlisten = self.changes.listen(token, subscriber.changed)  # before the ack: nothing is missed
        self.streams += 1
        try:
            await ctx.session.send_notification(
                SubscriptionsAcknowledgedNotification(
                    params=SubscriptionsAcknowledgedNotificationParams(notifications=honored, _meta=meta)
                ),
                related_request_id=ctx.request_id,
            )
            await subscriber.deliver()
        finally:
            unlisten()
            self.streams -= 1
            self._release(token)
        return SubscriptionsListenResult(_meta=meta)  # never reached: the stream ends by cancellation

    @staticmethod
    def _stream_sender(ctx: ServerRequestContext[Any]) -> Send:
        meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}

        async def send(event: ServerEvent) -> None:
            await ctx.session.send_notification(
                event_to_notification(event, meta), related_request_id=ctx.request_id
            )

        return send
