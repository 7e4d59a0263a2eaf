"""The knowledge graph's shapes and its search: each term's best entities and the paths joining them."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rapidfuzz import process
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


@dataclass(frozen=True, slots=True)
class Folded:
    """An entity's text case-folded once, for every term of every search until the graph changes."""

    name: str
    kind: str
    observations: str  # each observation case-folded, one per line (a term holds no line break)
    blob: str  # all three: a term found nowhere in it scores by typos alone

    @classmethod
    def of(cls, entity: Entity) -> Folded:
        name, kind = entity.name.casefold(), entity.entity_type.casefold()
        observations = "\n".join(o.casefold() for o in entity.observations)
        return cls(name, kind, observations, f"{name}\n{kind}\n{observations}")


def term_score(term: str, entity: Entity | Folded) -> float:
    """How well one (case-folded) term matches an entity: name above type above observations."""
    folded = entity if isinstance(entity, Folded) else Folded.of(entity)
    score = _exact_score(term, folded)
    if score == 0:
        # A typo, as read_memory tolerates them: a word of the name (or type) within one edit or swap
        # (4-7 letters) or two (8 or more) of the term.
        score = 3.0 if _near_word(term, folded.name) else 1.0 if _near_word(term, folded.kind) else 0.0
    return score


def _exact_score(term: str, folded: Folded) -> float:
    if term not in folded.blob:
        return 0.0
    name, kind = folded.name, folded.kind
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
    return score + min(5, folded.observations.count(term))


def _near_word(term: str, text: str) -> bool:
    return any(_near(term, word) for word in _WORDS.findall(text))


def _near(term: str, word: str) -> bool:
    if len(term) < 4:
        return False
    most = 1 if len(term) < 8 else 2
    return abs(len(word) - len(term)) <= most and OSA.distance(term, word, score_cutoff=most) <= most


def _near_names(term: str, words: Mapping[str, list[str]]) -> set[str]:
    """The entities one of whose words (in ``words``: word -> entities) is within a typo of the term
    (every word compared in one call: a distance is never less than the difference in length)."""
    if len(term) < 4:
        return set()
    most = 1 if len(term) < 8 else 2
    near = process.extract(term, words.keys(), scorer=OSA.distance, score_cutoff=most, limit=None)
    return {name for word, _, _ in near for name in words[word]}


def _ranked(
    names: Iterable[str], score: Mapping[str, float], rank: Mapping[str, int], most: int
) -> list[str]:
    """The ``most`` best: by score, then by ``rank`` (connectedness, then recency, then name; see
    Prepared). Grouped by score first, so only the groups that reach ``most`` are sorted."""
    groups: dict[float, list[str]] = {}
    for name in names:
        groups.setdefault(score[name], []).append(name)
    out: list[str] = []
    for value in sorted(groups, reverse=True):
        out += sorted(groups[value], key=rank.__getitem__)
        if len(out) >= most:
            break
    return out[:most]


