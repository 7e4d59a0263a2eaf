"""A revoked key's open streams end within a second and hear nothing more; other keys' go on.

Through the real server and the official client: the key opens a streamable HTTP session with
resource subscriptions (heard over its GET stream), a 2026-07-28 listen stream and a legacy SSE
connection with subscriptions; `memvault keys revoke` (the keys file replaced) ends all three.
That nothing more reaches them is shown with a barrier: the other key's listen stream hears the
new memory, and changes reach every listener of a vault from one batch.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from conftest import wait_for
from mcp.client.client import Client
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ResourceUpdated
from mcp.types import ResourceUpdatedNotification

from memvault.server import keys

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    # resources/subscribe is deprecated by the SDK (2026-07-28 removed it); the handshake era has it.
    pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning"),
]

DEADLINE = 1.0  # seconds from the revocation to its streams' end
VAULT = "memvault://vault"
BEFORE = "memvault://memories/before.md"
AFTER = "memvault://memories/after-revocation.md"


class Heard:
    """The resource URIs one client was told of, in order."""

    def __init__(self) -> None:
        self.uris: list[str] = []

    async def __call__(self, message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            self.uris.append(message.params.uri)


@contextlib.asynccontextmanager
async def http_with(key: str) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http:
        yield http


async def client_with(stack: contextlib.AsyncExitStack, url: str, key: str, **options: Any) -> Client:
    """The official client on streamable HTTP, sending ``key``, open until ``stack`` closes."""
    http = await stack.enter_async_context(http_with(key))
    return await stack.enter_async_context(Client(streamable_http_client(url, http_client=http), **options))


class Listening:
    """A 2026-07-28 listen stream read in the background: what it heard, and whether it ended."""

    def __init__(self) -> None:
        self.uris: list[str] = []
        self.ended = anyio.Event()

    async def read(self, client: Client, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            async with client.listen(resource_subscriptions=[VAULT]) as events:
                task_status.started()
                async for event in events:
                    if isinstance(event, ResourceUpdated):
                        self.uris.append(event.uri)
        except Exception:  # an abrupt end (SubscriptionLost) is an end too
            pass
        finally:
            self.ended.set()


async def write(client: Client, title: str) -> None:
    result = await client.call_tool("write_memory", {"title": title, "content": f"{title} text."})
    assert not result.is_error, result.content


async def test_a_revoked_keys_streams_close_and_hear_nothing_more(
    server_factory: Callable[..., Any], tmp_path: Path, vault_root: Path
) -> None:
    (vault_root / "alice").mkdir(parents=True)
    keys_file = tmp_path / "keys.txt"
    doomed = keys.add(keys_file, "laptop", "alice", read_only=True)
    other = keys.add(keys_file, "agent", "alice", read_only=False)
    async with server_factory(keys_file=keys_file) as srv, contextlib.AsyncExitStack() as stack:
        changes = srv.app.state.service.changes
        url = f"{srv.url}/mcp"
        # The doomed key: a handshake-era session subscribed to the vault (its GET stream) ...
        legacy_heard = Heard()
        legacy = await client_with(stack, url, doomed, mode="legacy", message_handler=legacy_heard)
        await legacy.subscribe_resource(VAULT)
        # ... a legacy SSE connection subscribed to the vault ...
        sse_heard = Heard()
        read, send = await stack.enter_async_context(
            sse_client(f"{srv.url}/sse", headers={"Authorization": f"Bearer {doomed}"})
        )
        sse = await stack.enter_async_context(ClientSession(read, send, message_handler=sse_heard))
        await sse.initialize()
        await sse.subscribe_resource(VAULT)
        # ... and a 2026-07-28 listen stream.
        modern = await client_with(stack, url, doomed)
        # The other key: a listen stream of the same vault, and the writes.
        writer = await client_with(stack, url, other)
        async with anyio.create_task_group() as group:
            doomed_listen, other_listen = Listening(), Listening()
            await group.start(doomed_listen.read, modern)
            await group.start(other_listen.read, writer)
            assert changes.listening("alice") == 4

            # All four hear a write while the key is good.
            await write(writer, "Before")
            await wait_for(
                lambda: all(BEFORE in h.uris for h in (legacy_heard, sse_heard, doomed_listen, other_listen)),
                timeout=DEADLINE,
            )

            keys.revoke(keys_file, "laptop")
            with anyio.fail_after(DEADLINE):
                await doomed_listen.ended.wait()
            # The subscriptions of the session and of the SSE connection ended with them.
            await wait_for(lambda: changes.listening("alice") == 1, timeout=DEADLINE)
            assert not other_listen.ended.is_set()

            await write(writer, "After revocation")
            await wait_for(lambda: AFTER in other_listen.uris, timeout=DEADLINE)  # the barrier
            for heard in (legacy_heard.uris, sse_heard.uris, doomed_listen.uris):
                assert AFTER not in heard and "after-revocation" not in str(heard)
            group.cancel_scope.cancel()

        # The revoked key opens nothing new either.
        async with http_with(doomed) as http:
            assert (await http.get(f"{srv.url}/sse")).status_code == 401
