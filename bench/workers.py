"""Worker processes taking turns: one per version of memvault (PYTHONPATH at its folder), each
timing a round when told "go" and answering with ``name=value`` pairs; for bench_ops.py and
bench_writepath.py."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path


def rounds(command: list[str], sides: list[Path], count: int) -> list[dict[str, list[float]]]:
    """Start ``command`` once per side (PYTHONPATH at it; each prints "ready", then a line of
    tab-separated ``name=value`` per "go"), run ``count`` rounds in turns; each side's values."""
    import os

    processes = [
        subprocess.Popen(
            command,
            env={**os.environ, "PYTHONPATH": str(side.resolve())},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=tempfile.gettempdir(),  # not the repository: PYTHONPATH alone decides the package
        )
        for side in sides
    ]
    results: list[dict[str, list[float]]] = [{} for _ in processes]
    try:
        for process in processes:
            assert process.stdin is not None and process.stdout is not None
            if process.stdout.readline().strip() != "ready":
                raise SystemExit("a worker did not start (see its error above)")
        for _ in range(count):
            for process, result in zip(processes, results, strict=True):
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write("go\n")
                process.stdin.flush()
                for item in process.stdout.readline().strip().split("\t"):
                    name, value = item.split("=")
                    result.setdefault(name, []).append(float(value))
    finally:
        for process in processes:
            if process.stdin is not None:
                process.stdin.close()
            process.wait(60)
    return results
