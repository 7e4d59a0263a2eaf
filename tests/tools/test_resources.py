"""Resources, prompts and completion through the real server and the SDK's client, in both protocol eras."""

from __future__ import annotations

import base64
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import pytest
from conftest import wait_for
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp.types import INVALID_PARAMS, PromptReference, ResourceTemplateReference

from memvault.server import keys

pytestmark = [pytest.mark.anyio]

ERAS = ["legacy", "auto"]  # the initialize handshake, and 2026-07-28 (server/discover)
MEMORY_TEMPLATE = "memvault://memories/{+filename}"
ARCHIVE_TEMPLATE = "memvault://archive/{+filename}"
SESSION_TEMPLATE = "memvault://sessions/{sessionId}"


@contextlib.asynccontextmanager
async def connect(srv: Any, token: str, mode: str) -> AsyncIterator[Client]:
    async with Client(srv.mcp_url(token), mode=mode) as client:
        yield client


async def call(client: Client, tool: str, **args: Any) -> str:
    result = await client.call_tool(tool, args)
    text = "\n".join(c.text for c in result.content if hasattr(c, "text"))
    assert not result.is_error, text
    return text


def hand_file(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


async def every_resource(client: Client) -> list[Any]:
    found, cursor = [], None
    while True:
        page = await client.list_resources(cursor=cursor)
        found += page.resources
        cursor = page.next_cursor
        if cursor is None:
            return found


@pytest.mark.parametrize("mode", ERAS)
async def test_a_vault_lists_its_memories_graph_and_sessions_as_resources(server_factory, vault_root, mode):
    async with server_factory() as srv, connect(srv, "alice", mode) as client:
        if mode == "auto":
            assert client.protocol_version == "2026-07-28"
        caps = client.server_capabilities
        assert caps.resources is not None and caps.resources.subscribe and caps.resources.list_changed
        assert caps.prompts is not None and caps.completions is not None
        await call(
            client, "write_memory", title="Deploy notes", content="Postgres on Fridays.", priority="P1"
        )
        await call(client, "upsert_summary", sessionId="standup", summary="We shipped.", title="Standup")
        hand_file(vault_root / "alice", "projects/alpha plan.md", "# Alpha plan\n\nBy hand.")

        async def listing() -> dict[str, Any]:
            found = {r.uri: r for r in await every_resource(client)}
            return found if "memvault://memories/projects/alpha%20plan.md" in found else {}

        listed = await wait_for(listing)  # the watcher indexes the hand-made file
        memory = listed["memvault://memories/deploy-notes.md"]
        path = vault_root / "alice" / "deploy-notes.md"
        assert (memory.name, memory.title, memory.mime_type) == (
            "deploy-notes.md",
            "Deploy notes",
            "text/markdown",
        )
        assert memory.size == path.stat().st_size
        assert memory.annotations is not None and memory.annotations.last_modified is not None
        modified = datetime.strptime(memory.annotations.last_modified, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
            tzinfo=UTC
        )
        assert abs(modified.timestamp() - path.stat().st_mtime) < 0.01
        # A name with a space and a folder: percent-encoded, the slash kept.
        assert listed["memvault://memories/projects/alpha%20plan.md"].title == "Alpha plan"
        assert listed["memvault://sessions/standup"].title == "Standup"
        assert listed["memory://knowledge-graph"].mime_type == "application/json"
        # Titled as the official memory server titles it, so clients show one name for both.
        assert listed["memory://knowledge-graph"].title == "Knowledge Graph"
        assert "memvault://vault" in listed
        templates = {t.uri_template for t in (await client.list_resource_templates()).resource_templates}
        assert templates == {MEMORY_TEMPLATE, ARCHIVE_TEMPLATE, SESSION_TEMPLATE}


@pytest.mark.parametrize("mode", ERAS)
async def test_reading_resources_gives_the_files_and_records_no_access(server_factory, vault_root, mode):
    async with server_factory() as srv, connect(srv, "alice", mode) as client:
        await call(client, "write_memory", title="Deploy notes", content="Postgres on Fridays.")
        await call(client, "upsert_summary", sessionId="standup", summary="We shipped the **alpha**.")
        await call(
            client,
            "create_entities",
            entities=[{"name": "Ann", "entityType": "person", "observations": ["runs deploys"]}],
        )
        folder = vault_root / "alice"
        hand_file(folder, "archive/old plan.md", "# Old plan\n\nArchived long ago.")
        before = (folder / "deploy-notes.md").read_bytes()

        read = await client.read_resource("memvault://memories/deploy-notes.md")
        assert read.contents[0].text == before.decode() and read.contents[0].mime_type == "text/markdown"
        archived = await client.read_resource("memvault://archive/old%20plan.md")
        assert "Archived long ago." in archived.contents[0].text
        session = await client.read_resource("memvault://sessions/standup")
        assert "We shipped the **alpha**." in session.contents[0].text
        graph = json.loads((await client.read_resource("memory://knowledge-graph")).contents[0].text)
        assert graph["entities"][0]["name"] == "Ann" and graph["relations"] == []

        async def overview() -> str:
            text = (await client.read_resource("memvault://vault")).contents[0].text
            return text if "1 archived memory" in text else ""

        text = await wait_for(overview)  # once the watcher has seen the hand-made file
        assert "- 1 memory:" in text and "- 1 session summary:" in text
        await srv.app.state.service.idle()
        assert (folder / "deploy-notes.md").read_bytes() == before  # no lastAccessedAt written back


@pytest.mark.parametrize("mode", ERAS)
async def test_unreadable_resources_say_what_to_do_and_reveal_nothing(server_factory, vault_root, mode):
    async with server_factory() as srv, connect(srv, "alice", mode) as client:
        await call(client, "write_memory", title="Secret", content="alice only")
        async with connect(srv, "bob", mode) as bob:
            for uri, words in [
                ("memvault://memories/secret.md", "list_memory_titles"),  # alice's: bob has none
                ("memvault://memories/../alice/secret.md", "Invalid filename"),
                ("memvault://sessions/nope", "list_summaries"),
                ("file:///etc/passwd", "resources/list"),
            ]:
                with pytest.raises(MCPError) as caught:
                    await bob.read_resource(uri)
                message = str(caught.value)
                assert words in message, message
                assert str(vault_root) not in message and "Traceback" not in message
            assert all("secret" not in r.uri for r in await every_resource(bob))
        with pytest.raises(MCPError, match="cursor"):
            await client.list_resources(cursor="not-ours")


@pytest.mark.parametrize("nested", ["[" * 250_000, "[" * 5_000 + "]" * 5_000])
async def test_a_huge_or_deeply_nested_cursor_is_invalid_params(server_factory, caplog, nested):
    """Issue 46, 7: a 500 KB nested cursor was an internal error with a traceback in the log."""
    cursor = base64.urlsafe_b64encode(nested.encode()).decode()
    async with server_factory() as srv, connect(srv, "alice", "auto") as client:
        with pytest.raises(MCPError) as caught:
            await client.list_resources(cursor=cursor)
        assert caught.value.error.code == INVALID_PARAMS and "cursor" in caught.value.error.message
        assert (await client.list_resources()).resources  # the server goes on
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_resources_list_pages_through_a_large_vault(server_factory, vault_root):
    folder = vault_root / "alice"
    for i in range(1_234):
        hand_file(folder, f"notes/n{i:04d}.md", f"# Note {i}\n\nBody {i}.")
    async with server_factory() as srv, connect(srv, "alice", "auto") as client:
        first = await client.list_resources()
        assert first.next_cursor is not None and len(first.resources) < 1_234
        listed = [r.uri for r in await every_resource(client)]
    memories = [u for u in listed if u.startswith("memvault://memories/")]
    assert len(memories) == len(set(memories)) == 1_234
    assert memories == sorted(memories)


async def test_a_read_only_key_lists_and_reads_every_resource(server_factory, tmp_path):
    keys_file = tmp_path / "keys.txt"
    writer = keys.add(keys_file, "agent", "alice", read_only=False)
    viewer = keys.add(keys_file, "viewer", "alice", read_only=True)
    async with server_factory(keys_file=keys_file) as srv:
        for key in (writer, viewer):
            async with (
                httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=30) as http,
                Client(streamable_http_client(f"{srv.url}/mcp", http_client=http), mode="legacy") as client,
            ):
                if key == writer:
                    await call(client, "write_memory", title="Deploy notes", content="Postgres on Fridays.")
                    continue
                uris = {r.uri for r in await every_resource(client)}
                assert "memvault://memories/deploy-notes.md" in uris
                read = await client.read_resource("memvault://memories/deploy-notes.md")
                assert "Postgres on Fridays." in read.contents[0].text
                prompt = await client.get_prompt("recall-before-task", {"topic": "postgres"})
                assert "deploy-notes.md" in prompt.messages[0].content.text
                # The prompts that ask for changes are not offered to a key that cannot make them.
                assert [p.name for p in (await client.list_prompts()).prompts] == ["recall-before-task"]
                with pytest.raises(MCPError, match="read-only"):
                    await client.get_prompt("save-session-learnings", {})


