"""The knowledge-graph tools, with the official MCP memory server's names and shapes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from memvault.config import Settings
from memvault.ops.records import sidecar_read, sidecar_write
from memvault.ops.store import Store
from memvault.records.graph import Entity, Graph, KnowledgeGraph, Relation, SearchLimits
from memvault.records.sidecar import Sidecar
from memvault.records.sync import GraphFile
from memvault.tools.common import (
    CHANGES,
    CREATES,
    READ_ONLY,
    graph_result,
    handles_errors,
    joined,
    list_result,
    outcome,
    token_of,
)


class EntityArg(BaseModel):
    name: str = Field(description="Entity name")
    entityType: str = Field(description="Entity type")
    observations: list[str] = Field(default_factory=list, description="Facts about it")


class RelationArg(BaseModel):
    source: str = Field(alias="from", description="Source entity")
    to: str = Field(description="Target entity")
    relationType: str = Field(description="Relation type")

    def relation(self) -> Relation:
        return Relation(self.source, self.to, self.relationType)


class ObservationAdditionArg(BaseModel):
    entityName: str = Field(description="Entity name")
    contents: list[str] = Field(description="Observations to add")


class ObservationDeletionArg(BaseModel):
    entityName: str = Field(description="Entity name")
    observations: list[str] = Field(description="Observations to delete")


class GraphOut(BaseModel):
    entities: list[EntityArg]
    relations: list[RelationArg]
    notes: list[str] | None = None


class EntitiesOut(BaseModel):
    entities: list[EntityArg]
    notes: list[str] | None = None


class RelationsOut(BaseModel):
    relations: list[RelationArg]
    notes: list[str] | None = None


class AddedObservationsOut(BaseModel):
    entityName: str
    addedObservations: list[str]


class ObservationResultsOut(BaseModel):
    results: list[AddedObservationsOut]
    notes: list[str] | None = None


class OutcomeOut(BaseModel):
    success: bool
    message: str


def kept_note(whys: list[str]) -> list[str]:
    """What an agent is told of graph.jsonl lines memvault keeps as they are but cannot serve."""
    if not whys:
        return []
    kinds = ", ".join(dict.fromkeys(whys[:50]))
    return [
        f"[graph.jsonl holds {len(whys)} line(s) memvault cannot read as an entity or a relation "
        f"({kinds:.300}); they are kept as they are and not shown. Ask the user to run memvault check.]"
    ]


# The graph tools' structured results, as listed (tools/list): short, so every session's listing
# stays small, and true of what each tool sends (a reply may add a "notes" list of text).
_LIST = {"type": "array"}
_GRAPH = {
    "type": "object",
    "properties": {"entities": _LIST, "relations": _LIST},
    "required": ["entities", "relations"],
}
_OUTCOME = {
    "type": "object",
    "properties": {"success": {"type": "boolean"}, "message": {"type": "string"}},
    "required": ["success", "message"],
}


def _listing(key: str) -> dict[str, Any]:
    return {"type": "object", "properties": {key: _LIST}, "required": [key]}


OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {
    "create_entities": _listing("entities"),
    "create_relations": _listing("relations"),
    "add_observations": _listing("results"),
    "delete_entities": _OUTCOME,
    "delete_observations": _OUTCOME,
    "delete_relations": _OUTCOME,
    "read_graph": _GRAPH,
    "search_nodes": _GRAPH,
    "open_nodes": _GRAPH,
}


def register_graph_tools(server: MCPServer, store: Store, settings: Settings) -> None:
    limits = SearchLimits(
        max_path_len=settings.graph_max_path_len,
        entries_per_term=settings.graph_entries_per_term,
        max_results=settings.graph_max_results,
    )
    budget = settings.max_reply_chars

    def graph(sidecar: Sidecar | Callable[[], Sidecar], folder: Path) -> KnowledgeGraph:
        return KnowledgeGraph(
            sidecar,
            max_chars=settings.max_content_chars,
            clock=store.clock,
            limits=limits,
            files=GraphFile(folder),
        )

    async def read(
        ctx: Context, work: Callable[[KnowledgeGraph], Graph], *, either_end: bool = False, kept: bool = False
    ) -> CallToolResult:
        """Run a read and build its reply (JSON of up to the whole graph) in a worker thread."""

        def reply(sidecar: Sidecar, folder: Path) -> CallToolResult:
            g = graph(sidecar, folder)
            found = work(g)
            notes = []
            if found.left_out:
                notes.append(
                    f"[{found.left_out} more matching entities left out: a search returns at most "
                    f"{limits.max_results}. Add words to the query to narrow it.]"
                )
            if kept:
                notes += kept_note(g.kept_lines())
            return graph_result(found, budget, either_end=either_end, notes=notes)

        done = await sidecar_read(store, token_of(ctx), reply)
        return graph_result(Graph(), budget) if done is None else done

    @server.tool(annotations=CREATES)
    @handles_errors
    async def create_entities(
        ctx: Context, entities: Annotated[list[EntityArg], Field(description="Entities to create")]
    ) -> Annotated[CallToolResult, EntitiesOut]:
        """Create entities in the knowledge graph; existing names are skipped."""
        wanted = [Entity(e.name, e.entityType, tuple(e.observations)) for e in entities]
        created = await sidecar_write(
            store, token_of(ctx), lambda sc, folder: graph(sc, folder).create_entities(wanted)
        )
        made = {e.name for e in created}
        skipped = list(dict.fromkeys(e.name for e in wanted if e.name not in made))
        note = (
            f"[Skipped {len(skipped)} that exist already: {joined(skipped, 300)}. "
            "Use add_observations to add facts to an existing entity.]"
            if skipped
            else ""
        )
        return list_result("entities", [e.to_json() for e in created], budget, "entities", note)

    @server.tool(annotations=CREATES)
    @handles_errors
    async def create_relations(
        ctx: Context,
        relations: Annotated[list[RelationArg], Field(description="Relations to create")],
    ) -> Annotated[CallToolResult, RelationsOut]:
        """Create relations (active voice) between existing entities; existing ones are skipped."""
        wanted = [r.relation() for r in relations]
        created = await sidecar_write(
            store, token_of(ctx), lambda sc, folder: graph(sc, folder).create_relations(wanted)
        )
        skipped = len(wanted) - len(created)
        note = f"[Skipped {skipped} relation(s) that exist already.]" if skipped else ""
        return list_result("relations", [r.to_json() for r in created], budget, "relations", note)

    @server.tool(annotations=CREATES)
    @handles_errors
    async def add_observations(
        ctx: Context,
        observations: Annotated[list[ObservationAdditionArg], Field(description="Per entity")],
    ) -> Annotated[CallToolResult, ObservationResultsOut]:
        """Add observations to existing entities; ones they have are skipped."""
        wanted = [(o.entityName, list(o.contents)) for o in observations]
        results = await sidecar_write(
            store, token_of(ctx), lambda sc, folder: graph(sc, folder).add_observations(wanted)
        )
        items = [{"entityName": name, "addedObservations": added} for name, added in results]
        return list_result("results", items, budget, "results")

    @server.tool(annotations=CHANGES)
    @handles_errors
    async def delete_entities(
        ctx: Context,
        entityNames: Annotated[list[str], Field(description="Entity names")],
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Delete entities and their relations."""
        deleted, not_found = await sidecar_write(
            store, token_of(ctx), lambda sc, folder: graph(sc, folder).delete_entities(entityNames)
        )
        if not not_found:
            return outcome("Entities deleted successfully")
        asked = len(dict.fromkeys(entityNames))
        return outcome(f"Deleted {len(deleted)} of {asked} entities. Not found: {joined(not_found, 1000)}")

    @server.tool(annotations=CHANGES)
    @handles_errors
    async def delete_observations(
        ctx: Context,
        deletions: Annotated[list[ObservationDeletionArg], Field(description="Per entity")],
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Delete observations from entities."""
        wanted = [(d.entityName, list(d.observations)) for d in deletions]
        count, missing = await sidecar_write(
            store, token_of(ctx), lambda sc, folder: graph(sc, folder).delete_observations(wanted)
        )
        requested = sum(len(set(obs)) for _, obs in wanted)
        if count == requested:
            return outcome("Observations deleted successfully")
        message = f"Deleted {count} of {requested} observations."
        if missing:
            message += f" Entities not found: {joined(missing, 1000)}"
        return outcome(message)

    @server.tool(annotations=CHANGES)
    @handles_errors
    async def delete_relations(
        ctx: Context,
        relations: Annotated[list[RelationArg], Field(description="Relations to delete")],
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Delete relations."""
        wanted = list(dict.fromkeys(r.relation() for r in relations))
        count = await sidecar_write(
            store, token_of(ctx), lambda sc, folder: graph(sc, folder).delete_relations(wanted)
        )
        if count == len(wanted):
            return outcome("Relations deleted successfully")
        return outcome(f"Deleted {count} of {len(wanted)} relations. The rest matched nothing.")

    @server.tool(annotations=READ_ONLY)
    @handles_errors
    async def read_graph(ctx: Context) -> Annotated[CallToolResult, GraphOut]:
        """Read the entire knowledge graph."""
        return await read(ctx, KnowledgeGraph.read_graph, either_end=True, kept=True)

    @server.tool(annotations=READ_ONLY)
    @handles_errors
    async def search_nodes(
        ctx: Context,
        query: Annotated[
            str,
            Field(description="Words to find"),
        ],
    ) -> Annotated[CallToolResult, GraphOut]:
        """Search the graph (names, types, observations; typos ok), adding entities that link the matches."""
        return await read(ctx, lambda g: g.search_nodes(query), either_end=True)

    @server.tool(annotations=READ_ONLY)
    @handles_errors
    async def open_nodes(
        ctx: Context,
        names: Annotated[list[str], Field(description="Entity names")],
    ) -> Annotated[CallToolResult, GraphOut]:
        """Entities by name, with their relations."""
        return await read(ctx, lambda g: g.open_nodes(names), either_end=True)
