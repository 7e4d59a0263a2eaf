"""bench/bench_load.py's own HTTP client against a real uvicorn server and the SDK floor."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.anyio


def load_bench() -> ModuleType:
    sys.path.insert(0, str(ROOT / "bench"))  # bench_load imports its neighbours
    spec = importlib.util.spec_from_file_location("bench_load", ROOT / "bench" / "bench_load.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_load"] = module
    spec.loader.exec_module(module)
    return module


async def serve(app: Starlette, port: int) -> tuple[uvicorn.Server, asyncio.Task[None]]:
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    deadline = asyncio.get_running_loop().time() + 10
    while not server.started:
        assert asyncio.get_running_loop().time() < deadline, "server did not start"
        await asyncio.sleep(0.01)
    return server, task


async def test_the_connection_reads_sized_chunked_and_closing_replies(unused_tcp_port: int) -> None:
    bench = load_bench()

    async def sized(request: Request) -> Response:
        return Response(b"sized:" + await request.body(), headers={"x-kind": "sized"})

    async def chunked(request: Request) -> StreamingResponse:
        body = await request.body()

        async def parts():  # type: ignore[no-untyped-def]
            for piece in (b"chunk", b"ed:", body, b"x" * 70_000):
                yield piece

        return StreamingResponse(parts(), media_type="text/event-stream")

    async def closing(request: Request) -> Response:
        return Response(b"bye", status_code=404, headers={"connection": "close"})

    app = Starlette(
        routes=[
            Route("/sized", sized, methods=["POST"]),
            Route("/chunked", chunked, methods=["POST"]),
            Route("/closing", closing, methods=["POST"]),
        ]
    )
    server, task = await serve(app, unused_tcp_port)
    try:
        base = f"http://127.0.0.1:{unused_tcp_port}"
        conn = bench.Connection(base + "/sized")
        for n in range(3):  # the same connection, kept alive
            status, fields, body = await conn.post(b"%d" % n, {"Content-Type": "text/plain"})
            assert (status, fields["x-kind"], body) == (200, "sized", b"sized:%d" % n)
        writer = conn.writer
        await conn.post(b"again", {})
        assert conn.writer is writer
        conn.close()

        conn = bench.Connection(base + "/chunked")
        status, fields, body = await conn.post(b"abc", {})
        assert status == 200 and fields["transfer-encoding"] == "chunked"
        assert body == b"chunked:abc" + b"x" * 70_000
        conn.close()

        conn = bench.Connection(base + "/closing")
        status, _, body = await conn.post(b"", {})
        assert (status, body, conn.writer) == (404, b"bye", None)  # closed as the server asked
        status, _, _ = await conn.post(b"", {})  # and opened again for the next call
        assert status == 404
        conn.close()
    finally:
        server.should_exit = True
        await task


@pytest.mark.slow
async def test_a_client_calls_the_floor_servers_tool(unused_tcp_port: int) -> None:
    bench = load_bench()
    spec = importlib.util.spec_from_file_location("floor_server", ROOT / "bench" / "floor_server.py")
    assert spec is not None and spec.loader is not None
    floor = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(floor)
    server, task = await serve(floor.build(), unused_tcp_port)
    try:
        urls = [f"http://127.0.0.1:{unused_tcp_port}/mcp/" for _ in range(3)]
        tally, elapsed = await bench.drive(urls, 0.3, lambda i, rng: ("echo", {"text": "hi"}))
        assert elapsed > 0
        calls = tally.latencies["echo"]
        assert len(calls) >= 3 and not tally.failed
        client = bench.Client(urls[0])
        await client.start()
        assert client.session
        assert await client.call("echo", {"text": "hi"}) is None
        assert await client.call("no_such_tool", {}) is not None  # a failure is reported, not hidden
        client.http.close()
    finally:
        server.should_exit = True
        await task


@pytest.fixture
def unused_tcp_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_steal_is_the_hosts_share_of_the_window(tmp_path: Path) -> None:
    bench = load_bench()
    stat = tmp_path / "stat"
    stat.write_text("cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 50 0 25 400 5 0 0 20 0 0\n")
    before = bench.cpu_ticks(stat)
    stat.write_text("cpu  160 0 70 900 10 0 0 100 0 0\ncpu0 80 0 35 450 5 0 0 50 0 0\n")
    after = bench.cpu_ticks(stat)
    assert before == (40, 1000) and after == (100, 1240)
    assert bench.steal_share(before, after) == pytest.approx(60 / 240)
    assert bench.steal_share(before, None) is None
    assert bench.cpu_ticks(tmp_path / "missing") is None
    stat.write_text("nonsense\n")
    assert bench.cpu_ticks(stat) is None
