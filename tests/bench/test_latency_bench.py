"""bench/bench_latency.py runs end to end on a small vault: every client and call timed, the floor beside."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from commands import clean_env, run

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_latency_times_every_call_through_both_clients_beside_the_floor(tmp_path: Path) -> None:
    out = tmp_path / "RESULTS.md"
    args = ["--memories", "80", "--calls", "6", "--rounds", "2", "--warmup", "1", "--out", str(out)]
    done = run([sys.executable, str(ROOT / "bench" / "bench_latency.py"), *args], clean_env(), timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    section = out.read_text(encoding="utf-8")
    for kind in ("light", "sdk"):
        for call in ("echo (floor)", "list_memory_titles", "read_memory (query)", "recall", "write_memory"):
            row = re.search(rf"^\| {kind} \| {re.escape(call)} \| ([\d.]+) \|", section, re.MULTILINE)
            assert row is not None and float(row.group(1)) > 0, (kind, call)
        assert re.search(rf"^\| {kind} \| [+-][\d.]+ \|", section, re.MULTILINE)  # above the floor
    assert "durable create in the vault's folder: p50" in section
    assert "vectors pending at the first timed call: 0" in section
