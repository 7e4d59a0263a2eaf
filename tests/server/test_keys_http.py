"""With a keys file: what a client that sends no key, a token URL or OAuth probes is told."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest

from memvault.server import keys

pytestmark = pytest.mark.anyio

PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


async def test_a_token_url_is_told_to_send_a_bearer_key(
    server_factory: Callable[..., Any], tmp_path: Path
) -> None:
    keys_file = tmp_path / "keys.txt"
    keys.add(keys_file, "laptop", "alice", read_only=False)
    async with server_factory(keys_file=keys_file) as srv:
        async with httpx2.AsyncClient(timeout=10) as client:
            for method, path in (
                ("POST", "/mcp/alice"),
                ("GET", "/mcp/alice/sse"),
                ("POST", "/mcp/alice/messages/"),
            ):
                response = await client.request(method, f"{srv.url}{path}", json=PING)
                message = response.json()["error"]["message"]
                assert response.status_code == 404, (path, message)
                assert "Authorization: Bearer" in message and "memvault keys add" in message
                assert "/mcp/<token>" not in message and "alice" not in message
            missing = await client.post(f"{srv.url}/mcp", json=PING)
            assert missing.status_code == 401 and "memvault keys add" in missing.json()["error"]["message"]


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/.well-known/oauth-protected-resource"),
        ("GET", "/.well-known/oauth-protected-resource/mcp"),
        ("GET", "/.well-known/oauth-authorization-server"),
        ("GET", "/.well-known/oauth-authorization-server/mcp"),
        ("GET", "/.well-known/openid-configuration"),
        ("POST", "/register"),
    ],
)
async def test_oauth_discovery_probes_learn_that_the_server_takes_keys(
    server_factory: Callable[..., Any], tmp_path: Path, method: str, path: str
) -> None:
    keys_file = tmp_path / "keys.txt"
    keys.add(keys_file, "laptop", "alice", read_only=False)
    async with server_factory(keys_file=keys_file) as srv:
        async with httpx2.AsyncClient(timeout=10) as client:
            response = await client.request(method, f"{srv.url}{path}", json={"client_name": "x"})
    # No OAuth here: no metadata (404, RFC 9728 and RFC 8414), no registration, and the reason.
    assert response.status_code == 404
    body = response.json()
    assert body["error"] == "invalid_request"
    assert "OAuth" in body["error_description"] and "Authorization: Bearer" in body["error_description"]
    assert "memvault keys add" in body["error_description"]


async def test_without_keys_an_oauth_probe_is_told_no_sign_in_is_needed(
    server_factory: Callable[..., Any],
) -> None:
    async with server_factory() as srv:
        async with httpx2.AsyncClient(timeout=10) as client:
            response = await client.get(f"{srv.url}/.well-known/oauth-protected-resource/mcp/alice")
    assert response.status_code == 404
    assert "/mcp/<token>" in response.json()["error_description"]
