"""Names (memvault.disk.names): slugs, memory ids, tokens."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memvault.disk.files import atomic_write
from memvault.disk.names import SLUG_MAX, check_id, slugify, valid_token
from memvault.errors import InvalidName

PROPS = settings(max_examples=150, deadline=None)


# ============================================================================ slugify


@pytest.mark.parametrize(
    ("title", "slug"),
    [
        ("Hello World", "hello-world"),
        ("工作安排", "工作安排"),
        ("  Deploy: Postgres 16!!  ", "deploy-postgres-16"),
        ("a - _ - b", "a-b"),
        ("a-_-b", "a-b"),
        ("snake_case_name", "snake-case-name"),
        ("Ｆｕｌｌｗｉｄｔｈ１２", "fullwidth12"),  # NFKC
        ("Crème Brûlée", "crème-brûlée"),
        ("../../etc/passwd", "etc-passwd"),
        (".hidden", "hidden"),
        ("", "memory"),
        ("!!!", "memory"),
        ("🎉🎉", "memory"),
        ("---", "memory"),
    ],
)
def test_slugify_examples(title: str, slug: str) -> None:
    assert slugify(title) == slug


def test_slugify_caps_length_at_80_without_trailing_dash() -> None:
    slug = slugify("word " * 40)
    assert len(slug) <= SLUG_MAX
    assert not slug.endswith("-")
    assert slugify("x" * 200) == "x" * 80


def test_slugify_of_long_four_byte_letters_still_makes_a_valid_file_name() -> None:
    slug = slugify("\U00020000" * 100)  # CJK extension B: letters, 4 bytes each in UTF-8
    assert slug
    assert check_id(slug) == slug + ".md"
    assert len((slug + "-99.md").encode()) <= 255


@PROPS
@given(st.text(max_size=200))
@example("a" + "\U00020000" * 79)
@example("İstanbul")
@example("_" * 10)
def test_slug_is_always_a_safe_non_empty_name(title: str) -> None:
    slug = slugify(title)
    assert slug
    assert len(slug) <= SLUG_MAX
    assert re.fullmatch(r"[^\W_]+(?:-[^\W_]+)*", slug), slug  # letters/digits, single dashes between
    for bad in ("/", "\\", ".", "\x00"):
        assert bad not in slug
    assert check_id(slug) == slug + ".md"
    assert slugify(slug) == slug  # idempotent


# ============================================================================ check_id / path_of


@pytest.mark.parametrize(
    "name",
    [
        "..",
        "../x",
        "a/../b",
        "a/..",
        "./a",
        "a/./b",
        "/x",
        "/etc/passwd",
        "C:\\x",
        "C:x",
        "a\\b",
        "a\x00b",
        ".hidden",
        ".hidden.md",
        "a/.git/config",
        "a/.memvault/x",
        "",
        "   ",
        "~",
        "~/x",
        "a//b",
        "a/",
        "x" * 2000,
        "a/" + "y" * 300,
        "tab\there",
        "unit\x1fseparator",
        "a/\x01b",
    ],
)
def test_check_id_refuses_unsafe_names(name: str) -> None:
    with pytest.raises(InvalidName) as info:
        check_id(name)
    assert info.value.why
    assert "\x00" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "id"),
    [
        ("note", "note.md"),
        ("note.md", "note.md"),
        ("My Note With Spaces", "My Note With Spaces.md"),
        ("Projects/Alpha Plan.md", "Projects/Alpha Plan.md"),
        ("a/b/c", "a/b/c.md"),
        ("工作安排", "工作安排.md"),
        ("v1.2 notes", "v1.2 notes.md"),
        ("NOTE.MD", "NOTE.MD"),
    ],
)
def test_check_id_accepts_hand_made_names_and_adds_md(name: str, id: str) -> None:
    assert check_id(name) == id


# ============================================================================ tokens


@pytest.mark.parametrize("token", ["alice", "a.b-c_d", "A1", "0", "a" * 128, "x..y", "a."])
def test_valid_token_accepts(token: str) -> None:
    assert valid_token(token)


@pytest.mark.parametrize(
    "token",
    [
        "",
        ".",
        "..",
        "...",
        ".hidden",
        ".memvault",
        "a/b",
        "a\\b",
        "a b",
        "a" * 129,
        "%2e%2e",
        "ünïcode",
        "工作",
        "alice\n",
        "-dash",
        "_under",
        "a\x00",
    ],
)
def test_valid_token_rejects(token: str) -> None:
    assert not valid_token(token)


@PROPS
@given(st.text(max_size=140))
def test_a_valid_token_is_always_a_plain_folder_name(token: str) -> None:
    if valid_token(token):
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", token)
        assert token.strip(".")
        assert "/" not in token and not token.startswith(".")


def test_rewrites_keep_the_file_mode_and_new_files_follow_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "note.md"
    path.write_text("---\npriority: P1\n---\n# Note\n\ntext\n", encoding="utf-8")
    path.chmod(0o640)
    atomic_write(path, b"new text")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    fresh = tmp_path / "fresh.md"
    atomic_write(fresh, b"x", overwrite=False)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask
