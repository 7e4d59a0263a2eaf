"""memvault.importers.markdown: the run every markdown kind shares, driven by a kind's sources."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from importers.conftest import Heard
from memvault.config import Settings
from memvault.importers import ImportOptions
from memvault.importers.copies import Note
from memvault.importers.markdown import MarkdownImporter


class Upper(MarkdownImporter):
    """A kind of its own: every .md of one folder, its text upper-cased, under "up/"."""

    name = "upper"

    def sources(self, options: ImportOptions, vault: Path) -> Iterator[tuple[Path, str, str]]:
        for path in sorted(options.paths[0].glob("*.md")):
            yield path, f"up/{path.name}", f"upper:{path.name}"

    def prepare(self, note: Note) -> Note:
        return Note(note.id, note.data.upper(), note.source, note.origin, note.source_hash)


def test_a_kind_names_its_sources_and_the_shared_run_plans_writes_and_reports(
    tmp_path: Path, heard: Heard
) -> None:
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.md").write_text("# a\n\nbody\n")
    settings = Settings(root=tmp_path / "m", watch=False, load_processes=0, capacity=1)
    importer = Upper(settings, heard)
    options = ImportOptions("alice", [tmp_path / "in"])
    assert importer.run(ImportOptions("alice", [tmp_path / "in"], dry_run=True)) == 0
    assert heard.said[0].endswith("in/a.md -> up/a.md: new") and not (tmp_path / "m").exists()
    assert importer.run(options) == 0
    copy = (tmp_path / "m" / "alice" / "up" / "a.md").read_text()
    assert copy.startswith("---\nsource: upper:a.md\n") and copy.endswith("# A\n\nBODY\n")
    assert importer.run(options) == 0
    assert heard.said[-1] == "alice: added 0 memories (1 already there)"


def test_an_import_past_the_capacity_warns_naming_priority_and_the_setting(
    tmp_path: Path, heard: Heard
) -> None:
    (tmp_path / "in").mkdir()
    for name in "abc":
        (tmp_path / "in" / f"{name}.md").write_text(f"# {name}\n")
    settings = Settings(root=tmp_path / "m", watch=False, load_processes=0, capacity=2)
    Upper(settings, heard).run(ImportOptions("alice", [tmp_path / "in"]))
    assert len(heard.warned) == 1 and "--priority P0" in heard.warned[0]
    assert "MEMVAULT_CAPACITY=2" in heard.warned[0]
