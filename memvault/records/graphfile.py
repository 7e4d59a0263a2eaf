"""The graph.jsonl format: the official memory server's lines, read without loss and written compact.

One JSON object per line, ``{"type":"entity","name":...,"entityType":...,"observations":[...]}`` or
``{"type":"relation","from":...,"to":...,"relationType":...}``, written as the official server
writes them (compact JSON, entities then relations). Reading keeps each entry's line as it is, so a
write changes only the lines of what changed, byte for byte the rest: fields memvault does not know
stay, repeated observations stay, a relation whose ends are no entities stays (the official server
stores those). A line memvault cannot take as an entity or a relation (not JSON, an entity without a
name, a second entity of one name with another type, a relation repeated) is kept as it is, after
the entry it followed, and reported. Only git's conflict markers make the file read-only.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from memvault.disk.markdown import has_conflict_markers
from memvault.records.graphsearch import Entity, Relation

BOM = "\ufeff"
# Characters str.splitlines (and some editors) take for line ends; JSON allows them raw in strings.
_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}
_MARKERS = ("<<<<<<<", "=======", ">>>>>>>", "|||||||")
_MERGED = ""
_UNDECODED = re.compile("[\udc80-\udcff]")


@dataclass(frozen=True, slots=True)
class Kept:
    """A line memvault cannot take as an entity or a relation, kept as it is after the entry it
    followed: ``after`` is ("entity", i) or ("relation", i), i-th of its kind in the file, or
    ("start", 0)."""

    line: str
    why: str
    after: tuple[str, int]
    number: int  # its line number in the file (1-based), for reports


@dataclass(slots=True)
class GraphText:
    """What a graph.jsonl holds, in file order."""

    entities: list[tuple[Entity, str]] = field(default_factory=list)  # each with its line
    relations: list[tuple[Relation, str]] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)
    conflicted: bool = False  # git left conflict markers: served as far as it reads, never written
    bom: bool = False
    final_newline: bool = True


def compact(row: dict[str, Any]) -> str:
    """One line as the official server writes it (JSON.stringify: no spaces, UTF-8 kept), every
    character a line splitter might break on escaped."""
    line = json.dumps(row, ensure_ascii=False, separators=(",", ":"))
    for char, escape in _LINE_BREAKS.items():
        line = line.replace(char, escape)
    return line


def entity_line(entity: Entity, old: str | None = None) -> str:
    """An entity's line: its old line with name, type and observations set (fields memvault does
    not know keep their place), or a new one in the official server's key order."""
    row = _object(old) if old is not None else None
    if row is None or row.get("type") != "entity":
        row = {"type": "entity"}
    row["name"] = entity.name
    row["entityType"] = entity.entity_type
    row["observations"] = list(entity.observations)
    return compact(row) + ("\r" if old is not None and old.endswith("\r") else "")  # a CRLF file stays so


def relation_line(relation: Relation) -> str:
    return compact({"type": "relation", **relation.to_json()})


def _object(line: str) -> dict[str, Any] | None:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return row if isinstance(row, dict) else None


def parse(raw: str) -> GraphText:
    """Every line of a graph.jsonl: entries with their lines, and the lines kept as they are."""
    found = GraphText()
    if raw.startswith(BOM):
        raw, found.bom = raw[1:], True
    found.final_newline = raw.endswith("\n") or not raw
    found.conflicted = has_conflict_markers(raw)
    by_name: dict[str, int] = {}
    seen: set[Relation] = set()
    after: tuple[str, int] = ("start", 0)
    for number, line in enumerate(raw.split("\n"), start=1):
        if not line.strip():  # a line keeps its "\r" (a CRLF file): json.loads takes it as space
            continue
        if found.conflicted and line.startswith(_MARKERS):
            continue
        if _UNDECODED.search(line):  # bytes that are not UTF-8 (read with surrogate escapes)
            found.kept.append(Kept(line, "not UTF-8 text", after, number))
            continue
        row = _object(line)
        why = _entry(row, line, found, by_name, seen) if row is not None else "not JSON"
        if why == "entity":
            after = ("entity", len(found.entities) - 1)
        elif why == "relation":
            after = ("relation", len(found.relations) - 1)
        elif why != _MERGED:
            found.kept.append(Kept(line, why, after, number))
    return found


def _entry(
    row: dict[str, Any], line: str, found: GraphText, by_name: dict[str, int], seen: set[Relation]
) -> str:
    """Take one parsed line as an entity or a relation (and say which, or that it merged into an
    earlier line of its entity); or say why it cannot be taken."""
    kind = row.get("type")
    if kind == "entity":
        name, entity_type, observations = row.get("name"), row.get("entityType"), row.get("observations")
        if observations is None:
            observations = []
        if not isinstance(name, str) or not name.strip():
            return "an entity without a name"
        if not isinstance(entity_type, str):
            return "an entity whose entityType is not text"
        if not isinstance(observations, list) or not all(isinstance(o, str) for o in observations):
            return "an entity whose observations are not a list of text"
        entity = Entity(name, entity_type, tuple(observations))
        index = by_name.get(name)
        if index is None:
            by_name[name] = len(found.entities)
            found.entities.append((entity, line))
            return "entity"
        first, first_line = found.entities[index]
        if first.entity_type != entity_type:
            return f"a second entity named {name!r}, of another type"
        # A merge kept both sides' lines: one entity with every observation of both.
        merged = first.observations + tuple(o for o in entity.observations if o not in first.observations)
        entity = Entity(name, entity_type, merged)
        found.entities[index] = (entity, entity_line(entity, first_line))
        return _MERGED
    if kind == "relation":
        source, target, relation_type = row.get("from"), row.get("to"), row.get("relationType")
        if not all(isinstance(x, str) and x for x in (source, target)) or not isinstance(relation_type, str):
            return "a relation without text in from, to or relationType"
        relation = Relation(str(source), str(target), relation_type)
        if relation in seen:
            return "the same relation again"
        seen.add(relation)
        found.relations.append((relation, line))
        return "relation"
    return "neither an entity nor a relation"


def compose(
    entities: Sequence[tuple[int, str]],
    relations: Sequence[tuple[int, str]],
    kept: Iterable[tuple[str, int, str]],
    *,
    bom: bool,
    final_newline: bool,
    lines: list[str] | None = None,
) -> str:
    """The file's text: entities, then relations (each in creation order, by row id), each kept
    line after the entry it followed (at the end of its section when that entry is gone); or
    ``lines`` as they are, when there is nothing to place between them."""
    if lines is not None:
        text = "\n".join(lines) + ("\n" if lines and final_newline else "")
        return (BOM if bom else "") + text
    anchored: dict[tuple[str, int], list[str]] = {}
    for kind, after, line in kept:
        anchored.setdefault((kind, after), []).append(line)
    out: list[str] = list(anchored.pop(("start", 0), []))
    for kind, rows in (("entity", entities), ("relation", relations)):
        for rowid, line in rows:
            out.append(line)
            out += anchored.pop((kind, rowid), [])
        for key in [k for k in anchored if k[0] == kind]:
            out += anchored.pop(key)
    for lines in anchored.values():
        out += lines
    text = "\n".join(out) + ("\n" if out and final_newline else "")
    return (BOM if bom else "") + text