# ---------------------------------------------------------------------------- prompts


@pytest.mark.parametrize("mode", ERAS)
async def test_prompts_are_listed_with_titles_and_arguments(server_factory, mode):
    async with server_factory() as srv, connect(srv, "alice", mode) as client:
        prompts = {p.name: p for p in (await client.list_prompts()).prompts}
    assert set(prompts) == {"recall-before-task", "save-session-learnings", "review-stale-memories"}
    assert all(p.title and p.description for p in prompts.values())
    assert [(a.name, a.required) for a in prompts["recall-before-task"].arguments or []] == [("topic", True)]


@pytest.mark.parametrize("mode", ERAS)
async def test_recall_before_a_task_shows_matching_memories_and_the_tools_to_call(server_factory, mode):
    async with server_factory() as srv, connect(srv, "alice", mode) as client:
        await call(client, "write_memory", title="Postgres tuning", content="Vacuum analyze nightly.")
        await call(client, "write_memory", title="Grocery list", content="Oat milk.")
        prompt = await client.get_prompt("recall-before-task", {"topic": "postgres vacuum"})
    text = prompt.messages[0].content.text
    assert prompt.messages[0].role == "user"
    assert "postgres-tuning.md" in text and "memvault://memories/postgres-tuning.md" in text
    assert "grocery" not in text.lower()
    assert "recall(query='postgres vacuum')" in text and "read_memory(filenames=" in text


