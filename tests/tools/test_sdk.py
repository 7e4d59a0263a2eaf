"""The adapter over the MCP SDK's private members: it must fail loudly, here, when an SDK upgrade
moves them, rather than leave memvault's own handlers silently unserved."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest
from mcp.client.client import Client
from mcp.server.mcpserver import MCPServer
from mcp.types import ListToolsResult, PaginatedRequestParams, Tool

from memvault.tools import sdk

pytestmark = pytest.mark.anyio

PACKAGE = Path(__file__).parents[2] / "memvault"
# What the adapter reaches for, and what a module might reach for beside it.
SDK_PRIVATES = {
    "_lowlevel_server",
    "_tool_manager",
    "_resource_manager",
    "_prompt_manager",
    "_server_instances",
    "_discard_session",
}


def sdk_server() -> MCPServer:
    server = MCPServer(name="probe")

    @server.tool()
    def echo(text: str) -> str:
        """Say it back."""
        return text

    return server


async def test_our_handler_answers_in_place_of_the_sdks() -> None:
    server = sdk_server()
    ours = Tool(name="ours", input_schema={"type": "object"})
    seen: list[Any] = []

    async def list_tools(ctx: Any, params: PaginatedRequestParams | None) -> ListToolsResult:
        seen.append(ctx.request)  # the handler sees the request: why memvault has its own
        return ListToolsResult(tools=[ours])

    sdk.serve(server, "tools/list", PaginatedRequestParams, list_tools)
    async with Client(server) as client:
        listed = await client.list_tools()
    assert [t.name for t in listed.tools] == ["ours"] and len(seen) == 1


@pytest.mark.parametrize("announced", [False, True])
async def test_a_handshake_client_learns_that_the_resource_list_changes(announced: bool) -> None:
    server = sdk_server()
    if announced:
        sdk.announce_resource_changes(server)
    async with Client(server, mode="legacy") as client:
        resources = client.server_capabilities.resources
    assert bool(resources and resources.list_changed) is announced


def test_a_server_without_the_private_member_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    server = sdk_server()
    monkeypatch.delattr(server, "_lowlevel_server")  # as an SDK that renamed it would be
    with pytest.raises(sdk.SdkChanged, match=r"memvault\.tools\.sdk"):
        sdk.serve(server, "tools/list", PaginatedRequestParams, lambda ctx, params: None)
    with pytest.raises(sdk.SdkChanged):
        sdk.announce_resource_changes(server)


def test_only_the_adapter_touches_the_sdk_servers_private_members() -> None:
    users = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "tools" / "sdk.py":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            overrides = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith(
                "_handle_"
            )
            if (isinstance(node, ast.Attribute) and node.attr in SDK_PRIVATES) or overrides:
                users.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert users == []


async def test_the_session_manager_adapter_ends_a_session_and_fails_loudly_when_moved(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

    manager = StreamableHTTPSessionManager(app=sdk_server()._lowlevel_server)
    assert sdk.live_sessions(manager) == {}
    ended: list[str] = []

    async def discard(session: str, transport: object) -> None:
        ended.append(session)

    sdk.live_sessions(manager)["s1"] = object()
    monkeypatch.setattr(manager, "_discard_session", discard)
    await sdk.discard_session(manager, "s1")
    await sdk.discard_session(manager, "unknown")  # not live: nothing to end
    assert ended == ["s1"]
    monkeypatch.delattr(manager, "_server_instances")
    with pytest.raises(sdk.SdkChanged, match=r"memvault\.tools\.sdk"):
        sdk.live_sessions(manager)
