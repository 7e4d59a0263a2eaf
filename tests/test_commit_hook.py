"""The commit-msg hook in .githooks: a subject of at most 72 characters, then a blank line."""

from __future__ import annotations

import shutil
import subprocess
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
