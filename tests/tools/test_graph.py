"""The nine knowledge-graph tools, through the official client: the official server's replies, and ours."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from inmemory import call_refused, served, text_of
from mcp import Client

from memvault.config import Settings

pytestmark = pytest.mark.anyio


@pytest.fixture
async def client(make_settings: Callable[..., Settings]) -> AsyncIterator[Client]:
    async with served(make_settings(embedder="hash", watch=False, graph_max_results=3)) as opened:
        yield opened


async def call_json(client: Client, tool: str, **args: Any) -> Any:
    """A reply's JSON text; its structured content must say the same (as an object)."""
    result = await client.call_tool(tool, args)
    assert not result.is_error, text_of(result)
    payload = json.loads(text_of(result))
    assert result.structured_content is not None
    assert payload in (result.structured_content, *result.structured_content.values())
    return payload


def entity(name: str, kind: str, *facts: str) -> dict[str, Any]:
    return {"name": name, "entityType": kind, "observations": list(facts)}


def relation(source: str, target: str, kind: str) -> dict[str, str]:
    return {"from": source, "to": target, "relationType": kind}


async def people(client: Client) -> None:
    """Alice knows Bob; Carol is on her own."""
    await call_json(
        client,
        "create_entities",
        entities=[
            entity("Alice", "person", "likes tea"),
            entity("Bob", "person", "plays chess"),
            entity("Carol", "person", "grows tomatoes"),
        ],
    )
    await call_json(client, "create_relations", relations=[relation("Alice", "Bob", "knows")])


async def test_create_entities_replies_what_it_created_and_names_what_it_skipped(client: Client) -> None:
    assert await call_json(client, "create_entities", entities=[entity("Alice", "person", "likes tea")]) == [
        entity("Alice", "person", "likes tea")
    ]
    again = await call_json(
        client, "create_entities", entities=[entity("Alice", "robot"), entity("Bob", "person")]
    )
    assert again == {
        "entities": [entity("Bob", "person")],
        "notes": [
            "[Skipped 1 that exist already: Alice. Use add_observations to add facts to an existing entity.]"
        ],
    }


async def test_create_relations_skips_what_exists_and_refuses_a_missing_entity(client: Client) -> None:
    await people(client)
    again = await call_json(
        client,
        "create_relations",
        relations=[relation("Alice", "Bob", "knows"), relation("Bob", "Carol", "knows")],
    )
    assert again == {
        "relations": [relation("Bob", "Carol", "knows")],
        "notes": ["[Skipped 1 relation(s) that exist already.]"],
    }
    message = await call_refused(client, "create_relations", relations=[relation("Alice", "Zed", "knows")])
    assert message.startswith("No entity named 'Zed'; nothing was changed.")


async def test_add_observations_says_which_were_added_per_entity(client: Client) -> None:
    await people(client)
    added = await call_json(
        client,
        "add_observations",
        observations=[{"entityName": "Alice", "contents": ["likes tea", "reads maps"]}],
    )
    assert added == [{"entityName": "Alice", "addedObservations": ["reads maps"]}]
    message = await call_refused(
        client, "add_observations", observations=[{"entityName": "Zed", "contents": ["x"]}]
    )
    assert "No entity named 'Zed'" in message


async def test_delete_entities_takes_their_relations_and_counts_what_it_did_not_find(client: Client) -> None:
    await people(client)
    partly = await call_json(client, "delete_entities", entityNames=["Bob", "Zed"])
    assert partly == {"success": True, "message": "Deleted 1 of 2 entities. Not found: Zed"}
    assert await call_json(client, "delete_entities", entityNames=["Carol"]) == {
        "success": True,
        "message": "Entities deleted successfully",
    }
    assert await call_json(client, "read_graph") == {
        "entities": [entity("Alice", "person", "likes tea")],
        "relations": [],
    }


async def test_delete_observations_counts_what_it_deleted(client: Client) -> None:
    await people(client)
    done = await call_json(
        client, "delete_observations", deletions=[{"entityName": "Alice", "observations": ["likes tea"]}]
    )
    assert done == {"success": True, "message": "Observations deleted successfully"}
    partly = await call_json(
        client,
        "delete_observations",
        deletions=[
            {"entityName": "Bob", "observations": ["plays chess", "never said"]},
            {"entityName": "Zed", "observations": ["x"]},
        ],
    )
    assert partly == {"success": True, "message": "Deleted 1 of 3 observations. Entities not found: Zed"}


async def test_delete_relations_says_when_some_matched_nothing(client: Client) -> None:
    await people(client)
    partly = await call_json(
        client,
        "delete_relations",
        relations=[relation("Alice", "Bob", "knows"), relation("Bob", "Alice", "knows")],
    )
    assert partly == {"success": True, "message": "Deleted 1 of 2 relations. The rest matched nothing."}
    assert (await call_json(client, "read_graph"))["relations"] == []


async def test_read_graph_of_an_empty_vault_is_empty(client: Client) -> None:
    assert await call_json(client, "read_graph") == {"entities": [], "relations": []}


async def test_search_nodes_finds_by_observation_and_says_what_its_cap_left_out(client: Client) -> None:
    await people(client)
    found = await call_json(client, "search_nodes", query="chess")
    assert [e["name"] for e in found["entities"]] == ["Bob"]
    await call_json(
        client, "create_entities", entities=[entity(f"Player {i}", "person", "plays chess") for i in range(5)]
    )
    capped = await call_json(client, "search_nodes", query="chess")
    assert len(capped["entities"]) == 3  # graph_max_results
    assert capped["notes"] == [
        "[3 more matching entities left out: a search returns at most 3. "
        "Add words to the query to narrow it.]"
    ]


async def test_open_nodes_gives_the_named_entities_with_relations_from_or_to_them(client: Client) -> None:
    await people(client)
    opened = await call_json(client, "open_nodes", names=["Bob", "Zed"])
    assert opened == {
        "entities": [entity("Bob", "person", "plays chess")],
        "relations": [relation("Alice", "Bob", "knows")],
    }


async def test_a_missing_argument_is_named_with_what_to_do(client: Client) -> None:
    message = await call_refused(client, "open_nodes")
    assert message == (
        "Invalid arguments for open_nodes: 'names' is required. "
        "Check the tool's input schema and call it again."
    )
