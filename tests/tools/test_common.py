"""What every tool shares: how one is declared and listed, its errors, and the reply budgets."""

from __future__ import annotations

import errno
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import pytest
from inmemory import served, text_of
from mcp import Client
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import Field

from memvault.config import Settings
from memvault.errors import InvalidArgument, MemvaultError
from memvault.records.graphsearch import Entity, Graph, Relation
from memvault.tools.common import (
    CHANGES,
    READ_ONLY,
    Reply,
    Tools,
    fit_names,
    fit_prefix,
    graph_result,
    joined,
    list_result,
    outcome,
    read_only,
    request_token,
    text,
    tool,
)

TESTS = Path(__file__).resolve().parents[1]


def calls_in_tests() -> str:
    """Every test module's text (this one's too: it names no tool of memvault's in a call)."""
    return "\n".join(path.read_text(encoding="utf-8") for path in sorted(TESTS.rglob("*.py")))


def called(name: str, source: str) -> bool:
    """Whether ``source`` calls tool ``name`` over MCP, through a function whose name holds "call":
    `call_tool("name"`, `srv.call(session, "name"`, `call_json(client, "name"`, and the like."""
    return re.search(rf"""\w*call\w*\(\s*(?:[\w.]+\s*,\s*)?["']{name}["']""", source) is not None


@pytest.mark.anyio
async def test_every_tool_has_a_title_a_description_annotations_and_a_test_that_calls_it(
    make_settings: Callable[..., Settings],
) -> None:
    async with served(make_settings(embedder="hash", watch=False)) as client:
        listed = (await client.list_tools()).tools
    assert len(listed) >= 25
    source = calls_in_tests()
    problems = []
    for listing in listed:
        if not listing.title:
            problems.append(f"{listing.name} has no title: declare it with @tool(title, annotations)")
        if not listing.description:
            problems.append(f"{listing.name} has no description: give its method a docstring")
        hints = listing.annotations
        if hints is None or None in (
            hints.read_only_hint,
            hints.destructive_hint,
            hints.idempotent_hint,
            hints.open_world_hint,
        ):
            problems.append(f"{listing.name} lacks annotations: pass one of tools.common's (READ_ONLY, ...)")
        if not called(listing.name, source):
            problems.append(f"{listing.name} is called by no test: add one to tests/tools/ that calls it")
    assert not problems, "\n".join(problems)


def test_a_test_that_names_a_tool_without_calling_it_does_not_count() -> None:
    assert called("read_graph", 'await srv.call(session, "read_graph")')
    assert called("read_graph", "result = await client.call_tool('read_graph', {})")
    assert not called("read_graph", 'assert "read_graph" in listed')
    assert not called("read_graph", 'await call(client, "read_graph_more")')


# ---------------------------------------------------------------------------- declaring tools


