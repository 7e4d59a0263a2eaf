"""A restart's folder scan in a helper process, on another core while the snapshot decodes.

A restart restores a token from its index snapshot, then stats every file to catch what changed
while the server was down: at 100,000 files about 0.5 s, nearly all of it in ``stat`` calls. A
thread cannot overlap them with the decode (after each call it waits up to a switch interval
for the GIL, which the decode holds), so when the snapshot is large and a second CPU is there,
a helper (``memvault.load.folderscan`` run by a fresh interpreter: no fork of a threaded server)
walks the folder with the same :meth:`Vault.scan`, compares each file's stamp with the one the
snapshot holds, exactly as the store would, and answers with the few that differ, as numpy
arrays (never pickle). The store then looks at those files only. A helper that cannot start,
fails, answers nonsense or read another snapshot than the store (one written meanwhile) costs
only time: the store then walks the folder itself.

Protocol: the token folder and the snapshot file as a JSON list on stdin (which may come long
after the helper started: memvault.load.processes starts one early); arrays on stdout
(``changed.*``: files new or different, ``gone.*``: in the snapshot but not found,
``leftovers.*``: our temp files seen, ``snapshot``: the snapshot file's identity); exit status 0.
Anything else is a failure.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np
import numpy.typing as npt

from memvault.disk.files import file_change, is_our_temp
from memvault.disk.names import ARCHIVE, SESSIONS_DIR, STATE_DIR
from memvault.disk.vault import Vault
from memvault.load import processes
from memvault.load.pipes import Arrays, answer, run
from memvault.search.columns import pack_strings, unpack_strings

__all__ = ["FolderDiff", "Scan", "identity", "start", "watch_all"]

log = logging.getLogger("memvault")

WAIT_SECONDS = 600.0  # a helper still walking after this is stuck (a hung network mount)
AREAS = (("hot", False), ("archive", True))

Located = tuple[str, bool]  # id, archived


def identity(snapshot_file: Path) -> tuple[int, ...] | None:
    """Which file a snapshot is (it is replaced, never rewritten in place: a new inode)."""
    try:
        return _identity(os.stat(snapshot_file))
    except OSError:
        return None


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return st.st_ino & 0x7FFF_FFFF_FFFF_FFFF, st.st_size, st.st_mtime_ns  # int64 each


@dataclass
class FolderDiff:
    """A helper's scan, compared with the snapshot whose identity it gives."""

    snapshot: tuple[int, ...]
    changed: list[Located]  # files new or different from the snapshot's record of them
    gone: list[Located]  # in the snapshot, not found
    leftovers: list[Path]  # our temp files the scan saw (memvault.disk.vault.Vault.remove_leftovers)


