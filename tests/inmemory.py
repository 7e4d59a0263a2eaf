"""Every tool group served in memory to the official MCP client, for one token's vault."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from mcp import Client
from mcp.types import CallToolResult

from memvault.clock import Clock, utcnow
from memvault.config import Settings
from memvault.ops.service import Service
from memvault.tools import build_server
from memvault.tools.common import SERVED_TOKEN


@contextlib.asynccontextmanager
async def served(settings: Settings, token: str = "alice", *, clock: Clock = utcnow) -> AsyncIterator[Client]:
    """A client of the server `memvault stdio` would build for ``token``, over the SDK's in-memory
    transport: the tools run as they do over a socket, without one."""
    service = Service(settings, clock=clock)
    server = build_server(service, settings)
    served_token = SERVED_TOKEN.set(token)  # the server's tasks copy this context, as under stdio
    try:
        await service.start()
        async with Client(server) as client:
            yield client
    finally:
        await service.close()
        SERVED_TOKEN.reset(served_token)


def text_of(result: CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if hasattr(c, "text"))


async def call(client: Client, tool: str, **args: Any) -> str:
    """Call a tool that must succeed; returns its reply's text."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, text_of(result)
    return text_of(result)


async def call_refused(client: Client, tool: str, **args: Any) -> str:
    """Call a tool that must fail; returns its error's text."""
    result = await client.call_tool(tool, args)
    assert result.is_error, text_of(result)
    return text_of(result)
