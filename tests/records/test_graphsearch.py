"""The knowledge graph's search, pure: how terms score, which entities come first, what joins two
terms, what the caps leave out and say they left out."""

from __future__ import annotations

from memvault.records.graphsearch import Entity, Node, Relation, SearchLimits, query_terms, search, term_score


def node(name: str, kind: str = "person", *observations: str, updated: str = "2026-01-01T00:00:00Z") -> Node:
    return Node(Entity(name, kind, tuple(observations)), updated)


def names(graph: object) -> list[str]:
    return [e.name for e in graph.entities]  # type: ignore[attr-defined]


def test_query_terms_are_distinct_case_folded_and_bounded() -> None:
    assert query_terms("Alice  alice BOB") == ["alice", "bob"]
    assert len(query_terms(" ".join(f"w{i}" for i in range(100)))) == 16


def test_a_name_scores_above_a_type_above_an_observation() -> None:
    in_name = term_score("rust", Entity("Rust", "language"))
    in_type = term_score("rust", Entity("Ferris", "rust"))
    in_observation = term_score("rust", Entity("Ann", "person", ("writes rust daily",)))
    assert in_name > in_type > in_observation > 0
    assert term_score("rust", Entity("Ann", "person", ("writes go",))) == 0


def test_a_typo_in_a_name_still_finds_it() -> None:
    assert term_score("kubernets", Entity("Kubernetes", "tool")) > 0
    found = search([node("Kubernetes", "tool"), node("Docker", "tool")], [], "kubernets", SearchLimits())
    assert names(found) == ["Kubernetes"]


def test_an_entity_matching_nothing_is_left_out_and_relations_touch_the_results() -> None:
    nodes = [node("Alice", "person", "likes tea"), node("Bob"), node("Carol")]
    relations = [Relation("Alice", "Bob", "knows"), Relation("Bob", "Carol", "knows")]
    found = search(nodes, relations, "tea", SearchLimits())
    assert names(found) == ["Alice"]
    assert [(r.source, r.target) for r in found.relations] == [("Alice", "Bob")]


def test_two_terms_bring_the_entities_on_the_path_joining_them() -> None:
    nodes = [node("Alice"), node("Bridge", "company"), node("Zed")]
    relations = [Relation("Alice", "Bridge", "works at"), Relation("Bridge", "Zed", "owned by")]
    found = search(nodes, relations, "alice zed", SearchLimits())
    assert set(names(found)) == {"Alice", "Bridge", "Zed"}
    # With paths switched off only the two named ones come back.
    assert set(names(search(nodes, relations, "alice zed", SearchLimits(max_path_len=0)))) == {"Alice", "Zed"}


def test_the_exact_full_name_comes_first_whatever_the_cap() -> None:
    # Each word matches many entities; the one the query names must not fall to the cap.
    crowd = [node(f"Jonas {i}") for i in range(60)] + [node(f"Jansen {i}") for i in range(60)]
    target = node("Jonas Jansen", updated="2020-01-01T00:00:00Z")  # the oldest: recency is no help
    found = search([*crowd, target], [], "jonas jansen", SearchLimits(max_results=5))
    assert names(found)[0] == "Jonas Jansen"
    assert len(found.entities) == 5
    assert found.left_out > 0


def test_all_terms_in_a_name_rank_before_one_term_elsewhere() -> None:
    nodes = [
        node("Project", "thing", "alpha release notes"),
        node("Alpha Release Plan", "plan", updated="2019-01-01T00:00:00Z"),
    ]
    assert names(search(nodes, [], "alpha release", SearchLimits()))[0] == "Alpha Release Plan"


def test_among_equal_matches_the_better_connected_comes_first() -> None:
    nodes = [node("Tea A", "drink"), node("Tea B", "drink"), node("Cup", "thing")]
    relations = [Relation("Tea B", "Cup", "served in")]
    assert names(search(nodes, relations, "drink", SearchLimits()))[:2] == ["Tea B", "Tea A"]


def test_an_empty_query_finds_nothing() -> None:
    found = search([node("Alice")], [], "   ", SearchLimits())
    assert found.entities == () and found.left_out == 0
