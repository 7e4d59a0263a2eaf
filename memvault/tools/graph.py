"""The knowledge-graph tools, with the official MCP memory server's names and shapes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import Context
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
    Tools,
    graph_result,
    joined,
    list_result,
    outcome,
    token_of,
    tool,
)

T = TypeVar("T")


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


def skipped_note(wanted: list[Entity], created: list[Entity]) -> str:
    """create_entities' note of the names it skipped because they exist already."""
    made = {e.name for e in created}
    skipped = list(dict.fromkeys(e.name for e in wanted if e.name not in made))
    if not skipped:
        return ""
    return (
        f"[Skipped {len(skipped)} that exist already: {joined(skipped, 300)}. "
        "Use add_observations to add facts to an existing entity.]"
    )


class GraphTools(Tools):
    """The tools over a token's knowledge graph, with the official MCP memory server's names and shapes."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.budget = settings.max_reply_chars
        self.limits = SearchLimits(
            max_path_len=settings.graph_max_path_len,
            entries_per_term=settings.graph_entries_per_term,
            max_results=settings.graph_max_results,
        )

    def graph(self, sidecar: Sidecar | Callable[[], Sidecar], folder: Path) -> KnowledgeGraph:
        return KnowledgeGraph(
            sidecar,
            max_chars=self.settings.max_content_chars,
            clock=self.store.clock,
            limits=self.limits,
            files=GraphFile(folder),
        )

    async def write(self, ctx: Context, work: Callable[[KnowledgeGraph], T]) -> T:
        """Run a change of the graph under the token's locks, in a worker thread."""
        return await sidecar_write(self.store, token_of(ctx), lambda sc, folder: work(self.graph(sc, folder)))

    async def read(
        self, ctx: Context, work: Callable[[KnowledgeGraph], Graph], *, kept: bool = False
    ) -> CallToolResult:
        """Run a read and build its reply (JSON of up to the whole graph) in a worker thread."""

        def reply(sidecar: Sidecar, folder: Path) -> CallToolResult:
            g = self.graph(sidecar, folder)
            found = work(g)
            notes = []
            if found.left_out:
                notes.append(
                    f"[{found.left_out} more matching entities left out: a search returns at most "
                    f"{self.limits.max_results}. Add words to the query to narrow it.]"
                )
            if kept:
                notes += kept_note(g.kept_lines())
            return graph_result(found, self.budget, either_end=True, notes=notes)

        done = await sidecar_read(self.store, token_of(ctx), reply)
        return graph_result(Graph(), self.budget) if done is None else done

    @tool("Create entities", CREATES, structured=True)
    async def create_entities(
        self, ctx: Context, entities: Annotated[list[EntityArg], Field(description="Entities to create")]
    ) -> Annotated[CallToolResult, EntitiesOut]:
        """Create entities in the knowledge graph; existing names are skipped."""
        wanted = [Entity(e.name, e.entityType, tuple(e.observations)) for e in entities]
        created = await self.write(ctx, lambda g: g.create_entities(wanted))
        note = skipped_note(wanted, created)
        return list_result("entities", [e.to_json() for e in created], self.budget, "entities", note)

    @tool("Create relations", CREATES, structured=True)
    async def create_relations(
        self,
        ctx: Context,
        relations: Annotated[list[RelationArg], Field(description="Relations to create")],
    ) -> Annotated[CallToolResult, RelationsOut]:
        """Create relations (active voice) between existing entities; existing ones are skipped."""
        wanted = [r.relation() for r in relations]
        created = await self.write(ctx, lambda g: g.create_relations(wanted))
        skipped = len(wanted) - len(created)
        note = f"[Skipped {skipped} relation(s) that exist already.]" if skipped else ""
        return list_result("relations", [r.to_json() for r in created], self.budget, "relations", note)

    @tool("Add observations", CREATES, structured=True)
    async def add_observations(
        self,
        ctx: Context,
        observations: Annotated[list[ObservationAdditionArg], Field(description="Per entity")],
    ) -> Annotated[CallToolResult, ObservationResultsOut]:
        """Add observations to existing entities; ones they have are skipped."""
        wanted = [(o.entityName, list(o.contents)) for o in observations]
        results = await self.write(ctx, lambda g: g.add_observations(wanted))
        items = [{"entityName": name, "addedObservations": added} for name, added in results]
        return list_result("results", items, self.budget, "results")

    @tool("Delete entities", CHANGES, structured=True)
    async def delete_entities(
        self,
        ctx: Context,
        entityNames: Annotated[list[str], Field(description="Entity names")],
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Delete entities and their relations."""
        deleted, not_found = await self.write(ctx, lambda g: g.delete_entities(entityNames))
        if not not_found:
            return outcome("Entities deleted successfully")
        asked = len(dict.fromkeys(entityNames))
        return outcome(f"Deleted {len(deleted)} of {asked} entities. Not found: {joined(not_found, 1000)}")

    @tool("Delete observations", CHANGES, structured=True)
    async def delete_observations(
        self,
        ctx: Context,
        deletions: Annotated[list[ObservationDeletionArg], Field(description="Per entity")],
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Delete observations from entities."""
        wanted = [(d.entityName, list(d.observations)) for d in deletions]
        count, missing = await self.write(ctx, lambda g: g.delete_observations(wanted))
        requested = sum(len(set(obs)) for _, obs in wanted)
        if count == requested:
            return outcome("Observations deleted successfully")
        message = f"Deleted {count} of {requested} observations."
        if missing:
            message += f" Entities not found: {joined(missing, 1000)}"
        return outcome(message)

    @tool("Delete relations", CHANGES, structured=True)
    async def delete_relations(
        self,
        ctx: Context,
        relations: Annotated[list[RelationArg], Field(description="Relations to delete")],
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Delete relations."""
        wanted = list(dict.fromkeys(r.relation() for r in relations))
        count = await self.write(ctx, lambda g: g.delete_relations(wanted))
        if count == len(wanted):
            return outcome("Relations deleted successfully")
        return outcome(f"Deleted {count} of {len(wanted)} relations. The rest matched nothing.")

    @tool("Read graph", READ_ONLY, structured=True)
    async def read_graph(self, ctx: Context) -> Annotated[CallToolResult, GraphOut]:
        """Read the entire knowledge graph."""
        return await self.read(ctx, KnowledgeGraph.read_graph, kept=True)

    @tool("Search graph", READ_ONLY, structured=True)
    async def search_nodes(
        self,
        ctx: Context,
        query: Annotated[
            str,
            Field(description="Words to find"),
        ],
    ) -> Annotated[CallToolResult, GraphOut]:
        """Search the graph (names, types, observations; typos ok), adding entities that link the matches."""
        return await self.read(ctx, lambda g: g.search_nodes(query))

    @tool("Open entities", READ_ONLY, structured=True)
    async def open_nodes(
        self,
        ctx: Context,
        names: Annotated[list[str], Field(description="Entity names")],
    ) -> Annotated[CallToolResult, GraphOut]:
        """Entities by name, with their relations."""
        return await self.read(ctx, lambda g: g.open_nodes(names))
