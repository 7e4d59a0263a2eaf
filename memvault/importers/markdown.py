"""The importers of markdown files (Claude Code's memories, CLAUDE.md files, notes): one run for all.

A kind names its sources (``sources``: each file, the memory it becomes, where it came from) and
may adjust a note as read (``prepare``); the rest is shared: every source read and checked, the
import planned against the vault, written in batches (see memvault.importers.copies), reported.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from memvault.errors import MemvaultError
from memvault.importers import copies
from memvault.importers.base import Importer, ImportOptions
from memvault.importers.copies import Note, NotesDone, plan_notes, read_note, write_notes

# What --dry-run says of each file.
SAID = {
    copies.NEW: "new",
    copies.REFRESH: "refresh (the source changed)",
    copies.PRIORITY: "refresh (to the priority asked for)",
    copies.SKIP: "skip (already there)",
    copies.KEPT: "kept (the copy changed since its import)",
    copies.CHANGED: "skip (the source changed; --refresh brings it in)",
    copies.ARCHIVED: "skip (archived; restore_memory brings it back)",
    copies.LINKED: "skip (a symbolic link stands there; memvault never writes through one)",
}


def listed(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


class MarkdownImporter(Importer):
    """Markdown files as memories, memvault's copies of them."""

    def sources(self, options: ImportOptions, vault: Path) -> Iterator[tuple[Path, str, str]]:
        """(file, its memory name, where it came from) of each source; ImportRefused if there is
        none to take."""
        raise NotImplementedError

    def prepare(self, note: Note) -> Note:
        """A note as read, made what the copy should hold (as it is, unless a kind says otherwise)."""
        return note

    def run(self, options: ImportOptions) -> int:
        assert options.token is not None
        folder = self.settings.token_dir(options.token)
        notes: list[Note] = []
        with self.out.progress("import (reading)") as progress:
            for path, id, origin in self.sources(options, folder):
                notes.append(self.prepare(read_note(path, id, str(path), origin)))
                progress(1)
        planned = plan_notes(folder, notes, refresh=options.refresh, priority=options.priority)
        hot = copies.hot_count(folder)
        if options.dry_run:
            for step in planned.steps:
                self.out.say(f"  {step.note.source} -> {step.note.id}: {SAID[step.action]}")
            done = planned
        else:
            with self.out.progress("import (writing)") as progress:
                try:
                    done = write_notes(folder, planned, progress)
                except (OSError, MemvaultError) as exc:
                    why = exc.strerror if isinstance(exc, OSError) else str(exc)
                    self.out.warn(
                        f"memvault: writing the memories failed ({why or type(exc).__name__}); "
                        "what this import wrote was taken back."
                    )
                    return 1
        self.report(options, done, hot)
        return 0

    def report(self, options: ImportOptions, done: NotesDone, hot: int) -> None:
        dry = options.dry_run
        added, refreshed = done.added, done.named(copies.REFRESH) + done.named(copies.PRIORITY)
        line = f"{options.token}: {'would add' if dry else 'added'} {len(added)} memories "
        line += f"({len(done.unchanged)} already there"
        if refreshed:
            line += f"; {'would refresh' if dry else 'refreshed'} {len(refreshed)}"
        if done.kept:
            line += f"; kept {len(done.kept)} changed since their import: {listed(done.kept)}"
        archived = done.named(copies.ARCHIVED)
        if archived:
            line += f"; {len(archived)} archived, left there"
        linked = done.named(copies.LINKED)
        if linked:
            line += f"; left {len(linked)} symbolic links alone: {listed(linked)}"
        self.out.say(line + ")")
        changed = done.named(copies.CHANGED)
        if changed:
            self.out.say(
                f"{options.token}: {len(changed)} sources changed since their import; --refresh "
                f"brings them in: {listed(changed)}"
            )
        capacity = self.settings.capacity
        left = max(0, capacity - hot)
        if len(added) > left:
            self.out.warn(
                f"memvault: warning: {options.token} holds {hot} hot memories and this import "
                f"{'would add' if dry else 'added'} {len(added)}, more than the {left} left under its "
                f"capacity (MEMVAULT_CAPACITY={capacity}): sweeps archive the least recently "
                "used beyond it. Import with --priority P0 to keep them out of capacity eviction, or "
                "raise MEMVAULT_CAPACITY."
            )


def folder_name(text: str) -> str:
    """A path segment safe as a memory folder's name."""
    cleaned = re.sub(r"[^\w.-]+", "-", text).strip(".-")
    return cleaned[:100] or "home"
