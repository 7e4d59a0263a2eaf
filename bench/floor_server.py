#!/usr/bin/env python
"""The throughput floor: a bare MCP SDK server with one trivial tool, served like memvault.

    python bench/floor_server.py --port 3100
    python bench/floor_server.py --stdio

Same SDK, same transport settings (streamable HTTP at /mcp/{token}, JSON responses), same uvicorn;
only memvault is missing. bench_load.py drives it with the same client and load as memvault.
"""

from __future__ import annotations

import argparse

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.routing import Mount


def mcp_server() -> MCPServer:
    server = MCPServer("floor")

    @server.tool()
    def echo(text: str = "") -> str:
        """Return the text."""
        return text

    return server


def build() -> Starlette:
    server = mcp_server()
    inner = server.streamable_http_app(json_response=True)
    manager = server.session_manager

    async def route(scope, receive, send):  # type: ignore[no-untyped-def]
        await manager.handle_request(scope, receive, send)

    return Starlette(routes=[Mount("/mcp", app=route)], lifespan=inner.router.lifespan_context)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int)
    parser.add_argument(
        "--stdio", action="store_true", help="serve on stdin/stdout instead (bench_coldstart)"
    )
    args = parser.parse_args()
    if args.stdio:
        mcp_server().run("stdio")
        return
    if args.port is None:
        parser.error("--port or --stdio")
    uvicorn.run(build(), host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
