"""Opening a vault's files never through a link: a token folder opened once for many reads keeps
every rule that opening each file from the root keeps."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memvault.disk import safe


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    token = tmp_path / "vault" / "tok"
    (token / "sub").mkdir(parents=True)
    (token / "a.md").write_text("# A\n\nalpha\n", encoding="utf-8")
    (token / "sub" / "b.md").write_text("# B\n\nbeta\n", encoding="utf-8")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("# Secret\n", encoding="utf-8")
    (token / "link.md").symlink_to(outside / "secret.md")
    (token / "linked").symlink_to(outside)
    return token


def test_a_folder_opened_once_reads_what_opening_from_the_root_reads(folder: Path) -> None:
    with safe.Folder(str(folder)) as opened:
        for rel in ("a.md", "sub/b.md"):
            data, st = opened.read(rel)
            expected, expected_st = safe.read_in(str(folder), rel)
            assert (data, st.st_ino, st.st_size) == (expected, expected_st.st_ino, expected_st.st_size)
        assert opened.read("a.md", limit=3)[0] == b"# A"


def test_a_folder_opened_once_refuses_links_and_leaves_no_descriptor_open(folder: Path) -> None:
    before = len(os.listdir("/proc/self/fd"))
    with safe.Folder(str(folder)) as opened:
        with pytest.raises(safe.LinkRefused) as file_link:
            opened.read("link.md")
        assert file_link.value.name == "link.md"
        with pytest.raises(safe.LinkRefused) as folder_link:
            opened.read("linked/secret.md")
        assert folder_link.value.name == "linked/"
        with pytest.raises(FileNotFoundError):
            opened.read("../outside/secret.md")
        with pytest.raises(FileNotFoundError):
            opened.read("missing.md")
        assert opened.read("sub/b.md")[0].endswith(b"beta\n")
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_token_folder_that_is_a_link_is_not_opened(folder: Path, tmp_path: Path) -> None:
    alias = tmp_path / "vault" / "alias"
    alias.symlink_to(folder)
    with pytest.raises(safe.LinkRefused) as refused:
        safe.Folder(str(alias))
    assert refused.value.name == ""


def test_the_plain_read_gives_reads_answer_or_leaves_the_file_to_it(folder: Path) -> None:
    """The cold load's fast read: a regular file under the limit exactly as ``read`` gives it;
    anything else (a link, a FIFO, a folder, a missing or large file) left to ``read``, which
    refuses or reads it as always. No descriptor stays open."""
    (folder / "empty.md").write_bytes(b"")
    (folder / "big.md").write_bytes(b"x" * 64)
    (folder / "dir.md").mkdir()
    os.mkfifo(folder / "fifo.md")
    before = len(os.listdir("/proc/self/fd"))
    with safe.Folder(str(folder)) as opened:
        for name in ("a.md", "empty.md", "big.md"):
            got = opened.read_plain(name, limit=1 << 20)
            assert got is not None
            want = opened.read(name)
            assert got[0] == want[0] and got[1].st_ino == want[1].st_ino and got[1].st_size == want[1].st_size
        assert opened.read_plain("big.md", limit=64) is None  # at the limit: read cuts it
        assert opened.read_plain("big.md", limit=65) is not None
        for name in ("link.md", "dir.md", "fifo.md", "missing.md"):
            assert opened.read_plain(name, limit=1 << 20) is None, name
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_vault_reads_scanned_files_as_before_with_the_plain_read(folder: Path) -> None:
    from memvault.disk.vault import Vault

    vault = Vault(folder)
    opened = vault.opened()
    assert opened is not None
    try:
        for id, archived, _ in vault.scan():
            got, alone = vault.read_scanned(id, archived, opened), vault.read_scanned(id, archived)
            assert got is not None and alone is not None, id
            assert got[0] == alone[0] and got[1].st_ino == alone[1].st_ino, id
    finally:
        opened.close()
