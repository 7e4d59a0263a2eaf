"""Tokens spread over two memvault processes behind a real nginx (`memvault nginx`), and one of them dying."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml
from conftest import run_server
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from nginxrun import NGINX, NO_NGINX, nginx_in_front

from memvault.cli.main import main
from memvault.errors import InvalidArgument
from memvault.server import keys, nginx

needs_nginx = pytest.mark.skipif(
    NGINX is None,
    reason=NO_NGINX,
)
TOKENS = [f"agent{i:02d}" for i in range(12)]


def test_backends_are_checked_before_they_go_into_a_configuration() -> None:
    text = nginx.http_block(["127.0.0.1:3001", "mybox:3002"], listen="8080")
    assert (
        "hash $memvault_shard consistent;" in text and "server mybox:3002" in text and "listen 8080;" in text
    )
    for bad in ([], ["127.0.0.1"], ["a b:1"], ["x:99999"], ["evil;}:1"]):
        with pytest.raises(InvalidArgument):
            nginx.http_block(bad)
    assert main(["nginx", "--backends", "127.0.0.1:1;include /etc/passwd"]) == 2


async def call(url: str, tool: str, **args: Any) -> str:
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool(tool, args)
        text = "\n".join(c.text for c in result.content if hasattr(c, "text"))
        assert not result.is_error, text
        return text


@pytest.mark.slow
@needs_nginx
@pytest.mark.anyio
async def test_two_backends_behind_nginx_keep_each_token_on_one_and_survive_losing_one(
    make_settings: Any, tmp_path: Path
) -> None:
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(run_server(make_settings()))
        b_stack = contextlib.AsyncExitStack()
        b = await b_stack.enter_async_context(run_server(make_settings()))
        try:
            backends = [s.url.removeprefix("http://") for s in (a, b)]
            url = await stack.enter_async_context(nginx_in_front(backends, tmp_path / "nginx"))
            front = f"{url}/mcp"
            for token in TOKENS:  # each write readable at once through nginx
                await call(
                    f"{front}/{token}", "write_memory", title=f"Note of {token}", content=f"walrus {token}"
                )
                assert f"walrus {token}" in await call(f"{front}/{token}", "read_memory", query="walrus")
            on_a, on_b = set(a.app.state.service.registry.states), set(b.app.state.service.registry.states)
            assert on_a and on_b and not on_a & on_b, (on_a, on_b)  # spread, each token on one process
            assert on_a | on_b == set(TOKENS)
        finally:
            await b_stack.aclose()  # backend B goes away
        for token in TOKENS:  # its tokens move to A: every acknowledged write is there, and writes go on
            assert f"walrus {token}" in await call(f"{front}/{token}", "read_memory", query="walrus")
            await call(f"{front}/{token}", "write_memory", title=f"After of {token}", content="still writing")
        assert set(a.app.state.service.registry.states) == set(TOKENS)


@needs_nginx
@pytest.mark.anyio
async def test_keyed_clients_reach_one_backend_per_key_over_both_transports_behind_nginx(
    make_settings: Any, tmp_path: Path, vault_root: Path
) -> None:
    keys_file = tmp_path / "keys.txt"
    vault_keys = {token: keys.add(keys_file, f"key-{token}", token, read_only=False) for token in TOKENS}
    async with contextlib.AsyncExitStack() as stack:
        a = await stack.enter_async_context(run_server(make_settings(keys_file=keys_file)))
        b = await stack.enter_async_context(run_server(make_settings(keys_file=keys_file)))
        front = await stack.enter_async_context(
            nginx_in_front([s.url.removeprefix("http://") for s in (a, b)], tmp_path / "nginx")
        )
        for token, key in vault_keys.items():
            headers = {"Authorization": f"Bearer {key}"}
            async with httpx2.AsyncClient(headers=headers, timeout=30) as client:
                async with streamable_http_client(f"{front}/mcp", http_client=client) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        result = await session.call_tool(
                            "write_memory", {"title": "Via key", "content": token}
                        )
                        assert not result.is_error, result.content
            async with sse_client(f"{front}/sse", headers=headers) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    result = await session.call_tool("read_memory", {"query": "via key"})
                    assert not result.is_error and token in str(result.content), result.content
        on_a, on_b = set(a.app.state.service.registry.states), set(b.app.state.service.registry.states)
        assert on_a and on_b and not on_a & on_b, (on_a, on_b)  # spread, each vault on one process
        assert on_a | on_b == set(TOKENS)
        async with httpx2.AsyncClient(timeout=10) as client:  # the backends' answers pass through
            probe = await client.get(f"{front}/.well-known/oauth-protected-resource")
            assert probe.status_code == 404 and "memvault keys add" in probe.json()["error_description"]
            assert (await client.post(f"{front}/mcp", json={})).status_code == 401
    for token in TOKENS:
        assert token in (vault_root / token / "via-key.md").read_text(encoding="utf-8")


def test_the_compose_files_nginx_configuration_is_what_memvault_nginx_writes() -> None:
    compose = yaml.safe_load((Path(__file__).parents[2] / "docker-compose.yml").read_text(encoding="utf-8"))
    content = compose["configs"]["memvault-nginx"]["content"].replace("$$", "$")
    assert content == nginx.http_block(["memvault-a:3000", "memvault-b:3000"], listen="3000")
    for name in ("memvault-a", "memvault-b"):
        replica = compose["services"][name]
        assert replica["profiles"] == ["sharded"]
        assert replica["volumes"] == compose["services"]["memvault"]["volumes"]  # one vault
