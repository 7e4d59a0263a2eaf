"""The knowledge graph: entities with observations and typed relations, and a search that joins paths."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

from memvault.clock import Clock, format_time, require_time, utcnow
from memvault.errors import InvalidArgument, UnknownEntity
from memvault.records.graphfile import entity_line, relation_line
from memvault.records.graphsearch import (
    MAX_PATH_LEN,
    MAX_QUERY_CHARS,
    MAX_RESULT_ENTITIES,
    Entity,
    Graph,
    Node,
    Prepared,
    Relation,
    SearchLimits,
    query_terms,
    search,
    term_score,
)
from memvault.records.sidecar import Sidecar, SidecarRecords

__all__ = [
    "MAX_PATH_LEN",
    "MAX_RESULT_ENTITIES",
    "Entity",
    "Graph",
    "GraphImported",
    "GraphRows",
    "KnowledgeGraph",
    "Node",
    "Relation",
    "SearchLimits",
    "query_terms",
    "search",
    "term_score",
]

MAX_NAME_CHARS = 500

_CHUNK = 500  # below SQLite's host-parameter limit
_INSERT_ENTITY = (
    "INSERT OR IGNORE INTO entities (name, entity_type, created, updated, line) VALUES (?, ?, ?, ?, ?)"
)
_INSERT_RELATION = (
    "INSERT OR IGNORE INTO relations (from_entity, to_entity, relation_type, line) VALUES (?, ?, ?, ?)"
)


@dataclass(frozen=True, slots=True)
class GraphRows:
    """Exported graph rows, checked: (entity, created, updated) and relations."""

    entities: list[tuple[Entity, str, str]]
    relations: list[Relation]


@dataclass(frozen=True, slots=True)
class Loaded:
    """The whole graph in creation order, and what its searches share."""

    nodes: list[Node]
    relations: list[Relation]
    prepared: Prepared


@dataclass(frozen=True, slots=True)
class GraphImported:
    entities: int
    observations: int
    relations: int
    skipped_relations: int  # an endpoint is neither in the file nor in the graph


# ---------------------------------------------------------------------------- checks


def _check_name(name: str, what: str = "entity name") -> str:
    if not isinstance(name, str) or not name.strip():
        raise InvalidArgument(f"An {what} is empty; every entity needs a name.")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(f"An {what} is longer than {MAX_NAME_CHARS} characters; use a short name.")
    return name


def _check_observation(text: str, limit: int) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument("An observation is empty; each observation is one fact as a sentence.")
    if len(text) > limit:
        raise InvalidArgument(
            f"An observation is {len(text):,} characters; the limit is {limit:,}. Split it into short facts."
        )
    return text


def _check_relation(relation: Relation) -> Relation:
    _check_name(relation.source, "relation's 'from'")
    _check_name(relation.target, "relation's 'to'")
    if not isinstance(relation.relation_type, str) or not relation.relation_type.strip():
        raise InvalidArgument("A relationType is empty; name the relation in active voice, e.g. 'works_at'.")
    return relation


# ---------------------------------------------------------------------------- storage


def _chunks(items: Sequence[str]) -> Iterable[Sequence[str]]:
    for start in range(0, len(items), _CHUNK):
        yield items[start : start + _CHUNK]


class GraphFiles(Protocol):
    """Where the graph is canonical (memvault.records.sync.GraphFile): checked before a change,
    written after it (``appended``: the change only added these (kind, line) entries)."""

    def check(self, conn: sqlite3.Connection) -> None: ...

    def written(self, conn: sqlite3.Connection, appended: Sequence[tuple[str, str]] = ()) -> None: ...


def entity_names(conn: sqlite3.Connection, prefix: str, limit: int) -> list[str]:
    """Up to ``limit`` entity names that start with ``prefix`` (ASCII letters in either case), by name."""
    pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = conn.execute(
        "SELECT name FROM entities WHERE name LIKE ? ESCAPE '\\' ORDER BY name LIMIT ?", (pattern, limit)
    )
    return [name for (name,) in rows]


class KnowledgeGraph(SidecarRecords):
    """One token's knowledge graph, queried in its sidecar, with the official memory server's semantics.

    Every write is one BEGIN IMMEDIATE transaction, so a failed call (a missing entity) changes
    nothing, and two processes cannot interleave; with ``files`` a change also rewrites graph.jsonl
    (memvault.records.sync), which is canonical, before the commit. Names are exact and case-sensitive.
    """

    def __init__(
        self,
        sidecar: Sidecar | Callable[[], Sidecar],
        *,
        max_chars: int,
        clock: Clock = utcnow,
        limits: SearchLimits | None = None,
        files: GraphFiles | None = None,
    ) -> None:
        super().__init__(sidecar, max_chars=max_chars, clock=clock)
        self.files = files
        self.limits = limits or SearchLimits()

    def _now(self) -> str:
        return format_time(self.clock())

    @contextmanager
    def _changing(self, appended: list[tuple[str, str]] | None = None) -> Iterator[sqlite3.Connection]:
        """A write transaction; the graph's file, if any, is refused when conflicted and written
        before the commit when the transaction changed something. ``appended``: the body fills it
        with the (kind, line) of each entry it adds, when adding is all it does."""
        with self.sidecar.transaction() as conn:
            if self.files is not None:
                self.files.check(conn)
            before = conn.total_changes
            yield conn
            if self.files is not None and conn.total_changes != before:
                self.files.written(conn, appended or ())

    # ------------------------------------------------------------------ writing

    def create_entities(self, entities: Sequence[Entity]) -> list[Entity]:
        """Create entities; names that exist (or repeat in the batch) are skipped. Returns the new ones."""
        cleaned = []
        for entity in entities:
            _check_name(entity.name)
            if not isinstance(entity.entity_type, str):
                raise InvalidArgument("entityType must be text.")
            observations = tuple(
                dict.fromkeys(_check_observation(o, self.max_chars) for o in entity.observations)
            )
            cleaned.append(Entity(entity.name, entity.entity_type, observations))
        now = self._now()
        created: list[Entity] = []
        appended: list[tuple[str, str]] = []
        with self._changing(appended) as conn:
            for entity in cleaned:
                line = entity_line(entity)
                cur = conn.execute(_INSERT_ENTITY, (entity.name, entity.entity_type, now, now, line))
                if cur.rowcount != 1:
                    continue
                appended.append(("entity", line))
                conn.executemany(
                    "INSERT INTO observations (entity, position, text) VALUES (?, ?, ?)",
                    [(entity.name, i, text) for i, text in enumerate(entity.observations)],
                )
                created.append(entity)
        return created

    def create_relations(self, relations: Sequence[Relation]) -> list[Relation]:
        """Create relations between existing entities; duplicates are skipped. Returns the new ones.

        A relation naming a missing entity fails the whole call (as the official server does).
        """
        for relation in relations:
            _check_relation(relation)
        created: list[Relation] = []
        appended: list[tuple[str, str]] = []
        with self._changing(appended) as conn:
            names = list(dict.fromkeys(n for r in relations for n in (r.source, r.target)))
            found = set(_existing(conn, names))
            missing = [n for n in names if n not in found]
            if missing:
                raise UnknownEntity(missing[0])
            for relation in relations:
                line = relation_line(relation)
                cur = conn.execute(
                    _INSERT_RELATION, (relation.source, relation.target, relation.relation_type, line)
                )
                if cur.rowcount == 1:
                    created.append(relation)
                    appended.append(("relation", line))
        return created

    def add_observations(self, additions: Sequence[tuple[str, Sequence[str]]]) -> list[tuple[str, list[str]]]:
        """Add observations to existing entities, skipping ones they already have.

        A missing entity fails the whole call. Returns each entity with the observations added.
        """
        checked = [
            (_check_name(name), [_check_observation(o, self.max_chars) for o in contents])
            for name, contents in additions
        ]
        now = self._now()
        results: list[tuple[str, list[str]]] = []
        with self._changing() as conn:
            for name, contents in checked:
                if conn.execute("SELECT 1 FROM entities WHERE name = ?", (name,)).fetchone() is None:
                    raise UnknownEntity(name)
                added = _append_observations(conn, name, contents)
                if added:
                    conn.execute("UPDATE entities SET updated = ? WHERE name = ?", (now, name))
                    _rewrite_line(conn, name)
                results.append((name, added))
        return results

    def delete_entities(self, names: Sequence[str]) -> tuple[list[str], list[str]]:
        """Delete entities with their observations and every relation from or to them.

        Returns (deleted, not found); names not found are not an error.
        """
        deleted: list[str] = []
        not_found: list[str] = []
        with self._changing() as conn:
            for name in dict.fromkeys(names):
                cur = conn.execute("DELETE FROM entities WHERE name = ?", (name,))
                if cur.rowcount != 1:
                    not_found.append(name)
                    continue
                deleted.append(name)
                conn.execute("DELETE FROM observations WHERE entity = ?", (name,))
                conn.execute("DELETE FROM relations WHERE from_entity = ? OR to_entity = ?", (name, name))
        return deleted, not_found

    def delete_observations(self, deletions: Sequence[tuple[str, Sequence[str]]]) -> tuple[int, list[str]]:
        """Delete the given observations. Returns (how many were deleted, entities not found)."""
        now = self._now()
        count = 0
        missing: list[str] = []
        with self._changing() as conn:
            for name, observations in deletions:
                if conn.execute("SELECT 1 FROM entities WHERE name = ?", (name,)).fetchone() is None:
                    missing.append(name)
                    continue
                removed = 0
                for text in dict.fromkeys(observations):
                    removed += conn.execute(
                        "DELETE FROM observations WHERE entity = ? AND text = ?", (name, text)
                    ).rowcount
                if removed:
                    conn.execute("UPDATE entities SET updated = ? WHERE name = ?", (now, name))
                    _rewrite_line(conn, name)
                count += removed
        return count, list(dict.fromkeys(missing))

    def delete_relations(self, relations: Sequence[Relation]) -> int:
        """Delete exactly matching relations; returns how many were deleted."""
        count = 0
        with self._changing() as conn:
            for r in dict.fromkeys(relations):
                count += conn.execute(
                    "DELETE FROM relations WHERE from_entity = ? AND to_entity = ? AND relation_type = ?",
                    (r.source, r.target, r.relation_type),
                ).rowcount
        return count

    # ------------------------------------------------------------------ reading

    def _loaded(self) -> Loaded:
        """The whole graph as search reads it, kept with the sidecar until the tables change."""
        with self.sidecar.snapshot() as conn:
            version = self.sidecar.data_version(conn)
            held = self.sidecar.derived.get("graph")
            if held is not None and held[0] == version:
                loaded: Loaded = held[1]
                return loaded
            nodes, relations = _load(conn)
        loaded = Loaded(nodes, relations, Prepared.of(nodes, relations))
        self.sidecar.derived["graph"] = (version, loaded)
        return loaded

    def read_graph(self) -> Graph:
        loaded = self._loaded()
        return Graph(tuple(n.entity for n in loaded.nodes), tuple(loaded.relations))

    def kept_lines(self) -> list[str]:
        """Why each line of graph.jsonl that memvault keeps as it is could not be read."""
        with self.sidecar.snapshot() as conn:
            return [why for (why,) in conn.execute("SELECT why FROM graph_kept ORDER BY seq")]

    def open_nodes(self, names: Sequence[str]) -> Graph:
        """The named entities, and every relation from or to one of them (as the official server)."""
        wanted = list(dict.fromkeys(n for n in names if isinstance(n, str)))
        with self.sidecar.snapshot() as conn:
            found = set(_existing(conn, wanted))
            nodes, relations = _load(conn, only=found)
        return Graph(
            tuple(n.entity for n in nodes if n.entity.name in found),
            tuple(r for r in relations if r.source in found or r.target in found),
        )

    def search_nodes(self, query: str) -> Graph:
        if not isinstance(query, str):
            raise InvalidArgument("query must be text.")
        if len(query) > MAX_QUERY_CHARS:
            raise InvalidArgument(f"query is longer than {MAX_QUERY_CHARS} characters; use a few words.")
        loaded = self._loaded()
        if not query_terms(query):
            # An empty query matches everything, as a substring search would (the official server).
            return Graph(tuple(n.entity for n in loaded.nodes), tuple(loaded.relations))
        return search(loaded.nodes, loaded.relations, query, self.limits, loaded.prepared)

    # ------------------------------------------------------------------ export / import

    def export_rows(self) -> list[dict[str, Any]]:
        """Entities then relations, each in creation order (as graph.jsonl), as plain dicts for JSON lines."""
        with self.sidecar.snapshot() as conn:
            nodes, relations = _load(conn)
            created = dict(conn.execute("SELECT name, created FROM entities").fetchall())
        rows: list[dict[str, Any]] = [
            {"kind": "entity", **n.entity.to_json(), "created": created[n.entity.name], "updated": n.updated}
            for n in nodes
        ]
        rows += [{"kind": "relation", **r.to_json()} for r in relations]
        return rows

    def parse_rows(self, rows: Iterable[Mapping[str, Any]]) -> GraphRows:
        """Exported rows checked as the tools check their arguments; raises InvalidArgument."""
        parsed = GraphRows([], [])
        for row in rows:
            try:
                if row.get("kind") == "entity":
                    observations = row.get("observations") or []
                    if not isinstance(observations, list):
                        raise InvalidArgument("observations must be a list of text")
                    entity = Entity(
                        _check_name(row["name"]),
                        row["entityType"],
                        tuple(_check_observation(o, self.max_chars) for o in observations),
                    )
                    if not isinstance(entity.entity_type, str) or not entity.entity_type.strip():
                        raise InvalidArgument("entityType must be text")
                    _check_name(entity.entity_type, "entity type")
                    created, updated = row.get("created") or self._now(), row.get("updated")
                    if not isinstance(created, str) or not isinstance(updated or created, str):
                        raise InvalidArgument("created and updated must be times")
                    created = format_time(require_time(created))
                    updated = format_time(require_time(updated or created))
                    parsed.entities.append((entity, created, updated))
                elif row.get("kind") == "relation":
                    relation = Relation(row["from"], row["to"], row["relationType"])
                    parsed.relations.append(_check_relation(relation))
                else:
                    raise InvalidArgument(f"unknown kind {row.get('kind')!r:.60}")
            except (KeyError, ValueError, TypeError, OverflowError, InvalidArgument) as exc:
                reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, KeyError) else str(exc)
                raise InvalidArgument(f"a graph row that cannot be imported ({reason:.300})") from None
        return parsed

    def import_rows(self, rows: Iterable[Mapping[str, Any]]) -> GraphImported:
        """Load exported entities and relations; what is already there stays, so a second import is a no-op.

        An existing entity keeps its type and gains only the observations it lacks.
        """
        parsed = self.parse_rows(rows)
        with self._changing() as conn:
            return self.import_into(conn, parsed)

    @staticmethod
    def import_into(conn: sqlite3.Connection, parsed: GraphRows) -> GraphImported:
        """Insert checked rows inside the caller's transaction (all of an import, or nothing)."""
        entities, relations = parsed.entities, parsed.relations
        new_entities = new_observations = new_relations = skipped = 0
        for entity, created, updated in entities:
            cur = conn.execute(
                _INSERT_ENTITY,
                (
                    entity.name,
                    entity.entity_type,
                    created,
                    updated,
                    entity_line(Entity(entity.name, entity.entity_type)),
                ),
            )
            new_entities += cur.rowcount
            added = _append_observations(conn, entity.name, entity.observations)
            new_observations += len(added)
            if added:
                _rewrite_line(conn, entity.name)
            if added and cur.rowcount != 1:
                conn.execute(
                    "UPDATE entities SET updated = max(updated, ?) WHERE name = ?", (updated, entity.name)
                )
        names = list(dict.fromkeys(n for r in relations for n in (r.source, r.target)))
        present = set(_existing(conn, names))
        for r in relations:
            if r.source not in present or r.target not in present:
                skipped += 1
                continue
            new_relations += conn.execute(
                _INSERT_RELATION,
                (r.source, r.target, r.relation_type, relation_line(r)),
            ).rowcount
        return GraphImported(new_entities, new_observations, new_relations, skipped)


