"""A token's folder: its memory files found, read, created, rewritten, moved and deleted safely."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from memvault.disk import safe
from memvault.disk.files import (
    TEMP_MIN_AGE_SECONDS,
    NotRegularFile,
    atomic_write,
    file_stamp,
    fsync_dir,
    is_our_temp,
    move_no_overwrite,
    numbered_ids,
    unchanged,
)
from memvault.disk.markdown import (
    MAX_INDEXED_BYTES,
    Memory,
    content_hash,
    parse_memory,
    render_new,
    rewrite,
    seal_markers,
)
from memvault.disk.names import ARCHIVE, LOCK_FILE, SESSIONS_DIR, STATE_DIR, check_id, slugify
from memvault.errors import Conflict, InvalidArgument, InvalidName, LinkedFolder, MemvaultError, NotFound

if TYPE_CHECKING:
    from filelock import FileLock


class Vault:
    """The files of one token. Synchronous: callers run it in a worker thread, under the token lock."""

    def __init__(self, token_dir: Path) -> None:
        self.dir = token_dir
        self.archive_dir = token_dir / ARCHIVE
        self._area_names = (str(token_dir), str(self.archive_dir))
        self._state_dir = f"{token_dir}{os.sep}{STATE_DIR}"
        self.leftovers: list[Path] = []  # temp files of ours the last scan saw (see remove_leftovers)
        # Told of each folder below the token's a scan meets, before it lists it: (folder, whether
        # the scan leaves it unlisted). A load watches them so (memvault.disk.watcher.watch_folder).
        self.entering: Callable[[Path, bool], None] | None = None

    # ---- names and paths

    def area(self, archived: bool) -> Path:
        return self.archive_dir if archived else self.dir

    def file_name(self, id: str, archived: bool) -> str:
        """``area(archived) / id`` as a string: for a stat on every read, without pathlib's cost."""
        return f"{self._area_names[archived]}{os.sep}{id}"

    def path_of(self, id: str, *, archived: bool = False) -> Path:
        """The file for a validated id; refuses anything that resolves outside the token folder."""
        return self._path_and_link(id, archived)[0]

    def _path_and_link(self, id: str, archived: bool) -> tuple[Path, bool]:
        """path_of, and whether the file is a link (one lstat, not one more in target_of)."""
        id = check_id(id)
        if not archived and id.split("/", 1)[0] == ARCHIVE:
            raise InvalidName(id, "that is an archived memory; call restore_memory to bring it back first")
        self.check_folder()
        path = self.area(archived) / id
        if "/" in id and self._through_link(path):  # (no folder between at the top)
            raise InvalidName(id, "a folder on its way is a symbolic link, which memvault does not follow")
        if not os.path.islink(path):
            return path, False  # no link from the token folder down to it: it is where its name says
        root = self.dir.resolve()
        try:
            resolved = path.resolve()
        except (OSError, RuntimeError):
            raise InvalidName(id, "it cannot be resolved (a link loop?)") from None
        if not resolved.is_relative_to(root):
            raise InvalidName(id, "it points outside your vault")
        if not archived and resolved.is_relative_to(self.archive_dir.resolve()):
            raise InvalidName(id, "it points into the archive; call restore_memory first")
        return path, True

    def target_of(self, id: str, *, archived: bool = False) -> Path:
        """The file to open for a memory: ``path_of``, or for a file link the file it leads to, if
        the scan would list it (inside the token folder, not in a dot-folder, from the hot set not
        into the archive). Open it with memvault.disk.safe, which follows no link at all, so a link
        swapped in since this check is refused, not read."""
        path, link = self._path_and_link(id, archived)
        if not link:
            return path
        root = self.dir.resolve()
        if not self._link_inside(path, root, archived):
            raise NotFound(check_id(id), archived=archived)
        try:
            return self.dir / path.resolve(strict=True).relative_to(root)
        except (OSError, RuntimeError, ValueError):
            raise NotFound(check_id(id), archived=archived) from None

    def check_folder(self) -> None:
        """Refuse a token folder that is a link: to another token's folder or out of the root."""
        if os.path.islink(self.dir):
            raise LinkedFolder()

    def _through_link(self, path: Path) -> bool:
        """True if a folder between the token folder and ``path`` is a link. Folder links are never
        followed: one may lead out of the vault, and `ln -s . a` would make every walk endless."""
        folder = path.parent
        while len(folder.parts) > len(self.dir.parts):
            if os.path.islink(folder):
                return True
            folder = folder.parent
        return False

    def existing(self, id: str, *, archived: bool = False) -> Path:
        """The path of a memory that must exist; checked before anything creates the token folder."""
        path = self.path_of(id, archived=archived)
        if not path.is_file():
            raise NotFound(check_id(id), archived=archived)
        return path

    def scan(self) -> Iterator[tuple[str, bool, os.stat_result]]:
        """Every memory file: (id, archived, stat). Skips dot-files/folders, folder links (never followed:
        no loops, each file once) and file links that lead out of the token folder."""
        return cast("Iterator[tuple[str, bool, os.stat_result]]", self._files(with_stat=True))

    def list_files(self) -> Iterator[tuple[str, bool]]:
        """``scan`` without the stat of each file (a third of a scan's time: the file type comes
        from the directory entry), for a load that reads every file anyway."""
        for id, archived, _ in self._files(with_stat=False):
            yield id, archived

    def _files(self, *, with_stat: bool) -> Iterator[tuple[str, bool, os.stat_result | None]]:
        self.leftovers = []
        if self.dir.is_symlink() or not self.dir.is_dir():
            return
        root = self.dir.resolve()
        yield from self._walk(self.dir, "", False, root, with_stat)

    def _walk(
        self, folder: Path, prefix: str, archived: bool, root: Path, with_stat: bool
    ) -> Iterator[tuple[str, bool, os.stat_result | None]]:
        """The memory files under ``folder``, whose ids start with ``prefix`` ("" or "a/b/"), until
        the end or an error. A restart of a large vault walks every file: each layer of generators cost
        measurably, so this is one. Entries come one at a time: a list of a large folder kept each
        one's cached stat to the end of the scan, and left Python's small-object pools behind."""
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    name = entry.name
                    if name.startswith("."):
                        if is_our_temp(name):
                            self.leftovers.append(Path(entry.path))
                        elif not prefix and not archived and name == STATE_DIR:
                            self._temps_in(entry)  # a snapshot's or the sidecar's own files
                        continue
                    try:
                        is_dir = entry.is_dir()  # (a stat where the folder gives no file types)
                    except OSError:
                        continue
                    if is_dir:
                        if entry.is_symlink():
                            continue
                        sessions = not prefix and name == SESSIONS_DIR
                        if self.entering is not None:
                            self.entering(Path(entry.path), sessions)
                        if not prefix and not archived and name == ARCHIVE:
                            yield from self._walk(Path(entry.path), "", True, root, with_stat)
                        elif sessions:
                            if not archived:  # session files (records.summaryfiles), not memories
                                self._temps_in(entry)
                        else:
                            yield from self._walk(
                                Path(entry.path), f"{prefix}{name}/", archived, root, with_stat
                            )
                    elif name.endswith(".md"):
                        if entry.is_symlink() and not self._link_inside(Path(entry.path), root, archived):
                            continue
                        try:
                            st = entry.stat() if with_stat else None
                            regular = stat.S_ISREG(st.st_mode) if st is not None else entry.is_file()
                        except OSError:
                            continue  # gone since it was listed
                        if regular:  # not a FIFO, socket or device named *.md
                            yield prefix + name, archived, st
        except OSError:
            return  # the folder went away or became unreadable: what was found so far stands

    def _temps_in(self, folder: os.DirEntry[str]) -> None:
        """Note our temp files in a folder of the token's own files (``sessions/``, ``.memvault/``),
        which the walk does not enter: a write killed there leaves one as well."""
        try:
            if folder.is_symlink() or not folder.is_dir():
                return
            with os.scandir(folder.path) as entries:
                self.leftovers += [Path(e.path) for e in entries if is_our_temp(e.name)]
        except OSError:
            return

    def remove_leftovers(self, now: float) -> int:
        """Delete the temp files of ours the last scan saw that are older than a minute: left by a
        crash mid-write (they would sit in `git status`). Call under the token's file lock, which
        every writer of memory files holds, so no write in progress is touched."""
        removed = 0
        for path in self.leftovers:
            try:
                st = path.lstat()
                if stat.S_ISREG(st.st_mode) and now - st.st_mtime >= TEMP_MIN_AGE_SECONDS:
                    path.unlink()
                    removed += 1
            except OSError:
                continue
        self.leftovers = []
        return removed

    def _link_inside(self, link: Path, root: Path, archived: bool) -> bool:
        """A file link is followed only to a file inside the token folder: not into a dot-folder
        (``.memvault/``), and from the hot set not into ``archive/``."""
        try:
            target = link.resolve(strict=True)
        except (OSError, RuntimeError):
            return False  # dangling, or a loop of links
        if not target.is_relative_to(root):
            return False
        parts = target.relative_to(root).parts
        if any(part.startswith(".") for part in parts[:-1]):
            return False
        return archived or not parts or parts[0] != ARCHIVE

    # ---- reading

    def read(self, id: str, *, archived: bool = False) -> Memory:
        return self.read_both(id, archived=archived)[1]

    def read_both(
        self, id: str, *, archived: bool = False, known: Memory | None = None
    ) -> tuple[bytes, Memory]:
        """The file's bytes and the memory they hold (to pass on to update: one read, one parse).
        ``known``: the memory as the server holds it, taken for the parse if the bytes are the same."""
        raw, st = self.read_raw(id, archived=archived)
        id = check_id(id)
        if known is not None and is_parse_of(known, raw, st, id, archived):
            return raw, known
        return raw, parse_memory(raw, id, archived=archived, **file_stamp(st))

    def opened(self) -> safe.Folder | None:
        """The token folder opened once for many read_scanned calls (close it); None if it cannot
        be (a link, or gone): read_scanned then opens it per file, and says None as it always did."""
        try:
            return safe.Folder(self._area_names[0])
        except OSError:
            return None

    def read_scanned(
        self, id: str, archived: bool, folder: safe.Folder | None = None
    ) -> tuple[bytes, os.stat_result] | None:
        """Bytes and stat of a file ``scan`` listed (no name checks: the scan made them); None if
        it cannot be read now. ``folder``: the token folder, ``opened`` once for many files."""
        if folder is not None and not archived and "/" not in id:  # the usual file, fast (None: not usual)
            usual = folder.read_plain(id, MAX_INDEXED_BYTES)
            if usual is not None:
                return usual
        rel = f"{ARCHIVE}/{id}" if archived else id
        try:
            if folder is not None:
                return folder.read(rel, MAX_INDEXED_BYTES)
            return safe.read_in(self._area_names[0], rel, MAX_INDEXED_BYTES)
        except safe.LinkRefused as exc:
            if exc.name != rel:
                return None  # the token folder or a folder on the way is a link: never read through
        except OSError:
            return None
        try:  # a file link, which the scan follows to a file inside the token folder
            return safe.read_file(self.target_of(id, archived=archived), self.dir, MAX_INDEXED_BYTES)
        except (OSError, MemvaultError):
            return None

    def read_raw(self, id: str, *, archived: bool = False) -> tuple[bytes, os.stat_result]:
        path = self.target_of(id, archived=archived)
        try:
            return safe.read_file(path, self.dir)
        except safe.LinkRefused as exc:
            raise exc.error() from None
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, NotRegularFile):
            raise NotFound(check_id(id), archived=archived) from None

    # ---- writing (callers hold the token lock)

    def temp_dir(self) -> str | None:
        """Where a memory's temp file is made: the token's ``.memvault/``, which the watcher does
        not watch (a write's temp file made four of the five events the watcher's thread handled
        for it); None (beside the file) if that is a link, which no write goes through."""
        return None if os.path.islink(self._state_dir) else self._state_dir

    def create(self, title: str, content: str, fields: Mapping[str, Any], *, folder: str = "") -> Memory:
        """Write a new memory named after its title; never overwrites (adds -2, -3, ...)."""
        stem = slugify(title)
        base = check_id(f"{folder.strip('/')}/{stem}.md" if folder else f"{stem}.md")
        data = seal_markers(render_new(title, content, fields)).encode("utf-8")
        for id in numbered_ids(base):  # ids, not Paths: pathlib was a sixth of a write's own work
            if os.path.islink(self.file_name(id, False)):
                continue  # a hand-made link holds this name (maybe pointing out of the vault): next one
            path = self.path_of(id)  # still refuses folders leading out
            try:
                st = atomic_write(path, data, overwrite=False, temp_dir=self.temp_dir())
            except FileExistsError:
                continue
            return parse_memory(data, id, **file_stamp(st))
        raise AssertionError("unreachable")  # pragma: no cover

    def update(
        self,
        id: str,
        fields: Mapping[str, Any],
        *,
        title: str | None = None,
        content: str | None = None,
        archived: bool = False,
        expect_hash: str | None = None,
        sync_folder: bool = True,
        read: tuple[bytes, Memory] | None = None,
        known: Memory | None = None,
    ) -> Memory:
        """Rewrite owned fields (and title/content) in place, preserving everything else.

        ``sync_folder=False`` leaves the folder's fsync to the caller (one for a batch of files).
        ``read``: what read_both gave the caller under the file lock it still holds (not read again).
        ``known``: the memory as the server holds it, taken for the file's parse if its bytes are
        the ones it was parsed from."""
        id = check_id(id)
        if read is None:
            raw, st = self.read_raw(id, archived=archived)
            current: Memory | None = None
            if len(raw) <= MAX_INDEXED_BYTES:
                if known is not None and is_parse_of(known, raw, st, id, archived):
                    current = known
                else:
                    current = parse_memory(raw, id, archived=archived)
        else:
            raw, current = read
        if len(raw) > MAX_INDEXED_BYTES or current is None:
            raise InvalidArgument(
                f"'{id}' is over {MAX_INDEXED_BYTES // 2**20} MiB, so the server will not rewrite it. Ask "
                "the user to edit it by hand, or write a new memory."
            )
        refuse_unwritable(
            current,
            "so the server will not rewrite it. Ask the user to fix the file (the YAML between the "
            "'---' lines, or its encoding), or write a new memory.",
        )
        if expect_hash is not None and current.hash != expect_hash:
            raise InvalidArgument(f"'{id}' changed on disk while being updated; read it again and retry.")
        text = rewrite(raw.decode("utf-8", errors="replace"), fields, title=title, content=content)
        data = seal_markers(text).encode("utf-8")
        path = self.path_of(id, archived=archived)
        st = atomic_write(path, data, sync_folder=sync_folder, temp_dir=self.temp_dir())
        return parse_memory(data, id, archived=archived, **file_stamp(st))

    def delete(self, id: str, *, archived: bool = False) -> None:
        path = self.path_of(id, archived=archived)
        try:
            path.unlink()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise NotFound(check_id(id), archived=archived) from None
        fsync_dir(path.parent)
        self._prune_empty(path.parent)

    def check_archive(self) -> None:
        """Refuse to archive into an ``archive`` that is not a folder (a file of that name)."""
        if self.archive_dir.exists() and not self.archive_dir.is_dir():
            raise InvalidArgument(
                "'archive' in this vault is a file, not a folder, so nothing can be archived. Ask the user "
                "to rename that file; the memories stay where they are meanwhile."
            )

    def move(self, id: str, *, to_archive: bool, sync: bool = True) -> str:
        """Move a memory between hot and archive; returns the new id (suffixed on collision).
        Without ``sync`` the folders are left to the caller to fsync (a sweep: once a batch)."""
        if to_archive:
            self.check_archive()
        src = self.path_of(id, archived=not to_archive)
        if not src.is_file():
            raise NotFound(check_id(id), archived=not to_archive)
        dst = self.path_of(id, archived=to_archive)  # refuses an `archive` that is a link
        final = move_no_overwrite(src, dst, sync=sync)
        self._prune_empty(src.parent)
        return final.relative_to(self.area(to_archive)).as_posix()

    def _prune_empty(self, folder: Path) -> None:
        """Remove folders the server emptied, up to (not including) the hot or archive root."""
        if folder in (self.dir, self.archive_dir):
            return  # a file at the top of an area, as most are: no folder to resolve (a stat each)
        stops = {self.dir.resolve(), self.archive_dir.resolve()}
        while folder.resolve() not in stops and folder.resolve().is_relative_to(self.dir.resolve()):
            try:
                folder.rmdir()
            except OSError:
                return
            folder = folder.parent


