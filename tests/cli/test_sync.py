"""memvault sync without --once: it syncs every interval until Ctrl-C or SIGTERM, then says how it left."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest
from commands import MEMVAULT, clean_env, wait_until
from gitrepo import GIT, git_sync

pytestmark = [pytest.mark.skipif(GIT is None, reason="git is not installed"), pytest.mark.slow]


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT])
def test_memvault_sync_keeps_syncing_until_stopped_then_exits_cleanly(tmp_path: Path, stop: int) -> None:
    remote = tmp_path / "remote.git"
    git_sync(tmp_path, "init", "--bare", "-b", "main", str(remote))
    clone = tmp_path / "clone"
    git_sync(tmp_path, "clone", str(remote), str(clone))
    (clone / "team").mkdir()
    (clone / "team" / "first.md").write_text("# First\n", encoding="utf-8")
    env = clean_env(
        MEMVAULT_SYNC_INTERVAL_SECONDS="0.5", GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1"
    )
    err = tmp_path / "stderr"
    with err.open("wb") as stderr:
        process = subprocess.Popen(
            [str(MEMVAULT), "sync", "--root", str(clone)], env=env, stdout=subprocess.DEVNULL, stderr=stderr
        )
    try:

        def on_remote(name: str) -> bool:
            shown = git_sync(remote, "ls-tree", "-r", "--name-only", "main", check=False).stdout
            return f"team/{name}" in shown.split()

        wait_until(lambda: on_remote("first.md"), 30, "the first sync pushes")
        (clone / "team" / "second.md").write_text("# Second\n", encoding="utf-8")
        wait_until(lambda: on_remote("second.md"), 30, "a later sync pushes what changed since")
        process.send_signal(stop)
        assert process.wait(30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    said = err.read_text(encoding="utf-8")
    assert "memvault: sync stopped (in sync)." in said and "Traceback" not in said, said
