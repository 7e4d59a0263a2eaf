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