class Scan:
    """A helper's scan under way."""

    def __init__(
        self, process: subprocess.Popen[bytes], token_dir: Path, snapshot_file: Path, *, counted: bool = False
    ) -> None:
        self._process = process
        self._dir = token_dir
        self._snapshot_file = snapshot_file
        self._expected = identity(snapshot_file)  # the snapshot the store is about to load
        self._counted = counted  # in _running (by start) until cancel()

    def result(self) -> FolderDiff | None:
        """The helper's answer once it is done (call it after loading the snapshot); None if it
        failed or compared with another snapshot than the store loaded (then scan in this process)."""
        try:
            out, err = self._process.communicate(timeout=WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self.cancel()
            log.warning("a folder scan process hung; scanning in this process")
            return None
        arrays = answer(
            "a folder scan process", "scanning in this process", self._process.returncode, out, err
        )
        if arrays is None:
            return None
        try:
            found = self._decode(arrays)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("a folder scan process gave unreadable output (%s)", type(exc).__name__)
            return None
        if not found.snapshot == self._expected == identity(self._snapshot_file):
            log.info("the snapshot was replaced during a load; scanning in this process")
            return None
        return found

    def cancel(self) -> None:
        """Stop the helper if it still runs, and reap it (the store calls this once it is done)."""
        with contextlib.suppress(OSError):
            self._process.kill()
        with contextlib.suppress(OSError, ValueError, subprocess.TimeoutExpired):
            self._process.communicate(timeout=10)
        if self._counted:
            self._counted = False
            _finished()

    def _decode(self, arrays: Arrays) -> FolderDiff:
        leftovers = []
        for rel in unpack_strings(arrays["leftovers.blob"], arrays["leftovers.len"]):
            # Removed later under the token's lock: only names of ours, only inside the folder.
            path = PurePosixPath(rel)
            if path.parts and not path.is_absolute() and ".." not in path.parts and is_our_temp(path.name):
                leftovers.append(self._dir.joinpath(*path.parts))
        # The ids are as trusted as a scan in this process: the helper ran Vault.scan (and the
        # store reads scanned files without name checks, as after loader helpers).
        changed, gone = _located(arrays, "changed"), _located(arrays, "gone")
        return FolderDiff(tuple(arrays["snapshot"].tolist()), changed, gone, leftovers)


def start(token_dir: Path, snapshot_file: Path, most: int) -> Scan | None:
    """A helper walking ``token_dir`` and comparing it with ``snapshot_file`` (the spare one if it
    waits: memvault.load.processes); None if ``most`` helpers run already (many large tokens loading at
    once: each helper is a Python process of tens of MB, 73 at 100,000 files) or if it could not
    start."""
    global _running
    with _lock:
        if _running >= most:
            return None
        _running += 1
    job = json.dumps([str(token_dir), str(snapshot_file)]).encode("ascii")  # json escapes the rest
    try:
        helper = processes.start("folderscan")
        if not helper.give(job):  # a spare that died since it was taken: one more try
            helper.stop()
            helper = processes.Started("folderscan")
            if not helper.give(job):
                helper.stop()  # reaped, not left a zombie
                raise BrokenPipeError
    except OSError as exc:
        _finished()
        log.warning("could not start a folder scan process (%s)", type(exc).__name__)
        return None
    return Scan(helper.process, token_dir, snapshot_file, counted=True)


# The folders a token's folder usually holds: memvault's own, and a git clone's.
_KNOWN_FOLDERS = (STATE_DIR, ARCHIVE, SESSIONS_DIR, ".git")


def watch_all(folder: Path, watch: Callable[[Path, bool], None]) -> None:
    """Watch ``folder`` and every folder below it before a helper lists it (the server's watcher
    cannot follow the helper's listing). Finding its folders took a listing of all its files in
    the server (100,000 entries, the GIL taken back after each, while it imports); a folder's
    link count (2 and one per folder in it, where the file system keeps it so) tells when the
    usual names are all the folders there are: then only those are walked. The folder itself is
    watched first, so a folder made meanwhile is seen."""
    watch(folder, False)
    try:
        links = os.stat(folder).st_nlink
    except OSError:
        links = -1
    found = [name for name in _KNOWN_FOLDERS if _is_folder(folder / name)]
    if links != 2 + len(found):
        watch(folder, True)  # folders of other names (or no count kept): found by a walk
        return
    for name in found:
        if not name.startswith("."):  # never watched (memvault.disk.watcher)
            watch(folder / name, True)


def _is_folder(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


_lock = threading.Lock()
_running = 0  # helpers started and not yet cancelled


def _finished() -> None:
    global _running
    with _lock:
        _running -= 1


def _located(arrays: Mapping[str, npt.NDArray[Any]], name: str) -> list[Located]:
    ids = unpack_strings(arrays[f"{name}.blob"], arrays[f"{name}.len"])
    archived = np.asarray(arrays[f"{name}.archived"], dtype=bool).tolist()
    return list(zip(ids, archived, strict=True))


def _pack(out: Arrays, name: str, located: list[Located]) -> None:
    out[f"{name}.blob"], out[f"{name}.len"] = pack_strings([id for id, _ in located])
    out[f"{name}.archived"] = np.array([archived for _, archived in located], dtype=np.uint8)


# ---------------------------------------------------------------------------- the helper's side


def _held(snapshot_file: Path) -> tuple[tuple[int, ...], list[dict[str, tuple[int, int, int]]]]:
    """The snapshot's identity and, per area, each memory's stamp as it holds it."""
    with open(snapshot_file, "rb") as handle:
        st = os.fstat(handle.fileno())  # of the file read, whatever replaces it meanwhile
        held = []
        with np.load(handle, allow_pickle=False) as data:
            for name, _ in AREAS:
                prefix = f"{name}.memories."
                ids = unpack_strings(data[prefix + "id.blob"], data[prefix + "id.len"])
                columns = (data[prefix + key].tolist() for key in ("mtime_ns", "size", "change"))
                held.append(dict(zip(ids, zip(*columns, strict=True), strict=True)))
    return _identity(st), held


def main() -> int:
    def work() -> Arrays:
        token_dir, snapshot_file = json.loads(sys.stdin.buffer.read())
        return _compared(Path(token_dir), Path(snapshot_file))

    return run(work)


def _compared(token_dir: Path, snapshot_file: Path) -> Arrays:
    snapshot, held = _held(snapshot_file)
    vault = Vault(token_dir)
    changed: list[Located] = []
    for id, archived, st in vault.scan():
        if held[archived].pop(id, None) != (st.st_mtime_ns, st.st_size, file_change(st)):
            changed.append((id, archived))
    gone = [(id, archived) for _, archived in AREAS for id in held[archived]]
    out: Arrays = {"snapshot": np.array(snapshot, dtype=np.int64)}
    _pack(out, "changed", changed)
    _pack(out, "gone", gone)
    left = [os.path.relpath(path, token_dir) for path in vault.leftovers]
    out["leftovers.blob"], out["leftovers.len"] = pack_strings(left)
    return out


if __name__ == "__main__":
    sys.exit(main())