class Echo(Tools):
    """A group of two tools, over a part of its own (a prefix), as a memvault group is over the store."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix

    @tool("Echo words", READ_ONLY)
    async def echo(
        self, ctx: Context, words: Annotated[str, Field(description="What to say back.")], times: int = 1
    ) -> CallToolResult:
        """Say the words back.

        Indented lines of a docstring reach the client without their indentation."""
        return text(self.prefix + " ".join([words] * times))

    def helper(self) -> str:  # not a tool: it is not declared with @tool
        return self.prefix

    @tool("Fail", CHANGES)
    async def fail(self, ctx: Context, how: str) -> CallToolResult:
        """Fail as told."""
        if how == "deliberately":
            raise InvalidArgument("how must be politely; nothing was changed.")
        if how == "disk":
            raise OSError(errno.ENOSPC, "No space left on device", "/srv/vault/alice/x.md")
        raise RuntimeError("at /srv/vault/alice/secret.md")


def echo_server() -> MCPServer:
    server = MCPServer(name="echo")
    Echo("> ").register(server)
    return server


@pytest.mark.anyio
async def test_a_declared_method_is_listed_by_its_name_title_annotations_and_docstring() -> None:
    async with Client(echo_server()) as client:
        listed = (await client.list_tools()).tools
    assert [t.name for t in listed] == ["echo", "fail"]  # as the class defines them; helper is no tool
    echo = listed[0]
    assert echo.title == "Echo words"
    assert echo.annotations == READ_ONLY
    assert echo.description == (
        "Say the words back.\n\nIndented lines of a docstring reach the client without their indentation."
    )
    # Neither self nor the context is an argument.
    assert set(echo.input_schema["properties"]) == {"words", "times"}
    assert echo.input_schema["required"] == ["words"]


@pytest.mark.anyio
async def test_a_declared_method_runs_on_its_group_and_replies_text() -> None:
    async with Client(echo_server()) as client:
        result = await client.call_tool("echo", {"words": "hi", "times": 2})
    assert not result.is_error
    assert text_of(result) == "> hi hi"


@pytest.mark.anyio
async def test_a_deliberate_error_reaches_the_agent_with_its_message() -> None:
    async with Client(echo_server()) as client:
        result = await client.call_tool("fail", {"how": "deliberately"})
    assert result.is_error
    assert text_of(result) == "how must be politely; nothing was changed."


@pytest.mark.anyio
async def test_an_unexpected_error_is_told_without_its_details(caplog: pytest.LogCaptureFixture) -> None:
    async with Client(echo_server()) as client:
        result = await client.call_tool("fail", {"how": "suddenly"})
    assert result.is_error
    message = text_of(result)
    assert message.startswith("fail failed because of an internal error; the server log has details.")
    assert "/srv" not in message and "secret" not in message
    assert "secret.md" in caplog.text  # the log has the details


@pytest.mark.anyio
async def test_a_full_disk_is_told_as_a_full_disk_without_the_path() -> None:
    async with Client(echo_server()) as client:
        result = await client.call_tool("fail", {"how": "disk"})
    assert result.is_error
    assert text_of(result).startswith("The disk is full (or over its quota), so nothing was written.")
    assert "/srv" not in text_of(result)


# ---------------------------------------------------------------------------- the token


def test_a_request_without_a_token_is_refused_with_where_to_connect() -> None:
    with pytest.raises(MemvaultError, match=r"connect to /mcp/<token>"):
        request_token(None)  # no request, and no token served over stdio


def test_a_request_without_a_key_marked_read_only_may_write() -> None:
    assert read_only(None) is False


# ---------------------------------------------------------------------------- reply budgets


def test_a_reply_stops_at_its_budget() -> None:
    reply = Reply(25)
    assert reply.add("0123456789")
    assert reply.add("0123456789")
    assert not reply.add("0123456789")
    assert reply.text() == "0123456789\n0123456789"


def test_one_part_larger_than_the_whole_budget_is_cut_and_says_so() -> None:
    reply = Reply(1000)
    assert reply.add("x" * 5000)
    assert reply.text().startswith("x" * 800)
    assert "[... cut: 4,200 more characters over the reply limit]" in reply.text()
    assert len(reply.text()) < 1000


def test_names_are_fitted_to_their_room_and_say_when_some_are_left_out() -> None:
    names = ["alpha.md", "beta.md", "gamma.md"]
    assert fit_names(names, 100) == "alpha.md, beta.md, gamma.md"
    assert fit_names(names, 20) == "alpha.md, ..."
    assert fit_names(names, 3) == "..."
    assert joined(names, 100) == "alpha.md, beta.md, gamma.md"
    assert joined(names, 20) == "alpha.md, ..."


def test_fit_prefix_finds_the_longest_prefix_within_the_budget() -> None:
    assert fit_prefix(10, lambda k: 3 * k, 14) == 4
    assert fit_prefix(10, lambda k: 3 * k, 100) == 10
    assert fit_prefix(10, lambda k: 3 * k + 5, 4) == 0


def structured(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    return result.structured_content


def test_a_graph_that_fits_is_sent_whole_as_text_and_as_structured_content() -> None:
    found = Graph((Entity("a", "t", ("x",)), Entity("b", "t")), (Relation("a", "b", "knows"),))
    result = graph_result(found, 10_000)
    assert json.loads(text_of(result)) == structured(result) == found.to_json()


def test_a_graph_over_the_budget_shows_the_first_entities_and_only_their_relations() -> None:
    entities = tuple(Entity(f"e{i}", "thing", (f"fact {i} " * 20,)) for i in range(40))
    relations = tuple(Relation(f"e{i}", f"e{i + 1}", "next") for i in range(39))
    result = graph_result(Graph(entities, relations), 3000)
    sent = structured(result)
    assert json.loads(text_of(result)) == sent and len(text_of(result)) <= 3000
    shown = {e["name"] for e in sent["entities"]}
    assert 0 < len(shown) < 40
    assert all(r["from"] in shown and r["to"] in shown for r in sent["relations"])
    assert sent["notes"][-1].startswith(f"[Reply limit: showing {len(shown)} of 40 entities")


def test_one_entity_larger_than_the_budget_is_shown_with_its_observations_cut() -> None:
    huge = Entity("huge", "thing", tuple("y" * 2000 for _ in range(5)))
    result = graph_result(Graph((huge,)), 2000)
    sent = structured(result)
    assert [e["name"] for e in sent["entities"]] == ["huge"]
    assert len(text_of(result)) <= 2000
    assert all(o.endswith(" [...cut]") for o in sent["entities"][0]["observations"])


def test_a_list_reply_over_the_budget_says_how_many_were_left_out_and_that_all_were_saved() -> None:
    items = [{"name": f"entity {i}", "pad": "z" * 80} for i in range(100)]
    result = list_result("entities", items, 2000, "entities")
    sent = structured(result)
    assert 0 < len(sent["entities"]) < 100
    assert sent["entities"] == items[: len(sent["entities"])]
    assert sent["notes"] == [
        f"[{100 - len(sent['entities'])} more entities not shown to keep this reply short; all were saved.]"
    ]
    assert json.loads(text_of(result)) == sent


def test_a_list_reply_that_fits_is_the_bare_json_array() -> None:
    result = list_result("entities", [{"name": "a"}], 2000, "entities")
    assert json.loads(text_of(result)) == [{"name": "a"}]
    assert structured(result) == {"entities": [{"name": "a"}]}


def test_an_outcome_is_json_with_success_and_message() -> None:
    result = outcome("Entities deleted successfully")
    assert json.loads(text_of(result)) == structured(result)
    assert structured(result) == {"success": True, "message": "Entities deleted successfully"}
