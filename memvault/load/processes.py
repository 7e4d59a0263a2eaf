"""Helper processes: how they start, and one started with the server to save a restart its start.

Helpers (``memvault.load.loader``, ``memvault.load.folderscan``) are fresh interpreters, never forks of a
threaded server. Starting one costs its interpreter and imports (numpy and our parsing): about
0.3 s on this project's slow machine, which is on a restart's critical path when the folder scan
helper takes longer than the snapshot decode it runs beside. So ``serve`` starts one folder scan
helper (the spare) before its own imports, when the vault holds a snapshot large enough to use
one: its imports run on the other core while the server's run. The first large restore takes it
and hands it its job on stdin. A spare nobody took within ``SPARE_SECONDS`` is stopped.

This module is imported before the server's imports, so it imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import math
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

from memvault.disk.names import SNAPSHOT_FILE, STATE_DIR, valid_token

__all__ = [
    "HELPER_MALLOC", "HELPER_MIN_BYTES", "SPARE_SECONDS", "Started", "command", "drop_spare", "environment",
    "scan_helpers", "snapshots", "start", "start_spare", "take_spare", "usable_cpus", "worth_a_spare",
]  # fmt: skip

# A snapshot this large holds some 10,000 memories or more: below it, scanning them here costs
# less than starting a folder scan helper (bench/RESULTS.md, bench_scale).
HELPER_MIN_BYTES = 6 << 20
SPARE_SECONDS = 120.0  # clients reconnect to a restarted server within seconds, not minutes
MOST_FOLDERS = 10_000  # the spare check looks at this many token folders at most


def command(module: str) -> list[str]:
    """How to start the helper ``memvault.load.<module>``: its ``main`` in a fresh interpreter, with the
    cyclic collector off from before the first import. What a helper makes (numpy's modules, the
    files it parsed) lives until it exits, so the collector's passes find nothing: off, a folder
    scan of 100,000 files took about a tenth less CPU, most of it while importing."""
    if not module.isidentifier():
        raise ValueError("not a module name")
    main = f"import gc; gc.disable(); from memvault.load.{module} import main; raise SystemExit(main())"
    return [sys.executable, "-c", main]


# glibc's heap in a helper: what is freed stays for the next allocation (a loader helper's index
# batches free and allocate tens of MB in turn), and large blocks come from the heap up to 32 MiB
# (glibc's most) instead of being mapped and unmapped each time. Each page handed back was
# faulted in again: a loader helper of 50,000 files took 85,000 page faults, 42,000 with these,
# and a tenth less system time. The helper exits when done, which frees it all.
HELPER_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(1 << 30),
    "MALLOC_TOP_PAD_": str(64 << 20),
}


def environment() -> dict[str, str]:
    """A helper's environment: this process's, with HELPER_MALLOC."""
    return {**os.environ, **HELPER_MALLOC}


def scan_helpers(load_processes: int | None) -> int:
    """How many folder scan helpers may run at once (one per CPU); 0 when there are none to use:
    helper processes turned off (``MEMVAULT_LOAD_PROCESSES=0``) or a single CPU. The store asks
    before a restore, ``serve`` before it starts the spare: both must agree."""
    cpus = usable_cpus()
    return 0 if load_processes == 0 or cpus < 2 else cpus


def usable_cpus(cpu_max: Path = Path("/sys/fs/cgroup/cpu.max")) -> int:
    """CPUs this process may run on, less a container's CPU quota (cgroup v2 ``cpu.max``, as
    set by ``docker run --cpus``), rounded up."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = cpu_max.read_text(encoding="ascii").split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return cpus


