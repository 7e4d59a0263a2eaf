"""The graph's merge: the same result whichever side is ours, no addition lost, no marker, what
memvault does not read kept byte for byte."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from strategies import PROPS

from memvault.disk.markdown import has_conflict_markers
from memvault.git.mergegraph import merge_graph
from memvault.records.graphfile import compact, parse

NAMES = ["ada", "grace", "linus", "Ünïcode name"]
WORDS = ["x", "y", "z", "w", "a long observation, with punctuation"]
Graph = dict[str, Any]  # {"entities": {name: [type, [obs]]}, "relations": [(from, to)]}

graph_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(NAMES), st.lists(st.sampled_from(WORDS), max_size=3)),
        st.tuples(st.just("delete"), st.sampled_from(NAMES)),
        st.tuples(st.just("observe"), st.sampled_from(NAMES), st.sampled_from(WORDS)),
        st.tuples(st.just("forget"), st.sampled_from(NAMES), st.sampled_from(WORDS)),
        st.tuples(st.just("retype"), st.sampled_from(NAMES), st.sampled_from(["person", "team"])),
        st.tuples(st.just("relate"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
        st.tuples(st.just("unrelate"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    ),
    max_size=8,
)


def apply_graph(graph: Graph, ops: list[tuple[Any, ...]]) -> Graph:
    """The official server's operations on a graph: a deleted entity takes its relations along."""
    entities = {name: [kind, list(obs)] for name, (kind, obs) in graph["entities"].items()}
    relations = list(graph["relations"])
    for op, *args in ops:
        if op == "add" and args[0] not in entities:
            entities[args[0]] = ["person", list(dict.fromkeys(args[1]))]
        elif op == "delete" and args[0] in entities:
            del entities[args[0]]
            relations = [r for r in relations if args[0] not in r]
        elif op == "observe" and args[0] in entities and args[1] not in entities[args[0]][1]:
            entities[args[0]][1].append(args[1])
        elif op == "forget" and args[0] in entities and args[1] in entities[args[0]][1]:
            entities[args[0]][1].remove(args[1])
        elif op == "retype" and args[0] in entities:
            entities[args[0]][0] = args[1]
        elif op == "relate" and tuple(args) not in relations:
            relations.append(tuple(args))
        elif op == "unrelate" and tuple(args) in relations:
            relations.remove(tuple(args))
    return {"entities": entities, "relations": relations}


def graph_bytes(graph: Graph) -> bytes:
    lines = [
        compact({"type": "entity", "name": name, "entityType": kind, "observations": obs})
        for name, (kind, obs) in graph["entities"].items()
    ]
    lines += [
        compact({"type": "relation", "from": a, "to": b, "relationType": "knows"})
        for a, b in graph["relations"]
    ]
    return "".join(line + "\n" for line in lines).encode()


def read_graph(data: bytes) -> tuple[dict[str, tuple[str, ...]], set[tuple[str, str]]]:
    text = parse(data.decode())
    assert not text.kept and not text.conflicted
    return (
        {e.name: e.observations for e, _ in text.entities},
        {(r.source, r.target) for r, _ in text.relations},
    )


@PROPS
@given(graph_ops, graph_ops, graph_ops)
def test_graph_merges_the_same_either_way_round_and_keeps_every_addition(
    made: list[tuple[Any, ...]], mine: list[tuple[Any, ...]], yours: list[tuple[Any, ...]]
) -> None:
    base = apply_graph({"entities": {}, "relations": []}, made)
    ours, theirs = apply_graph(base, mine), apply_graph(base, yours)
    b, o, t = graph_bytes(base), graph_bytes(ours), graph_bytes(theirs)

    merged = merge_graph(b, o, t)
    assert merged == merge_graph(b, t, o)
    assert not has_conflict_markers(merged.decode())
    entities, relations = read_graph(merged)
    for side in (ours, theirs):
        for name, (kind, obs) in side["entities"].items():
            if base["entities"].get(name) == [kind, obs]:
                continue  # unchanged on this side: the other side's deletion may hold
            base_obs = base["entities"].get(name, [None, []])[1]
            assert name in entities  # added or changed: a change beats a deletion
            assert set(obs) - set(base_obs) <= set(entities[name])  # each observation added stays
        assert set(side["relations"]) - set(base["relations"]) <= relations
    for name in set(base["entities"]) - set(entities):  # gone: a side deleted it, none changed it
        assert any(name not in side["entities"] for side in (ours, theirs))
        assert all(
            side["entities"].get(name, base["entities"][name]) == base["entities"][name]
            for side in (ours, theirs)
        )


@PROPS
@given(graph_ops, graph_ops)
def test_graph_merge_with_one_side_unchanged_is_the_other_side(
    made: list[tuple[Any, ...]], mine: list[tuple[Any, ...]]
) -> None:
    base = graph_bytes(apply_graph({"entities": {}, "relations": []}, made))
    ours = graph_bytes(apply_graph(apply_graph({"entities": {}, "relations": []}, made), mine))
    assert merge_graph(base, ours, base) == ours
    assert merge_graph(base, base, ours) == ours


def test_graph_merge_keeps_unknown_fields_and_unreadable_lines_byte_for_byte() -> None:
    ada = '{"type":"entity","name":"ada","entityType":"person","observations":["x"],"since": 1815}'
    odd = "{not json at all"
    base = f"{ada}\n{odd}\n".encode()
    ours = (
        f'{ada}\n{odd}\n{{"type":"entity","name":"grace","entityType":"person","observations":[]}}\n'.encode()
    )
    more = ada.replace('["x"]', '["x","y"]')
    theirs = f"{more}\n{odd}\n".encode()
    merged = merge_graph(base, ours, theirs).decode()
    lines = merged.splitlines()
    assert odd in lines
    assert json.loads(lines[0]) == {
        "type": "entity",
        "name": "ada",
        "entityType": "person",
        "observations": ["x", "y"],
        "since": 1815,
    }
    assert '{"type":"entity","name":"grace","entityType":"person","observations":[]}' in lines


def test_a_change_beats_a_deletion_in_the_graph() -> None:
    ada = compact({"type": "entity", "name": "ada", "entityType": "person", "observations": ["x"]})
    changed = compact({"type": "entity", "name": "ada", "entityType": "person", "observations": ["x", "y"]})
    merged = merge_graph(f"{ada}\n".encode(), b"", f"{changed}\n".encode())
    assert merged == f"{changed}\n".encode()
