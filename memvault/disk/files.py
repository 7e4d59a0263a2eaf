"""File primitives: atomic writes, no-overwrite moves, non-blocking reads, a file's stat identity."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import itertools
import os
import random
import re
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol, TypedDict

# Our temp files: hidden (editors and git leave dot-files alone, the watcher skips them) and
# recognisable, so one left by a crash (SIGKILL mid-write) can be removed when the token loads.
TEMP_PREFIX, TEMP_SUFFIX = ".memvault-", ".tmp"
_OUR_TEMP = re.compile(r"\.memvault-[a-z0-9_]{8}\.tmp|\.[a-z0-9_]{8}\.tmp")  # and before 0.2's prefix
TEMP_MIN_AGE_SECONDS = 60.0
# How long fsyncs take here: writes run on the event loop only while the quickest of the last few
# took at most this (a local disk), else in a worker thread (a slow or network disk must not stall
# every agent). The quickest, not the mean: a timing also holds the wait for the GIL afterwards,
# which under load can be longer than the fsync itself.
FAST_FSYNC_SECONDS = 0.002
_fsync_seconds = [0.0] * 16  # the latest timings, a ring (assignments only: safe across threads)
_fsync_count = itertools.count()


def _fsync(fd: int) -> None:
    started = time.perf_counter()
    os.fsync(fd)
    _fsync_seconds[next(_fsync_count) % len(_fsync_seconds)] = time.perf_counter() - started


def try_lock(path: str) -> int | None:
    """An exclusive flock on ``path`` (created if missing) if it is free at once: the descriptor
    that holds it (close it to release), else None. The same lock as filelock's FileLock on that
    path, between processes and threads alike (each holder flocks its own descriptor), at a
    twentieth of its cost; None too where the filesystem cannot flock (FileLock then decides)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def fsync_is_fast() -> bool:
    """Whether the quickest of the latest fsyncs here took at most FAST_FSYNC_SECONDS."""
    return min(_fsync_seconds) <= FAST_FSYNC_SECONDS


def is_our_temp(name: str) -> bool:
    """A temp file name of ours (atomic_write's, or the older mkstemp pattern)."""
    return _OUR_TEMP.fullmatch(name) is not None


def file_change(st: os.stat_result) -> int:
    """A file's ctime and inode in one number. With mtime and size it tells whether a file is
    unchanged since it was read: a rename-over or `cp -p`/`rsync -a` keeps mtime and size, but a
    new file has a new inode and any write or utime moves the ctime, which user space cannot set."""
    return ((st.st_ctime_ns * 1_000_003) ^ st.st_ino) & 0x7FFF_FFFF_FFFF_FFFF


class Stamp(TypedDict):
    mtime_ns: int
    size: int
    change: int


def file_stamp(st: os.stat_result) -> Stamp:
    """What a Memory records of its file's stat (parse_memory's keyword arguments)."""
    return {"mtime_ns": st.st_mtime_ns, "size": st.st_size, "change": file_change(st)}


class Stamped(Protocol):
    """Anything that recorded a file's stat: a Memory, the sidecar's FileStat."""

    @property
    def mtime_ns(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def change(self) -> int: ...


def unchanged(seen: Stamped, st: os.stat_result) -> bool:
    """True if the file is the one ``seen`` was read from, as far as its stat can tell."""
    return (seen.mtime_ns, seen.size, seen.change) == (st.st_mtime_ns, st.st_size, file_change(st))


def _umask() -> int:
    current = os.umask(0o022)  # read it the only way there is, at import, before any thread runs
    os.umask(current)
    return current


_UMASK = _umask()
_NEW_FILE_MODE = 0o666 & ~_UMASK
_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
_temp_names = random.Random()  # temp names need to be unlikely to collide, not unpredictable


def atomic_write(
    path: Path | str,
    data: bytes,
    *,
    overwrite: bool = True,
    sync_folder: bool = True,
    mode: int | None = None,
    temp_dir: str | None = None,
) -> os.stat_result:
    """Temp file, fsync, then replace (or link, to never overwrite), fsync the folder; the new
    file's stat.

    With ``overwrite=False`` an existing file raises FileExistsError and is left untouched. With
    ``sync_folder=False`` the caller fsyncs the folder (once for a batch of files). ``mode`` sets
    the file's permissions (e.g. 0o600 for a file holding a key); by default an existing file keeps
    its own and a new one gets the umask's default. ``temp_dir``: a folder on the same file system
    for the temp file, one nobody watches (a vault's ``.memvault/``): a write then makes one file
    event where ``path`` is, not five, each of which the watcher's thread handled. Where the file
    cannot be linked from there (another file system below the vault), the temp file is made
    beside ``path`` instead.
    """
    parent = os.path.dirname(path) or "."
    if mode is None:
        mode = _NEW_FILE_MODE
        if overwrite:
            with contextlib.suppress(FileNotFoundError):
                mode = stat.S_IMODE(os.stat(path).st_mode)
    try:
        st = _write_through(path, data, overwrite, mode, temp_dir or parent)
    except FileNotFoundError:
        if temp_dir is not None and not os.path.isdir(temp_dir):
            temp_dir = None  # gone (a person removed .memvault/): beside the file, as always
        Path(parent).mkdir(parents=True, exist_ok=True)
        st = _write_through(path, data, overwrite, mode, temp_dir or parent)
    except OSError as exc:
        if temp_dir is None or exc.errno != errno.EXDEV:
            raise
        st = _write_through(path, data, overwrite, mode, parent)
    if sync_folder:
        fsync_dir(parent)
    return st


def _write_through(path: Path | str, data: bytes, overwrite: bool, mode: int, folder: str) -> os.stat_result:
    """atomic_write's file part: the temp file in ``folder``, its bytes fsynced, put in place."""
    fd, tmp = _open_temp(folder, mode)
    try:
        if mode & (_UMASK | 0o7000):
            os.fchmod(fd, mode)  # bits the umask (or open) does not give
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        _fsync(fd)
        if overwrite:
            os.replace(tmp, path)
        else:
            _link_no_overwrite(tmp, path)
            with contextlib.suppress(FileNotFoundError):  # (gone if the fallback renamed it)
                os.unlink(tmp)  # before the stat: dropping a link moves the ctime too
        return os.fstat(fd)  # the file now in place, without looking its name up again
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)


