"""Bearer keys: the key names the vault and its scope; read-only keys change nothing; revocation is live."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import keyed, text_of, wait_for
from mcp.client.session import ClientSession
from mcp.client.sse import sse_client

from memvault.server import keys

pytestmark = pytest.mark.anyio


def vault_hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".memvault" not in p.relative_to(folder).parts
    }


WRITES: dict[str, dict[str, Any]] = {
    "write_memory": {"title": "New", "content": "x"},
    "update_memory": {"filename": "plan.md", "content": "changed"},
    "delete_memory": {"filename": "plan.md"},
    "restore_memory": {"filename": "plan.md"},
    "evict_memories": {},
    "upsert_summary": {"sessionId": "s", "summary": "changed"},
    "append_summary": {"sessionId": "s", "content": "more"},
    "update_summary_metadata": {"sessionId": "s", "title": "t"},
    "create_entities": {"entities": [{"name": "Bob", "entityType": "person", "observations": []}]},
    "create_relations": {"relations": [{"from": "Alice", "to": "Alice", "relationType": "is"}]},
    "add_observations": {"observations": [{"entityName": "Alice", "contents": ["new"]}]},
    "delete_entities": {"entityNames": ["Alice"]},
    "delete_observations": {"deletions": [{"entityName": "Alice", "observations": ["Speaks Dutch"]}]},
    "delete_relations": {"relations": [{"from": "Alice", "to": "Alice", "relationType": "is"}]},
}


async def test_a_read_only_key_cannot_change_a_byte(
    server_factory: Callable[..., Any], vault_root: Path, tmp_path: Path
) -> None:
    keys_file = tmp_path / "keys.txt"
    writer = keys.add(keys_file, "agent", "alice", read_only=False)
    viewer = keys.add(keys_file, "viewer", "alice", read_only=True)
    async with server_factory(keys_file=keys_file) as srv:
        async with keyed(srv.url, writer) as s:
            for tool, args in {
                "write_memory": {"title": "Plan", "content": "Ship it."},
                "upsert_summary": {"sessionId": "s", "summary": "So far."},
                "create_entities": {
                    "entities": [{"name": "Alice", "entityType": "p", "observations": ["Speaks Dutch"]}]
                },
            }.items():
                result = await s.call_tool(tool, args)
                assert not result.is_error, text_of(result)
        before = vault_hashes(vault_root / "alice")
        async with keyed(srv.url, viewer) as s:
            listed = {t.name for t in (await s.list_tools()).tools}
            assert "read_memory" in listed and "recall" in listed and not listed & set(WRITES)
            for tool, args in WRITES.items():
                result = await s.call_tool(tool, args)
                assert result.is_error and "read-only" in text_of(result), (tool, text_of(result))
            result = await s.call_tool("read_memory", {"filenames": ["plan.md"]})
            assert not result.is_error and "Ship it." in text_of(result)
        assert vault_hashes(vault_root / "alice") == before


async def test_keys_are_required_revocable_at_once_and_never_shown(
    server_factory: Callable[..., Any], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    keys_file = tmp_path / "keys.txt"
    key = keys.add(keys_file, "agent", "alice", read_only=False)
    async with server_factory(keys_file=keys_file) as srv:
        async with httpx2.AsyncClient(timeout=10) as client:
            body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
            missing = await client.post(f"{srv.url}/mcp", json=body)
            assert missing.status_code == 401 and missing.headers["www-authenticate"].startswith("Bearer")
            wrong = await client.post(f"{srv.url}/mcp", json=body, headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"]
            assert wrong.json()["error"]["code"] == -32600
            # With a keys file, the vault's name no longer works as a URL.
            assert (await client.post(f"{srv.url}/mcp/alice", json=body)).status_code == 404
            health = (await client.get(f"{srv.url}/healthz")).text
        replies = []
        async with keyed(srv.url, key) as s:
            result = await s.call_tool("write_memory", {"title": "Note", "content": "hello"})
            replies.append(text_of(result))
            assert not result.is_error
            keys.revoke(keys_file, "agent")

        async def new_session_refused() -> bool:
            async with httpx2.AsyncClient(timeout=10) as client:
                response = await client.post(
                    f"{srv.url}/mcp",
                    json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
                    headers={"Authorization": f"Bearer {key}"},
                )
                return response.status_code == 401

        await wait_for(new_session_refused, timeout=1.0)
    assert key not in caplog.text and key not in health and all(key not in r for r in replies)
    assert key not in keys_file.read_text() and hashlib.sha256(key.encode()).hexdigest() not in caplog.text


@pytest.mark.slow
async def test_legacy_sse_takes_a_bearer_key_and_keeps_the_vault_out_of_the_url(
    server_factory: Callable[..., Any], tmp_path: Path, vault_root: Path
) -> None:
    keys_file = tmp_path / "keys.txt"
    key = keys.add(keys_file, "laptop", "alice", read_only=False)
    async with server_factory(keys_file=keys_file) as srv:
        async with sse_client(f"{srv.url}/sse", headers={"Authorization": f"Bearer {key}"}) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                error, reply = await srv.call(session, "write_memory", title="Over SSE", content="hello")
                assert not error, reply
        assert (vault_root / "alice" / "over-sse.md").exists()
        async with httpx2.AsyncClient(timeout=10) as client:
            assert (await client.get(f"{srv.url}/sse")).status_code == 401
