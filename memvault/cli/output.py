"""Where a command's text goes: stdout, or a file written atomically with a line on stderr."""

from __future__ import annotations

import sys
from pathlib import Path

from memvault.disk.files import atomic_write


def write_out(text: str, out: Path | None, done: str) -> int:
    """``text`` to stdout, or to ``out`` (atomically, then ``done`` on stderr); the exit status."""
    if out is None:
        sys.stdout.write(text)
    else:
        atomic_write(out, text.encode("utf-8"))
        print(done, file=sys.stderr)
    return 0