def _open_temp(folder: str, mode: int) -> tuple[int, str]:
    """A new temp file of ours in ``folder``, opened for writing (never through a link)."""
    for _ in range(100):
        tmp = f"{folder}{os.sep}{TEMP_PREFIX}{_temp_names.getrandbits(32):08x}{TEMP_SUFFIX}"
        try:
            return os.open(tmp, _TEMP_FLAGS, mode), tmp
        except FileExistsError:
            continue
    raise FileExistsError(errno.EEXIST, "no free temp file name", folder)


def _link_no_overwrite(src: Path | str, dst: Path | str) -> None:
    try:
        os.link(src, dst)  # atomic and refuses an existing name, even across processes
    except (FileExistsError, FileNotFoundError):
        raise
    except OSError as exc:
        if exc.errno == errno.EXDEV:
            raise
        # File systems without hard links: we hold the token's file lock, so check-then-rename is safe.
        if os.path.exists(dst):
            raise FileExistsError(dst) from None
        os.replace(src, dst)


def fsync_dir(path: Path | str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        _fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def move_no_overwrite(src: Path, dst: Path, *, sync: bool = True) -> Path:
    """Move src to dst, adding -2, -3, ... to the stem if dst exists. Returns the final path.
    Without ``sync`` the two folders are not fsynced: the caller does it once for a batch."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    for candidate in numbered(dst):
        try:
            _link_no_overwrite(src, candidate)
        except FileExistsError:
            continue
        with contextlib.suppress(FileNotFoundError):  # gone already if the fallback renamed it
            os.unlink(src)
        if sync:
            fsync_dir(candidate.parent)
            fsync_dir(src.parent)
        return candidate
    raise AssertionError("unreachable")  # pragma: no cover


def numbered_ids(id: str) -> Iterator[str]:
    """``id``, then with -2, -3, ... before its last component's suffix, as pathlib reads one (a
    dot neither first nor last): a/b.md, a/b-2.md, a/b-3.md, ..."""
    yield id
    dot = id.rfind(".")
    stem, suffix = (id[:dot], id[dot:]) if id.rfind("/") + 1 < dot < len(id) - 1 else (id, "")
    n = 2
    while True:
        yield f"{stem}-{n}{suffix}"
        n += 1


def numbered(path: Path) -> Iterator[Path]:
    """:func:`numbered_ids` of ``path``'s name, in its folder."""
    return (path.parent / name for name in numbered_ids(path.name))


class NotRegularFile(OSError):
    """A name ending in .md that is a FIFO, socket or device: never opened for reading."""


def read_regular(
    path: Path | str, limit: int | None = None, *, follow_links: bool = True
) -> tuple[bytes, os.stat_result]:
    """A regular file's bytes (its first ``limit`` bytes, if given) and stat. Opened without
    blocking, so a FIFO named like a memory cannot hang a load; anything but a regular file
    raises NotRegularFile. ``follow_links=False``: a link raises OSError (ELOOP)."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_links:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"not a regular file: {os.path.basename(path)}")
        return read_fd(fd, st.st_size, limit), st
    finally:
        os.close(fd)


def read_fd(fd: int, size: int, limit: int | None) -> bytes:
    """Up to ``limit`` bytes (None: all), for a file fstat said has ``size``. Plain os.read, one
    call for most files: a load reads 100,000 of them, and a buffered file object cost two more
    system calls each (its own fstat, and a read that finds the end)."""
    chunks: list[bytes] = []
    total = 0
    while limit is None or total < limit:
        # Sized by the stat, and one byte more to see a file that grew since: a buffer sized by
        # the limit (8 MiB) was a third of a load's reading time.
        ask = size + 1 - total if total <= size else 1 << 20
        if limit is not None:
            ask = min(ask, limit - total)
        chunk = os.read(fd, ask)
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if len(chunk) < ask and total >= size:
            break  # short, and past the size fstat gave: the end of the file
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)
