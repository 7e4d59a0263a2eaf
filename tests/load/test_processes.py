"""Helper processes: their command, and the spare one serve starts before its own imports."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from memvault.load import processes
from memvault.load.processes import command


@pytest.fixture(autouse=True)
def _no_spare_left() -> Iterator[None]:
    yield
    processes.drop_spare()


def _probe_package(tmp_path: Path) -> dict[str, str]:
    """A stand-in memvault on PYTHONPATH, ahead of the real one (run with cwd=tmp_path): its
    ``probe`` helper says whether the cyclic collector ran while it was imported and while its main
    ran, and echoes its arguments and what it read from stdin."""
    fake = tmp_path / "memvault"
    (fake / "load").mkdir(parents=True)
    (fake / "__init__.py").write_text("", encoding="utf-8")
    (fake / "load" / "__init__.py").write_text("", encoding="utf-8")
    (fake / "load" / "probe.py").write_text(
        "import gc, sys\nAT_IMPORT = gc.isenabled()\n"
        "def main():\n"
        "    job = sys.stdin.read()\n"
        "    print(AT_IMPORT, gc.isenabled(), sys.argv[1:], job)\n"
        "    return 3\n",
        encoding="utf-8",
    )
    return {**os.environ, "PYTHONPATH": str(tmp_path)}


def test_helpers_start_with_the_collector_off_before_their_first_import(tmp_path):
    env = _probe_package(tmp_path)
    done = subprocess.run(
        [*command("probe"), "a b", "c"], input="job", capture_output=True, text=True, env=env, cwd=tmp_path,
        timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout.strip()) == (3, "False False ['a b', 'c'] job"), done.stderr
    with pytest.raises(ValueError):
        command("folderscan; import os")


def test_a_started_helper_takes_its_job_whenever_it_comes(tmp_path, monkeypatch):
    _probe_package(tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    helper = processes.Started("probe")
    # The job comes whenever the store knows it; the helper waits on its stdin meanwhile.
    assert helper.give('["é", 1]'.encode())
    out, err = helper.process.communicate(timeout=60)
    assert (helper.process.returncode, out.decode().strip()) == (3, 'False False [] ["é", 1]'), err
    assert not helper.give(b"twice")  # its stdin is closed: a job is given once
    helper.stop()


def test_the_spare_is_taken_once_by_its_own_kind(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert processes.start_spare("folderscan")
    spare = processes._spare
    assert spare is not None
    assert processes.take_spare("loader") is None  # another kind of helper: not this one
    assert processes.take_spare("folderscan") is spare
    assert processes.take_spare("folderscan") is None
    fresh = processes.start("folderscan")  # no spare left: a fresh one
    assert fresh is not spare
    for helper in (spare, fresh):
        helper.stop()
        assert helper.process.returncode is not None


def _wait(condition, seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_spare_nobody_takes_is_stopped_after_its_time():
    assert processes.start_spare("folderscan", seconds=0.2)
    spare = processes._spare
    assert spare is not None
    _wait(lambda: processes._spare is None and spare.process.returncode is not None)  # killed, reaped
    assert processes.take_spare("folderscan") is None


def test_a_spare_that_died_is_not_handed_out():
    assert processes.start_spare("folderscan")
    spare = processes._spare
    assert spare is not None
    spare.process.kill()
    spare.process.wait(timeout=30)
    assert processes.take_spare("folderscan") is None
    assert processes._spare is None and spare.process.returncode is not None


def test_drop_spare_stops_it_and_a_new_spare_replaces_the_old():
    assert processes.start_spare("folderscan")
    first = processes._spare
    assert processes.start_spare("folderscan")
    assert first is not None and first.process.returncode is not None
    second = processes._spare
    processes.drop_spare()
    assert processes._spare is None and second is not None and second.process.returncode is not None


def test_a_spare_is_worth_it_only_for_a_large_snapshot_in_a_token_folder(tmp_path):
    root = tmp_path / "vault"
    assert not processes.worth_a_spare(root, 1000)  # no vault yet
    (root / "alice" / ".memvault").mkdir(parents=True)
    (root / "alice" / ".memvault" / "snapshot.npz").write_bytes(b"x" * 999)
    (root / "alice" / "big.md").write_bytes(b"x" * 5000)
    assert not processes.worth_a_spare(root, 1000)
    outside = tmp_path / "elsewhere"
    (outside / ".memvault").mkdir(parents=True)
    (outside / ".memvault" / "snapshot.npz").write_bytes(b"x" * 5000)
    (root / "linked").symlink_to(outside)  # not followed: nothing outside the vault is looked at
    (root / ".memvault").symlink_to(outside / ".memvault")
    assert not processes.worth_a_spare(root, 1000)
    (root / "bob" / ".memvault").mkdir(parents=True)
    with open(root / "bob" / ".memvault" / "snapshot.npz", "wb") as handle:
        handle.truncate(1000)
    assert processes.worth_a_spare(root, 1000)


def test_folder_scan_helpers_only_with_two_cpus_and_helpers_allowed(monkeypatch):
    monkeypatch.setattr(processes, "usable_cpus", lambda: 4)
    assert processes.scan_helpers(None) == 4 and processes.scan_helpers(2) == 4
    assert processes.scan_helpers(0) == 0  # MEMVAULT_LOAD_PROCESSES=0: no helper processes at all
    monkeypatch.setattr(processes, "usable_cpus", lambda: 1)
    assert processes.scan_helpers(None) == 0


def test_snapshots_lists_the_token_folders_with_one_the_last_written_first(tmp_path):
    root = tmp_path / "vault"
    assert processes.snapshots(root) == []  # no vault yet
    for token, size, when in (("alice", 10, 100), ("bob", 30, 300), ("carol", 20, 200)):
        (root / token / ".memvault").mkdir(parents=True)
        snapshot = root / token / ".memvault" / "snapshot.npz"
        snapshot.write_bytes(b"x" * size)
        os.utime(snapshot, (when, when))
    (root / "dave").mkdir()  # no snapshot
    (root / "erin" / ".memvault" / "snapshot.npz").mkdir(parents=True)  # not a file
    outside = tmp_path / "elsewhere"
    (outside / ".memvault").mkdir(parents=True)
    (outside / ".memvault" / "snapshot.npz").write_bytes(b"x")
    (root / "linked").symlink_to(outside)  # not followed
    (root / ".hidden").symlink_to(outside)
    assert processes.snapshots(root) == [("bob", 30), ("carol", 20), ("alice", 10)]


def test_a_started_helper_keeps_its_freed_heap_and_the_servers_environment(tmp_path, monkeypatch):
    """A helper's glibc keeps what it frees (HELPER_MALLOC): a loader helper's page faults halved.
    Everything else in its environment is the server's."""
    fake = tmp_path / "memvault" / "load"
    fake.mkdir(parents=True)
    (tmp_path / "memvault" / "__init__.py").write_text("", encoding="utf-8")
    (fake / "__init__.py").write_text("", encoding="utf-8")
    (fake / "envprobe.py").write_text(
        "import json, os, sys\ndef main():\n    sys.stdin.read()\n    print(json.dumps(dict(os.environ)))\n",
        encoding="utf-8",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.setenv("MEMVAULT_PROBE", "kept")
    helper = processes.Started("envprobe")
    assert helper.give(b"")
    out, err = helper.process.communicate(timeout=60)
    seen = json.loads(out)
    assert seen["MEMVAULT_PROBE"] == "kept", err
    assert {key: seen.get(key) for key in processes.HELPER_MALLOC} == processes.HELPER_MALLOC
    assert "MALLOC_TRIM_THRESHOLD_" not in os.environ  # the server's own heap is left as it was
