"""memvault.importers.transcripts: past sessions become summaries once; a dry run lists them."""

from __future__ import annotations

from pathlib import Path

import pytest
from transcripts import SESSION, Transcript

from importers.conftest import Runner
from memvault.importers import ImportRefused


def test_a_dry_run_lists_each_session_then_the_import_adds_it_once(tmp_path: Path, run_kind: Runner) -> None:
    log = Transcript(tmp_path / "projects" / "p" / f"{SESSION}.jsonl", tmp_path / "shop")
    log.turn("Fix the login bug", "Fixed it.")
    log.slash("/model", output="Set model to opus")
    code, heard = run_kind("transcripts", tmp_path / "projects", dry_run=True)
    assert code == 0 and heard.said[0].endswith(f"-> session {SESSION}: 1 new requests")
    assert not (run_kind.root / "alice").exists()
    code, heard = run_kind("transcripts", tmp_path / "projects")
    assert heard.said == ["alice: added 1 requests to 1 sessions (0 had nothing new)"]
    code, heard = run_kind("transcripts", tmp_path / "projects")
    assert heard.said == ["alice: added 0 requests to 0 sessions (1 had nothing new)"]


def test_a_path_that_is_neither_file_nor_folder_is_refused(tmp_path: Path, run_kind: Runner) -> None:
    with pytest.raises(ImportRefused, match="neither a transcript file nor a folder"):
        run_kind("transcripts", tmp_path / "nowhere")
