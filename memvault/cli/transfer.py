"""export and import: session summaries and knowledge graphs as sorted JSON lines, and back."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from memvault.cli.maintenance import tokens_of
from memvault.cli.output import write_out
from memvault.config import Settings

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


def import_(settings: Settings, token: str | None, file: Path) -> int:
    """Load an export (memvault.importers.export): every line is read and checked before anything
    is written, each token is written in one transaction, and every row already present is left as
    it is, so importing twice changes nothing."""
    from memvault.cli.importers import run
    from memvault.importers import ImportOptions

    return run(settings, "export", ImportOptions(token, [file]))
