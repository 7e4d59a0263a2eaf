"""The whole vault in its files, end to end over MCP: a git clone, a copy without .memvault/ and a
pull bring sessions and the graph along; hand-made notes are never rewritten or moved."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from conftest import Running, run_server, wait_for
from gitrepo import GIT, call_ok, git

from memvault.config import Settings
from memvault.records import sync
from memvault.records.graph import Entity, KnowledgeGraph
from memvault.records.sidecar import Sidecar
from memvault.records.summaries import SessionSummaries

pytestmark = pytest.mark.anyio
TOKEN = "alice"
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")


async def fill(srv: Running) -> None:
    async with srv.session(TOKEN) as s:
        await call_ok(srv, s, "write_memory", title="Deploy notes", content="Blue/green on Fridays.")
        await call_ok(srv, s, "upsert_summary", sessionId="standup", summary="Day one.", title="Standup")
        for day in ("Day two.", "Day three."):
            await call_ok(srv, s, "append_summary", sessionId="standup", content=day)
        await call_ok(srv, s, "update_summary_metadata", sessionId="standup", tags=["team"])
        await call_ok(srv, s, "upsert_summary", sessionId="Retro / March", summary="What went well.")
        await call_ok(
            srv,
            s,
            "create_entities",
            entities=[
                {"name": "Alice", "entityType": "person", "observations": ["likes tea"]},
                {"name": "Acme", "entityType": "company", "observations": []},
            ],
        )
        await call_ok(
            srv,
            s,
            "create_relations",
            relations=[{"from": "Alice", "to": "Acme", "relationType": "works_at"}],
        )
        await call_ok(
            srv, s, "add_observations", observations=[{"entityName": "Alice", "contents": ["plays chess"]}]
        )


async def everything(srv: Running) -> dict[str, str]:
    """What a client sees of sessions and the graph (and the memories, for good measure)."""
    async with srv.session(TOKEN) as s:
        return {
            "standup": await call_ok(srv, s, "get_session_history", sessionId="standup"),
            "retro": await call_ok(srv, s, "get_session_history", sessionId="Retro / March"),
            "list": await call_ok(srv, s, "list_summaries"),
            "graph": await call_ok(srv, s, "read_graph"),
            "memories": await call_ok(srv, s, "list_memory_titles"),
        }


@pytest.mark.slow
@needs_git
async def test_a_git_clone_and_a_copy_without_the_sidecar_serve_every_session_and_the_graph(
    make_settings: Any, vault_root: Path, tmp_path: Path
) -> None:
    async with run_server(make_settings()) as srv:
        await fill(srv)
        seen = await everything(srv)
    assert "3 versions" in seen["list"] and "Alice" in seen["graph"]
    await git(vault_root, "init", "-q")
    await git(vault_root, "add", "-A")
    await git(vault_root, "commit", "-q", "-m", "vault")
    clone = tmp_path / "clone"
    await git(tmp_path, "clone", "-q", str(vault_root), str(clone))
    assert not (clone / TOKEN / ".memvault").exists()
    copy = tmp_path / "copy"
    shutil.copytree(vault_root, copy, ignore=shutil.ignore_patterns(".memvault", ".git"))
    for root in (clone, copy):
        async with run_server(Settings(root=root)) as other:
            assert await everything(other) == seen, root.name


@pytest.mark.slow
@needs_git
async def test_a_pull_brings_a_graph_entity_and_a_session_to_a_running_server(
    make_settings: Any, vault_root: Path, tmp_path: Path
) -> None:
    async with run_server(make_settings()) as srv:
        await fill(srv)
        await git(vault_root, "init", "-q")
        await git(vault_root, "add", "-A")
        await git(vault_root, "commit", "-q", "-m", "vault")
        laptop = tmp_path / "laptop"
        await git(tmp_path, "clone", "-q", str(vault_root), str(laptop))

        def work_on_the_laptop() -> None:  # another machine's memvault, writing its files
            folder = laptop / TOKEN
            with Sidecar.open(folder) as sidecar:
                sync.sync(sidecar, folder)
                files = sync.GraphFile(folder)
                KnowledgeGraph(sidecar, max_chars=1000, files=files).create_entities(
                    [Entity("Zoe", "person")]
                )
                sessions = SessionSummaries(sidecar, max_chars=1000, files=sync.SessionFiles(folder))
                sessions.upsert("from-laptop", "Written on the laptop.")

        await anyio.to_thread.run_sync(work_on_the_laptop)
        await git(laptop, "add", "-A")
        await git(laptop, "commit", "-q", "-m", "laptop")
        await git(vault_root, "pull", "-q", "--ff-only", str(laptop), "HEAD")

        async with srv.session(TOKEN) as s:

            async def both_served() -> bool:
                found = await call_ok(srv, s, "search_nodes", query="Zoe")
                err, summary = await srv.call(s, "get_summary", sessionId="from-laptop")
                return "Zoe" in found and not err and "Written on the laptop." in summary

            await wait_for(both_served, timeout=2.0, interval=0.05)
            # ... and the server's own data is all still there, and it writes on top of the pull.
            assert "3 versions" in await call_ok(srv, s, "list_summaries")
            await call_ok(
                srv, s, "add_observations", observations=[{"entityName": "Zoe", "contents": ["back home"]}]
            )
        rows = [json.loads(line) for line in (vault_root / TOKEN / "graph.jsonl").read_text().splitlines()]
        assert {
            "type": "entity",
            "name": "Zoe",
            "entityType": "person",
            "observations": ["back home"],
        } in rows


@pytest.mark.slow
async def test_reads_recall_and_sweeps_never_rewrite_or_move_hand_made_notes(
    make_settings: Any, vault_root: Path
) -> None:
    folder = vault_root / TOKEN
    folder.mkdir()
    for i in range(120):
        (folder / f"note-{i:03d}.md").write_text(
            f"# Note {i}\n\nA hand-written note about topic{i} and otters.\n"
        )
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    async with run_server(
        make_settings(capacity=50, evict_interval_hours=0, ttl_p2_days=0, evict_grace_hours=0)
    ) as srv:
        async with srv.session(TOKEN) as s:
            listed = await call_ok(srv, s, "list_memory_titles")
            assert len([line for line in listed.splitlines() if line.startswith("note-")]) == 120
            for query in ("otters", "topic7", "note 42"):
                await call_ok(srv, s, "read_memory", query=query)
            await call_ok(srv, s, "read_memory", filenames=["note-001.md", "note-119.md"])
            await call_ok(srv, s, "recall", query="what about otters?")
            await call_ok(srv, s, "read_memory")
            swept = await call_ok(srv, s, "evict_memories")
            await srv.app.state.service.idle()
        assert not (folder / "archive").exists(), swept
    after = {p.name: p.read_bytes() for p in folder.iterdir() if not p.name.startswith(".")}
    assert after == before


@pytest.mark.slow
async def test_the_session_tools_say_when_a_sessions_file_is_conflicted(
    make_settings: Any, vault_root: Path
) -> None:
    async with run_server(make_settings()) as srv, srv.session(TOKEN) as s:
        await call_ok(srv, s, "upsert_summary", sessionId="plan", summary="Step one.")
        history = vault_root / TOKEN / "sessions" / "plan.history.jsonl"
        history.write_text(history.read_text() + "<<<<<<< HEAD\n=======\n>>>>>>> laptop\n")
        summary = await call_ok(srv, s, "get_summary", sessionId="plan")
        assert "Step one." in summary and "sessions/plan.history.jsonl holds git conflict markers" in summary
        assert "conflict markers" in await call_ok(srv, s, "get_session_history", sessionId="plan")
        err, reply = await srv.call(s, "append_summary", sessionId="plan", content="Step two.")
        assert err and "sessions/plan.history.jsonl" in reply and "resolve" in reply
        await call_ok(srv, s, "upsert_summary", sessionId="other", summary="All clear.")
        assert "conflict" not in await call_ok(srv, s, "get_summary", sessionId="other")
