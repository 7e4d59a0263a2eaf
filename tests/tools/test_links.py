"""Links planted in a vault are never read or written through: every resource and every tool that
opens a file, against a file linked to /etc/passwd or out of the vault, a link to another vault's
files, a linked folder and a token folder that is a link (issue 46, 1)."""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import pytest
from mcp.client.client import Client
from mcp.shared.exceptions import MCPError

pytestmark = [pytest.mark.anyio]

SECRETS = ("root:x:0", "OUTSIDESECRET", "BOBSECRET", "BobSecretEntity")
PASSWD = Path("/etc/passwd")


def plant(vault_root: Path, tmp_path: Path) -> dict[str, bytes]:
    """Bob's vault, a folder outside the root, and alice's, carol's and dave's vaults with links
    into them; returns what every file a link leads to holds, to check nothing wrote through."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "notes.md").write_text("# Outside\n\nOUTSIDESECRET zebrafinch\n", encoding="utf-8")
    (outside / "folder").mkdir()
    (outside / "folder" / "inner.md").write_text(
        "# Inner\n\nOUTSIDESECRET inner zebrafinch\n", encoding="utf-8"
    )

    bob = vault_root / "bob"
    (bob / "sessions").mkdir(parents=True)
    (bob / "bob.md").write_text("# Bob\n\nBOBSECRET memory zebrafinch\n", encoding="utf-8")
    (bob / "sessions" / "secret.md").write_text(
        "# Secret\n\nBOBSECRET session zebrafinch\n", encoding="utf-8"
    )
    (bob / "sessions" / "secret.history.jsonl").write_text(
        '{"version": 1, "summary": "BOBSECRET history", "updatedAt": "2026-01-01T00:00:00.000Z"}\n',
        encoding="utf-8",
    )
    (bob / "graph.jsonl").write_text(
        '{"type": "entity", "name": "BobSecretEntity", "entityType": "x", "observations": ["BOBSECRET"]}\n',
        encoding="utf-8",
    )

    alice = vault_root / "alice"
    (alice / "sessions").mkdir(parents=True)
    (alice / "archive").mkdir()
    (alice / "own.md").write_text("# Own\n\nalice's own memory\n", encoding="utf-8")
    links = {
        "sessions/passwd.md": PASSWD,
        "sessions/outside.md": outside / "notes.md",
        "sessions/outside.history.jsonl": outside / "notes.md",
        "sessions/bobs.md": bob / "sessions" / "secret.md",
        "sessions/bobs.history.jsonl": bob / "sessions" / "secret.history.jsonl",
        "passwd.md": PASSWD,
        "outside.md": outside / "notes.md",
        "peek.md": bob / "bob.md",
        "archive/arch.md": outside / "notes.md",
        "archive/bobarch.md": bob / "bob.md",
        "linked": outside / "folder",  # a folder link
        "bobfolder": bob,
    }
    for name, target in links.items():
        os.symlink(target, alice / name)
    (vault_root / "carol").symlink_to(bob, target_is_directory=True)  # a token folder that is a link
    dave = vault_root / "dave"
    dave.mkdir()
    (dave / "graph.jsonl").symlink_to(bob / "graph.jsonl")
    (dave / "sessions").symlink_to(bob / "sessions", target_is_directory=True)  # a folder on the way
    return {str(p): p.read_bytes() for p in [*outside.rglob("*"), *bob.rglob("*")] if p.is_file()}


def leaked(text: str) -> list[str]:
    return [secret for secret in SECRETS if secret in text]


async def outcome(call: Awaitable[Any]) -> str:
    """What a client reads back from a tool call or a resource read, error or not."""
    try:
        result = await call
    except MCPError as exc:
        return f"error {exc.error.code}: {exc.error.message}"
    if hasattr(result, "contents"):
        return "\n".join(getattr(c, "text", "") for c in result.contents)
    if hasattr(result, "resources"):
        return "\n".join(f"{r.uri} {r.name} {r.title} {r.description}" for r in result.resources)
    return "\n".join(getattr(c, "text", "") for c in result.content)


TOOL_CALLS: list[tuple[str, str, dict[str, Any]]] = [
    ("alice", "list_memory_titles", {}),
    ("alice", "read_memory", {"filenames": ["passwd.md", "outside.md", "peek.md"]}),
    ("alice", "read_memory", {"filenames": ["linked/inner.md", "bobfolder/bob.md"]}),
    ("alice", "read_memory", {"query": "zebrafinch root"}),
    ("alice", "read_memory", {}),
    ("alice", "search_archive", {"query": "zebrafinch"}),
    ("alice", "recall", {"query": "zebrafinch root", "includeArchive": True}),
    ("alice", "memory_stats", {}),
    ("alice", "update_memory", {"filename": "outside.md", "append": "written through?"}),
    ("alice", "update_memory", {"filename": "peek.md", "content": "written through?"}),
    ("alice", "update_memory", {"filename": "linked/inner.md", "append": "written through?"}),
    ("alice", "delete_memory", {"filename": "peek.md"}),
    ("alice", "delete_memory", {"filename": "linked/inner.md"}),
    ("alice", "restore_memory", {"filename": "arch.md"}),
    ("alice", "restore_memory", {"filename": "bobarch.md"}),
    ("alice", "write_memory", {"title": "bobfolder/bob", "content": "x"}),
    ("alice", "evict_memories", {"dryRun": True}),
    ("alice", "get_summary", {"sessionId": "passwd"}),
    ("alice", "get_summary", {"sessionId": "bobs"}),
    ("alice", "get_summary", {"sessionId": "outside", "version": 1}),
    ("alice", "get_session_history", {"sessionId": "bobs"}),
    ("alice", "get_session_history", {"sessionId": "outside"}),
    ("alice", "list_summaries", {}),
    ("alice", "upsert_summary", {"sessionId": "outside", "summary": "written through?"}),
    ("alice", "append_summary", {"sessionId": "bobs", "content": "written through?"}),
    ("alice", "update_summary_metadata", {"sessionId": "bobs", "title": "written through?"}),
    ("carol", "read_graph", {}),
    ("carol", "list_memory_titles", {}),
    ("carol", "read_memory", {"query": "zebrafinch"}),
    ("carol", "get_summary", {"sessionId": "secret"}),
    ("carol", "list_summaries", {}),
    ("carol", "create_entities", {"entities": [{"name": "E", "entityType": "x", "observations": []}]}),
    ("dave", "read_graph", {}),
    ("dave", "search_nodes", {"query": "Bob"}),
    ("dave", "open_nodes", {"names": ["BobSecretEntity"]}),
    ("dave", "create_entities", {"entities": [{"name": "E", "entityType": "x", "observations": []}]}),
    ("dave", "add_observations", {"observations": [{"entityName": "Ann", "contents": ["y"]}]}),
    ("dave", "get_summary", {"sessionId": "secret"}),
    ("dave", "get_session_history", {"sessionId": "secret"}),
    ("dave", "list_summaries", {}),
    ("dave", "upsert_summary", {"sessionId": "secret", "summary": "written through?"}),
]

RESOURCE_READS = [
    ("alice", "memvault://sessions/passwd"),
    ("alice", "memvault://sessions/outside"),
    ("alice", "memvault://sessions/bobs"),
    ("alice", "memvault://memories/passwd.md"),
    ("alice", "memvault://memories/outside.md"),
    ("alice", "memvault://memories/peek.md"),
    ("alice", "memvault://memories/linked/inner.md"),
    ("alice", "memvault://memories/bobfolder/bob.md"),
    ("alice", "memvault://archive/arch.md"),
    ("alice", "memvault://archive/bobarch.md"),
    ("alice", "memvault://vault"),
    ("carol", "memory://knowledge-graph"),
    ("carol", "memvault://sessions/secret"),
    ("carol", "memvault://memories/bob.md"),
    ("carol", "memvault://vault"),
    ("dave", "memory://knowledge-graph"),
    ("dave", "memvault://sessions/secret"),
]


async def test_no_tool_or_resource_reads_or_writes_through_a_planted_link(
    server_factory, vault_root: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    before = plant(vault_root, tmp_path)
    passwd = PASSWD.read_bytes()
    heard: dict[tuple[str, str], str] = {}
    async with server_factory() as srv:
        for token in ("alice", "carol", "dave"):
            async with Client(srv.mcp_url(token)) as client:
                for who, uri in RESOURCE_READS:  # first: a write may replace a link with a file
                    if who == token:
                        heard[(token, uri)] = await outcome(client.read_resource(uri))
                for who, tool, args in TOOL_CALLS:
                    if who == token:
                        heard[(token, f"{tool} {args}")] = await outcome(client.call_tool(tool, args))
                heard[(token, "resources/list")] = await outcome(client.list_resources())
    assert {k: leaked(v) for k, v in heard.items() if leaked(v)} == {}
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    for text in heard.values():
        assert str(tmp_path) not in text and "Traceback" not in text
    # Nothing was written through a link either.
    for path, data in before.items():
        assert Path(path).read_bytes() == data, path
    assert PASSWD.read_bytes() == passwd
    # A linked memory is refused as leading out of the vault, a linked session, graph or folder as a
    # link: neither as missing.
    assert "points outside your vault" in heard[("alice", "memvault://memories/peek.md")]
    for key in [
        ("alice", "memvault://sessions/passwd"),
        ("alice", "memvault://sessions/bobs"),
        ("alice", "get_summary {'sessionId': 'passwd'}"),
        ("alice", "get_summary {'sessionId': 'bobs'}"),
        ("carol", "memory://knowledge-graph"),
        ("carol", "read_graph {}"),
        ("dave", "memory://knowledge-graph"),
        ("dave", "memvault://sessions/secret"),
        ("dave", "get_summary {'sessionId': 'secret'}"),
    ]:
        assert "symbolic link" in heard[key] and "No session" not in heard[key], (key, heard[key])
