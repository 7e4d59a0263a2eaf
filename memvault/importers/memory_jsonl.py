"""The official MCP memory server's memory.jsonl, merged into a token's graph: what is there stays.

Every line is read with a bound (one longer than MEMVAULT_MAX_IMPORT_LINE_BYTES is refused before
it is all in memory) and checked as the graph tools check their arguments, before the merge, which
is one transaction (a dry run rolls it back).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from memvault.disk.vault import Vault, folder_lock
from memvault.errors import MemvaultError
from memvault.importers.base import Importer, ImportOptions, ImportRefused
from memvault.records import sync
from memvault.records.graph import GraphImported, GraphRows, KnowledgeGraph
from memvault.records.sidecar import Sidecar, sidecar_path


def read_memory_jsonl(path: Path, shown: str, max_chars: int, max_line_bytes: int) -> GraphRows:
    """The official MCP memory server's memory.jsonl, every line checked as the graph tools check
    their arguments; a bad line raises ImportRefused naming it. Each line is read with a bound: one
    longer than ``max_line_bytes`` is refused before it is all in memory."""

    def unopened() -> Sidecar:
        raise AssertionError("checking rows opens no sidecar")

    checker = KnowledgeGraph(unopened, max_chars=max_chars)
    rows = GraphRows([], [])
    try:
        handle = open(path, "rb")
    except OSError as exc:
        raise ImportRefused(f"cannot read {shown} ({exc.strerror or type(exc).__name__})") from None
    with handle:
        for number, raw in _lines(handle, shown, max_line_bytes):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except (ValueError, RecursionError):
                raise ImportRefused(f"{shown}, line {number}: not valid JSON") from None
            if not isinstance(row, dict) or row.get("type") not in ("entity", "relation"):
                raise ImportRefused(f"{shown}, line {number}: not an entity or relation of memory.jsonl")
            fields = {
                k: v for k, v in row.items() if k in ("name", "entityType", "observations", "from", "to")
            }
            if "relationType" in row:
                fields["relationType"] = row["relationType"]
            try:
                part = checker.parse_rows([{"kind": row["type"], **fields}])
            except MemvaultError as exc:
                raise ImportRefused(f"{shown}, line {number}: {exc}") from None
            rows.entities.extend(part.entities)
            rows.relations.extend(part.relations)
    return rows


def _lines(handle: BinaryIO, shown: str, limit: int) -> Iterator[tuple[int, bytes]]:
    """(number, bytes) of each line, none read past ``limit`` bytes: an over-long line is refused
    after reading its first ``limit``, however long it is."""
    number = 0
    while raw := handle.readline(limit + 2):
        number += 1
        if len(raw.rstrip(b"\r\n")) > limit:
            raise ImportRefused(
                f"{shown}, line {number}: longer than {limit:,} bytes (MEMVAULT_MAX_IMPORT_LINE_BYTES); "
                "raise the setting if the file is yours"
            )
        yield number, raw


def merge_graph(folder: Path, rows: GraphRows, *, dry_run: bool) -> GraphImported:
    """Merge rows into the token's graph in one transaction (a dry run rolls it back): entities and
    observations missing are added, relations whose two ends exist are added, the rest stays."""
    Vault(folder).check_folder()
    if dry_run and not sidecar_path(folder).is_file() and not sync.has_files(folder):
        # Nothing stored yet, and a dry run creates nothing: all of it would be new.
        names = {entity.name for entity, _, _ in rows.entities}
        facts = {(entity.name, o) for entity, _, _ in rows.entities for o in entity.observations}
        links = set(rows.relations)
        joined = {r for r in links if r.source in names and r.target in names}
        return GraphImported(len(names), len(facts), len(joined), len(links) - len(joined))
    with Sidecar.open(folder) as sidecar, folder_lock(folder):
        sync.sync(sidecar, folder)
        try:
            with sidecar.transaction() as conn:
                done = KnowledgeGraph.import_into(conn, rows)
                if dry_run:
                    raise _DryRun(done)
                if done.entities or done.observations or done.relations:
                    sync.GraphFile(folder).written(conn)
        except _DryRun as rolled_back:
            done = rolled_back.done
    return done


class _DryRun(Exception):
    """Raised inside a transaction to roll it back, carrying what it would have done."""

    def __init__(self, done: GraphImported) -> None:
        super().__init__("dry run")
        self.done = done


class MemoryJsonlImporter(Importer):
    name = "memory-jsonl"

    def run(self, options: ImportOptions) -> int:
        assert options.token is not None
        if not options.paths:
            raise ImportRefused("name the memory.jsonl file to merge")
        rows = GraphRows([], [])
        settings = self.settings
        with self.out.progress("import (reading)") as progress:
            for path in options.paths:
                part = read_memory_jsonl(
                    path, str(path), settings.max_content_chars, settings.max_import_line_bytes
                )
                rows.entities.extend(part.entities)
                rows.relations.extend(part.relations)
                progress(1)
        done = merge_graph(settings.token_dir(options.token), rows, dry_run=options.dry_run)
        verb = "would add" if options.dry_run else "added"
        line = f"{options.token}: {verb} {done.entities} entities, {done.observations} observations, "
        line += f"{done.relations} relations"
        if done.skipped_relations:
            line += f"; skipped {done.skipped_relations} relations to missing entities"
        self.out.say(line)
        return 0


IMPORTER = MemoryJsonlImporter
