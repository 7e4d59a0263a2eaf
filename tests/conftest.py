"""Shared fixtures: a clean environment, settings factory, and a real server on a loopback port."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx2
import pytest
import uvicorn
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from starlette.applications import Starlette

from memvault.config import Settings
from memvault.server.app import create_app


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in list(os.environ):
        if key.startswith("MEMVAULT_"):
            monkeypatch.delenv(key)


@pytest.fixture
def vault_root(tmp_path: Path) -> Path:
    root = tmp_path / "memories"
    root.mkdir()
    return root


@pytest.fixture
def make_settings(vault_root: Path) -> Callable[..., Settings]:
    def make(**changes: Any) -> Settings:
        return Settings(root=vault_root).replace(**changes)

    return make


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def wait_for(condition: Callable[[], Any], timeout: float = 5.0, interval: float = 0.01) -> Any:
    """Poll a condition until it is truthy, failing after a deadline (never a fixed sleep)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        result = condition()
        if asyncio.iscoroutine(result):
            result = await result
        if result:
            return result
        if loop.time() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await asyncio.sleep(interval)


@dataclass
class Running:
    """A live server: its base URL, app (for app.state.service / watcher) and settings."""

    url: str
    app: Starlette
    settings: Settings

    def mcp_url(self, token: str) -> str:
        return f"{self.url}/mcp/{token}"

    @contextlib.asynccontextmanager
    async def session(self, token: str, transport: str = "http") -> AsyncIterator[ClientSession]:
        """An initialised official MCP client session over 'http' (streamable) or 'sse'."""
        if transport == "http":
            async with streamable_http_client(self.mcp_url(token)) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    yield session
        else:
            async with sse_client(self.mcp_url(token) + "/sse") as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    yield session

    async def call(self, session: ClientSession, tool: str, **args: Any) -> tuple[bool, str]:
        """Call a tool; returns (is_error, text)."""
        result = await session.call_tool(tool, args)
        return bool(result.is_error), "\n".join(c.text for c in result.content if hasattr(c, "text"))


@contextlib.asynccontextmanager
async def run_server(settings: Settings, **app_kwargs: Any) -> AsyncIterator[Running]:
    port = free_port()
    settings = settings.replace(port=port)
    app = create_app(settings, **app_kwargs)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    task = asyncio.create_task(server.serve())
    try:
        await wait_for(lambda: server.started or task.done(), timeout=10)
        if task.done():
            task.result()
        yield Running(f"http://127.0.0.1:{port}", app, settings)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 10)


@pytest.fixture
def server_factory(make_settings: Callable[..., Settings]) -> Callable[..., Any]:
    """``async with server_factory(capacity=5) as srv:`` starts a real server on a free port."""

    def factory(**changes: Any) -> contextlib.AbstractAsyncContextManager[Running]:
        app_kwargs = {k: changes.pop(k) for k in ("clock", "force_polling") if k in changes}
        return run_server(make_settings(**changes), **app_kwargs)

    return factory


@pytest.fixture
def thread_hops(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """One entry per call sent to a worker thread (anyio.to_thread.run_sync) from now on."""
    hops: list[str] = []
    run_sync = anyio.to_thread.run_sync

    async def counted(func, *args, **kwargs):  # type: ignore[no-untyped-def]
        hops.append(getattr(func, "func", func).__name__)
        return await run_sync(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    return hops


def hidden_files(folder: Path) -> list[str]:
    """Every dot-file and dot-folder under ``folder`` (temp files a write must not leave behind)."""
    return sorted(p.name for p in folder.rglob(".*"))


@contextlib.asynccontextmanager
async def keyed(url: str, key: str) -> AsyncIterator[ClientSession]:
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as client:
        async with streamable_http_client(f"{url}/mcp", http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content if hasattr(c, "text"))
