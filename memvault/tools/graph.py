"""The knowledge-graph tools, with the official MCP memory server's names and shapes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import BaseModel, Field

from memvault.canonical import GraphFile
from memvault.config import Settings
from memvault.graph import Entity, Graph, KnowledgeGraph, Relation, SearchLimits
from memvault.sidecar import Sidecar
from memvault.store import Store
from memvault.tools.common import (
    CHANGES,
    CREATES,
    READ_ONLY,
    graph_result,
    handles_errors,
    joined,
    list_result,
    outcome,
    sidecar_read,
    sidecar_write,
    token_of,
)


class EntityArg(BaseModel):
    name: str = Field(description="The name of the entity")
    entityType: str = Field(description="The type of the entity")
    observations: list[str] = Field(
        default_factory=list, description="An array of observation contents associated with the entity"
    )


class RelationArg(BaseModel):
    source: str = Field(alias="from", description="The name of the entity where the relation starts")
    to: str = Field(description="The name of the entity where the relation ends")
    relationType: str = Field(description="The type of the relation")

    def relation(self) -> Relation:
        return Relation(self.source, self.to, self.relationType)


class ObservationAdditionArg(BaseModel):
    entityName: str = Field(description="The name of the entity to add the observations to")
    contents: list[str] = Field(description="An array of observation contents to add")


class ObservationDeletionArg(BaseModel):
    entityName: str = Field(description="The name of the entity containing the observations")
    observations: list[str] = Field(description="An array of observations to delete")


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

    async def read(ctx: Context, work: Callable[[KnowledgeGraph], Graph]) -> Graph:
        found = await sidecar_read(store, token_of(ctx), lambda sidecar, folder: work(graph(sidecar, folder)))
        return Graph() if found is None else found

    @server.tool(annotations=CREATES)
    @handles_errors
    async def create_entities(
        ctx: Context, entities: Annotated[list[EntityArg], Field(description="The entities to create")]
    ) -> Annotated[CallToolResult, EntitiesOut]:
        """Create multiple new entities in the knowledge graph. Names that exist already are skipped."""
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
        relations: Annotated[list[RelationArg], Field(description="The relations to create")],
    ) -> Annotated[CallToolResult, RelationsOut]:
        """Create multiple new relations between entities in the knowledge graph.

        Relations should be in active voice. Both entities must exist; a relation that exists
        already is skipped.
        """
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
        observations: Annotated[
            list[ObservationAdditionArg], Field(description="Observations to add, per entity")
        ],
    ) -> Annotated[CallToolResult, ObservationResultsOut]:
        """Add new observations to existing entities in the knowledge graph; ones they have are skipped."""
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
        entityNames: Annotated[list[str], Field(description="An array of entity names to delete")],
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Delete multiple entities and their associated relations from the knowledge graph."""
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
        deletions: Annotated[
            list[ObservationDeletionArg], Field(description="Observations to delete, per entity")
        ],
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Delete specific observations from entities in the knowledge graph."""
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
        relations: Annotated[list[RelationArg], Field(description="An array of relations to delete")],
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Delete multiple relations from the knowledge graph."""
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
        return graph_result(await read(ctx, KnowledgeGraph.read_graph), budget)

    @server.tool(annotations=READ_ONLY)
    @handles_errors
    async def search_nodes(
        ctx: Context,
        query: Annotated[
            str,
            Field(
                description="The search query to match against entity names, types, and observation content"
            ),
        ],
    ) -> Annotated[CallToolResult, GraphOut]:
        """Search for nodes in the knowledge graph based on a query.

        Each word picks its best matching entities (name, type, observations; case-insensitive);
        the entities on short paths connecting the words' matches are added, so a query for two
        concepts also returns what links them. Returns the entities and the relations among them.
        """
        return graph_result(await read(ctx, lambda g: g.search_nodes(query)), budget)

    @server.tool(annotations=READ_ONLY)
    @handles_errors
    async def open_nodes(
        ctx: Context,
        names: Annotated[list[str], Field(description="An array of entity names to retrieve")],
    ) -> Annotated[CallToolResult, GraphOut]:
        """Open specific nodes in the knowledge graph by their names, with every relation from or to them."""
        return graph_result(await read(ctx, lambda g: g.open_nodes(names)), budget, either_end=True)
