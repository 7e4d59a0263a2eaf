"""Importers: one module per kind of source, each found by its name in one registry.

``find("notes")`` is the importer of a folder of markdown notes; ``KINDS`` names every kind, the
module that holds it and what `memvault import-from --help` says of it. A module is imported only
when its kind is asked for, so building the command line costs no more than this list.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from memvault.importers.base import Importer, ImportOptions, ImportRefused, Output

__all__ = ["KINDS", "ImportOptions", "ImportRefused", "Importer", "ImporterKind", "Output", "find", "names"]


@dataclass(frozen=True, slots=True)
class ImporterKind:
    name: str
    module: str  # memvault.importers.<module> defines IMPORTER
    help: str
    import_from: bool = True  # offered by `memvault import-from`; False: a command of its own


KINDS = (
    ImporterKind(
        "claude-memory",
        "claude_memory",
        "Claude Code's auto-memory files (PATH: its projects folder, default ~/.claude/projects)",
    ),
    ImporterKind(
        "claude-md", "claude_md", "CLAUDE.md and CLAUDE.local.md files (or project folders holding them)"
    ),
    ImporterKind(
        "transcripts", "transcripts", "Claude Code session transcripts (*.jsonl) as session summaries"
    ),
    ImporterKind(
        "notes", "notes", "a folder of markdown notes (Obsidian, Basic Memory), frontmatter and links kept"
    ),
    ImporterKind("memory-jsonl", "memory_jsonl", "the official memory server's file, merged into the graph"),
    ImporterKind(
        "export", "export", "a file written by memvault export (memvault import)", import_from=False
    ),
)


def names(*, import_from: bool = True) -> tuple[str, ...]:
    """The kinds' names: those `import-from` offers, or (``import_from=False``) every one."""
    return tuple(kind.name for kind in KINDS if kind.import_from or not import_from)


def find(name: str) -> type[Importer]:
    """The importer of the kind named; LookupError for a name no kind has."""
    for kind in KINDS:
        if kind.name == name:
            module = importlib.import_module(f"{__name__}.{kind.module}")
            importer: type[Importer] = module.IMPORTER
            return importer
    raise LookupError(f"no importer for {name!r}; the kinds are {', '.join(names(import_from=False))}")