def is_parse_of(known: Memory, raw: bytes, st: os.stat_result, id: str, archived: bool) -> bool:
    """Whether ``known`` was parsed from this file as it is now (its name, stat and bytes): then
    it is what parsing ``raw`` gives, but for ``meta``, which the server's memories leave out."""
    return (
        known.id == id
        and known.archived == archived
        and len(raw) < MAX_INDEXED_BYTES
        and unchanged(known, st)
        and known.hash == content_hash(raw)
    )


def refuse_unwritable(memory: Memory, consequence: str) -> None:
    """Refuse to rewrite a memory with git conflict markers (Conflict) or one that did not parse
    cleanly (InvalidArgument: "'<id>' has a problem (...), <consequence>")."""
    if memory.conflicted:
        raise Conflict(memory.id)
    if memory.problem is not None:
        raise InvalidArgument(f"'{memory.id}' has a problem ({memory.problem}), {consequence}")


LOCK_TIMEOUT = 30.0  # seconds a command waits for another process's write before giving up


def folder_lock(folder: Path) -> FileLock:
    """The cross-process lock of a token folder (.memvault/lock): the server, the CLI and a second
    server on the same vault take it around every change of the token's files."""
    from filelock import FileLock  # here: a loader helper imports this module, and never locks

    return FileLock(str(folder / STATE_DIR / LOCK_FILE), timeout=LOCK_TIMEOUT)
