"""A folder of markdown notes (an Obsidian vault, a Basic Memory project) as memories, layout kept.

The notes go to a folder of the vault named after the one imported (``--into`` names another);
frontmatter and links stay as written.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from memvault.importers.base import ImportOptions, ImportRefused
from memvault.importers.markdown import MarkdownImporter, folder_name
from memvault.ops.transcripts import files_under


class NotesImporter(MarkdownImporter):
    name = "notes"

    def sources(self, options: ImportOptions, vault: Path) -> Iterator[tuple[Path, str, str]]:
        if len(options.paths) != 1 or not options.paths[0].is_dir():
            raise ImportRefused("name one folder of markdown notes")
        folder = options.paths[0]
        into = options.into or folder_name(folder.resolve().name)
        for path in files_under(folder, ".md"):
            rel = path.relative_to(folder).as_posix()
            yield path, f"{into.strip('/')}/{rel}", f"notes:{folder.resolve().name}/{rel}"


IMPORTER = NotesImporter
