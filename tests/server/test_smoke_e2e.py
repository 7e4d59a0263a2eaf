"""A first end-to-end check over both transports."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["http", "sse"])
async def test_write_then_read_over_transport(server_factory, transport):
    async with server_factory() as srv, srv.session("alice", transport) as session:
        err, text = await srv.call(
            session, "write_memory", title="Deploy notes", content="postgres 16 on fridays"
        )
        assert not err and "deploy-notes.md" in text
        err, text = await srv.call(session, "read_memory", query="fridays")
        assert not err and "postgres 16" in text
