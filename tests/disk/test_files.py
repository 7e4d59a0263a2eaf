"""File primitives (memvault.disk.files): atomic writes and the non-blocking file lock."""

from __future__ import annotations

import dataclasses
import errno
import os
import stat
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import hidden_files
from hypothesis import given
from hypothesis import strategies as st

from memvault.disk.files import atomic_write
from memvault.disk.markdown import Memory
from memvault.disk.vault import Vault


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


# ============================================================================ files


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "note.md"
    atomic_write(target, b"one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert hidden_files(tmp_path) == []
    assert not list(tmp_path.rglob("*.tmp"))


def test_atomic_write_without_overwrite_refuses_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "note.md"
    target.write_bytes(b"precious")
    with pytest.raises(FileExistsError):
        atomic_write(target, b"clobber", overwrite=False)
    assert target.read_bytes() == b"precious"
    assert hidden_files(tmp_path) == []


def test_atomic_write_without_overwrite_creates_a_new_file(tmp_path: Path) -> None:
    target = tmp_path / "new.md"
    atomic_write(target, b"fresh", overwrite=False)
    assert target.read_bytes() == b"fresh"
    assert os.listdir(tmp_path) == ["new.md"]


def test_atomic_write_gives_the_stat_of_the_file_in_place(tmp_path: Path) -> None:
    target = tmp_path / "note.md"
    for overwrite in (False, True):
        st = atomic_write(target, b"text " * (3 if overwrite else 1), overwrite=overwrite)
        now = os.stat(target)
        assert (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns) == (
            now.st_ino,
            now.st_size,
            now.st_mtime_ns,
            now.st_ctime_ns,
        )


def test_atomic_write_keeps_an_existing_file_s_mode_and_gives_a_new_one_the_umask_s(tmp_path: Path) -> None:
    kept = tmp_path / "kept.md"
    kept.write_bytes(b"old")
    kept.chmod(0o664)  # a bit the usual umask (022) takes away
    atomic_write(kept, b"new")
    assert stat.S_IMODE(kept.stat().st_mode) == 0o664
    fresh = tmp_path / "fresh.md"
    atomic_write(fresh, b"new", overwrite=False)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask
    atomic_write(tmp_path / "key", b"secret", mode=0o600)
    assert stat.S_IMODE((tmp_path / "key").stat().st_mode) == 0o600


@pytest.mark.parametrize("overwrite", [False, True])
def test_atomic_write_makes_its_temp_file_in_the_temp_folder(tmp_path: Path, monkeypatch, overwrite) -> None:
    """A vault's writes make their temp files in .memvault/, which the watcher does not watch."""
    temps = tmp_path / ".memvault"
    temps.mkdir()
    target = tmp_path / "sub" / "note.md"
    placed: list[Path] = []
    real_link, real_replace = os.link, os.replace

    def link(src, dst, *args, **kwargs):
        placed.append(Path(src).parent)
        return real_link(src, dst, *args, **kwargs)

    def replace(src, dst, *args, **kwargs):
        placed.append(Path(src).parent)
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", link)
    monkeypatch.setattr(os, "replace", replace)
    if overwrite:
        target.parent.mkdir()
        target.write_bytes(b"old")
    atomic_write(target, b"new", overwrite=overwrite, temp_dir=str(temps))
    assert target.read_bytes() == b"new"
    assert set(placed) == {temps}
    assert hidden_files(tmp_path) == [".memvault"]
    assert os.listdir(temps) == []


@pytest.mark.parametrize("overwrite", [False, True])
def test_atomic_write_from_a_temp_folder_on_another_file_system_writes_beside(
    tmp_path: Path, monkeypatch, overwrite
) -> None:
    temps = tmp_path / ".memvault"
    temps.mkdir()
    target = tmp_path / "note.md"
    real_link, real_replace = os.link, os.replace

    def across(real):
        def call(src, dst, *args, **kwargs):
            if Path(src).parent == temps:
                raise OSError(errno.EXDEV, "Invalid cross-device link")
            return real(src, dst, *args, **kwargs)

        return call

    monkeypatch.setattr(os, "link", across(real_link))
    monkeypatch.setattr(os, "replace", across(real_replace))
    if overwrite:
        target.write_bytes(b"old")
    atomic_write(target, b"new", overwrite=overwrite, temp_dir=str(temps))
    assert target.read_bytes() == b"new"
    assert hidden_files(tmp_path) == [".memvault"]
    assert os.listdir(temps) == []


def test_atomic_write_with_its_temp_folder_gone_writes_beside(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "note.md"
    atomic_write(target, b"new", overwrite=False, temp_dir=str(tmp_path / ".memvault"))
    assert target.read_bytes() == b"new"
    assert hidden_files(tmp_path) == []


def test_atomic_write_of_a_bare_name_writes_in_the_working_folder(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    atomic_write(Path("out.json"), b"{}")
    atomic_write("out.json", b"[]")
    assert (tmp_path / "out.json").read_bytes() == b"[]"
    assert os.listdir(tmp_path) == ["out.json"]


@given(st.from_regex(r"([a-z0-9]{1,5}/){0,2}[a-z0-9-]{1,8}\.(md|MD)", fullmatch=True))
def test_numbered_ids_are_numbered_paths_relative_to_the_folder(id: str) -> None:
    from itertools import islice

    from memvault.disk.files import numbered, numbered_ids

    root = Path("/vault")
    paths = [p.relative_to(root).as_posix() for p in islice(numbered(root / id), 4)]
    assert list(islice(numbered_ids(id), 4)) == paths


def test_numbered_names_count_before_the_suffix_as_pathlib_reads_it() -> None:
    from itertools import islice

    from memvault.disk.files import numbered, numbered_ids

    expected = {
        "a/b.md": ["a/b.md", "a/b-2.md", "a/b-3.md"],
        "x.tar.gz": ["x.tar.gz", "x.tar-2.gz", "x.tar-3.gz"],
        ".hidden": [".hidden", ".hidden-2", ".hidden-3"],
        "end.": ["end.", "end.-2", "end.-3"],
        "a.b/c": ["a.b/c", "a.b/c-2", "a.b/c-3"],
    }
    for id, names in expected.items():
        assert list(islice(numbered_ids(id), 3)) == names
        assert [p.name for p in islice(numbered(Path("/v") / id), 3)] == [n.rsplit("/", 1)[-1] for n in names]


# ============================================================================ try_lock


def test_try_lock_is_the_same_lock_as_filelock(tmp_path: Path) -> None:
    """try_lock and filelock's FileLock exclude each other, in this process and across threads;
    closing the descriptor releases the lock."""
    import threading

    from filelock import FileLock, Timeout

    from memvault.disk.files import try_lock

    path = str(tmp_path / "lock")
    fd = try_lock(path)
    assert fd is not None
    assert try_lock(path) is None  # a second holder, even in the same thread, is refused
    failed: list[BaseException] = []

    def other() -> None:
        try:
            FileLock(path, timeout=0).acquire()
        except Timeout as exc:
            failed.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(10)
    assert failed, "FileLock took a lock try_lock holds"
    os.close(fd)
    with FileLock(path, timeout=0):
        assert try_lock(path) is None
    again = try_lock(path)
    assert again is not None
    os.close(again)


@pytest.mark.parametrize("size", [0, 1, 99, 100, 101, 5000])
def test_read_regular_gives_the_whole_file_or_its_first_limit_bytes(tmp_path: Path, size: int) -> None:
    from memvault.disk.files import read_regular

    path = tmp_path / "m.md"
    data = bytes(range(256)) * (size // 256 + 1)
    path.write_bytes(data[:size])
    raw, st = read_regular(path, 100)
    assert raw == data[: min(size, 100)] and st.st_size == size
    assert read_regular(path)[0] == data[:size]


def test_read_regular_reads_what_a_file_grew_by_after_its_stat(tmp_path: Path, monkeypatch) -> None:
    from memvault.disk import files

    path = tmp_path / "m.md"
    path.write_bytes(b"a" * 10)
    real_fstat = os.fstat

    def fstat_then_grow(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        with open(path, "ab") as more:  # appended in place between the stat and the read
            more.write(b"b" * 50)
        return st

    monkeypatch.setattr(files.os, "fstat", fstat_then_grow)
    raw, st = files.read_regular(path, 40)
    assert st.st_size == 10 and raw == b"a" * 10 + b"b" * 30
    path.write_bytes(b"a" * 10)
    assert files.read_regular(path, 1000)[0] == b"a" * 10 + b"b" * 50


def test_read_regular_reads_on_after_short_reads_and_stops_at_a_shrunk_end(
    tmp_path: Path, monkeypatch
) -> None:
    from memvault.disk import files

    path = tmp_path / "m.md"
    data = bytes(range(256)) * 4
    path.write_bytes(data)
    real_read = os.read

    def dribble(fd: int, n: int) -> bytes:  # what a network file system may do
        return real_read(fd, min(n, 7))

    monkeypatch.setattr(files.os, "read", dribble)
    assert files.read_regular(path)[0] == data
    assert files.read_regular(path, 100)[0] == data[:100]
    monkeypatch.setattr(files.os, "read", real_read)
    real_fstat = os.fstat

    def fstat_then_shrink(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        os.truncate(path, 300)
        return st

    monkeypatch.setattr(files.os, "fstat", fstat_then_shrink)
    raw, st = files.read_regular(path, 10_000)
    assert st.st_size == len(data) and raw == data[:300]


def test_a_stored_memory_sets_every_field_where_the_dataclass_would() -> None:
    """make_memory (parsing, and a restart's snapshot) sets slots directly, in declaration order: a
    field added or moved shows here."""
    from memvault.disk.markdown import NO_META, make_memory

    t1, t2, t3 = (datetime(2026, 1, d, tzinfo=UTC) for d in (1, 2, 3))
    built = make_memory(
        "a/b.md", "T", "C", "P0", t1, t2, t3, ("x",), 0.5, True, NO_META, False, "bad", True, 11, 22, 33, "h"
    )  # fmt: skip
    assert built == Memory(
        id="a/b.md", title="T", content="C", priority="P0", created_at=t1, updated_at=t2, last_accessed_at=t3,
        tags=("x",), importance=0.5, archived=True, has_frontmatter=False, problem="bad", conflicted=True,
        mtime_ns=11, size=22, change=33, hash="h",
    )  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.title = "changed"  # type: ignore[misc]


def test_scan_holds_one_folder_entry_at_a_time(tmp_path: Path) -> None:
    """A scan kept a list of the folder's entries, each with its cached stat, to its end: at
    100,000 files a restart's rescan left 70 MB of free pools resident. Now its memory stays flat."""
    import tracemalloc

    token = tmp_path / "t"
    token.mkdir()
    for i in range(3000):
        (token / f"m{i}.md").write_bytes(b"x")
    tracemalloc.start()
    try:
        count = 0
        for _id, _archived, _st in Vault(token).scan():
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 3000
    assert peak < 300_000  # a list of 3,000 entries with their stats is some 1.5 MB