async def test_save_session_learnings_names_only_the_tools_served(server_factory):
    async with server_factory(tools=("memories",)) as srv, connect(srv, "alice", "auto") as client:
        lean = (await client.get_prompt("save-session-learnings", {})).messages[0].content.text
    async with server_factory() as srv, connect(srv, "alice", "auto") as client:
        full = await client.get_prompt("save-session-learnings", {"sessionId": "s-42", "focus": "the deploy"})
        full_text = full.messages[0].content.text
    assert "write_memory(" in lean and "upsert_summary" not in lean and "recall(" not in lean
    assert "upsert_summary(sessionId='s-42'" in full_text and "the deploy" in full_text
    assert "create_entities" in full_text


async def test_review_stale_memories_lists_the_ones_unread_longest(server_factory, vault_root):
    folder = vault_root / "alice"
    for name, accessed in [("ancient", "2020-01-01"), ("old", "2023-06-01"), ("fresh", None)]:
        at = accessed or datetime.now(UTC).strftime("%Y-%m-%d")
        hand_file(
            folder,
            f"{name}.md",
            f"---\npriority: P1\ncreatedAt: {at}T00:00:00.000Z\nlastAccessedAt: {at}T00:00:00.000Z\n---\n"
            f"# {name.title()}\n\nText.",
        )
    async with server_factory() as srv, connect(srv, "alice", "auto") as client:
        text = (await client.get_prompt("review-stale-memories", {"days": "90"})).messages[0].content.text
        with pytest.raises(MCPError, match="whole number"):
            await client.get_prompt("review-stale-memories", {"days": "soon"})
        with pytest.raises(MCPError, match="needs the argument 'topic'"):
            await client.get_prompt("recall-before-task", {})
        with pytest.raises(MCPError, match="prompts/list"):
            await client.get_prompt("nope", {})
    assert "2 memories have not been read for 90 days" in text
    assert text.index("ancient.md") < text.index("old.md") and "fresh.md" not in text
    assert "delete_memory" in text and "update_memory" in text


# ---------------------------------------------------------------------------- completion


