"""A restart's folder scan in a helper process: the same stamps as a scan in the server process,
used by the restart, and a failing helper costs only time."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from memvault import folderscan, snapshot
from memvault.columns import pack_strings
from memvault.files import TEMP_PREFIX, TEMP_SUFFIX
from memvault.store import Store
from memvault.vault import Vault

pytestmark = pytest.mark.anyio


def _fill(folder: Path, n: int) -> None:
    (folder / "archive").mkdir(parents=True)
    (folder / "sub" / "deeper").mkdir(parents=True)
    (folder / ".hidden").mkdir()
    (folder / "sessions").mkdir()
    for i in range(n):
        where = folder / "archive" if i % 7 == 0 else folder / "sub" / "deeper" if i % 5 == 0 else folder
        (where / f"note-{i}.md").write_text(f"# Note {i}\n\nharbour tide {i}\n", encoding="utf-8")
    (folder / "ünïcode 東京.md").write_text("# Unicode\n\nname\n", encoding="utf-8")
    (folder / ".hidden" / "x.md").write_text("# Hidden\n", encoding="utf-8")
    (folder / "sessions" / "s.md").write_text("# Session\n", encoding="utf-8")
    (folder / "notes.txt").write_text("not a memory\n", encoding="utf-8")
    outside = folder.parent / "outside.md"
    outside.write_text("# Outside\n", encoding="utf-8")
    (folder / "link-out.md").symlink_to(outside)
    (folder / "link-in.md").symlink_to(folder / "note-1.md")
    (folder / "sub" / f"{TEMP_PREFIX}left_abc{TEMP_SUFFIX}").write_text("half a write", encoding="utf-8")


def test_the_helper_finds_what_the_scan_in_process_finds(tmp_path):
    folder = tmp_path / "alice"
    _fill(folder, 60)
    vault = Vault(folder)
    here = sorted(folderscan.stamps(vault))
    scan = folderscan.start(folder)
    assert scan is not None
    found = scan.result()
    assert found is not None
    there = sorted(found.stamps())
    assert there == here
    assert len(here) == 62  # 60 notes, the unicode name, the link inside; not the rest
    assert {type(v) for stamp in there for v in stamp} == {str, bool, int}
    assert found.leftovers == vault.leftovers == [folder / "sub" / f"{TEMP_PREFIX}left_abc{TEMP_SUFFIX}"]


def test_an_empty_or_missing_folder_gives_no_stamps(tmp_path):
    for folder in (tmp_path / "missing", tmp_path):
        scan = folderscan.start(folder)
        assert scan is not None
        found = scan.result()
        assert found is not None and list(found.stamps()) == [] and found.leftovers == []


def _answer(tmp_path: Path, arrays: dict[str, np.ndarray], status: int = 0) -> folderscan.Found | None:
    """What the store makes of a helper that wrote ``arrays`` and exited with ``status``."""
    out = io.BytesIO()
    np.savez(out, **arrays)
    dump = tmp_path / "out.npz"
    dump.write_bytes(out.getvalue())
    code = f"import sys; sys.stdout.buffer.write(open({str(dump)!r}, 'rb').read()); sys.exit({status})"
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    return folderscan.Scan(process, tmp_path).result()


def _arrays(ids: list[str], leftovers: list[str]) -> dict[str, np.ndarray]:
    n = len(ids)
    arrays = {"archived": np.zeros(n, np.uint8), "mtime_ns": np.ones(n, np.int64)}
    arrays |= {"size": np.ones(n, np.int64), "change": np.ones(n, np.int64)}
    arrays["ids.blob"], arrays["ids.len"] = pack_strings(ids)
    arrays["leftovers.blob"], arrays["leftovers.len"] = pack_strings(leftovers)
    return arrays


def test_leftovers_from_a_helper_stay_inside_the_folder(tmp_path):
    temp = f"{TEMP_PREFIX}x1234567{TEMP_SUFFIX}"
    found = _answer(
        tmp_path, _arrays(["a.md"], [temp, f"sub/{temp}", f"../{temp}", f"/etc/{temp}", "sub/a.md"])
    )
    assert found is not None
    assert found.leftovers == [tmp_path / temp, tmp_path / "sub" / temp]
    assert list(found.stamps()) == [("a.md", False, 1, 1, 1)]


def test_a_failing_or_garbled_helper_gives_nothing(tmp_path, caplog):
    good = _arrays(["a.md", "b.md"], [])
    short = dict(good, size=np.ones(1, np.int64))
    unfit = dict(good, **{"ids.len": np.array([4, 9])})
    with caplog.at_level(logging.WARNING, logger="memvault"):
        assert _answer(tmp_path, good, status=3) is None
        assert "exit 3" in caplog.text
        assert _answer(tmp_path, short) is None
        assert _answer(tmp_path, unfit) is None
        assert _answer(tmp_path, {"nothing": np.zeros(1)}) is None
    assert "unreadable output" in caplog.text
    assert str(tmp_path) not in caplog.text


def _restartable(vault_root: Path, n: int) -> Path:
    folder = vault_root / "alice"
    for i in range(n):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"note-{i}.md").write_text(f"# Note {i}\n\nharbour tide {i}\n", encoding="utf-8")
    return folder


def _change_while_down(folder: Path) -> None:
    """What a person or git does while the server is stopped."""
    (folder / "note-1.md").write_text("# Note 1\n\nrewritten: lighthouse\n", encoding="utf-8")
    (folder / "note-2.md").unlink()
    (folder / "new.md").write_text("# New\n\nwritten while down: lighthouse\n", encoding="utf-8")
    old = time.time() - 3600
    leftover = folder / f"{TEMP_PREFIX}crash123{TEMP_SUFFIX}"
    leftover.write_text("half a write", encoding="utf-8")
    os.utime(leftover, (old, old))
    # Same size and mtime, other bytes (a rename over it): the ctime and inode tell.
    before = os.stat(folder / "note-3.md")
    replacement = folder / "tmp-replacement"
    replacement.write_text("# Note 3\n\nharbour tidX 3\n", encoding="utf-8")
    os.utime(replacement, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(replacement, folder / "note-3.md")


@pytest.mark.parametrize("helper", [True, False])
async def test_a_restart_catches_changes_made_while_down(make_settings, vault_root, monkeypatch, helper):
    folder = _restartable(vault_root, 40)
    monkeypatch.setattr(snapshot, "MIN_MEMORIES", 10)
    monkeypatch.setattr(folderscan, "HELPER_MIN_BYTES", 0)
    monkeypatch.setattr("memvault.loader.usable_cpus", lambda: 2)
    first = Store(make_settings(watch=False))
    try:
        await first.state("alice")
    finally:
        await first.close()  # writes the snapshot
    assert (folder / ".memvault" / snapshot.FILE_NAME).is_file()
    _change_while_down(folder)
    started: list[Path] = []
    real_start = folderscan.start
    monkeypatch.setattr(folderscan, "start", lambda d: started.append(d) or real_start(d))
    store = Store(make_settings(watch=False, load_processes=None if helper else 0))
    try:
        state = await store.state("alice")
        assert started == ([folder] if helper else [])
        assert set(state.hot.memories) == {f"note-{i}.md" for i in range(40) if i != 2} | {"new.md"}
        assert "lighthouse" in state.hot.memories["note-1.md"].content
        assert "tidX" in state.hot.memories["note-3.md"].content
        found = await store.find("alice", query="lighthouse", limit=10)
        assert {m.id for m in found.memories} == {"note-1.md", "new.md"}
        assert not list(folder.glob(f"{TEMP_PREFIX}*"))  # the crash's leftover, removed
    finally:
        await store.close()


async def test_a_helper_that_cannot_start_means_scanning_in_process(
    make_settings, vault_root, monkeypatch, caplog
):
    folder = _restartable(vault_root, 30)
    monkeypatch.setattr(snapshot, "MIN_MEMORIES", 10)
    monkeypatch.setattr(folderscan, "HELPER_MIN_BYTES", 0)
    monkeypatch.setattr("memvault.loader.usable_cpus", lambda: 2)
    first = Store(make_settings(watch=False))
    try:
        await first.state("alice")
    finally:
        await first.close()
    _change_while_down(folder)
    monkeypatch.setattr(folderscan.sys, "executable", sys.executable + "-missing")
    store = Store(make_settings(watch=False))
    try:
        with caplog.at_level(logging.WARNING, logger="memvault"):
            state = await store.state("alice")
        assert "could not start a folder scan process" in caplog.text
        assert str(vault_root) not in caplog.text
        assert "new.md" in state.hot.memories and "note-2.md" not in state.hot.memories
        assert "tidX" in state.hot.memories["note-3.md"].content
    finally:
        await store.close()
