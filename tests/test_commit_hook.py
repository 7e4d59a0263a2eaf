"""The hooks in .githooks: commit-msg (a subject of at most 72 characters, then a blank line) and
pre-commit (ruff over the staged Python files)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HOOK = Path(__file__).resolve().parents[1] / ".githooks" / "commit-msg"
pytestmark = pytest.mark.skipif(shutil.which("sh") is None, reason="needs a POSIX shell")


def check(tmp_path: Path, message: str) -> subprocess.CompletedProcess[str]:
    file = tmp_path / "COMMIT_EDITMSG"
    file.write_text(message, encoding="utf-8")
    return subprocess.run(["sh", str(HOOK), str(file)], capture_output=True, text=True, check=False)


def test_a_short_subject_with_a_body_after_a_blank_line_passes(tmp_path: Path) -> None:
    subject = "index: " + "x" * 65  # 72 characters exactly
    assert check(tmp_path, f"{subject}\n\nWhy, with the figures.\n").returncode == 0


def test_a_subject_over_72_characters_is_refused_and_says_so(tmp_path: Path) -> None:
    done = check(tmp_path, "index: " + "x" * 66 + "\n")
    assert done.returncode == 1 and "73 characters" in done.stderr


def test_a_body_glued_to_the_subject_is_refused(tmp_path: Path) -> None:
    done = check(tmp_path, "index: short\nthe body at once\n")
    assert done.returncode == 1 and "blank line" in done.stderr


def test_comment_lines_git_adds_are_not_the_subject(tmp_path: Path) -> None:
    assert check(tmp_path, "# Please enter the commit message\nindex: short\n").returncode == 0


# ---------------------------------------------------------------------------- pre-commit

PRE_COMMIT = HOOK.parent / "pre-commit"
RUFF = Path(sys.executable).parent / "ruff"


def staged_repo(tmp_path: Path, source: str, *, with_ruff: bool = True) -> Path:
    """A git repository with ``source`` staged as a.py, and .venv/bin/ruff as this test run's."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "a.py").write_text(source, encoding="utf-8")
    subprocess.run(["git", "-C", str(repo), "add", "a.py"], check=True)
    if with_ruff:
        (repo / ".venv" / "bin").mkdir(parents=True)
        (repo / ".venv" / "bin" / "ruff").symlink_to(RUFF)
    return repo


def pre_commit(repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["sh", str(PRE_COMMIT)], cwd=repo, capture_output=True, text=True, check=False)


needs_git_and_ruff = pytest.mark.skipif(
    shutil.which("git") is None or not RUFF.exists(), reason="needs git and ruff (the test extra)"
)


@needs_git_and_ruff
def test_pre_commit_passes_clean_staged_python(tmp_path: Path) -> None:
    assert pre_commit(staged_repo(tmp_path, "x = 1\n")).returncode == 0


@needs_git_and_ruff
@pytest.mark.parametrize("source", ["x =  1\n", "import os\n"])  # unformatted; an unused import
def test_pre_commit_refuses_what_the_lint_test_would_and_says_how_to_mend_it(
    tmp_path: Path, source: str
) -> None:
    done = pre_commit(staged_repo(tmp_path, source))
    assert done.returncode == 1 and "ruff format" in done.stderr


@needs_git_and_ruff
def test_pre_commit_stands_aside_without_a_venv(tmp_path: Path) -> None:
    assert pre_commit(staged_repo(tmp_path, "x =  1\n", with_ruff=False)).returncode == 0
