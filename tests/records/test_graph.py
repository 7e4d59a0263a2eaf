"""The knowledge graph: storage and search, then the nine tools through the real server and client."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from memvault.errors import InvalidArgument, UnknownEntity
from memvault.records.graph import Entity, KnowledgeGraph, Node, Relation, SearchLimits, search, term_score
from memvault.records.sidecar import Sidecar

TRANSPORTS = ["http", "sse"]
# watchdog warns from its inotify thread when token/.memvault is added to the recursive watch twice.
pytestmark = pytest.mark.filterwarnings("ignore:Callback with id .* already exists for watch:RuntimeWarning")


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)  # every write a second later: recency is well defined
        return self.now


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Sidecar]:
    with Sidecar.open(tmp_path / "alice") as opened:
        yield opened


@pytest.fixture
def kg(sidecar: Sidecar) -> KnowledgeGraph:
    return KnowledgeGraph(sidecar, max_chars=1000, clock=Clock())


def names(graph: Any) -> list[str]:
    return [e.name for e in graph.entities]


def chain(kg: KnowledgeGraph) -> None:
    """A - B - C - D in a chain (mixed directions), and E on its own."""
    kg.create_entities([Entity(n, "letter", (f"the letter {n}",)) for n in ("A", "B", "C", "D", "E")])
    kg.create_relations(
        [Relation("A", "B", "next"), Relation("C", "B", "follows"), Relation("C", "D", "next")]
    )


# ---------------------------------------------------------------------------- storage: writes


def test_create_entities_skips_existing_names_and_batch_duplicates(kg: KnowledgeGraph) -> None:
    first = kg.create_entities([Entity("Alice", "person", ("likes tea",))])
    assert first == [Entity("Alice", "person", ("likes tea",))]
    again = kg.create_entities(
        [Entity("Alice", "robot", ("other",)), Entity("Bob", "person"), Entity("Bob", "cat")]
    )
    assert again == [Entity("Bob", "person")]
    graph = kg.read_graph()
    assert graph.entities == (Entity("Alice", "person", ("likes tea",)), Entity("Bob", "person"))


def test_names_are_exact_and_case_sensitive(kg: KnowledgeGraph) -> None:
    kg.create_entities([Entity("alice", "person"), Entity("Alice", "person")])
    assert names(kg.read_graph()) == ["alice", "Alice"]


def test_create_relations_skips_duplicates(kg: KnowledgeGraph) -> None:
    kg.create_entities([Entity("A", "x"), Entity("B", "x")])
    rel = Relation("A", "B", "knows")
    assert kg.create_relations([rel, rel]) == [rel]
    assert kg.create_relations([rel, Relation("B", "A", "knows")]) == [Relation("B", "A", "knows")]
    assert kg.read_graph().relations == (rel, Relation("B", "A", "knows"))


def test_create_relations_to_a_missing_entity_fails_and_creates_nothing(kg: KnowledgeGraph) -> None:
    kg.create_entities([Entity("A", "x"), Entity("B", "x")])
    with pytest.raises(UnknownEntity, match="'Ghost'") as info:
        kg.create_relations([Relation("A", "B", "knows"), Relation("A", "Ghost", "haunts")])
    assert "create_entities" in str(info.value)
    assert kg.read_graph().relations == ()


def test_add_observations_skips_duplicates_and_fails_atomically_for_a_missing_entity(
    kg: KnowledgeGraph,
) -> None:
    kg.create_entities([Entity("A", "x", ("one",))])
    added = kg.add_observations([("A", ["one", "two", "two", "three"])])
    assert added == [("A", ["two", "three"])]
    assert kg.read_graph().entities[0].observations == ("one", "two", "three")
    with pytest.raises(UnknownEntity, match="'Nope'"):
        kg.add_observations([("A", ["four"]), ("Nope", ["x"])])
    assert kg.read_graph().entities[0].observations == ("one", "two", "three")


def test_delete_entities_cascades_to_observations_and_relations(kg: KnowledgeGraph) -> None:
    chain(kg)
    deleted, missing = kg.delete_entities(["B", "Zed"])
    assert (deleted, missing) == (["B"], ["Zed"])
    graph = kg.read_graph()
    assert names(graph) == ["A", "C", "D", "E"]
    assert graph.relations == (Relation("C", "D", "next"),)
    # A re-created B starts clean: no old observations or relations come back.
    kg.create_entities([Entity("B", "letter")])
    assert kg.open_nodes(["B"]).entities == (Entity("B", "letter"),)
    assert kg.open_nodes(["B"]).relations == ()


def test_delete_observations_and_relations(kg: KnowledgeGraph) -> None:
    chain(kg)
    kg.add_observations([("A", ["vowel"])])
    count, missing = kg.delete_observations([("A", ["vowel", "not there"]), ("Q", ["x"])])
    assert (count, missing) == (1, ["Q"])
    assert kg.open_nodes(["A"]).entities[0].observations == ("the letter A",)
    assert kg.delete_relations([Relation("A", "B", "next"), Relation("A", "B", "other")]) == 1
    assert Relation("A", "B", "next") not in kg.read_graph().relations


def test_bad_arguments_are_refused(kg: KnowledgeGraph) -> None:
    with pytest.raises(InvalidArgument, match="empty"):
        kg.create_entities([Entity(" ", "x")])
    with pytest.raises(InvalidArgument, match="limit is 1,000"):
        kg.create_entities([Entity("A", "x", ("y" * 1001,))])
    with pytest.raises(InvalidArgument, match="relationType"):
        kg.create_relations([Relation("A", "A", "")])
    with pytest.raises(InvalidArgument, match="2048"):
        kg.search_nodes("q" * 3000)
    assert kg.read_graph().entities == ()


def test_open_nodes_returns_named_entities_and_relations_from_or_to_them(kg: KnowledgeGraph) -> None:
    chain(kg)
    graph = kg.open_nodes(["B", "missing"])
    assert names(graph) == ["B"]
    assert set(graph.relations) == {Relation("A", "B", "next"), Relation("C", "B", "follows")}


# ---------------------------------------------------------------------------- search


def test_search_is_case_insensitive_over_name_type_and_observations(kg: KnowledgeGraph) -> None:
    kg.create_entities(
        [
            Entity("PostgreSQL", "database", ("runs on port 5432",)),
            Entity("Redis", "Cache", ()),
            Entity("Deploy script", "tool", ("restarts POSTGRESQL after migrations",)),
        ]
    )
    assert names(kg.search_nodes("postgresql")) == ["PostgreSQL", "Deploy script"]
    assert names(kg.search_nodes("CACHE")) == ["Redis"]
    assert names(kg.search_nodes("5432")) == ["PostgreSQL"]
    assert names(kg.search_nodes("nothing-like-this")) == []


def test_search_joins_the_path_between_two_concepts_and_leaves_out_unconnected(kg: KnowledgeGraph) -> None:
    chain(kg)
    graph = kg.search_nodes("A D")
    assert set(names(graph)) == {"A", "B", "C", "D"}
    assert names(graph)[:2] == ["A", "D"]  # the matches first, then what connects them
    assert set(graph.relations) == {
        Relation("A", "B", "next"),
        Relation("C", "B", "follows"),
        Relation("C", "D", "next"),
    }


def test_search_with_realistic_names_returns_connecting_entities(kg: KnowledgeGraph) -> None:
    kg.create_entities(
        [
            Entity("Alice", "person", ("backend engineer",)),
            Entity("Payments team", "team", ("owns billing",)),
            Entity("Ledger service", "service", ("written in Go",)),
            Entity("Kafka", "system", ("event bus",)),
            Entity("Office plant", "thing", ("a ficus",)),
        ]
    )
    kg.create_relations(
        [
            Relation("Alice", "Payments team", "member_of"),
            Relation("Payments team", "Ledger service", "owns"),
            Relation("Ledger service", "Kafka", "publishes_to"),
        ]
    )
    assert names(kg.search_nodes("alice kafka")) == ["Alice", "Kafka", "Payments team", "Ledger service"]
    # One concept alone adds no path: just what matches.
    assert names(kg.search_nodes("kafka")) == ["Kafka"]


def test_paths_longer_than_the_limit_are_not_joined(sidecar: Sidecar) -> None:
    kg = KnowledgeGraph(sidecar, max_chars=1000, clock=Clock(), limits=SearchLimits(max_path_len=2))
    chain(kg)  # A to D is three relations
    assert set(names(kg.search_nodes("A D"))) == {"A", "D"}
    assert set(names(kg.search_nodes("A C"))) == {"A", "B", "C"}


def test_search_result_is_capped(sidecar: Sidecar) -> None:
    kg = KnowledgeGraph(sidecar, max_chars=1000, clock=Clock(), limits=SearchLimits(max_results=3))
    kg.create_entities([Entity(f"server-{n}", "host") for n in range(10)])
    graph = kg.search_nodes("server")
    assert len(graph.entities) == 3


def test_an_exact_full_name_comes_first_whatever_the_cap() -> None:
    """Issue 50: "Jonas Jansen" was left out when each word matched over a hundred entities."""
    at = "2026-01-01T00:00:00.000Z"
    nodes = [Node(Entity(f"Jonas Berg {i}", "person", ("friend of jansen",)), at) for i in range(120)]
    nodes += [Node(Entity(f"Eva Jansen {i}", "person", ("knows jonas",)), at) for i in range(120)]
    nodes += [Node(Entity("Anna Jonas Jansen", "person"), at), Node(Entity("Jonas  Jansen", "person"), at)]
    relations = [Relation(f"Jonas Berg {i}", f"Eva Jansen {i}", "knows") for i in range(120)]
    found = search(nodes, relations, "jonas jansen", SearchLimits(max_results=50))
    assert [e.name for e in found.entities[:2]] == ["Jonas  Jansen", "Anna Jonas Jansen"]
    assert len(found.entities) == 50


def test_each_term_picks_its_best_entities_by_score_then_degree_then_recency() -> None:
    older, newer = "2026-01-01T00:00:00.000Z", "2026-02-01T00:00:00.000Z"
    nodes = [
        Node(Entity("hub", "node", ("mentions cat",)), older),
        Node(Entity("leaf", "node", ("mentions cat",)), newer),
        Node(Entity("cat", "animal"), older),
        Node(Entity("other", "node"), older),
    ]
    relations = [Relation("hub", "other", "links")]
    found = search(nodes, relations, "cat", SearchLimits())
    # An exact name beats observations; among equal scores the connected one, then the recent one.
    assert [e.name for e in found.entities] == ["cat", "hub", "leaf"]
    assert term_score("cat", nodes[2].entity) > term_score("cat", nodes[0].entity) > 0


def test_empty_query_returns_the_whole_graph(kg: KnowledgeGraph) -> None:
    chain(kg)
    assert names(kg.search_nodes("   ")) == ["A", "B", "C", "D", "E"]


# ---------------------------------------------------------------------------- tools, end to end


async def call(srv: Any, session: Any, tool: str, **args: Any) -> tuple[bool, str, Any]:
    result = await session.call_tool(tool, args)
    text = "\n".join(c.text for c in result.content if hasattr(c, "text"))
    if not result.is_error:
        # Every graph reply is one JSON document, notes included (issue 13).
        assert len(result.content) == 1, text
        parsed = json.loads(text)
        assert parsed == result.structured_content or parsed == next(iter(result.structured_content.values()))
    return bool(result.is_error), text, result.structured_content


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.anyio
async def test_graph_tools_follow_the_official_memory_server(server_factory, transport: str) -> None:
    async with server_factory() as srv, srv.session("alice", transport) as s:
        error, text, data = await call(
            srv,
            s,
            "create_entities",
            entities=[
                {"name": "Alice", "entityType": "person", "observations": ["Speaks Dutch"]},
                {"name": "Acme", "entityType": "company", "observations": []},
            ],
        )
        assert not error
        assert json.loads(text.splitlines()[0]) == data["entities"]
        assert [e["name"] for e in data["entities"]] == ["Alice", "Acme"]

        error, text, data = await call(
            srv, s, "create_entities", entities=[{"name": "Alice", "entityType": "robot", "observations": []}]
        )
        assert not error and data["entities"] == [] and "exist already" in data["notes"][0]

        rel = {"from": "Alice", "to": "Acme", "relationType": "works_at"}
        error, _, data = await call(srv, s, "create_relations", relations=[rel, rel])
        assert not error and data["relations"] == [rel] and "Skipped 1" in data["notes"][0]
        error, _, data = await call(srv, s, "create_relations", relations=[rel])
        assert not error and data["relations"] == []
        error, text, _ = await call(
            srv, s, "create_relations", relations=[{"from": "Alice", "to": "Ghost", "relationType": "x"}]
        )
        assert error and "Ghost" in text and "create_entities" in text

        error, _, data = await call(
            srv,
            s,
            "add_observations",
            observations=[{"entityName": "Alice", "contents": ["Speaks Dutch", "Runs"]}],
        )
        assert not error
        assert data == {"results": [{"entityName": "Alice", "addedObservations": ["Runs"]}]}
        error, text, _ = await call(
            srv, s, "add_observations", observations=[{"entityName": "Nobody", "contents": ["x"]}]
        )
        assert error and "Nobody" in text

        error, text, data = await call(srv, s, "search_nodes", query="DUTCH")
        assert not error and [e["name"] for e in data["entities"]] == ["Alice"]
        assert json.loads(text) == data

        error, _, data = await call(srv, s, "open_nodes", names=["Acme"])
        assert data == {
            "entities": [{"name": "Acme", "entityType": "company", "observations": []}],
            "relations": [rel],
        }

        error, text, data = await call(
            srv, s, "delete_observations", deletions=[{"entityName": "Alice", "observations": ["Runs"]}]
        )
        assert (
            not error and data["message"] == "Observations deleted successfully" and data["success"] is True
        )
        error, text, data = await call(srv, s, "delete_relations", relations=[rel])
        assert not error and data["message"] == "Relations deleted successfully"
        await call(srv, s, "create_relations", relations=[rel])
        error, text, data = await call(srv, s, "delete_entities", entityNames=["Acme"])
        assert not error and data["message"] == "Entities deleted successfully"

        error, text, data = await call(srv, s, "read_graph")
        assert not error
        assert data == {
            "entities": [{"name": "Alice", "entityType": "person", "observations": ["Speaks Dutch"]}],
            "relations": [],
        }
        assert json.loads(text) == data


@pytest.mark.anyio
async def test_graph_tool_schemas_use_the_official_parameter_names(server_factory) -> None:
    async with server_factory() as srv, srv.session("alice") as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
    assert set(tools) >= {
        "create_entities",
        "create_relations",
        "add_observations",
        "delete_entities",
        "delete_observations",
        "delete_relations",
        "read_graph",
        "search_nodes",
        "open_nodes",
    }
    relation = json.dumps(tools["create_relations"].input_schema)
    assert '"from"' in relation and '"relationType"' in relation and "source" not in relation
    assert tools["delete_entities"].input_schema["required"] == ["entityNames"]
    assert tools["search_nodes"].input_schema["required"] == ["query"]
    assert "entities" in tools["read_graph"].output_schema["properties"]
    assert tools["read_graph"].annotations.read_only_hint is True
    assert tools["delete_entities"].annotations.destructive_hint is True


@pytest.mark.slow
@pytest.mark.anyio
async def test_search_nodes_tool_returns_connecting_entities(server_factory) -> None:
    async with server_factory() as srv, srv.session("alice", "sse") as s:
        await call(
            srv,
            s,
            "create_entities",
            entities=[{"name": n, "entityType": "letter", "observations": []} for n in "ABCDE"],
        )
        await call(
            srv,
            s,
            "create_relations",
            relations=[
                {"from": "A", "to": "B", "relationType": "next"},
                {"from": "B", "to": "C", "relationType": "next"},
                {"from": "C", "to": "D", "relationType": "next"},
            ],
        )
        _, _, data = await call(srv, s, "search_nodes", query="a d")
    assert {e["name"] for e in data["entities"]} == {"A", "B", "C", "D"}
    assert len(data["relations"]) == 3


@pytest.mark.slow
@pytest.mark.anyio
async def test_graph_survives_a_restart_and_tokens_are_isolated(server_factory, vault_root: Path) -> None:
    async with server_factory() as srv:
        async with srv.session("alice") as s:
            await call(
                srv,
                s,
                "create_entities",
                entities=[{"name": "Secret", "entityType": "x", "observations": []}],
            )
        async with srv.session("bob") as s:
            _, _, data = await call(srv, s, "read_graph")
            assert data == {"entities": [], "relations": []}
            _, _, data = await call(srv, s, "search_nodes", query="secret")
            assert data["entities"] == []
    assert not (vault_root / "bob").exists()  # reads create nothing
    async with server_factory() as srv, srv.session("alice") as s:
        _, _, data = await call(srv, s, "read_graph")
    assert [e["name"] for e in data["entities"]] == ["Secret"]


@pytest.mark.anyio
async def test_graph_replies_stay_within_the_reply_limit(server_factory) -> None:
    limit = 3000
    async with server_factory(max_reply_chars=limit) as srv, srv.session("alice") as s:
        entities = [
            {"name": f"host-{n:03d}", "entityType": "server", "observations": ["x" * 50]} for n in range(100)
        ]
        error, text, data = await call(srv, s, "create_entities", entities=entities)
        assert not error and len(text) <= limit and "all were saved" in text
        error, text, data = await call(srv, s, "read_graph")
        assert not error and len(text) <= limit + 200
        assert "Reply limit: showing" in text and 0 < len(data["entities"]) < 100
        error, text, data = await call(srv, s, "create_entities", entities=[])
        assert not error and data == {"entities": []} and text == "[]"
        big = {"name": "big", "entityType": "blob", "observations": ["y" * 2500, "z" * 2500]}
        await call(srv, s, "create_entities", entities=[big])
        error, text, data = await call(srv, s, "open_nodes", names=["big"])
        assert not error and len(text) <= limit + 200 and data["entities"][0]["name"] == "big"


def test_search_nodes_tolerates_typos_like_read_memory(tmp_path: Path) -> None:
    nodes = [
        Node(Entity("Alice", "person", ("Speaks Dutch",)), "2026-01-01"),
        Node(Entity("Bob", "person", ()), "2026-01-01"),
        Node(Entity("Rotterdam Harbour", "place", ()), "2026-01-01"),
    ]
    found = search(nodes, [], "alcie", SearchLimits())
    assert [e.name for e in found.entities] == ["Alice"]
    assert [e.name for e in search(nodes, [], "roterdam", SearchLimits()).entities] == ["Rotterdam Harbour"]
    assert search(nodes, [], "bxb", SearchLimits()).entities == ()  # 3 letters: too short to guess


def test_search_returns_every_relation_touching_a_result_and_says_when_it_stops(sidecar: Sidecar) -> None:
    kg = KnowledgeGraph(sidecar, max_chars=1000, clock=Clock(), limits=SearchLimits(max_results=3))
    kg.create_entities([Entity("Alice", "person"), Entity("Acme", "company"), Entity("Bob", "person")])
    kg.create_relations([Relation("Alice", "Acme", "works_at"), Relation("Bob", "Alice", "knows")])
    found = kg.search_nodes("acme")
    assert names(found) == ["Acme"]
    assert found.relations == (Relation("Alice", "Acme", "works_at"),)  # as the official server
    kg.create_entities([Entity(f"server-{n}", "host") for n in range(10)])
    capped = kg.search_nodes("server")
    assert len(capped.entities) == 3 and capped.left_out == 7


@pytest.mark.anyio
async def test_search_nodes_tool_says_how_many_matches_it_left_out(server_factory) -> None:
    async with server_factory(graph_max_results=5) as srv, srv.session("alice") as s:
        hosts = [{"name": f"host-{n}", "entityType": "server", "observations": []} for n in range(12)]
        await call(srv, s, "create_entities", entities=hosts)
        error, text, data = await call(srv, s, "search_nodes", query="host")
    assert not error and len(data["entities"]) == 5
    assert "7 more matching entities left out" in text and "narrow" in text


@pytest.mark.anyio
async def test_every_graph_tool_lists_the_shape_of_its_structured_content(server_factory) -> None:
    async with server_factory() as srv, srv.session("alice") as s:
        tools = {t.name: t for t in (await s.list_tools()).tools}
        graph_tools = [name for name, t in tools.items() if name in GRAPH_TOOLS]
        assert len(graph_tools) == 9
        for name in graph_tools:
            assert tools[name].output_schema is not None, name
        # The client checks each structured reply against the listed schema.
        await call(srv, s, "create_entities", entities=[{"name": "A", "entityType": "x", "observations": []}])
        await call(srv, s, "add_observations", observations=[{"entityName": "A", "contents": ["o"]}])
        await call(srv, s, "delete_relations", relations=[{"from": "A", "to": "A", "relationType": "r"}])


GRAPH_TOOLS = {
    "create_entities",
    "create_relations",
    "add_observations",
    "delete_entities",
    "delete_observations",
    "delete_relations",
    "read_graph",
    "search_nodes",
    "open_nodes",
}


@pytest.mark.anyio
async def test_read_graph_builds_its_reply_off_the_event_loop(server_factory, monkeypatch) -> None:
    import threading

    from memvault.records.graphsearch import Graph

    threads: list[threading.Thread] = []
    to_json = Graph.to_json

    def recording(self: Graph) -> dict[str, Any]:
        threads.append(threading.current_thread())
        return to_json(self)

    async with server_factory() as srv, srv.session("alice") as s:
        entities = [{"name": f"e{n}", "entityType": "x", "observations": ["fact"]} for n in range(300)]
        await call(srv, s, "create_entities", entities=entities)
        monkeypatch.setattr(Graph, "to_json", recording)
        for tool, args in (
            ("read_graph", {}),
            ("search_nodes", {"query": "fact"}),
            ("open_nodes", {"names": ["e1"]}),
        ):
            error, _, data = await call(srv, s, tool, **args)
            assert not error and data["entities"]
    assert threads and threading.main_thread() not in threads


@pytest.mark.anyio
async def test_a_reply_from_a_large_graph_costs_what_it_holds(server_factory, monkeypatch) -> None:
    sized: list[str] = []
    to_json = Entity.to_json

    def counting(self: Entity) -> dict[str, Any]:
        sized.append(self.name)
        return to_json(self)

    async with server_factory(max_reply_chars=5000) as srv, srv.session("alice") as s:
        entities = [{"name": f"e{n}", "entityType": "x", "observations": ["a fact"]} for n in range(5000)]
        await call(srv, s, "create_entities", entities=entities)
        monkeypatch.setattr(Entity, "to_json", counting)
        error, text, data = await call(srv, s, "read_graph")
    assert not error and "Reply limit: showing" in text and 0 < len(data["entities"]) < 100
    assert len(sized) < 300  # not the 5,000 entities of the graph, several times over


@pytest.mark.anyio
async def test_read_graph_says_what_it_keeps_but_cannot_serve(server_factory, vault_root: Path) -> None:
    (vault_root / "alice").mkdir()
    (vault_root / "alice" / "graph.jsonl").write_text(
        '{"type":"entity","name":"Ann","entityType":"person","observations":[]}\n'
        '{"type":"entity","name":"","entityType":"ghost","observations":[]}\n'
    )
    async with server_factory() as srv, srv.session("alice") as s:
        error, text, data = await call(srv, s, "read_graph")
        assert not error and [e["name"] for e in data["entities"]] == ["Ann"]
        assert "1 line(s)" in text and "an entity without a name" in text and "memvault check" in text
        assert str(vault_root) not in text
        error, _, _ = await call(srv, s, "create_entities", entities=[{"name": "Bo", "entityType": "x"}])
        assert not error
    assert '"name":""' in (vault_root / "alice" / "graph.jsonl").read_text()
