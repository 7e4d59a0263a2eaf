"""The keys file as the server reads it: a BOM, editors that save in place, and one log line per problem."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import pytest

from memvault.server import keys


def test_a_keys_file_saved_with_a_bom_still_grants_its_keys(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    key = keys.add(path, "laptop", "alice", read_only=False)
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())  # as Notepad saves UTF-8
    found = keys.KeyRing(path).find(key)
    assert found is not None and found.token == "alice"
    assert keys.listing(path) == ["laptop\talice\tread-write"]


def test_an_editor_saving_in_place_never_refuses_a_valid_key(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    key = keys.add(path, "laptop", "alice", read_only=False)
    text = path.read_bytes()
    ring = keys.KeyRing(path)
    assert ring.find(key) is not None
    with open(path, "r+b") as handle:  # the editor truncates, then writes, in place
        handle.truncate(0)
        handle.flush()
        assert ring.find(key) is not None  # empty for a moment: the grants read before stand
        handle.write(text[: len(text) // 2])
        handle.flush()
        assert ring.find(key) is not None  # half written: malformed for a moment
        handle.seek(0)
        handle.write(text)
    assert ring.find(key) is not None


def test_a_change_in_place_that_revokes_is_taken_at_once(tmp_path: Path) -> None:
    path = tmp_path / "keys.txt"
    kept = keys.add(path, "laptop", "alice", read_only=False)
    gone = keys.add(path, "phone", "alice", read_only=False)
    ring = keys.KeyRing(path)
    assert ring.find(gone) is not None
    lines = [line for line in path.read_text().splitlines(keepends=True) if not line.startswith("phone ")]
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(lines)
    assert ring.find(gone) is None and ring.find(kept) is not None


def test_a_broken_keys_file_refuses_every_key_and_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "keys.txt"
    key = keys.add(path, "laptop", "alice", read_only=False)
    ring = keys.KeyRing(path)
    assert ring.find(key) is not None
    with open(path, "a", encoding="utf-8") as handle:
        handle.write("not a key line\n")
    past = time.time() - 3600
    os.utime(path, (past, past))  # the edit is long done: this is what the person left
    with caplog.at_level(logging.ERROR, logger="memvault"):
        for _ in range(3):
            assert ring.find(key) is None
        os.utime(path, (past + 1, past + 1))  # touched again, still broken
        assert ring.find(key) is None
    unusable = [r for r in caplog.records if "keys file unusable" in r.getMessage()]
    assert len(unusable) == 1 and "line 3" in unusable[0].getMessage()
