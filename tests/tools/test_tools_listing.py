"""What a client reads before its first call: lean tool schemas, the instructions."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

import jsonschema
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from pydantic import BaseModel, Field, TypeAdapter

from memvault.tools.guide import instructions
from memvault.tools.schema import compact


class Shape(BaseModel):
    title: Annotated[str, Field(description="A property named title stays.")]
    size: Annotated[int | None, Field(description="Optional size.")] = None
    parts: list[str] | None = None


def test_compact_drops_titles_but_keeps_a_property_named_title() -> None:
    schema = compact(Shape.model_json_schema())
    assert "title" not in schema
    assert set(schema["properties"]) == {"title", "size", "parts"}
    assert schema["properties"]["title"] == {"description": "A property named title stays.", "type": "string"}
    assert schema["required"] == ["title"]


def test_compact_spells_an_optional_input_as_its_type() -> None:
    props = compact(Shape.model_json_schema())["properties"]
    assert props["size"] == {"description": "Optional size.", "type": "integer"}
    assert props["parts"] == {"items": {"type": "string"}, "type": "array"}


def test_compact_output_keeps_null_and_drops_descriptions() -> None:
    props = compact(Shape.model_json_schema(), optional_null=False, described=False)["properties"]
    assert props["size"] == {"anyOf": [{"type": "integer"}, {"type": "null"}]}
    assert props["title"] == {"type": "string"}


@pytest.mark.parametrize("value", [{"title": "x", "size": None}, {"title": "x", "size": 3, "parts": ["a"]}])
def test_compacted_output_schema_accepts_what_the_model_writes(value: dict[str, object]) -> None:
    schema = compact(Shape.model_json_schema(), optional_null=False, described=False)
    dumped = TypeAdapter(Shape).dump_python(Shape.model_validate(value), mode="json")
    jsonschema.validate(dumped, schema)


def test_compact_keeps_refs_and_defs_usable() -> None:
    class Outer(BaseModel):
        shapes: list[Shape]

    schema = compact(Outer.model_json_schema())
    assert schema["properties"]["shapes"]["items"] == {"$ref": "#/$defs/Shape"}
    assert "title" not in schema["$defs"]["Shape"]
    assert "title" in schema["$defs"]["Shape"]["properties"]


def test_instructions_name_only_the_tools_served() -> None:
    every = instructions(("memories", "sessions", "graph", "recall"))
    assert "recall(query)" in every and "read_memory(filenames=" in every and "append_summary" in every
    lean = instructions(("memories",))
    assert "recall" not in lean and "summary" not in lean and "write_memory" in lean


@pytest.mark.anyio
async def test_the_server_tells_agents_when_to_recall(server_factory: Callable[..., Any]) -> None:
    async with server_factory() as srv:
        async with streamable_http_client(srv.mcp_url("alice")) as (read, write):
            async with ClientSession(read, write) as session:
                result = await session.initialize()
    assert result.instructions is not None
    assert result.instructions.index("recall(query)") < result.instructions.index("read_memory(query=")


# tools/list of every tool group on d2f9dc8, before issue 13, measured as below: 24,193 characters.
LISTING_BEFORE = 24_193


@pytest.mark.anyio
async def test_tools_list_is_at_most_60_percent_of_what_it_was(server_factory: Callable[..., Any]) -> None:
    async with server_factory() as srv, srv.session("alice") as session:
        listed = await session.list_tools()
    size = len(listed.model_dump_json(by_alias=True, exclude_none=True))
    # Titles (issue 36) came later, by the protocol's wish: a client shows them to a person.
    titles = sum(len(f',"title":{json.dumps(tool.title)}') for tool in listed.tools if tool.title)
    assert len(listed.tools) >= 25
    assert size - titles <= 0.6 * LISTING_BEFORE, f"tools/list is {size:,} characters, {titles:,} of titles"
    schemas = {tool.name: tool.output_schema for tool in listed.tools}
    # Every tool that sends structured content says so (the graph tools), in a few characters.
    assert schemas["read_graph"] is not None and schemas["create_entities"] is not None
