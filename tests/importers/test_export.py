"""memvault.importers.export: memvault's own export loaded back, every line checked first."""

from __future__ import annotations

import io
import json
import tracemalloc
from pathlib import Path

import pytest

from importers.conftest import Runner
from memvault.importers import ImportRefused
from memvault.importers.export import import_lines


def test_lines_are_read_with_a_bound_and_a_bad_one_is_named() -> None:
    huge = io.BytesIO(b"\n" + b"x" * 10_000_000 + b"\n")
    tracemalloc.start()
    try:
        with pytest.raises(ImportRefused, match="line 2 is longer than 100 bytes"):
            list(import_lines(huge, 100))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000
    with pytest.raises(ImportRefused, match="line 1 is not a memvault export line"):
        list(import_lines(io.BytesIO(b'{"kind": "other"}\n'), 100))


def test_an_export_line_loads_into_the_token_given_once(tmp_path: Path, run_kind: Runner) -> None:
    row = {"token": "bob", "kind": "entity", "name": "Alice", "entityType": "person", "observations": ["tea"]}
    source = tmp_path / "export.jsonl"
    source.write_text(json.dumps(row) + "\n")
    code, heard = run_kind("export", source)
    assert code == 0 and heard.said[0].startswith("alice: added 1 entities, 1 observations")
    code, heard = run_kind("export", source)
    assert heard.said[0].startswith("alice: added 0 entities, 0 observations")
    assert not (run_kind.root / "bob").exists()


def test_an_invalid_token_is_refused_with_status_2(tmp_path: Path, run_kind: Runner) -> None:
    code, heard = run_kind("export", tmp_path / "x.jsonl", token="../up")
    assert code == 2 and heard.warned == ["memvault: '../up' is not a valid token."]
