"""The one place that reaches into the MCP SDK's private members: handlers of our own.

The SDK's ``MCPServer`` serves what is registered once for all (tools, resources, prompts), with
handlers that never see the request. Ours see it (a vault's resources are its own; a read-only
key lists only the read-only tools), so they replace the SDK's on its low-level server, which
``MCPServer`` keeps private. The session caps and a revoked key end a streamable HTTP session
through its session manager's private map and discard. Nothing else in memvault touches a private
name of the SDK's; tests/tools/test_sdk.py fails loudly when an SDK upgrade moves what is used here.
"""

from __future__ import annotations

import functools
from typing import Any

from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.lowlevel.server import Server as LowLevelServer
from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

__all__ = ["SdkChanged", "announce_resource_changes", "discard_session", "live_sessions", "serve"]


class SdkChanged(RuntimeError):
    """The MCP SDK no longer has what this adapter uses: pin the SDK, or update memvault.tools.sdk."""


def _lowlevel(server: MCPServer) -> LowLevelServer[Any]:
    low = getattr(server, "_lowlevel_server", None)
    if not isinstance(low, LowLevelServer):
        raise SdkChanged("MCPServer._lowlevel_server is gone: memvault.tools.sdk needs updating.")
    return low


def serve(server: MCPServer, method: str, params: type[Any], handler: Any) -> None:
    """Answer ``method`` with ``handler(ctx, params)``, in place of the SDK's own handler."""
    _lowlevel(server).add_request_handler(method, params, handler)


def announce_resource_changes(server: MCPServer) -> None:
    """Tell handshake-era clients, in the initialize result, that the resource list changes (the
    SDK's default says it does not; 2026-07-28 clients learn it from server/discover)."""
    low = _lowlevel(server)
    low.create_initialization_options = functools.partial(  # type: ignore[method-assign]
        low.create_initialization_options, NotificationOptions(resources_changed=True)
    )


def live_sessions(manager: StreamableHTTPSessionManager) -> dict[str, Any]:
    """The session manager's live streamable HTTP sessions, by id (a private map of the SDK's)."""
    live = getattr(manager, "_server_instances", None)
    if not isinstance(live, dict):
        raise SdkChanged(
            "StreamableHTTPSessionManager._server_instances is gone: memvault.tools.sdk needs updating."
        )
    return live


async def discard_session(manager: StreamableHTTPSessionManager, session: str) -> None:
    """End one streamable HTTP session as the SDK ends an idle one: its transport closed, its entry
    gone (a session cap's least recently used, a revoked key's)."""
    transport = live_sessions(manager).get(session)
    if transport is None:
        return
    discard = getattr(manager, "_discard_session", None)
    if discard is None:
        raise SdkChanged(
            "StreamableHTTPSessionManager._discard_session is gone: memvault.tools.sdk needs updating."
        )
    await discard(session, transport)