@pytest.mark.parametrize("mode", ERAS)
async def test_completion_offers_filenames_session_ids_and_entity_names(server_factory, vault_root, mode):
    async with server_factory() as srv, connect(srv, "alice", mode) as client:
        for title in ("Deploy notes", "Deploy checklist", "Grocery list"):
            await call(client, "write_memory", title=title, content=f"{title} text.")
        hand_file(vault_root / "alice", "archive/deploy-2019.md", "# Deploy 2019\n\nOld.")
        await call(client, "upsert_summary", sessionId="standup-monday", summary="x")
        await call(client, "upsert_summary", sessionId="retro", summary="y")
        await call(
            client,
            "create_entities",
            entities=[
                {"name": "Postgres", "entityType": "system", "observations": []},
                {"name": "Python", "entityType": "language", "observations": []},
            ],
        )

        async def complete(ref: Any, name: str, value: str) -> list[str]:
            return (await client.complete(ref, {"name": name, "value": value})).completion.values

        memories = ResourceTemplateReference(type="ref/resource", uri=MEMORY_TEMPLATE)
        assert await complete(memories, "filename", "dep") == ["deploy-checklist.md", "deploy-notes.md"]
        assert await complete(memories, "filename", "cery") == ["grocery-list.md"]  # contained, not prefix
        archive = ResourceTemplateReference(type="ref/resource", uri=ARCHIVE_TEMPLATE)
        # The hand-made archived file is indexed once the watcher has seen it.
        assert await wait_for(lambda: complete(archive, "filename", "dep")) == ["deploy-2019.md"]
        sessions = ResourceTemplateReference(type="ref/resource", uri=SESSION_TEMPLATE)
        assert await complete(sessions, "sessionId", "st") == ["standup-monday"]
        save = PromptReference(type="ref/prompt", name="save-session-learnings")
        assert await complete(save, "sessionId", "") == ["retro", "standup-monday"]
        recall = PromptReference(type="ref/prompt", name="recall-before-task")
        assert await complete(recall, "topic", "p") == ["Postgres", "Python"]
        assert await complete(recall, "unknown", "p") == []


async def test_completion_is_bounded_in_a_large_vault(server_factory, vault_root):
    for i in range(250):
        hand_file(vault_root / "alice", f"n{i:03d}.md", f"# N {i}\n")
    async with server_factory() as srv, connect(srv, "alice", "auto") as client:
        ref = ResourceTemplateReference(type="ref/resource", uri=MEMORY_TEMPLATE)
        done = (await client.complete(ref, {"name": "filename", "value": "n"})).completion
    assert len(done.values) == 100 and done.has_more is True
    assert done.values == sorted(done.values) and done.values[0] == "n000.md"


def test_every_tool_has_a_title_and_all_four_hints(make_settings: Callable[..., Any]) -> None:
    import anyio

    from memvault.ops.service import Service
    from memvault.tools import build_server

    settings = make_settings()
    server = build_server(Service(settings), settings)
    tools = anyio.run(server.list_tools)
    assert len(tools) >= 25
    for tool in tools:
        hints = tool.annotations
        assert tool.title, tool.name
        assert hints is not None, tool.name
        values = (hints.read_only_hint, hints.destructive_hint, hints.idempotent_hint, hints.open_world_hint)
        assert None not in values, tool.name
    by_name = {t.name: t.annotations for t in tools}
    assert by_name["update_memory"].idempotent_hint is False  # an append appends again
    assert by_name["delete_memory"].destructive_hint is True
    assert by_name["restore_memory"].destructive_hint is False


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_the_conformance_suites_calls_on_memvaults_own_resources_and_prompts(
    server_factory, vault_root
):
    """The suite's resources-*, prompts-* and completion scenarios read its reference server's
    test:// fixtures; the same calls, in the same era (the handshake), on what memvault serves."""
    hand_file(vault_root / "alice", "deploy-notes.md", "# Deploy notes\n\nPostgres on Fridays.\n")
    async with server_factory() as srv, connect(srv, "alice", "legacy") as client:
        assert client.protocol_version == "2025-11-25"
        listed = (await client.list_resources()).resources  # resources-list
        assert "memvault://memories/deploy-notes.md" in {r.uri for r in listed}
        text = (await client.read_resource("memvault://memories/deploy-notes.md")).contents[0]  # read-text
        assert text.mime_type == "text/markdown" and "Postgres on Fridays." in text.text
        templates = (await client.list_resource_templates()).resource_templates  # templates-read
        uri = next(t.uri_template for t in templates if t.name == "memory").replace(
            "{+filename}", "deploy-notes.md"
        )
        assert "Postgres" in (await client.read_resource(uri)).contents[0].text
        assert await client.subscribe_resource(uri) is not None  # resources-subscribe
        assert await client.unsubscribe_resource(uri) is not None  # resources-unsubscribe
        simple = await client.get_prompt("save-session-learnings", {})  # prompts-get-simple
        assert simple.messages[0].role == "user" and "write_memory(" in simple.messages[0].content.text
        with_args = await client.get_prompt("recall-before-task", {"topic": "postgres"})  # get-with-args
        assert "deploy-notes.md" in with_args.messages[0].content.text
        ref = ResourceTemplateReference(type="ref/resource", uri=MEMORY_TEMPLATE)  # completion-complete
        done = await client.complete(ref, {"name": "filename", "value": "dep"})
        assert done.completion.values == ["deploy-notes.md"]
