"""memvault.importers.claude_md: CLAUDE.md beside CLAUDE.local.md, projects of one name apart."""

from __future__ import annotations

from pathlib import Path

import pytest

from importers.conftest import Runner
from memvault.importers import ImportRefused


def project(tmp_path: Path, where: str) -> Path:
    folder = tmp_path / where
    folder.mkdir(parents=True)
    (folder / "CLAUDE.md").write_text(f"# {where}\n\nShared rules.\n")
    (folder / "CLAUDE.local.md").write_text(f"# {where} local\n\nMy rules.\n")
    return folder


def test_both_files_of_a_project_and_two_projects_of_one_name_each_get_a_memory(
    tmp_path: Path, run_kind: Runner
) -> None:
    one, two = project(tmp_path, "a/api"), project(tmp_path, "b/api")
    code, heard = run_kind("claude-md", one, two, dry_run=True)
    assert code == 0 and heard.said[-1].startswith("alice: would add 4 memories")
    ids = [line.split(" -> ")[1].split(":")[0] for line in heard.said[:-1]]
    assert len(set(ids)) == 4 and sum(i.endswith("-local.md") for i in ids) == 2
    assert not run_kind.root.exists()  # a dry run writes nothing


def test_no_paths_is_refused(run_kind: Runner) -> None:
    with pytest.raises(ImportRefused, match=r"CLAUDE\.md"):
        run_kind("claude-md")