def _existing(conn: sqlite3.Connection, names: Sequence[str]) -> list[str]:
    found: list[str] = []
    for chunk in _chunks(list(names)):
        marks = ",".join("?" * len(chunk))
        found += [
            row[0] for row in conn.execute(f"SELECT name FROM entities WHERE name IN ({marks})", tuple(chunk))
        ]
    return found


def _rewrite_line(conn: sqlite3.Connection, name: str) -> None:
    """After an entity's observations changed: its line, from its old one (fields memvault does not
    know keep their place)."""
    kind, old = conn.execute("SELECT entity_type, line FROM entities WHERE name = ?", (name,)).fetchone()
    rows = conn.execute("SELECT text FROM observations WHERE entity = ? ORDER BY position", (name,))
    entity = Entity(name, kind, tuple(text for (text,) in rows))
    conn.execute("UPDATE entities SET line = ? WHERE name = ?", (entity_line(entity, old), name))


def _append_observations(conn: sqlite3.Connection, name: str, contents: Iterable[str]) -> list[str]:
    """Add the observations an entity lacks at the end of its list; returns those added."""
    have = {row[0] for row in conn.execute("SELECT text FROM observations WHERE entity = ?", (name,))}
    position = conn.execute(
        "SELECT coalesce(max(position) + 1, 0) FROM observations WHERE entity = ?", (name,)
    ).fetchone()[0]
    added: list[str] = []
    for text in contents:
        if text in have:
            continue
        conn.execute(
            "INSERT INTO observations (entity, position, text) VALUES (?, ?, ?)", (name, position, text)
        )
        have.add(text)
        added.append(text)
        position += 1
    return added