@dataclass(frozen=True, slots=True)
class Prepared:
    """What every search of one state of the graph shares: computed once, kept until it changes."""

    by_name: dict[str, Node]
    folded: dict[str, Folded]
    adjacency: dict[str, list[str]]  # relations read both ways, among entities, sorted
    rank: dict[str, int]  # order among equal scores: the better connected, the more recent, by name
    touching: dict[str, list[int]]  # each entity's relations (their places in the relation list)
    name_words: dict[str, list[str]]  # each word of a name -> the entities with it in their name
    kind_words: dict[str, list[str]]  # the same for types
    named: dict[str, list[str]]  # each case-folded name, its words joined by one space -> entities

    @classmethod
    def of(cls, nodes: Sequence[Node], relations: Sequence[Relation]) -> Prepared:
        by_name = {n.entity.name: n for n in nodes}
        near: dict[str, set[str]] = {}
        for r in relations:
            if r.source != r.target and r.source in by_name and r.target in by_name:
                near.setdefault(r.source, set()).add(r.target)
                near.setdefault(r.target, set()).add(r.source)
        times = sorted({n.updated for n in nodes}, reverse=True)
        rank = {t: i for i, t in enumerate(times)}
        folded = {name: Folded.of(n.entity) for name, n in by_name.items()}
        name_words: dict[str, list[str]] = {}
        kind_words: dict[str, list[str]] = {}
        for name, f in folded.items():
            for word in dict.fromkeys(_WORDS.findall(f.name)):
                name_words.setdefault(word, []).append(name)
            for word in dict.fromkeys(_WORDS.findall(f.kind)):
                kind_words.setdefault(word, []).append(name)
        named: dict[str, list[str]] = {}
        for name, f in folded.items():
            named.setdefault(" ".join(f.name.split()), []).append(name)
        order = sorted(by_name, key=lambda n: (-len(near.get(n, ())), rank[by_name[n].updated], n))
        touching: dict[str, list[int]] = {}
        for i, r in enumerate(relations):
            touching.setdefault(r.source, []).append(i)
            if r.target != r.source:
                touching.setdefault(r.target, []).append(i)
        return cls(
            by_name,
            folded,
            {name: sorted(them) for name, them in near.items()},
            {name: i for i, name in enumerate(order)},
            touching,
            name_words,
            kind_words,
            named,
        )


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


def search(
    nodes: Sequence[Node],
    relations: Sequence[Relation],
    query: str,
    limits: SearchLimits,
    prepared: Prepared | None = None,
) -> Graph:
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
    p = prepared if prepared is not None else Prepared.of(nodes, relations)
    by_name, rank, ordered_adjacency = p.by_name, p.rank, p.adjacency

    per_term: list[dict[str, float]] = []
    for term in terms:
        scores = {name: _exact_score(term, f) for name, f in p.folded.items() if term in f.blob}
        # A typo (see term_score): words within an edit or two, looked up once per distinct word.
        near_name = _near_names(term, p.name_words) - scores.keys()
        near_kind = _near_names(term, p.kind_words) - scores.keys() - near_name
        scores.update(dict.fromkeys(near_name, 3.0))
        scores.update(dict.fromkeys(near_kind, 1.0))
        per_term.append(scores)

    entries: list[list[str]] = []
    for scores in per_term:
        ranked = _ranked(scores, scores, rank, limits.entries_per_term)
        best = scores[ranked[0]] if ranked else 0.0
        entries.append([n for n in ranked if scores[n] >= best * ENTRY_RATIO])

    # The query naming an entity comes first whatever the cap (a person's full name whose every
    # word matches a hundred others was left out), then entities whose name holds every term.
    result: dict[str, None] = dict.fromkeys(p.named.get(" ".join(terms), ()))
    if len(terms) > 1:
        in_name = [n for n in per_term[0] if all(t in p.folded[n].name for t in terms)]
        if in_name:
            named_total = {n: sum(scores.get(n, 0.0) for scores in per_term) for n in in_name}
            result.update(dict.fromkeys(_ranked(in_name, named_total, rank, limits.max_results)))
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

    matched = len(result)
    if per_term:
        some = set().union(*per_term)
        matched = len(some | result.keys())
        total = dict(per_term[0])
        for scores in per_term[1:]:
            for name, value in scores.items():
                total[name] = total.get(name, 0.0) + value
        every = set(per_term[0]).intersection(*per_term[1:])
        # Only as many as can still come back are ranked.
        result.update(dict.fromkeys(_ranked(every, total, rank, limits.max_results)))
        if len(result) < limits.max_results:
            result.update(dict.fromkeys(_ranked(some, total, rank, limits.max_results)))

    chosen = list(result)[: limits.max_results]
    places = sorted({i for name in chosen for i in p.touching.get(name, ())})
    return Graph(
        tuple(by_name[name].entity for name in chosen),
        tuple(relations[i] for i in places),
        matched - len(chosen),
    )
