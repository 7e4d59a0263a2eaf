"""memvault.importers.memory_jsonl: the official server's file merged once, each line read bounded."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest

from importers.conftest import Runner
from memvault.importers import ImportRefused
from memvault.importers.memory_jsonl import read_memory_jsonl


def memory_jsonl(tmp_path: Path) -> Path:
    path = tmp_path / "memory.jsonl"
    rows = [
        {"type": "entity", "name": "Alice", "entityType": "person", "observations": ["likes tea"]},
        {"type": "entity", "name": "Acme", "entityType": "org", "observations": []},
        {"type": "relation", "from": "Alice", "to": "Acme", "relationType": "works_at"},
        {"type": "relation", "from": "Alice", "to": "Nobody", "relationType": "knows"},
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_a_dry_run_creates_nothing_and_the_merge_adds_once(tmp_path: Path, run_kind: Runner) -> None:
    source = memory_jsonl(tmp_path)
    code, heard = run_kind("memory-jsonl", source, dry_run=True)
    assert heard.said == [
        "alice: would add 2 entities, 1 observations, 1 relations; skipped 1 relations to missing entities"
    ]
    assert not run_kind.root.exists()
    run_kind("memory-jsonl", source)
    code, heard = run_kind("memory-jsonl", source)
    assert code == 0 and heard.said[0].startswith("alice: added 0 entities, 0 observations, 0 relations")


def test_an_over_long_line_is_refused_after_reading_its_bound(tmp_path: Path) -> None:
    source = tmp_path / "memory.jsonl"
    source.write_text('{"type": "entity", "name": "' + "x" * 20_000_000 + '"}\n')
    tracemalloc.start()
    try:
        with pytest.raises(ImportRefused, match="line 1: longer than 1,000 bytes"):
            read_memory_jsonl(source, "memory.jsonl", 10_000, 1_000)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000


def test_a_line_that_is_no_entity_or_relation_is_refused_naming_it(tmp_path: Path) -> None:
    source = memory_jsonl(tmp_path)
    source.write_text(source.read_text() + '{"type": "note"}\n')
    with pytest.raises(ImportRefused, match="line 5: not an entity or relation"):
        read_memory_jsonl(source, "memory.jsonl", 10_000, 100_000)
