"""export and import: session summaries and knowledge graphs as sorted JSON lines, and back."""

from __future__ import annotations

import json
import sqlite3
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, BinaryIO

from memvault.cli.maintenance import tokens_of
from memvault.cli.output import write_out
from memvault.cli.progress import Progress
from memvault.config import Settings
from memvault.disk.names import valid_token
from memvault.errors import MemvaultError

# Characters str.splitlines (and some editors) take for line ends; JSON allows them raw in strings,
# so an export escapes them and every line of it survives any line splitter.
_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}


def export_line(row: Mapping[str, object]) -> str:
    """One export row as a JSON line: UTF-8 kept readable, line separators escaped."""
    line = json.dumps(row, ensure_ascii=False)
    for char, escape in _LINE_BREAKS.items():
        line = line.replace(char, escape)
    return line


def export(settings: Settings, token: str | None, out: Path | None) -> int:
    """Session summaries and graphs as JSON lines: per token, entities, relations, then versions, sorted."""
    from memvault.records import sync
    from memvault.records.graph import KnowledgeGraph
    from memvault.records.sidecar import Sidecar, sidecar_path
    from memvault.records.summaries import SessionSummaries

    tokens = tokens_of(settings, token)
    if tokens is None:
        return 2
    lines: list[str] = []
    for name in tokens:
        folder = settings.token_dir(name)
        if not sidecar_path(folder).is_file() and not sync.has_files(folder):
            continue  # nothing stored yet; exporting must not create a folder
        with Sidecar.open(folder) as sidecar:
            sync.sync(sidecar, folder)  # the files are canonical: a pull since is included
            rows = KnowledgeGraph(sidecar, max_chars=settings.max_content_chars).export_rows()
            rows += SessionSummaries(sidecar, max_chars=settings.max_content_chars).export_rows()
        lines += [export_line({"token": name, **row}) for row in rows]
    text = "".join(line + "\n" for line in lines)
    return write_out(text, out, f"wrote {len(lines)} line(s) to {out}")


class ImportRefused(Exception):
    """An import file that cannot be loaded; the message names the line and says why."""


def _import_lines(handle: BinaryIO, limit: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of each non-blank line. Lines end at "\n" only (export escapes every other
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


def import_(settings: Settings, token: str | None, file: Path) -> int:
    """Load an export: every line is read and checked before anything is written, each token is
    written in one transaction (graph and sessions together), and every row already present is
    left as it is, so importing twice changes nothing."""
    from memvault.disk.vault import folder_lock
    from memvault.records import sync
    from memvault.records.graph import GraphRows, KnowledgeGraph
    from memvault.records.sidecar import Sidecar
    from memvault.records.summaries import SessionSummaries, Version

    if token is not None and not valid_token(token):
        print(f"memvault: {token!r} is not a valid token.", file=sys.stderr)
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
        print(f"memvault: cannot read {file}: {exc.strerror or type(exc).__name__}", file=sys.stderr)
        return 2
    try:
        with handle, Progress("import (checking)", unit=" lines") as progress:
            for number, row in _import_lines(handle, settings.max_import_line_bytes):
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
        print(f"memvault: cannot read {file}: {exc.strerror or type(exc).__name__}", file=sys.stderr)
        return 2
    except ImportRefused as exc:
        print(f"memvault: {exc}. Nothing was imported.", file=sys.stderr)
        return 1
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
                exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
            )
            left = [n for n in sorted(set(graphs) | set(versions)) if n not in done]
            print(
                f"memvault: writing token {name!r} failed ({why}); it is unchanged. "
                f"Imported: {', '.join(done) or 'none'}; not imported: {', '.join(left)}. "
                "Importing the file again adds only what is missing.",
                file=sys.stderr,
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
        print(report)
    return 0
