"""A token's folder (memvault.disk.vault): paths kept inside, create, update, move, delete, scan."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import hidden_files
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memvault.disk.names import check_id
from memvault.disk.vault import Vault
from memvault.errors import Conflict, InvalidArgument, InvalidName, NotFound

PROPS_FS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def test_path_of_refuses_the_archive_for_hot_names(tmp_path: Path) -> None:
    vault = Vault(tmp_path)
    for name in ("archive/old.md", "archive/sub/old"):
        with pytest.raises(InvalidName):
            vault.path_of(name)
    assert vault.path_of("old.md", archived=True) == tmp_path / "archive" / "old.md"
    assert vault.path_of("archived-things.md") == tmp_path / "archived-things.md"


def test_path_of_refuses_a_symlink_out_of_the_token_folder(tmp_path: Path) -> None:
    token = tmp_path / "tok"
    token.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret")
    (token / "escape").symlink_to(outside, target_is_directory=True)
    (token / "file-link.md").symlink_to(outside / "secret.md")
    vault = Vault(token)
    with pytest.raises(InvalidName):
        vault.path_of("escape/secret.md")
    with pytest.raises(InvalidName):
        vault.path_of("file-link.md")
    with pytest.raises(InvalidName):
        vault.read("escape/secret")


def test_path_of_refuses_a_symlink_from_hot_into_the_archive(tmp_path: Path) -> None:
    (tmp_path / "archive").mkdir()
    (tmp_path / "sneaky").symlink_to(tmp_path / "archive", target_is_directory=True)
    with pytest.raises(InvalidName):
        Vault(tmp_path).path_of("sneaky/old.md")


def test_path_of_allows_a_file_link_that_stays_inside_but_no_folder_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "x.md").write_text("# X\n", encoding="utf-8")
    (tmp_path / "same.md").symlink_to(tmp_path / "real" / "x.md")
    assert Vault(tmp_path).path_of("same") == tmp_path / "same.md"
    # Folder links are never followed (issue 9, 4), even to a folder of the same vault.
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    with pytest.raises(InvalidName, match="symbolic link"):
        Vault(tmp_path).path_of("alias/x")


PATH_PIECES = st.sampled_from(["..", ".", "a", "B c", "/", "\\", "~", "archive", "x.md", "\x00", "C:"])


@PROPS_FS
@given(
    st.one_of(
        st.text(max_size=60),
        st.lists(PATH_PIECES, max_size=8).map("".join),
        st.lists(st.sampled_from(["..", ".", "a", "archive", "", ".git", "~"]), max_size=6).map("/".join),
    )
)
def test_any_text_is_refused_or_stays_inside_the_token_folder(tmp_path: Path, name: str) -> None:
    root = tmp_path.resolve()
    vault = Vault(root)
    try:
        id = check_id(name)
    except InvalidName:
        return
    assert id.endswith((".md", ".MD", ".Md", ".mD"))
    assert "\x00" not in id and "\\" not in id
    assert not id.startswith(("/", "."))
    assert all(part not in ("", ".", "..") and not part.startswith(".") for part in id.split("/"))
    assert check_id(id) == id  # idempotent
    for archived in (False, True):
        try:
            path = vault.path_of(id, archived=archived)
        except InvalidName:
            assert not archived and id.split("/")[0] == "archive"
            continue
        assert path.resolve().is_relative_to(root)
        if not archived:
            assert not path.resolve().is_relative_to(root / "archive")


def test_create_never_overwrites_an_existing_memory(tmp_path: Path) -> None:
    vault = Vault(tmp_path / "tok")
    first = vault.create("Hello World", "first", {"priority": "P1"})
    second = vault.create("Hello World", "second", {"priority": "P1"})
    third = vault.create("hello world!", "third", {})
    assert (first.id, second.id, third.id) == ("hello-world.md", "hello-world-2.md", "hello-world-3.md")
    assert vault.read("hello-world").content == "first"
    assert vault.read("hello-world-2").content == "second"
    assert vault.read("hello-world-3").content == "third"
    assert hidden_files(vault.dir) == []


def test_create_leaves_a_hand_made_file_with_the_same_name_untouched(tmp_path: Path) -> None:
    token = tmp_path / "tok"
    token.mkdir()
    precious = b"---\nbroken: [yaml\n---\nhand written \xff bytes\n"
    (token / "notes.md").write_bytes(precious)
    made = Vault(token).create("Notes", "server text", {})
    assert made.id == "notes-2.md"
    assert (token / "notes.md").read_bytes() == precious


def test_create_in_a_subfolder_and_the_result_parses(tmp_path: Path) -> None:
    vault = Vault(tmp_path / "tok")
    t = datetime(2026, 1, 1, tzinfo=UTC)
    fields = {"priority": "P0", "createdAt": t, "tags": ["x"]}
    m = vault.create("Alpha Plan", "Do things.", fields, folder="projects")
    assert m.id == "projects/alpha-plan.md"
    assert (m.title, m.content, m.priority, m.tags) == ("Alpha Plan", "Do things.", "P0", ("x",))
    assert m.created_at == t
    assert vault.read("projects/alpha-plan").hash == m.hash


def test_read_of_a_missing_memory_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        Vault(tmp_path).read("nope")
    with pytest.raises(NotFound):
        Vault(tmp_path).read("nope", archived=True)


def test_update_refuses_a_conflicted_file_and_leaves_it_alone(tmp_path: Path) -> None:
    raw = b"# T\n\n<<<<<<< HEAD\na\n=======\nb\n>>>>>>> x\n"
    (tmp_path / "c.md").write_bytes(raw)
    with pytest.raises(Conflict):
        Vault(tmp_path).update("c.md", {"priority": "P0"})
    assert (tmp_path / "c.md").read_bytes() == raw


@pytest.mark.parametrize(
    "raw",
    [
        b"---\npriority: P1\n# no closing fence\n\nBody\n",
        b"---\npriority: [P1\n---\nBody\n",
        b"---\n- a list\n---\nBody\n",
        "---\npriority: P1\n---\nna\u00efve latin-1\n".encode("latin-1"),
    ],
)
def test_update_never_writes_over_a_broken_file(tmp_path: Path, raw: bytes) -> None:
    (tmp_path / "b.md").write_bytes(raw)
    with pytest.raises(InvalidArgument):
        Vault(tmp_path).update("b.md", {"lastAccessedAt": datetime(2026, 1, 1, tzinfo=UTC)})
    assert (tmp_path / "b.md").read_bytes() == raw


def test_update_migrates_a_legacy_file_once(tmp_path: Path) -> None:
    original = b"# Legacy\n\nKept exactly.\n"
    (tmp_path / "l.md").write_bytes(original)
    vault = Vault(tmp_path)
    m = vault.update("l.md", {"priority": "P2"})
    assert m.has_frontmatter
    assert (tmp_path / "l.md").read_bytes() == b"---\npriority: P2\n---\n" + original
    vault.update("l.md", {"priority": "P1"})
    assert (tmp_path / "l.md").read_bytes() == b"---\npriority: P1\n---\n" + original


def test_update_with_a_stale_hash_is_refused(tmp_path: Path) -> None:
    vault = Vault(tmp_path)
    m = vault.create("T", "x", {"priority": "P1"})
    (tmp_path / m.id).write_bytes(b"# T\n\nchanged by hand\n")
    with pytest.raises(InvalidArgument):
        vault.update(m.id, {"priority": "P0"}, expect_hash=m.hash)
    assert (tmp_path / m.id).read_bytes() == b"# T\n\nchanged by hand\n"


def test_move_to_archive_with_a_name_collision_keeps_both(tmp_path: Path) -> None:
    vault = Vault(tmp_path)
    (tmp_path / "archive").mkdir()
    (tmp_path / "archive" / "note.md").write_bytes(b"old archived")
    (tmp_path / "note.md").write_bytes(b"hot one")
    new_id = vault.move("note.md", to_archive=True)
    assert new_id == "note-2.md"
    assert (tmp_path / "archive" / "note.md").read_bytes() == b"old archived"
    assert (tmp_path / "archive" / "note-2.md").read_bytes() == b"hot one"
    assert not (tmp_path / "note.md").exists()
    assert hidden_files(tmp_path) == []


def test_move_back_from_the_archive(tmp_path: Path) -> None:
    vault = Vault(tmp_path)
    (tmp_path / "projects").mkdir()
    (tmp_path / "projects" / "alpha.md").write_bytes(b"alpha")
    archived = vault.move("projects/alpha", to_archive=True)
    assert archived == "projects/alpha.md"
    assert (tmp_path / "archive" / "projects" / "alpha.md").read_bytes() == b"alpha"
    assert not (tmp_path / "projects").exists()  # emptied hot subfolder pruned
    (tmp_path / "projects").mkdir()
    (tmp_path / "projects" / "alpha.md").write_bytes(b"a new hot alpha")
    restored = vault.move("projects/alpha.md", to_archive=False)
    assert restored == "projects/alpha-2.md"
    assert (tmp_path / "projects" / "alpha.md").read_bytes() == b"a new hot alpha"
    assert (tmp_path / "projects" / "alpha-2.md").read_bytes() == b"alpha"
    assert not (tmp_path / "archive" / "projects").exists()
    assert (tmp_path / "archive").is_dir()  # the archive root stays


def test_move_of_a_missing_memory_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        Vault(tmp_path).move("ghost.md", to_archive=True)
    with pytest.raises(NotFound):
        Vault(tmp_path).move("ghost.md", to_archive=False)


def test_delete_prunes_emptied_subfolders_but_not_the_roots(tmp_path: Path) -> None:
    token = tmp_path / "tok"
    vault = Vault(token)
    vault.create("Deep", "x", {}, folder="a/b/c")
    vault.create("Keep", "x", {}, folder="a")
    vault.delete("a/b/c/deep.md")
    assert not (token / "a" / "b").exists()
    assert (token / "a" / "keep.md").exists()
    vault.delete("a/keep")
    assert not (token / "a").exists()
    assert token.is_dir()
    vault.create("Last", "x", {})
    vault.delete("last.md")
    assert token.is_dir()
    (token / "archive" / "x").mkdir(parents=True)
    (token / "archive" / "x" / "old.md").write_bytes(b"old")
    vault.delete("x/old.md", archived=True)
    assert not (token / "archive" / "x").exists()
    assert (token / "archive").is_dir()


def test_delete_keeps_a_folder_that_still_has_other_files(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.md").write_bytes(b"a")
    (tmp_path / "p" / "image.png").write_bytes(b"png")
    Vault(tmp_path).delete("p/a.md")
    assert (tmp_path / "p" / "image.png").exists()


def test_delete_of_a_missing_memory_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        Vault(tmp_path).delete("ghost")


def test_scan_lists_memories_and_skips_hidden_and_non_markdown(tmp_path: Path) -> None:
    files = {
        "a.md": True,
        "sub/b.md": True,
        "sub/deeper/c.md": True,
        "archive/old.md": True,
        "archive/p/older.md": True,
        ".hidden.md": False,
        ".git/HEAD.md": False,
        ".memvault/x.md": False,
        "sub/.obsidian/workspace.md": False,
        "notes.txt": False,
        "image.png": False,
        "README": False,
    }
    for rel in files:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"# x\n")
    found = {(id, archived) for id, archived, _ in Vault(tmp_path).scan()}
    assert found == {
        ("a.md", False),
        ("sub/b.md", False),
        ("sub/deeper/c.md", False),
        ("old.md", True),
        ("p/older.md", True),
    }


def test_scan_of_a_missing_token_folder_is_empty_and_creates_nothing(tmp_path: Path) -> None:
    assert list(Vault(tmp_path / "nobody").scan()) == []
    assert not (tmp_path / "nobody").exists()


def test_scan_skips_links_that_leave_the_vault(tmp_path: Path) -> None:
    token = tmp_path / "tok"
    token.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("s")
    (token / "out").symlink_to(outside, target_is_directory=True)
    (token / "secret.md").symlink_to(outside / "secret.md")
    (token / "mine.md").write_text("m")
    assert [id for id, _, _ in Vault(token).scan()] == ["mine.md"]


def test_list_files_lists_what_scan_does_without_a_stat(tmp_path: Path, monkeypatch) -> None:
    token = tmp_path / "tok"
    for rel in ("a.md", "sub/b.md", "archive/old.md", ".memvault/x.md", "sessions/s.md", "n.txt"):
        (token / rel).parent.mkdir(parents=True, exist_ok=True)
        (token / rel).write_text("# x\n")
    (token / ".memvault-abcd1234.tmp").write_text("partial")  # a temp file of ours: a leftover
    os.mkfifo(token / "pipe.md")
    (tmp_path / "outside.md").write_text("s")
    (token / "out.md").symlink_to(tmp_path / "outside.md")
    (token / "in.md").symlink_to(token / "sub" / "b.md")
    (token / "to-archive.md").symlink_to(token / "archive" / "old.md")
    vault = Vault(token)
    scanned = [(id, archived) for id, archived, _ in vault.scan()]
    leftovers = vault.leftovers
    assert [p.name for p in leftovers] == [".memvault-abcd1234.tmp"]
    assert ("in.md", False) in scanned and ("old.md", True) in scanned and ("a.md", False) in scanned
    monkeypatch.setattr(
        os.DirEntry, "stat", lambda self: pytest.fail("list_files took a stat"), raising=False
    )
    assert list(vault.list_files()) == scanned
    assert vault.leftovers == leftovers


def _placing_from(monkeypatch) -> list[Path]:
    """The folders the files os.link and os.replace put in place came from, from now on."""
    sources: list[Path] = []
    for name in ("link", "replace"):
        real = getattr(os, name)

        def spy(src, dst, *args, _real=real, **kwargs):
            sources.append(Path(src).parent)
            return _real(src, dst, *args, **kwargs)

        monkeypatch.setattr(os, name, spy)
    return sources


def test_create_and_update_make_their_temp_files_in_the_state_folder(tmp_path: Path, monkeypatch) -> None:
    """.memvault/ is not watched: a write's temp file there costs the watcher no events."""
    (tmp_path / ".memvault").mkdir()
    vault = Vault(tmp_path)
    sources = _placing_from(monkeypatch)
    memory = vault.create("A note", "Body.", {"priority": "P1"})
    vault.update(memory.id, {"priority": "P0"})
    assert sources == [tmp_path / ".memvault"] * 2
    assert vault.read(memory.id).priority == "P0"
    assert hidden_files(tmp_path) == [".memvault"]
    assert os.listdir(tmp_path / ".memvault") == []


def test_a_linked_state_folder_takes_no_temp_file(tmp_path: Path, monkeypatch) -> None:
    token, outside = tmp_path / "tok", tmp_path / "outside"
    token.mkdir()
    outside.mkdir()
    (token / ".memvault").symlink_to(outside)
    vault = Vault(token)
    sources = _placing_from(monkeypatch)
    memory = vault.create("A note", "Body.", {"priority": "P1"})
    vault.update(memory.id, {"priority": "P0"})
    assert sources == [token] * 2
    assert os.listdir(outside) == []
    assert vault.read(memory.id).priority == "P0"