def _load(conn: sqlite3.Connection, only: set[str] | None = None) -> tuple[list[Node], list[Relation]]:
    """Entities (in creation order) with their observations, and relations (in creation order)."""
    observations: dict[str, list[str]] = {}
    if only is None:
        rows = conn.execute("SELECT name, entity_type, updated FROM entities ORDER BY rowid").fetchall()
        for entity, text in conn.execute("SELECT entity, text FROM observations ORDER BY entity, position"):
            observations.setdefault(entity, []).append(text)
        relation_rows = conn.execute(
            "SELECT from_entity, to_entity, relation_type FROM relations ORDER BY rowid"
        ).fetchall()
    else:
        rows = []
        relation_rows = []
        names = sorted(only)
        for chunk in _chunks(names):
            marks = ",".join("?" * len(chunk))
            params = tuple(chunk)
            rows += conn.execute(
                f"SELECT name, entity_type, updated, rowid FROM entities WHERE name IN ({marks})", params
            ).fetchall()
            for entity, text in conn.execute(
                f"SELECT entity, text FROM observations WHERE entity IN ({marks}) ORDER BY entity, position",
                params,
            ):
                observations.setdefault(entity, []).append(text)
            relation_rows += conn.execute(
                "SELECT from_entity, to_entity, relation_type, rowid FROM relations "
                f"WHERE from_entity IN ({marks}) OR to_entity IN ({marks})",
                params + params,
            ).fetchall()
        rows = [row[:3] for row in sorted(rows, key=lambda row: row[3])]
        relation_rows = [row[:3] for row in sorted(set(relation_rows), key=lambda row: row[3])]
    nodes = [
        Node(Entity(name, kind, tuple(observations.get(name, ()))), updated) for name, kind, updated in rows
    ]
    return nodes, [Relation(*row) for row in relation_rows]