class Started:
    """A helper started and waiting for its job, which it reads from stdin until end of file.

    Its stdin is a pipe of our own (``Popen.stdin`` is None), so ``process.communicate`` later
    only reads: the job is handed over at once, the answer collected when it is wanted."""

    def __init__(self, module: str) -> None:
        """Raises OSError if the process cannot start."""
        self.module = module
        read_end, self._job_fd = os.pipe()  # both ends close on exec: only the helper's stdin stays
        try:
            self.process = subprocess.Popen(
                command(module),
                stdin=read_end,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=environment(),
            )
        except BaseException:
            os.close(self._job_fd)
            raise
        finally:
            os.close(read_end)

    def give(self, job: bytes) -> bool:
        """Hand the helper its job (a few hundred bytes: a pipe takes them at once); False if it
        is gone."""
        fd, self._job_fd = self._job_fd, -1
        if fd < 0:
            return False
        try:
            view = memoryview(job)
            while view:
                view = view[os.write(fd, view) :]
            return True
        except OSError:  # BrokenPipeError: it died
            return False
        finally:
            os.close(fd)

    def stop(self) -> None:
        """Kill it if it still runs, and reap it."""
        if self._job_fd >= 0:
            os.close(self._job_fd)
            self._job_fd = -1
        with contextlib.suppress(OSError):
            self.process.kill()
        with contextlib.suppress(OSError, ValueError, subprocess.TimeoutExpired):
            self.process.communicate(timeout=10)


def start(module: str) -> Started:
    """A fresh helper, or the spare if it is one of ``module`` and still waits. Raises OSError if a
    fresh one cannot start."""
    return take_spare(module) or Started(module)


_lock = threading.Lock()
_spare: Started | None = None
_timer: threading.Timer | None = None


def start_spare(module: str, seconds: float = SPARE_SECONDS) -> bool:
    """Start the spare (replacing any); True if it started. Stopped after ``seconds`` untaken."""
    global _spare, _timer
    drop_spare()
    try:
        spare = Started(module)
    except OSError:
        return False  # the load starts a helper itself, or scans in process
    timer = threading.Timer(seconds, drop_spare)
    timer.daemon = True
    with _lock:
        _spare, _timer = spare, timer
    timer.start()
    return True


def take_spare(module: str) -> Started | None:
    """The spare if it is one of ``module`` and still waits; None otherwise. Taken once."""
    global _spare
    with _lock:
        spare = _spare
        if spare is None or spare.module != module:
            return None
        _spare = None
    if spare.process.poll() is not None:
        spare.stop()  # it died: reap it
        return None
    return spare


def drop_spare() -> None:
    """Stop the spare if nobody took it (at shutdown, and ``SPARE_SECONDS`` after it started)."""
    global _spare, _timer
    with _lock:
        spare, _spare = _spare, None
        timer, _timer = _timer, None
    if timer is not None and timer is not threading.current_thread():
        timer.cancel()
    if spare is not None:
        spare.stop()


def worth_a_spare(root: Path, min_bytes: int) -> bool:
    """Whether a folder of ``root`` (not a link) holds a snapshot of ``min_bytes`` or more: a
    restore that will use a folder scan helper. Looks at ``MOST_FOLDERS`` folders at most."""
    return any(size >= min_bytes for _, size in snapshots(root))


def snapshots(root: Path) -> list[tuple[str, int]]:
    """The token folders of ``root`` (not links) that hold a snapshot, as (token, the snapshot's
    size), the most recently written snapshot first: at a restart, the token a server saved last
    (at its shutdown, or after it loaded the token) is the likeliest to be asked for first. Looks
    at ``MOST_FOLDERS`` folders at most."""
    found: list[tuple[int, str, int]] = []
    try:
        with os.scandir(root) as entries:
            for count, entry in enumerate(entries):
                if count >= MOST_FOLDERS:
                    break
                with contextlib.suppress(OSError):
                    if entry.is_dir(follow_symlinks=False) and valid_token(entry.name):
                        st = os.lstat(os.path.join(entry.path, STATE_DIR, SNAPSHOT_FILE))
                        if stat.S_ISREG(st.st_mode):
                            found.append((st.st_mtime_ns, entry.name, st.st_size))
    except OSError:
        pass
    found.sort(reverse=True)
    return [(token, size) for _, token, size in found]
