"""memvault check: what it reports of a vault's files, and as what (an error or a note)."""

from __future__ import annotations

from pathlib import Path

from memvault.cli.check import check_vault
from memvault.disk.vault import Vault

NOTE = "---\npriority: P1\nupdatedAt: 2026-02-01T08:00:00.000Z\n---\n# Deploy\n\nmake stage\n"


def test_a_conflict_copy_is_a_note_naming_its_memory_and_what_to_do(tmp_path: Path) -> None:
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "deploy.md").write_text(NOTE, encoding="utf-8")
    copy = NOTE.replace("updatedAt", 'conflictOf: "notes/deploy.md"\nupdatedAt').replace("stage", "stage-a")
    (tmp_path / "notes" / "deploy.conflict-0a1b2c3d.md").write_text(copy, encoding="utf-8")
    # The frontmatter says what a copy is, whatever a person renamed it to.
    (tmp_path / "renamed.md").write_text(copy.replace("notes/deploy.md", "old.md"), encoding="utf-8")

    found = {f.id: f for f in check_vault(Vault(tmp_path))}
    assert set(found) == {"notes/deploy.conflict-0a1b2c3d.md", "renamed.md"}  # no duplicate titles
    note = found["notes/deploy.conflict-0a1b2c3d.md"]
    assert not note.error
    assert "other side's version of notes/deploy.md" in note.problem
    assert "move what you want to keep into notes/deploy.md, then delete this file" in note.problem
    assert "version of old.md" in found["renamed.md"].problem


def test_two_memories_of_one_title_without_a_conflict_are_still_a_note(tmp_path: Path) -> None:
    (tmp_path / "deploy.md").write_text(NOTE, encoding="utf-8")
    (tmp_path / "deploy-2.md").write_text(NOTE, encoding="utf-8")
    found = list(check_vault(Vault(tmp_path)))
    assert [(f.id, f.error) for f in found] == [("deploy-2.md", False), ("deploy.md", False)]
    assert all("duplicate title" in f.problem for f in found)
