"""The MCP tools, one module per group; build_server assembles the groups MEMVAULT_TOOLS selects."""

from __future__ import annotations

from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import (
    CallToolResult,
    CompleteRequestParams,
    GetPromptRequestParams,
    InputRequiredResult,
    ListToolsResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    SubscribeRequestParams,
    SubscriptionsListenRequestParams,
    UnsubscribeRequestParams,
)
from mcp.types import Tool as MCPTool
from pydantic import ValidationError

from memvault import __version__
from memvault.config import Settings
from memvault.ops.changes import Changes
from memvault.ops.recall import Recaller
from memvault.ops.service import Service
from memvault.ops.store import Store
from memvault.search.ranking import DEFAULT_WEIGHTS
from memvault.tools import sdk
from memvault.tools.common import read_only
from memvault.tools.completion import Completer
from memvault.tools.graph import OUTPUT_SCHEMAS, GraphTools
from memvault.tools.guide import instructions
from memvault.tools.memories import MemoryTools
from memvault.tools.prompts import Prompts
from memvault.tools.recall import RecallTools
from memvault.tools.resources import Resources, guarded
from memvault.tools.schema import compact
from memvault.tools.subscriptions import Subscriptions
from memvault.tools.summaries import SessionTools

__all__ = ["build_server"]


class Server(MCPServer):
    """The SDK's server, with lean tool schemas and argument errors worded for the agent."""

    _listed: list[MCPTool] | None = None
    _by_name: dict[str, MCPTool] | None = None

    async def list_tools(self) -> list[MCPTool]:
        # Tools are registered once, before serving: compact their schemas once.
        if self._listed is None:
            self._listed = [lean(tool) for tool in await super().list_tools()]
            self._by_name = {tool.name: tool for tool in self._listed}
        return self._listed

    async def _tool(self, name: str) -> MCPTool | None:
        await self.list_tools()
        return self._by_name.get(name) if self._by_name is not None else None

    async def list_tools_for(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        """tools/list: a read-only key sees only the read-only tools."""
        tools = await self.list_tools()
        if read_only(ctx.request):
            tools = [t for t in tools if _read_only_tool(t)]
        return ListToolsResult(tools=tools)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if context is not None and read_only(context.request_context.request):
            tool = await self._tool(name)
            if tool is not None and not _read_only_tool(tool):
                # Refused before the tool runs: nothing is read for it, nothing written.
                raise ToolError(f"This key is read-only, so {name} is refused; nothing was changed.")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(argument_errors(name, exc.__cause__)) from None
            raise


def _read_only_tool(tool: MCPTool) -> bool:
    return tool.annotations is not None and bool(tool.annotations.read_only_hint)


def lean(tool: MCPTool) -> MCPTool:
    """The tool as listed, with its schemas compacted (see schema.compact).

    Every tool that sends structured content lists an output schema (the graph tools): a short one
    of their own (tools.graph.OUTPUT_SCHEMAS), since the derived ones would cost every session
    about 3,000 characters for nothing an agent reads. Every tool has its title from its @tool."""
    output = OUTPUT_SCHEMAS.get(tool.name) if tool.output_schema is not None else None
    return tool.model_copy(
        update={
            "input_schema": compact(tool.input_schema),
            "output_schema": output,
        }
    )


def argument_errors(tool: str, error: ValidationError) -> str:
    """One short line per bad argument, and what to do next."""
    problems = []
    for item in error.errors()[:5]:
        where = ".".join(str(part) for part in item["loc"] if part != f"{tool}Arguments") or "arguments"
        if item["type"] == "missing":
            problems.append(f"'{where}' is required")
        else:
            problems.append(f"'{where}': {item['msg'].rstrip('.')}")
    return (
        f"Invalid arguments for {tool}: {'; '.join(problems)}. "
        "Check the tool's input schema and call it again."
    )


def build_server(service: Service, settings: Settings) -> MCPServer:
    # subscriptions=False: the SDK's own subscriptions/listen tells every stream of every event, of
    # whatever vault; ours (tools.subscriptions) tells each client of its own vault's changes only.
    server = Server(
        name="memvault", version=__version__, instructions=instructions(settings.tools), subscriptions=False
    )
    store = service.store
    if "memories" in settings.tools:
        MemoryTools(store, settings).register(server)
    if "sessions" in settings.tools:
        SessionTools(store, settings).register(server)
    if "graph" in settings.tools:
        GraphTools(store, settings).register(server)
    if "recall" in settings.tools:
        recaller = Recaller(
            store,
            service.registry,
            service.embeddings,
            DEFAULT_WEIGHTS.replace(floor=settings.recall_floor),
            service.reranking,
        )
        RecallTools(store, recaller, settings).register(server)
    sdk.serve(server, "tools/list", PaginatedRequestParams, server.list_tools_for)
    serve_resources(server, store, service.changes, settings)
    return server


def serve_resources(server: Server, store: Store, changes: Changes, settings: Settings) -> None:
    """Resources, their subscriptions, prompts and completion, in place of the SDK's handlers (which
    serve what is registered once for all; a vault's resources are its own and change)."""
    resources = Resources(store, settings)
    subscriptions = Subscriptions(changes)
    prompts = Prompts(store, settings)
    completer = Completer(store, settings)
    handlers: list[tuple[str, Any, Any]] = [
        ("resources/list", PaginatedRequestParams, guarded("resources/list", resources.list_resources)),
        ("resources/templates/list", PaginatedRequestParams, resources.list_templates),
        ("resources/read", ReadResourceRequestParams, guarded("resources/read", resources.read)),
        ("resources/subscribe", SubscribeRequestParams, subscriptions.subscribe),
        ("resources/unsubscribe", UnsubscribeRequestParams, subscriptions.unsubscribe),
        ("subscriptions/listen", SubscriptionsListenRequestParams, subscriptions.listen),
        ("prompts/list", PaginatedRequestParams, prompts.list_prompts),
        ("prompts/get", GetPromptRequestParams, prompts.get_prompt),
        ("completion/complete", CompleteRequestParams, completer.complete),
    ]
    for method, params, handler in handlers:
        sdk.serve(server, method, params, handler)
    sdk.announce_resource_changes(server)
