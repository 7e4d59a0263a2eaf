"""The knowledge graph's shapes and its search: each term's best entities and the paths joining them."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rapidfuzz.distance import OSA

# Search limits (defaults of the MEMVAULT_GRAPH_* settings).
MAX_PATH_LEN = 4  # most relations on a path joining two entry entities
MAX_ENTRY_PER_TERM = 5  # most entry entities one query term picks
MAX_RESULT_ENTITIES = 50  # most entities one search returns
MAX_TERMS = 16
MAX_QUERY_CHARS = 2048  # as the official server
ENTRY_RATIO = 0.5  # an entry entity scores at least this share of its term's best score


@dataclass(frozen=True, slots=True)
class Entity:
    name: str
    entity_type: str
    observations: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "entityType": self.entity_type, "observations": list(self.observations)}


@dataclass(frozen=True, slots=True)
class Relation:
    source: str  # "from" on the wire
    target: str  # "to"
    relation_type: str

    def to_json(self) -> dict[str, Any]:
        return {"from": self.source, "to": self.target, "relationType": self.relation_type}


@dataclass(frozen=True, slots=True)
class Graph:
    entities: tuple[Entity, ...] = ()
    relations: tuple[Relation, ...] = ()
    left_out: int = 0  # entities a search matched beyond its cap

    def to_json(self) -> dict[str, Any]:
        return {
            "entities": [e.to_json() for e in self.entities],
            "relations": [r.to_json() for r in self.relations],
        }


@dataclass(frozen=True, slots=True)
class Node:
    """An entity with its last change time, for ranking by recency."""

    entity: Entity
    updated: str


@dataclass(frozen=True, slots=True)
class SearchLimits:
    max_path_len: int = MAX_PATH_LEN
    entries_per_term: int = MAX_ENTRY_PER_TERM
    max_results: int = MAX_RESULT_ENTITIES


# ---------------------------------------------------------------------------- search (pure)


_WORDS = re.compile(r"\w+")


def query_terms(query: str) -> list[str]:
    """The distinct, case-folded whitespace-separated terms of a query, in order."""
    return list(dict.fromkeys(t.casefold() for t in query.split()))[:MAX_TERMS]


def _word_start(text: str, term: str) -> bool:
    start = text.find(term)
    while start >= 0:
        if start == 0 or not text[start - 1].isalnum():
            return True
        start = text.find(term, start + 1)
    return False


def term_score(term: str, entity: Entity) -> float:
    """How well one (case-folded) term matches an entity: name above type above observations."""
    name = entity.name.casefold()
    kind = entity.entity_type.casefold()
    score = 0.0
    if name == term:
        score += 10
    elif _word_start(name, term):
        score += 6
    elif term in name:
        score += 4
    if kind == term:
        score += 3
    elif term in kind:
        score += 1
    # Term frequency in the observations, capped so one chatty entity cannot drown a name match.
    score += min(5, sum(o.casefold().count(term) for o in entity.observations))
    if score == 0:
        # A typo, as read_memory tolerates them: a word of the name (or type) within one edit or swap
        # (4-7 letters) or two (8 or more) of the term.
        score = 3.0 if _near_word(term, name) else 1.0 if _near_word(term, kind) else 0.0
    return score


def _near_word(term: str, text: str) -> bool:
    if len(term) < 4:
        return False
    most = 1 if len(term) < 8 else 2
    return any(
        abs(len(word) - len(term)) <= most and OSA.distance(term, word, score_cutoff=most) <= most
        for word in _WORDS.findall(text)
    )


def _ranked(
    names: Iterable[str], score: Mapping[str, float], degree: Mapping[str, int], updated: Mapping[str, str]
) -> list[str]:
    out = sorted(names)
    out.sort(key=lambda n: updated[n], reverse=True)  # recency breaks ties ...
    out.sort(key=lambda n: (-score[n], -degree[n]))  # ... after score and connectedness
    return out


def _shortest_paths(
    source: str, targets: set[str], adjacency: Mapping[str, Sequence[str]], max_len: int
) -> dict[str, list[str]]:
    """Breadth-first from ``source`` (at most ``max_len`` relations): the path to each reachable target."""
    parent: dict[str, str | None] = {source: None}
    frontier = deque([(source, 0)])
    found: dict[str, list[str]] = {}
    while frontier and len(found) < len(targets):
        node, depth = frontier.popleft()
        if node in targets and node != source and node not in found:
            path = [node]
            while (step := parent[path[-1]]) is not None:
                path.append(step)
            found[node] = path[::-1]
        if depth == max_len:
            continue
        for nxt in adjacency.get(node, ()):
            if nxt not in parent:
                parent[nxt] = node
                frontier.append((nxt, depth + 1))
    return found


def search(nodes: Sequence[Node], relations: Sequence[Relation], query: str, limits: SearchLimits) -> Graph:
    """Entities matching the query, ranked, plus the entities on short paths joining the terms' best matches.

    Each term picks its entry entities: its best matches (name, type, observations; scored by
    :func:`term_score`, then connectedness, then recency), at most ``entries_per_term``, each
    scoring at least half of the term's best. The shortest path (relations read both ways, at
    most ``max_path_len`` long) between entry entities of different terms is added, so a query
    for two concepts also returns what connects them. Then come entities matching every term,
    then those matching some term. An entity that matches no term and joins nothing is left out.
    Relations returned are every one from or to a result entity (as the official server's search);
    ``left_out`` says how many matching entities the cap left out.
    """
    terms = query_terms(query)
    by_name = {n.entity.name: n for n in nodes}
    adjacency: dict[str, set[str]] = {}
    for r in relations:
        if r.source != r.target and r.source in by_name and r.target in by_name:
            adjacency.setdefault(r.source, set()).add(r.target)
            adjacency.setdefault(r.target, set()).add(r.source)
    degree = {name: len(adjacency.get(name, ())) for name in by_name}
    updated = {name: n.updated for name, n in by_name.items()}
    ordered_adjacency = {name: sorted(near) for name, near in adjacency.items()}

    per_term: list[dict[str, float]] = []
    for term in terms:
        scores = {name: s for name, n in by_name.items() if (s := term_score(term, n.entity)) > 0}
        per_term.append(scores)

    entries: list[list[str]] = []
    for scores in per_term:
        ranked = _ranked(scores, scores, degree, updated)
        best = scores[ranked[0]] if ranked else 0.0
        entries.append([n for n in ranked if scores[n] >= best * ENTRY_RATIO][: limits.entries_per_term])

    result: dict[str, None] = {}
    for group in entries:
        result.update(dict.fromkeys(group))

    # Connecting paths between the entry entities of different terms.
    if limits.max_path_len > 0:
        for i, group in enumerate(entries):
            later = {n for other in entries[i + 1 :] for n in other} - set(group)
            if not later:
                continue
            for source in group:
                paths = _shortest_paths(source, later, ordered_adjacency, limits.max_path_len)
                for target in sorted(paths):
                    result.update(dict.fromkeys(paths[target]))

    total = {name: sum(scores.get(name, 0.0) for scores in per_term) for name in by_name}
    if per_term:
        every = [n for n in by_name if all(n in scores for scores in per_term)]
        some = [n for n in by_name if any(n in scores for scores in per_term)]
        result.update(dict.fromkeys(_ranked(every, total, degree, updated)))
        result.update(dict.fromkeys(_ranked(some, total, degree, updated)))

    chosen = list(result)[: limits.max_results]
    keep = set(chosen)
    return Graph(
        tuple(by_name[name].entity for name in chosen),
        tuple(r for r in relations if r.source in keep or r.target in keep),
        len(result) - len(chosen),
    )
