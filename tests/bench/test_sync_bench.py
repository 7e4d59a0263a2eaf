"""bench/bench_sync.py runs end to end on a few writes: both sides timed, every write pushed."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
from commands import clean_env, run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_bench_sync_times_both_sides_and_every_synced_write_reaches_the_remote(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    args = [
        "--writes",
        "8",
        "--warmup",
        "1",
        "--peer-every",
        "0.3",
        "--dir",
        str(tmp_path),
        "--out",
        str(out),
    ]
    done = run([sys.executable, str(ROOT / "bench" / "bench_sync.py"), *args], clean_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "| plain (sync off) |" in done.stdout and "| synced (MEMVAULT_SYNC=git) |" in done.stdout
    assert "reached the remote afterwards: yes" in done.stdout
    section = out.read_text(encoding="utf-8")
    assert "writes with git sync on and off" in section and "synced / plain: p50" in section
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("bench-sync-")]  # cleaned up
