"""memvault.importers.notes: a folder of notes, layout and frontmatter kept, into a folder named."""

from __future__ import annotations

from pathlib import Path

import pytest

from importers.conftest import Runner
from memvault.importers import ImportRefused


def test_notes_keep_their_layout_under_the_folder_asked_for(tmp_path: Path, run_kind: Runner) -> None:
    notes = tmp_path / "Vault"
    (notes / "runs").mkdir(parents=True)
    (notes / "runs" / "long.md").write_text("---\ntags: [run]\n---\n# Long run\n\nSunday.\n")
    (notes / "index.md").write_text("See [[long]].\n")
    code, heard = run_kind("notes", notes, into="obsidian")
    vault = run_kind.root / "alice"
    assert code == 0 and heard.said == ["alice: added 2 memories (0 already there)"]
    assert sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*.md")) == [
        "obsidian/index.md",
        "obsidian/runs/long.md",
    ]
    assert (vault / "obsidian/runs/long.md").read_text().startswith("---\ntags: [run]\n")


def test_anything_but_one_folder_is_refused(tmp_path: Path, run_kind: Runner) -> None:
    with pytest.raises(ImportRefused, match="one folder"):
        run_kind("notes", tmp_path / "nowhere")
