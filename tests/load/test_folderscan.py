"""A restart's folder scan in a helper process: the same stamps as a scan in the server process,
used by the restart, and a failing helper costs only time."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from memvault.disk.files import TEMP_PREFIX, TEMP_SUFFIX, file_change
from memvault.disk.names import SNAPSHOT_FILE
from memvault.disk.vault import Vault
from memvault.load import folderscan, pipes, processes, snapshot
from memvault.ops.service import Service
from memvault.search.columns import pack_strings

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


async def _snapshot_of(make_settings, folder: Path, monkeypatch) -> Path:
    """The folder loaded once and the server closed: its snapshot written."""
    monkeypatch.setattr(snapshot, "MIN_MEMORIES", 1)
    service = Service(make_settings(watch=False))
    store = service.store
    try:
        await store.state(folder.name)
    finally:
        await service.close()
    path = folder / ".memvault" / SNAPSHOT_FILE
    assert path.is_file()
    return path


def _expected(folder: Path, snap: Path) -> tuple[set[tuple[str, bool]], set[tuple[str, bool]]]:
    """Changed and gone, as a scan in this process against the snapshot finds them."""
    with np.load(snap) as data:
        areas = snapshot.areas_from(data)
    held = {(id, m.archived): (m.mtime_ns, m.size, m.change) for a in areas for id, m in a.memories.items()}
    changed = set()
    for id, archived, st in Vault(folder).scan():
        if held.pop((id, archived), None) != (st.st_mtime_ns, st.st_size, file_change(st)):
            changed.add((id, archived))
    return changed, set(held)


@pytest.mark.slow
@pytest.mark.parametrize("spare", [False, True])
async def test_the_helper_finds_what_a_scan_in_process_finds(make_settings, vault_root, monkeypatch, spare):
    folder = vault_root / "alice"
    _fill(folder, 60)
    snap = await _snapshot_of(make_settings, folder, monkeypatch)
    if spare:  # started before the job was known, as serve does (memvault.load.processes)
        assert processes.start_spare("folderscan")
        waiting = processes._spare
    _change_while_down(folder)
    (folder / "archive" / "note-7.md").unlink()
    scan = folderscan.start(folder, snap, most=1)
    assert scan is not None
    if spare:
        assert waiting is not None and scan._process is waiting.process and processes._spare is None
    assert folderscan.start(folder, snap, most=1) is None  # one runs already
    found = scan.result()
    scan.cancel()
    assert found is not None
    changed, gone = _expected(folder, snap)
    assert set(found.changed) == changed and len(found.changed) == len(changed)
    assert set(found.gone) == gone and len(found.gone) == len(gone)
    # (link-in.md leads to note-1.md)
    assert changed == {("note-1.md", False), ("link-in.md", False), ("note-3.md", False), ("new.md", False)}
    assert gone == {("note-2.md", False), ("note-7.md", True)}
    temps = {
        folder / "sub" / f"{TEMP_PREFIX}left_abc{TEMP_SUFFIX}",
        folder / f"{TEMP_PREFIX}crash123{TEMP_SUFFIX}",
    }
    assert set(found.leftovers) == temps


@pytest.mark.slow
async def test_a_missing_folder_or_snapshot(make_settings, vault_root, monkeypatch, caplog):
    folder = vault_root / "alice"
    _fill(folder, 10)
    snap = await _snapshot_of(make_settings, folder, monkeypatch)
    kept = vault_root.parent / "kept.npz"
    snap.rename(kept)
    with caplog.at_level(logging.WARNING, logger="memvault"):
        scan = folderscan.start(folder, snap, most=1)
        assert scan is not None and scan.result() is None
        scan.cancel()
    assert "a folder scan process failed" in caplog.text
    assert str(vault_root) not in caplog.text
    scan = folderscan.start(vault_root / "missing", kept, most=1)  # the one before was cancelled
    assert scan is not None
    found = scan.result()
    scan.cancel()
    assert folderscan._running == 0
    assert found is not None and found.changed == [] and found.leftovers == []
    assert len(found.gone) == 12  # every memory the snapshot holds


def _answer(tmp_path: Path, arrays: dict[str, np.ndarray], status: int = 0) -> folderscan.FolderDiff | None:
    """What the store makes of a helper that wrote ``arrays`` and exited with ``status``."""
    dump = tmp_path / "out.bin"
    dump.write_bytes(b"".join(pipes.encode(arrays)))
    code = f"import sys; sys.stdout.buffer.write(open({str(dump)!r}, 'rb').read()); sys.exit({status})"
    process = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL
    )
    return folderscan.Scan(process, tmp_path, tmp_path / "snapshot.npz").result()


def _arrays(tmp_path: Path, changed: list[str], leftovers: list[str]) -> dict[str, np.ndarray]:
    snap = tmp_path / "snapshot.npz"
    if not snap.exists():
        snap.write_bytes(b"stands for a snapshot")
    arrays = {"snapshot": np.array(folderscan.identity(snap), dtype=np.int64)}
    arrays["changed.blob"], arrays["changed.len"] = pack_strings(changed)
    arrays["changed.archived"] = np.arange(len(changed), dtype=np.uint8) % 2
    arrays["gone.blob"], arrays["gone.len"] = pack_strings(["g.md"])
    arrays["gone.archived"] = np.ones(1, dtype=np.uint8)
    arrays["leftovers.blob"], arrays["leftovers.len"] = pack_strings(leftovers)
    return arrays


def test_leftovers_from_a_helper_stay_inside_the_folder(tmp_path):
    temp = f"{TEMP_PREFIX}x1234567{TEMP_SUFFIX}"
    leftovers = [temp, f"sub/{temp}", f"../{temp}", f"/etc/{temp}", "sub/a.md"]
    found = _answer(tmp_path, _arrays(tmp_path, ["a.md", "b/c.md"], leftovers))
    assert found is not None
    assert found.leftovers == [tmp_path / temp, tmp_path / "sub" / temp]
    assert found.changed == [("a.md", False), ("b/c.md", True)] and found.gone == [("g.md", True)]


def test_a_failing_or_garbled_helper_or_another_snapshot_gives_nothing(tmp_path, caplog):
    good = _arrays(tmp_path, ["a.md", "b.md"], [])
    short = dict(good, **{"changed.archived": np.ones(1, np.uint8)})
    unfit = dict(good, **{"changed.len": np.array([4, 9])})
    with caplog.at_level(logging.INFO, logger="memvault"):
        assert _answer(tmp_path, good) is not None
        assert _answer(tmp_path, good, status=3) is None
        assert "exit 3" in caplog.text
        assert _answer(tmp_path, short) is None
        assert _answer(tmp_path, unfit) is None
        assert _answer(tmp_path, {"nothing": np.zeros(1)}) is None
        assert "unreadable output" in caplog.text
        other = dict(good, snapshot=good["snapshot"] + np.array([0, 1, 0]))
        assert _answer(tmp_path, other) is None  # compared with another snapshot than the one loaded
        assert "the snapshot was replaced during a load" in caplog.text
    assert str(tmp_path) not in caplog.text


def test_helpers_that_cannot_take_their_job_are_reaped(tmp_path, monkeypatch):
    started: list[processes.Started] = []
    real = processes.Started.__init__

    def recorded(self: processes.Started, module: str) -> None:
        real(self, module)
        started.append(self)

    monkeypatch.setattr(processes.Started, "__init__", recorded)
    monkeypatch.setattr(processes.Started, "give", lambda self, job: False)  # as if each died at once
    running = folderscan._running
    assert folderscan.start(tmp_path, tmp_path / "snapshot.npz", most=4) is None
    assert len(started) == 2  # the first, then one more try
    assert all(helper.process.returncode is not None for helper in started)  # killed and reaped
    assert folderscan._running == running  # its place given back


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


async def _down_after_changes(make_settings, vault_root: Path, monkeypatch, n: int) -> Path:
    """A token of ``n`` notes served once (its snapshot written), then changed while the server
    is down; a helper is used for any snapshot on any machine."""
    folder = _restartable(vault_root, n)
    monkeypatch.setattr(processes, "HELPER_MIN_BYTES", 0)
    monkeypatch.setattr("memvault.load.processes.usable_cpus", lambda: 2)
    await _snapshot_of(make_settings, folder, monkeypatch)
    _change_while_down(folder)
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("helper", [True, False])
async def test_a_restart_catches_changes_made_while_down(make_settings, vault_root, monkeypatch, helper):
    folder = await _down_after_changes(make_settings, vault_root, monkeypatch, 40)
    answers: list[folderscan.FolderDiff | None] = []
    real_result = folderscan.Scan.result
    monkeypatch.setattr(
        folderscan.Scan, "result", lambda scan: answers.append(real_result(scan)) or answers[-1]
    )
    service = Service(make_settings(watch=False, load_processes=None if helper else 0))
    store = service.store
    try:
        state = await store.state("alice")
        if helper:  # the helper's answer was used: the files it found changed or gone
            assert len(answers) == 1 and answers[0] is not None
            assert {id for id, _ in answers[0].changed + answers[0].gone} == {
                f"note-{i}.md" for i in (1, 2, 3)
            } | {"new.md"}
        else:
            assert answers == []
        assert set(state.hot.memories) == {f"note-{i}.md" for i in range(40) if i != 2} | {"new.md"}
        assert "lighthouse" in state.hot.memories["note-1.md"].content
        assert "tidX" in state.hot.memories["note-3.md"].content
        found = await store.find("alice", query="lighthouse", limit=10)
        assert {m.id for m in found.memories} == {"note-1.md", "new.md"}
        assert not list(folder.glob(f"{TEMP_PREFIX}*"))  # the crash's leftover, removed
        assert folderscan._running == 0  # the store let go of its helper
    finally:
        await service.close()


async def test_a_helper_that_cannot_start_means_scanning_in_process(
    make_settings, vault_root, monkeypatch, caplog
):
    await _down_after_changes(make_settings, vault_root, monkeypatch, 30)
    monkeypatch.setattr(folderscan.sys, "executable", sys.executable + "-missing")
    service = Service(make_settings(watch=False))
    store = service.store
    try:
        with caplog.at_level(logging.WARNING, logger="memvault"):
            state = await store.state("alice")
        assert "could not start a folder scan process" in caplog.text
        assert str(vault_root) not in caplog.text
        assert "new.md" in state.hot.memories and "note-2.md" not in state.hot.memories
        assert "tidX" in state.hot.memories["note-3.md"].content
        assert folderscan._running == 0
    finally:
        await service.close()
