"""`memvault stdio`: one vault served over stdio and over HTTP at once, with no lost write."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest
from conftest import wait_for
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


def stdio_params(root: Path, token: str) -> StdioServerParameters:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    env["PYTHONPATH"] = str(REPO)
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "memvault", "stdio", "--root", str(root), "--token", token],
        env=env,
    )


def text_of(result: object) -> str:
    return "\n".join(c.text for c in result.content if hasattr(c, "text"))  # type: ignore[attr-defined]


@pytest.mark.slow
async def test_stdio_and_http_share_one_vault_without_losing_a_write(
    server_factory, vault_root: Path
) -> None:
    async with server_factory() as srv, srv.session("alice") as http:
        async with stdio_client(stdio_params(vault_root, "alice")) as (read, write):
            async with ClientSession(read, write) as stdio:
                init = await stdio.initialize()
                assert init.instructions and "recall(query)" in init.instructions
                names = {t.name for t in (await stdio.list_tools()).tools}
                assert {"read_memory", "write_memory", "recall", "get_summary"} <= names

                async def write(session: ClientSession, who: str, i: int) -> None:
                    result = await session.call_tool(
                        "write_memory", {"title": f"{who} note {i}", "content": f"written over {who}, {i}"}
                    )
                    assert not result.is_error, text_of(result)

                await asyncio.gather(
                    *(write(stdio, "stdio", i) for i in range(12)),
                    *(write(http, "http", i) for i in range(12)),
                )
                # Both sessions append to one session summary: every append lands.
                for i in range(5):
                    for session in (stdio, http):
                        result = await session.call_tool(
                            "append_summary", {"sessionId": "s", "content": f"step {i}"}
                        )
                        assert not result.is_error, text_of(result)

                files = {p.name for p in (vault_root / "alice").glob("*.md")}
                assert len(files) == 24

                async def sees_all(session: ClientSession) -> bool:
                    listed = text_of(await session.call_tool("list_memory_titles", {}))
                    return sum(line.count("|") >= 3 for line in listed.splitlines()) == 24

                await wait_for(lambda: sees_all(stdio), timeout=10)
                await wait_for(lambda: sees_all(http), timeout=10)
                summary = text_of(await stdio.call_tool("get_summary", {"sessionId": "s"}))
                assert "version 10 of 10" in summary and summary.count("step") == 10


@pytest.mark.slow
async def test_stdio_refuses_a_bad_token(vault_root: Path) -> None:
    process = await asyncio.create_subprocess_exec(
        *[sys.executable, "-m", "memvault", "stdio", "--root", str(vault_root), "--token", "../etc"],
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**stdio_params(vault_root, "x").env},  # type: ignore[dict-item]
    )
    out, err = await process.communicate()
    assert process.returncode == 2 and out == b"" and b"not a token" in err


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_a_stdio_client_hears_of_a_write_over_http(server_factory, vault_root: Path) -> None:
    from mcp.types import ResourceUpdatedNotification

    heard: list[str] = []

    async def handler(message: object) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            heard.append(message.params.uri)

    folder = vault_root / "alice"
    folder.mkdir()
    (folder / "deploy-notes.md").write_text("# Deploy notes\n\nFridays.\n", encoding="utf-8")
    async with server_factory() as srv, srv.session("alice") as http:
        async with stdio_client(stdio_params(vault_root, "alice")) as (read, write):
            async with ClientSession(read, write, message_handler=handler) as stdio:
                await stdio.initialize()
                await stdio.subscribe_resource("memvault://memories/deploy-notes.md")
                edit = {"filename": "deploy-notes.md", "append": "Mon."}
                result = await http.call_tool("update_memory", edit)
                assert not result.is_error
                await wait_for(lambda: "memvault://memories/deploy-notes.md" in heard, timeout=1.0)
