"""graph.jsonl as the official memory server writes it: read without loss (unknown fields, odd
lines, a BOM, CRLF), written compact, only changed lines changing."""

from __future__ import annotations

import json

from memvault.records.graphfile import compact, compose, entity_line, parse, relation_line
from memvault.records.graphsearch import Entity, Relation

ALICE = '{"type":"entity","name":"Alice","entityType":"person","observations":["likes tea"]}'
KNOWS = '{"type":"relation","from":"Alice","to":"Bob","relationType":"knows"}'


def test_lines_are_compact_as_the_official_server_writes_them() -> None:
    assert entity_line(Entity("Alice", "person", ("likes tea",))) == ALICE
    assert relation_line(Relation("Alice", "Bob", "knows")) == KNOWS
    # A line splitter's characters are escaped, so one entry stays one line.
    assert "\n" not in compact({"t": "a\u2028b\nc"}) and "\u2028" not in compact({"t": "a\u2028b"})


def test_an_edit_keeps_the_fields_memvault_does_not_know_in_their_place() -> None:
    old = '{"type":"entity","name":"Alice","x-colour":"red","entityType":"person","observations":[]}'
    new = entity_line(Entity("Alice", "person", ("likes tea",)), old)
    assert list(json.loads(new)) == ["type", "name", "x-colour", "entityType", "observations"]
    assert json.loads(new)["observations"] == ["likes tea"]


def test_reading_keeps_what_it_cannot_take_after_the_entry_it_followed() -> None:
    raw = "\n".join([ALICE, "not json", '{"type":"entity","entityType":"x"}', KNOWS, KNOWS]) + "\n"
    found = parse(raw)
    assert [e.name for e, _ in found.entities] == ["Alice"]
    assert [r.target for r, _ in found.relations] == ["Bob"]
    assert [(k.line, k.after) for k in found.kept] == [
        ("not json", ("entity", 0)),
        ('{"type":"entity","entityType":"x"}', ("entity", 0)),
        (KNOWS, ("relation", 0)),
    ]
    assert "the same relation again" in found.kept[-1].why
    kept = [(k.after[0], k.after[1], k.line) for k in found.kept]
    entities = [(i, line) for i, (_, line) in enumerate(found.entities)]
    relations = [(i, line) for i, (_, line) in enumerate(found.relations)]
    assert compose(entities, relations, kept, bom=False, final_newline=True) == raw


def test_two_lines_of_one_entity_from_a_merge_read_as_one_with_every_observation() -> None:
    other = '{"type":"entity","name":"Alice","entityType":"person","observations":["likes tea","runs"]}'
    found = parse(ALICE + "\n" + other + "\n")
    assert [e.observations for e, _ in found.entities] == [("likes tea", "runs")]
    assert found.kept == []


def test_a_bom_crlf_and_no_final_newline_survive_a_round_trip() -> None:
    raw = "\ufeff" + ALICE + "\r\n" + KNOWS + "\r"
    found = parse(raw)
    assert found.bom and not found.final_newline and not found.conflicted
    lines = [line for _, line in found.entities] + [line for _, line in found.relations]
    assert compose([], [], [], bom=found.bom, final_newline=found.final_newline, lines=lines) == raw


def test_git_markers_make_the_file_conflicted_and_it_still_reads() -> None:
    raw = f"{ALICE}\n<<<<<<< HEAD\n{KNOWS}\n=======\n>>>>>>> theirs\n"
    found = parse(raw)
    assert found.conflicted
    assert [e.name for e, _ in found.entities] == ["Alice"] and len(found.relations) == 1
    assert found.kept == []
