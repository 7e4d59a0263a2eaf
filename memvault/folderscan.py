"""A restart's folder scan in a helper process, on another core while the snapshot decodes.

A restart restores a token from its index snapshot, then stats every file to catch what changed
while the server was down: at 100,000 files about 0.5 s, nearly all of it in ``stat`` calls. A
thread cannot overlap them with the decode (after each call it waits up to a switch interval
for the GIL, which the decode holds), so when the snapshot is large and a second CPU is there,
a helper (``python -m memvault.folderscan``, a fresh interpreter: no fork of a threaded server)
walks the folder with the same :meth:`Vault.scan` and writes each file's stamp back as numpy
arrays, never pickle. The store compares the stamps with what the snapshot held, exactly as it
would compare its own stats. A helper that cannot start, fails or answers nonsense costs only
time: the store then walks the folder itself.

Protocol: the token folder as the only argument; an ``.npz`` on stdout (``ids.*``, ``archived``,
``mtime_ns``, ``size``, ``change``, ``leftovers.*``); exit status 0. Anything else is a failure.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from memvault.columns import iter_strings, pack_strings
from memvault.files import file_change, is_our_temp
from memvault.vault import Vault

__all__ = ["HELPER_MIN_BYTES", "Found", "Scan", "stamps", "start"]

log = logging.getLogger("memvault")

# A snapshot this large holds some 10,000 memories or more: their scan (~60 ms) outweighs a
# helper's start (~0.15 s of the other CPU, ~5 ms of this one).
HELPER_MIN_BYTES = 6 << 20
WAIT_SECONDS = 600.0  # a helper still walking after this is stuck (a hung network mount)

Stamp = tuple[str, bool, int, int, int]  # id, archived, mtime_ns, size, change (memvault.files)


def stamps(vault: Vault) -> Iterator[Stamp]:
    """Every memory file's stamp, walked in this process."""
    for id, archived, st in vault.scan():
        yield id, archived, st.st_mtime_ns, st.st_size, file_change(st)


@dataclass
class Found:
    """A helper's scan: the stamps (read lazily, one id at a time) and our temp files it saw."""

    arrays: dict[str, Any]
    leftovers: list[Path] = field(default_factory=list)

    def stamps(self) -> Iterator[Stamp]:
        # The ids are as trusted as the scan in this process: the helper ran Vault.scan (and the
        # store reads scanned files without name checks, as after loader helpers).
        a = self.arrays
        ids = iter_strings(a["ids.blob"], a["ids.len"])
        columns = (a["archived"].astype(bool).tolist(), a["mtime_ns"].tolist(), a["size"].tolist())
        return zip(ids, *columns, a["change"].tolist(), strict=True)


class Scan:
    """A helper's scan under way."""

    def __init__(self, process: subprocess.Popen[bytes], token_dir: Path) -> None:
        self._process = process
        self._dir = token_dir

    def result(self) -> Found | None:
        """The helper's scan once it is done; None if it failed (then scan in this process)."""
        try:
            out, err = self._process.communicate(timeout=WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.cancel()
            log.warning("a folder scan process hung; scanning in this process")
            return None
        if self._process.returncode != 0:
            last = (err.decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1]
            log.warning("a folder scan process failed (exit %s: %s)", self._process.returncode, last)
            return None
        try:
            return self._decode(out)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("a folder scan process gave unreadable output (%s)", type(exc).__name__)
            return None

    def cancel(self) -> None:
        """Stop the helper if it still runs, and reap it."""
        with contextlib.suppress(OSError):
            self._process.kill()
        with contextlib.suppress(OSError, ValueError, subprocess.TimeoutExpired):
            self._process.communicate(timeout=10)

    def _decode(self, out: bytes) -> Found:
        with np.load(io.BytesIO(out), allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
        n = len(arrays["ids.len"])
        iter_strings(arrays["ids.blob"], arrays["ids.len"])  # raises now if they do not fit together
        if any(len(arrays[key]) != n for key in ("archived", "mtime_ns", "size", "change")):
            raise ValueError("columns differ in length")
        leftovers = []
        for rel in iter_strings(arrays["leftovers.blob"], arrays["leftovers.len"]):
            # Removed later under the token's lock: only names of ours, only inside the folder.
            path = PurePosixPath(rel)
            if path.parts and not path.is_absolute() and ".." not in path.parts and is_our_temp(path.name):
                leftovers.append(self._dir.joinpath(*path.parts))
        return Found(arrays, leftovers)


def start(token_dir: Path) -> Scan | None:
    """A helper walking ``token_dir``; None if it could not start."""
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "memvault.folderscan", str(token_dir)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
    except OSError as exc:
        log.warning("could not start a folder scan process (%s)", type(exc).__name__)
        return None
    return Scan(process, token_dir)


# ---------------------------------------------------------------------------- the helper's side


def main() -> int:
    token_dir = Path(sys.argv[1])
    vault = Vault(token_dir)
    ids: list[str] = []
    columns: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
    for stamp in stamps(vault):
        ids.append(stamp[0])
        for column, value in zip(columns, stamp[1:], strict=True):
            column.append(int(value))
    out: dict[str, Any] = {}
    out["ids.blob"], out["ids.len"] = pack_strings(ids)
    dtypes = (np.uint8, np.int64, np.int64, np.int64)
    for name, column, dtype in zip(("archived", "mtime_ns", "size", "change"), columns, dtypes, strict=True):
        out[name] = np.array(column, dtype=dtype)
    left = [os.path.relpath(path, token_dir) for path in vault.leftovers]
    out["leftovers.blob"], out["leftovers.len"] = pack_strings(left)
    buffer = io.BytesIO()
    np.savez(buffer, **out)
    sys.stdout.buffer.write(buffer.getbuffer())
    sys.stdout.buffer.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
