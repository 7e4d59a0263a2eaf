"""A three-way merge of graph.jsonl: entities by name, relations by their ends and type, lines kept.

Each side's file is read as :mod:`memvault.records.graphfile` reads it. An entry one side left as
the base had it takes the other side's version (a change, a deletion or nothing); an entry both
sides changed is merged field by field against the base, observations as sets (a deletion on one
side holds, an addition on either side stays); a change beats a deletion. Entries nobody changed
keep their lines byte for byte, fields memvault does not know included, and so do lines memvault
cannot read (kept as lines: one side's addition or deletion holds).

The result does not depend on which side is ours: where both sides changed the same field, and for
the order of what each side added, the side whose file sorts first by its bytes goes first, so two
clones merging the same pair of commits write the same bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, TypeVar

from memvault.records.graphfile import GraphText, compact, compose, parse

K = TypeVar("K", bound=Hashable)
_MISSING = object()


def merge_graph(base: bytes, ours: bytes, theirs: bytes) -> bytes:
    """The merged graph.jsonl of two sides that each changed ``base``."""
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    first_raw, second_raw = sorted((ours, theirs))
    b, f, s = (parse(raw.decode("utf-8", "surrogateescape")) for raw in (base, first_raw, second_raw))
    entities = _merge_entries(
        {e.name: line for e, line in b.entities},
        {e.name: line for e, line in f.entities},
        {e.name: line for e, line in s.entities},
    )
    relations = _merge_entries(
        {r: line for r, line in b.relations},
        {r: line for r, line in f.relations},
        {r: line for r, line in s.relations},
    )
    entity_at = {name: i for i, name in enumerate(entities)}
    relation_at = {key: i for i, key in enumerate(relations)}
    kept: list[tuple[str, int, str]] = []
    for line, (kind, key) in _merge_kept(b, f, s):
        if kind == "entity":
            kept.append((kind, entity_at.get(key, -1), line))
        elif kind == "relation":
            kept.append((kind, relation_at.get(key, -1), line))
        else:
            kept.append(("start", 0, line))
    text = compose(
        list(enumerate(entities.values())),
        list(enumerate(relations.values())),
        kept,
        bom=_three_way(b.bom, f.bom, s.bom),
        final_newline=_three_way(b.final_newline, f.final_newline, s.final_newline),
    )
    return text.encode("utf-8", "surrogateescape")


def _three_way(base: Any, first: Any, second: Any) -> Any:
    """One value both sides may have changed: a side's change holds; both changed, the first's."""
    if first == second or second == base:
        return first
    if first == base:
        return second
    return first


def _merge_entries(base: Mapping[K, str], first: Mapping[K, str], second: Mapping[K, str]) -> dict[K, str]:
    """Each entry's merged line, in the base's order, then what the first side added, then the second."""
    merged: dict[K, str] = {}
    for key in [*base, *first, *second]:
        if key in merged:
            continue
        line = _merge_line(base.get(key), first.get(key), second.get(key))
        if line is not None:
            merged[key] = line
    return merged


def _merge_line(base: str | None, first: str | None, second: str | None) -> str | None:
    """One entry's line (None: it is gone): a change beats a deletion; both changed, field by field."""
    if first == second or second == base:
        return first
    if first == base:
        return second
    if first is None:
        return second
    if second is None:
        return first
    rows = [_row(line) for line in (base, first, second)]
    _, row_f, row_s = rows
    if row_f is None or row_s is None:  # cannot happen for lines graphfile took as entries
        return first
    merged: dict[str, Any] = {}
    for key in [*row_f, *(k for k in row_s if k not in row_f)]:
        values = [r.get(key, _MISSING) if r is not None else _MISSING for r in rows]
        if key == "observations" and all(isinstance(v, list) or v is _MISSING for v in values):
            value: Any = merge_sets(*[v if isinstance(v, list) else [] for v in values])
        else:
            value = _three_way(*values)
        if value is not _MISSING:
            merged[key] = value
    return compact(merged) + ("\r" if first.endswith("\r") else "")


def merge_sets(base: Sequence[Any], first: Sequence[Any], second: Sequence[Any]) -> list[Any]:
    """Two sides' lists merged as sets against the base: what either side took out of the base
    goes, what either side added stays; the first side's order, then the second's additions."""
    in_base = set(base)
    removed = (in_base - set(first)) | (in_base - set(second))
    out = [item for item in first if item not in removed]
    have = set(first)
    out += [item for item in second if item not in have and item not in in_base]
    return out


def _row(line: str | None) -> dict[str, Any] | None:
    if line is None:
        return None
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return row if isinstance(row, dict) else None


def _anchored(text: GraphText) -> list[tuple[str, tuple[str, Any]]]:
    """Each line graphfile kept as it is, with the entry it follows named by its key, not its place."""
    out: list[tuple[str, tuple[str, Any]]] = []
    for kept in text.kept:
        kind, at = kept.after
        if kind == "entity" and at < len(text.entities):
            out.append((kept.line, (kind, text.entities[at][0].name)))
        elif kind == "relation" and at < len(text.relations):
            out.append((kept.line, (kind, text.relations[at][0])))
        else:
            out.append((kept.line, ("start", None)))
    return out


def _merge_kept(b: GraphText, f: GraphText, s: GraphText) -> list[tuple[str, tuple[str, Any]]]:
    """The lines memvault cannot read, merged as lines: how many times each stands in the file is
    merged three ways, and each keeps its place after the entry it followed."""
    sides = [_anchored(t) for t in (b, f, s)]
    counts = [Counter(line for line, _ in side) for side in sides]
    wanted = {
        line: _three_way(counts[0][line], counts[1][line], counts[2][line])
        for line in {line for side in sides for line, _ in side}
    }
    out: list[tuple[str, tuple[str, Any]]] = []
    taken: Counter[str] = Counter()
    # The first side's places first, then the second's, then the base's (a line only it still has).
    for side in (sides[1], sides[2], sides[0]):
        for line, anchor in side:
            if taken[line] < wanted[line]:
                taken[line] += 1
                out.append((line, anchor))
    return out
