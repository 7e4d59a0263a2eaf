"""memvault.importers.claude_memory: auto-memory under the project's real name, its index left out."""

from __future__ import annotations

import json
from pathlib import Path

from importers.conftest import Runner
from memvault.importers.claude_memory import decoded, titled


def projects_with(tmp_path: Path, encoded: str, files: dict[str, str]) -> Path:
    memory = tmp_path / "projects" / encoded / "memory"
    memory.mkdir(parents=True)
    for name, text in files.items():
        (memory / name).write_text(text)
    return tmp_path / "projects"


def test_files_land_under_the_project_name_a_transcript_gives_and_the_index_is_skipped(
    tmp_path: Path, run_kind: Runner
) -> None:
    projects = projects_with(
        tmp_path,
        "-srv-work-acme-api",
        {"MEMORY.md": "- [Deploy](deploy.md)\n", "deploy.md": "---\nname: Deploy\n---\nOn Fridays.\n"},
    )
    (projects / "-srv-work-acme-api" / "s.jsonl").write_text(json.dumps({"cwd": "/srv/work/acme-api"}) + "\n")
    code, heard = run_kind("claude-memory", projects)
    vault = run_kind.root / "alice"
    assert code == 0 and heard.said[-1].startswith("alice: added 1 memories")
    assert [p.relative_to(vault).as_posix() for p in vault.rglob("*.md")] == [
        "claude-code/acme-api/deploy.md"
    ]
    assert b"title: Deploy\n" in (vault / "claude-code/acme-api/deploy.md").read_bytes()


def test_an_encoded_folder_name_is_decoded_by_the_folders_on_this_machine(tmp_path: Path) -> None:
    (tmp_path / "my-app.v2").mkdir()
    encoded = str(tmp_path).replace("/", "-").replace("_", "-") + "-my-app-v2"
    assert decoded(encoded) == "my-app.v2"
    assert decoded("-nowhere-at-all-shop") == "shop"


def test_a_title_is_added_from_the_name_and_the_rest_kept_byte_for_byte() -> None:
    assert (
        titled(b"---\nname: Deploy\ntype: x\n---\nbody\n")
        == b"---\nname: Deploy\ntitle: Deploy\ntype: x\n---\nbody\n"
    )
    kept = b"---\nname: A\ntitle: B\n---\nbody\n"
    assert titled(kept) == kept and titled(b"no frontmatter\n") == b"no frontmatter\n"
