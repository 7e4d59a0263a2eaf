"""CLAUDE.md and CLAUDE.local.md files as memories, one pair per project folder, never colliding.

Each goes to ``claude-code/claude-md/<folder>-<hash of its folder's path>[-local].md``: two
projects of one folder name stay apart, and a project's CLAUDE.local.md sits beside its CLAUDE.md.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from memvault.importers.base import ImportOptions, ImportRefused
from memvault.importers.markdown import MarkdownImporter, folder_name

FILES = ("CLAUDE.md", "CLAUDE.local.md")


class ClaudeMdImporter(MarkdownImporter):
    name = "claude-md"

    def sources(self, options: ImportOptions, vault: Path) -> Iterator[tuple[Path, str, str]]:
        if not options.paths:
            raise ImportRefused("name the CLAUDE.md files (or the project folders holding them) to import")
        for given in options.paths:
            if given.is_dir() and not given.is_symlink():
                files = [given / n for n in FILES if (given / n).is_file()]
                if not files:
                    raise ImportRefused(f"{given} holds no CLAUDE.md or CLAUDE.local.md")
            else:
                files = [given]
            for path in files:
                where = path.resolve().parent
                digest = hashlib.sha256(str(where).encode("utf-8")).hexdigest()[:8]
                kind = path.name.lower()
                suffix = {"claude.md": "", "claude.local.md": "-local"}.get(kind)
                if suffix is None:
                    suffix = "-" + folder_name(kind.removesuffix(".md"))
                yield (
                    path,
                    f"claude-code/claude-md/{folder_name(where.name)}-{digest}{suffix}.md",
                    f"claude-md:{where.name}/{path.name}",
                )


IMPORTER = ClaudeMdImporter
