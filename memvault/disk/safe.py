"""Opening a vault's files: never through a link, be it the file, a folder on the way or the token folder.

One rule for every reader of a token's files (resources, session summaries, the graph file, memory
reads, exports, hooks): a file is opened from the token folder down, one name at a time, each
relative to the folder opened before it and with ``O_NOFOLLOW``, so a link anywhere below the root
(a ``git pull`` carries links) is refused instead of read through, and a link swapped in between a
check and the open cannot be followed either. The root itself may be a link (a user's choice).
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePath

from memvault.disk.files import NotRegularFile, read_fd
from memvault.errors import LinkedFile, LinkedFolder, MemvaultError

_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | os.O_NOFOLLOW | _CLOEXEC
_FILE_FLAGS = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | os.O_NOFOLLOW | _CLOEXEC


class LinkRefused(OSError):
    """A link where a vault file or a folder on its way should be: never read through. ``name`` is
    the link's path relative to the token folder ("" for the token folder itself)."""

    def __init__(self, name: str) -> None:
        super().__init__(errno.ELOOP, "a symbolic link, not read through")
        self.name = name

    def error(self) -> MemvaultError:
        """The message a client reads: which name is a link (relative, never an absolute path)."""
        return LinkedFolder() if not self.name else LinkedFile(self.name)


def _parts(rel: str) -> list[str]:
    parts = rel.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise FileNotFoundError(errno.ENOENT, "not a file inside the token folder")
    return parts


class Folder:
    """A token folder opened once, as open_in opens it (LinkRefused if it is a link), for opening
    many files in it: each then costs one open relative to it, where open_in opens the root and
    the token folder again (a cold load reads 100,000 files; two thirds of the system calls were
    those). Use it with ``with``, or close it."""

    def __init__(self, folder: str) -> None:
        parent, name = os.path.split(folder)
        fd = os.open(parent or ".", os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC)  # the root
        try:
            self.fd = _open_at(name, fd, _DIR_FLAGS, "")
        finally:
            os.close(fd)

    def __enter__(self) -> Folder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def open(self, rel: str) -> int:
        """open_in's descriptor of ``rel`` in this folder."""
        return self._open(_parts(rel), rel)

    def _open(self, parts: list[str], rel: str) -> int:
        fd = self.fd
        try:
            for i in range(len(parts) - 1):
                fd_next = _open_at(parts[i], fd, _DIR_FLAGS, "/".join(parts[: i + 1]) + "/")
                if fd != self.fd:
                    os.close(fd)
                fd = fd_next
            return _open_at(parts[-1], fd, _FILE_FLAGS, rel)
        finally:
            if fd != self.fd:
                os.close(fd)

    def read(self, rel: str, limit: int | None = None) -> tuple[bytes, os.stat_result]:
        """read_in's bytes and stat of ``rel`` in this folder."""
        return _read(self.open(rel), rel, limit)

    def read_plain(self, name: str, limit: int) -> tuple[bytes, os.stat_result] | None:
        """``read(name, limit)`` for a name right in this folder (no "/", not "." or ".."), in the
        usual case alone: a regular file under ``limit`` bytes, whole in one read. None for
        anything else (a link, an error, a file being written), which ``read`` then sorts out. A
        cold load reads 100,000 files: the general path's layers were a fifth of reading one."""
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=self.fd)
        except OSError:
            return None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size >= limit:
                return None
            data = os.read(fd, st.st_size + 1)  # one more byte: a file that grew is seen
            return (data, st) if len(data) == st.st_size else None
        except OSError:
            return None
        finally:
            os.close(fd)


def open_in(folder: str, rel: str) -> int:
    """A read-only descriptor of ``rel`` ("a/b.md", "/"-separated) inside the token folder
    ``folder`` (close it). Raises LinkRefused if the token folder, a folder between it and the
    file, or the file is a symbolic link; other OSErrors as os.open does (FileNotFoundError,
    NotADirectoryError). Opened without blocking, so a FIFO cannot hang a reader. Strings, not
    Paths: a load opens every file this way, and pathlib cost more than the system calls."""
    parts = _parts(rel)
    with Folder(folder) as opened:
        return opened._open(parts, rel)


def read_in(folder: str, rel: str, limit: int | None = None) -> tuple[bytes, os.stat_result]:
    """A regular file's bytes (its first ``limit`` bytes, if given) and stat, opened as open_in
    does: LinkRefused for a link on the way, NotRegularFile for a FIFO, socket, device or folder."""
    return _read(open_in(folder, rel), rel, limit)


def _read(fd: int, rel: str, limit: int | None) -> tuple[bytes, os.stat_result]:
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(f"not a regular file: {rel.rsplit('/', 1)[-1]}")
        return read_fd(fd, st.st_size, limit), st
    finally:
        os.close(fd)


def _relative(path: Path, folder: Path) -> str:
    return PurePath(path).relative_to(folder).as_posix()


def open_file(path: Path, folder: Path) -> int:
    """open_in for a path inside the token folder ``folder``."""
    return open_in(str(folder), _relative(path, folder))


def read_file(path: Path, folder: Path, limit: int | None = None) -> tuple[bytes, os.stat_result]:
    """read_in for a path inside the token folder ``folder``."""
    return read_in(str(folder), _relative(path, folder), limit)


def _open_at(name: str, dir_fd: int, flags: int, shown: str) -> int:
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkRefused(shown) from None
        if exc.errno == errno.ENOTDIR:  # O_DIRECTORY | O_NOFOLLOW on a link says ENOTDIR
            try:
                linked = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
            except OSError:
                linked = False
            if linked:
                raise LinkRefused(shown) from None
        raise
