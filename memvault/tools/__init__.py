"""The MCP tools, one module per group; build_server assembles the groups MEMVAULT_TOOLS selects."""

from __future__ import annotations

from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import CallToolResult, InputRequiredResult, ListToolsResult, PaginatedRequestParams
from mcp.types import Tool as MCPTool
from pydantic import ValidationError

from memvault import __version__
from memvault.config import Settings
from memvault.ops.store import Store
from memvault.tools.common import read_only
from memvault.tools.graph import register_graph_tools
from memvault.tools.guide import instructions
from memvault.tools.memories import register_memory_tools, render_found
from memvault.tools.recall import register_recall_tools
from memvault.tools.schema import compact
from memvault.tools.summaries import register_session_tools

__all__ = ["build_server", "render_found"]


class Server(MCPServer):
    """The SDK's server, with lean tool schemas and argument errors worded for the agent."""

    _listed: list[MCPTool] | None = None

    async def list_tools(self) -> list[MCPTool]:
        # Tools are registered once, before serving: compact their schemas once.
        if self._listed is None:
            self._listed = [lean(tool) for tool in await super().list_tools()]
        return self._listed

    async def _handle_list_tools(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        tools = await self.list_tools()
        if read_only(ctx.request):
            tools = [t for t in tools if t.annotations is not None and t.annotations.read_only_hint]
        return ListToolsResult(tools=tools)

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        if context is not None and read_only(context.request_context.request):
            tool = self._tool_manager.get_tool(name)
            if tool is not None and not (tool.annotations and tool.annotations.read_only_hint):
                # Refused before the tool runs: nothing is read for it, nothing written.
                raise ToolError(f"This key is read-only, so {name} is refused; nothing was changed.")
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(argument_errors(name, exc.__cause__)) from None
            raise


LISTED_OUTPUTS = ("read_graph",)


def lean(tool: MCPTool) -> MCPTool:
    """The tool as listed, with its schemas compacted (see schema.compact).

    Only read_graph lists its output schema: the graph tools' replies are JSON text (their
    structured results are sent all the same), the other read tools return the same shape, and
    the mutations' schemas cost every session about 3,000 characters for nothing an agent reads."""
    keep = tool.output_schema is not None and tool.name in LISTED_OUTPUTS
    output = compact(tool.output_schema or {}, optional_null=False, described=False) if keep else None
    return tool.model_copy(update={"input_schema": compact(tool.input_schema), "output_schema": output})


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


# The SDK registers these for every server, so it advertises prompts and resources; memvault
# serves neither yet, and a capability with nothing behind it misleads clients (issue 14).
UNSERVED = ("prompts/list", "prompts/get", "resources/list", "resources/read", "resources/templates/list")


def build_server(store: Store, settings: Settings) -> MCPServer:
    server = Server(name="memvault", version=__version__, instructions=instructions(settings.tools))
    handlers = server._lowlevel_server._request_handlers  # the SDK offers no public way to drop them
    for method in UNSERVED:
        handlers.pop(method, None)
    if "memories" in settings.tools:
        register_memory_tools(server, store, settings)
    if "sessions" in settings.tools:
        register_session_tools(server, store, settings)
    if "graph" in settings.tools:
        register_graph_tools(server, store, settings)
    if "recall" in settings.tools:
        register_recall_tools(server, store, settings)
    return server
