"""app: session-to-token bindings and the Origin check when any Host is allowed."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import anyio.to_thread
import pytest
from commands import INITIALIZE_REQUEST, MCP_HEADERS
from conftest import wait_for

from memvault.server.app import SessionOwners

pytestmark = pytest.mark.anyio


async def _post(url: str, body: dict, headers: dict, method: str = "POST") -> tuple[int, dict[str, str]]:
    # urllib blocks: run it off the loop that serves the server under test.
    return await anyio.to_thread.run_sync(_post_sync, url, body, headers, method)


def _post_sync(url: str, body: dict, headers: dict, method: str) -> tuple[int, dict[str, str]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers)
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers)


def test_session_owners_forget_the_least_recently_used():
    owners = SessionOwners(capacity=2)
    owners.bind("s1", "alice")
    owners.bind("s2", "bob")
    assert owners.owner("s1") == "alice"  # s1 now most recent
    owners.bind("s3", "carol")
    assert owners.owner("s2") is None
    assert owners.owner("s1") == "alice" and owners.owner("s3") == "carol"
    owners.release("s1")
    assert owners.owner("s1") is None and len(owners) == 1


async def test_unknown_and_ended_session_ids_are_refused(server_factory):
    async with server_factory() as srv:
        url = srv.mcp_url("alice")
        status, _ = await _post(
            url, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, {**MCP_HEADERS, "mcp-session-id": "forged"}
        )
        assert status == 404
        status, headers = await _post(url, INITIALIZE_REQUEST, MCP_HEADERS)
        assert status == 200
        session = headers["mcp-session-id"]
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        with_session = {**MCP_HEADERS, "mcp-session-id": session, "mcp-protocol-version": "2025-06-18"}
        assert (await _post(url, ping, with_session))[0] == 200
        assert (await _post(url, {}, with_session, method="DELETE"))[0] == 200
        assert len(srv.app.state.sessions) == 0  # the binding went with the session
        assert (await _post(url, ping, with_session))[0] == 404


async def test_any_host_still_refuses_foreign_origins(server_factory):
    async with server_factory(allowed_hosts=("*",)) as srv:
        url = srv.mcp_url("alice")
        assert (await _post(url, INITIALIZE_REQUEST, {**MCP_HEADERS, "Host": "anything.example:1234"}))[
            0
        ] == 200
        assert (await _post(url, INITIALIZE_REQUEST, {**MCP_HEADERS, "Origin": "http://localhost:5173"}))[
            0
        ] == 200
        assert (await _post(url, INITIALIZE_REQUEST, {**MCP_HEADERS, "Origin": "https://evil.example"}))[
            0
        ] == 403
        status = (
            await _post(
                url,
                INITIALIZE_REQUEST,
                {**MCP_HEADERS, "Host": "evil.example:80", "Origin": "http://evil.example:80"},
            )
        )[0]
        assert status == 403  # DNS rebinding: page and Host agree, Origin is still foreign


async def test_wrong_urls_say_what_the_endpoint_is(server_factory):
    async with server_factory() as srv:
        for path in ("/mcp", "/mcp/", "/mcp/a%20b", "/nothing"):
            status, _ = await _post(srv.url + path, INITIALIZE_REQUEST, MCP_HEADERS)
            assert status == 404, path
        body = await anyio.to_thread.run_sync(_get_error_body, srv.url + "/mcp/")
        # The SDK's error shape (a JSON-RPC error without an id), like every HTTP error the server writes.
        assert body["jsonrpc"] == "2.0" and body["id"] is None and body["error"]["code"] == -32600
        assert "/mcp/<token>" in body["error"]["message"]


def _get_error_body(url: str) -> dict:
    try:
        urllib.request.urlopen(url, timeout=10)
    except urllib.error.HTTPError as exc:
        return json.loads(exc.read())
    raise AssertionError("expected an error status")


@pytest.mark.slow
async def test_a_token_starts_loading_with_its_clients_first_request(server_factory, vault_root):
    (vault_root / "alice").mkdir()
    (vault_root / "alice" / "tide.md").write_text("# Tide\n\nharbour\n", encoding="utf-8")
    (vault_root / "linked").symlink_to(vault_root / "alice")
    async with server_factory() as srv:
        states = srv.app.state.service.registry.states
        assert (await _post(srv.mcp_url("alice"), INITIALIZE_REQUEST, MCP_HEADERS))[
            0
        ] == 200  # no tool called
        await wait_for(lambda: "alice" in states and states["alice"].loaded, timeout=10)
        assert "tide.md" in states["alice"].hot.memories
        # A token without a folder loads as empty and creates nothing; a linked one is refused by
        # the tool call, as before, and the handshake still answers.
        assert (await _post(srv.mcp_url("nobody"), INITIALIZE_REQUEST, MCP_HEADERS))[0] == 200
        await wait_for(lambda: "nobody" in states and states["nobody"].loaded, timeout=10)
        assert not (vault_root / "nobody").exists()
        assert (await _post(srv.mcp_url("linked"), INITIALIZE_REQUEST, MCP_HEADERS))[0] == 200
        await wait_for(lambda: not srv.app.state.service.registry.warming, timeout=10)
        assert "linked" not in states
        async with srv.session("linked") as session:
            is_error, message = await srv.call(session, "list_memory_titles")
        assert is_error and "link" in message.lower()
        # Ending a session (DELETE) loads nothing.
        (vault_root / "carol").mkdir()
        (vault_root / "carol" / "reef.md").write_text("# Reef\n\ncoral\n", encoding="utf-8")
        await _post(srv.mcp_url("carol"), {}, MCP_HEADERS, method="DELETE")
        assert "carol" not in states and "carol" not in srv.app.state.service.registry.warming
