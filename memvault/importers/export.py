"""A file written by ``memvault export`` loaded back (``memvault import``): what is there stays.

Every line is read with a bound and checked before anything is written; each token is then
written in one transaction (graph and sessions together), so importing twice changes nothing.
"""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator
from typing import Any, BinaryIO

from memvault.disk.names import valid_token
from memvault.disk.vault import folder_lock
from memvault.errors import MemvaultError
from memvault.importers.base import Importer, ImportOptions, ImportRefused
from memvault.records import sync
from memvault.records.graph import GraphRows, KnowledgeGraph
from memvault.records.sidecar import Sidecar
from memvault.records.summaries import SessionSummaries, Version


def import_lines(handle: BinaryIO, limit: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of each non-blank line. Lines end at "\\n" only (export escapes every other
    line separator); a line is read with a bound, so a huge one never fills the memory."""
    number = 0
    while True:
        raw = handle.readline(limit + 2)
        if not raw:
            return
        number += 1
        if len(raw.rstrip(b"\r\n")) > limit:
            raise ImportRefused(
                f"line {number} is longer than {limit:,} bytes (MEMVAULT_MAX_IMPORT_LINE_BYTES); "
                "raise the setting if the file is yours"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ImportRefused(f"line {number} is not valid UTF-8") from None
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except (ValueError, RecursionError) as exc:
            # ValueError: not JSON, or a number past Python's digit limit; RecursionError: deep nesting.
            why = "nested too deeply" if isinstance(exc, RecursionError) else "not valid JSON"
            raise ImportRefused(f"line {number} is {why}") from None
        if not isinstance(row, dict) or row.get("kind") not in ("entity", "relation", "session"):
            raise ImportRefused(f"line {number} is not a memvault export line")
        yield number, row


class ExportImporter(Importer):
    """``options.paths`` is the one file ('-': standard input); ``options.token``, if given, takes
    every line (else each line's own token)."""

    name = "export"
    on_interrupt = "the tokens imported so far stay; importing the file again adds only what is missing"

    def run(self, options: ImportOptions) -> int:
        settings, token, file = self.settings, options.token, options.paths[0]
        if token is not None and not valid_token(token):
            self.out.warn(f"memvault: {token!r} is not a valid token.")
            return 2

        # Checked without a sidecar: nothing is opened or created until the whole file passed.
        def unopened() -> Sidecar:
            raise AssertionError("checking rows must not open a sidecar")

        checker_graph = KnowledgeGraph(unopened, max_chars=settings.max_content_chars)
        checker_sessions = SessionSummaries(unopened, max_chars=settings.max_content_chars)
        graphs: dict[str, GraphRows] = {}
        versions: dict[str, list[Version]] = {}
        try:
            handle: BinaryIO = sys.stdin.buffer if str(file) == "-" else open(file, "rb")
        except OSError as exc:
            self.out.warn(f"memvault: cannot read {file}: {exc.strerror or type(exc).__name__}")
            return 2
        try:
            with handle, self.out.progress("import (checking)", unit=" lines") as progress:
                for number, row in import_lines(handle, settings.max_import_line_bytes):
                    progress(1)
                    name = token or row.get("token")
                    if not isinstance(name, str) or not valid_token(name):
                        raise ImportRefused(f"line {number} has no valid token; pass --token")
                    if settings.token_dir(name).is_symlink():
                        raise ImportRefused(f"line {number}: the folder of token {name!r} is a symbolic link")
                    try:
                        if row["kind"] == "session":
                            versions.setdefault(name, []).extend(checker_sessions.parse_rows([row]))
                        else:
                            part = checker_graph.parse_rows([row])
                            graph = graphs.setdefault(name, GraphRows([], []))
                            graph.entities.extend(part.entities)
                            graph.relations.extend(part.relations)
                    except MemvaultError as exc:
                        raise ImportRefused(f"line {number} holds {exc}") from None
        except OSError as exc:
            self.out.warn(f"memvault: cannot read {file}: {exc.strerror or type(exc).__name__}")
            return 2
        done: list[str] = []
        for name in sorted(set(graphs) | set(versions)):
            folder = settings.token_dir(name)
            try:
                with Sidecar.open(folder) as sidecar, folder_lock(folder):
                    sync.sync(sidecar, folder)
                    with sidecar.transaction() as conn:
                        g = KnowledgeGraph.import_into(conn, graphs.get(name, GraphRows([], [])))
                        s = SessionSummaries.import_into(conn, versions.get(name, []))
                        # The files first, inside the transaction: they are what a clone or a backup keeps.
                        if g.entities or g.observations or g.relations:
                            sync.GraphFile(folder).written(conn)
                        if s.added:
                            for session_id in sorted({v.session_id for v in versions.get(name, [])}):
                                sync.SessionFiles(folder).rewrite(conn, session_id)
            except (OSError, sqlite3.Error, MemvaultError) as exc:
                why = (
                    exc.strerror
                    if isinstance(exc, OSError) and exc.strerror
                    else str(exc) or type(exc).__name__
                )
                left = [n for n in sorted(set(graphs) | set(versions)) if n not in done]
                self.out.warn(
                    f"memvault: writing token {name!r} failed ({why}); it is unchanged. "
                    f"Imported: {', '.join(done) or 'none'}; not imported: {', '.join(left)}. "
                    "Importing the file again adds only what is missing."
                )
                return 1
            done.append(name)
            report = (
                f"{name}: added {g.entities} entities, {g.observations} observations, "
                f"{g.relations} relations, {s.added} session versions ({s.unchanged} already there)"
            )
            if s.conflicts:
                report += f"; kept {s.conflicts} existing versions that differ from the file"
            if g.skipped_relations:
                report += f"; skipped {g.skipped_relations} relations to missing entities"
            self.out.say(report)
        return 0


IMPORTER = ExportImporter
