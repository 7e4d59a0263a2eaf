"""The MCP tools, one module per group; build_server assembles the groups MEMVAULT_TOOLS selects."""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, CallToolResult, InputRequiredResult
from pydantic import ValidationError

from memvault import __version__
from memvault.config import Settings
from memvault.errors import quote
from memvault.store import Store
from memvault.tools.common import INSTRUCTIONS
from memvault.tools.graph import register_graph_tools
from memvault.tools.memories import register_memory_tools, render_found
from memvault.tools.recall import register_recall_tools
from memvault.tools.summaries import register_session_tools

__all__ = ["build_server", "render_found"]


class Server(MCPServer):
    """The SDK's server, with argument errors worded for the agent instead of pydantic's dump."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            if isinstance(exc.__cause__, ValidationError):
                raise ToolError(argument_errors(name, exc.__cause__)) from None
            raise

    async def get_prompt(
        self, name: str, arguments: dict[str, Any] | None = None, context: Context[Any, Any] | None = None
    ) -> Any:
        """An unknown prompt is an invalid parameter (-32602, as the spec says), not an internal
        error with a traceback in the log."""
        if self._prompt_manager.get_prompt(name) is None:
            raise MCPError(code=INVALID_PARAMS, message=f"Unknown prompt: {quote(name)}")
        return await super().get_prompt(name, arguments, context)


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


def build_server(store: Store, settings: Settings) -> MCPServer:
    server = Server(name="memvault", version=__version__, instructions=INSTRUCTIONS)
    if "memories" in settings.tools:
        register_memory_tools(server, store, settings)
    if "sessions" in settings.tools:
        register_session_tools(server, store, settings)
    if "graph" in settings.tools:
        register_graph_tools(server, store, settings)
    if "recall" in settings.tools:
        register_recall_tools(server, store, settings)
    return server
