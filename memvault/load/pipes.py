"""How the server and its helper processes (loader, folderscan) talk: arrays as an .npz on stdout.

A helper answers with numpy arrays (never pickle) and exit status 0; on any error it prints only
the error's kind and exits 1, because the server logs that line and a message could hold a path.
The server takes the arrays, or logs one warning and does the work itself.
"""

from __future__ import annotations

import io
import logging
import sys
import zipfile
from collections.abc import Callable, Mapping
from typing import Any, cast

import numpy as np
import numpy.typing as npt

__all__ = ["Arrays", "answer", "run"]

log = logging.getLogger("memvault")

Arrays = dict[str, npt.NDArray[Any]]


def run(work: Callable[[], Mapping[str, npt.NDArray[Any]]]) -> int:
    """A helper's main: what ``work`` returns, as an .npz on stdout; the exit status."""
    try:
        buffer = io.BytesIO()
        np.savez(buffer, **cast("dict[str, Any]", work()))  # numpy stubs type **kwds as allow_pickle
        sys.stdout.buffer.write(buffer.getbuffer())
        sys.stdout.buffer.flush()
    except Exception as exc:  # the server logs this line: the error's kind, never a path
        print(type(exc).__name__, file=sys.stderr)
        return 1
    return 0


def answer(helper: str, instead: str, status: int, stdout: bytes, stderr: bytes) -> Arrays | None:
    """A finished helper's arrays; None, after one warning naming ``helper`` and what happens
    ``instead``, if it failed or wrote something else."""
    if status != 0:
        last = (stderr.decode("utf-8", "replace").strip().splitlines() or ["no message"])[-1]
        log.warning("%s failed (exit %s: %s); %s", helper, status, last, instead)
        return None
    try:
        with np.load(io.BytesIO(stdout), allow_pickle=False) as data:
            return {key: data[key] for key in data.files}
    # A cut-off archive (it starts like a zip file) raises BadZipFile, an incomplete member EOFError.
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile) as exc:
        log.warning("%s gave unreadable output (%s); %s", helper, type(exc).__name__, instead)
        return None
