"""The README stays honest: its test command is what CI runs, and it documents every setting."""

from __future__ import annotations

import re
from pathlib import Path

from memvault.config import SETTINGS

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```sh\n(python3 -m venv .*?)\n```", readme)


def test_ci_runs_the_readme_test_command():
    commands = _readme_commands()
    test_command = next(c for c in commands if "pytest" in c)
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert test_command in ci.splitlines()


def test_readme_serve_command_starts_memvault_serve():
    commands = _readme_commands()
    assert any(c.endswith("memvault serve") for c in commands)


def test_readme_documents_every_setting():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    missing = [s.env for s in SETTINGS.values() if f"`{s.env}`" not in readme]
    assert missing == []
