"""Running git safely, and the repository around a vault, with a real git in a temporary folder."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gitrepo import GIT, git_sync

from memvault.errors import SyncFailed
from memvault.git import repo as git_repo
from memvault.git.repo import DEFAULT_EMAIL, Repo

needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")


@pytest.fixture(autouse=True)
def own_git_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No identity or setting of this machine's user, and no repository found above tmp_path."""
    config = tmp_path / "gitconfig"
    config.write_text("[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n", encoding="utf-8")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))


def repository(tmp_path: Path, vault: str = "vaults") -> tuple[Path, Repo]:
    """A repository with one commit, and the Repo of the vault folder ``vault`` in it."""
    top = tmp_path / "repo"
    git_sync(tmp_path, "init", "-b", "main", str(top))
    (top / "README.md").write_text("# Repo\n", encoding="utf-8")
    git_sync(top, "add", "README.md")
    git_sync(top, "commit", "-q", "-m", "first")
    root = top / vault if vault != "." else top
    root.mkdir(parents=True, exist_ok=True)
    return top, git_repo.find(root)


def write(path: Path, text: str = "x\n") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


# ---------------------------------------------------------------- running git safely


def test_git_words_lose_credentials_and_absolute_paths() -> None:
    said = git_repo.clean(
        "fatal: unable to access 'https://ada:s3cret@git.example.invalid/team.git/': 403\n"
        "fatal: '/home/ada/vaults/remote.git' does not appear to be a git repository\n"
        "hint: see git help"
    )
    assert "s3cret" not in said and "ada:" not in said and "/home/ada" not in said
    assert "https://git.example.invalid/team.git/" in said and ".../remote.git" in said
    assert "hint" not in said


def test_git_words_are_one_bounded_line() -> None:
    said = git_repo.clean("error: one\n\n  error: two\n" + "x" * 2000)
    assert said.startswith("error: one error: two") and "\n" not in said and len(said) <= 500
    assert git_repo.clean("hint: only advice") == "hint: only advice"  # nothing else to say


def test_git_runs_without_prompts_pagers_or_a_borrowed_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_DIR", "/elsewhere/.git")
    env = git_repo.child_env()
    assert "GIT_DIR" not in env
    assert env["GIT_TERMINAL_PROMPT"] == "0" and env["LC_ALL"] == "C" and env["GIT_PAGER"] == "cat"
    assert env["HOME"] == os.environ["HOME"]
    assert "BatchMode=yes" in env["GIT_SSH_COMMAND"]
    monkeypatch.setenv("GIT_SSH_COMMAND", "ssh -i key")
    assert git_repo.child_env()["GIT_SSH_COMMAND"] == "ssh -i key"  # the user's own choice stays


@needs_git
def test_a_redirected_git_dir_is_not_followed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    top, repo = repository(tmp_path)
    other = tmp_path / "other"
    git_sync(tmp_path, "init", "-b", "main", str(other))
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    assert git_repo.find(top / "vaults").git_dir == repo.git_dir


@needs_git
def test_a_failing_git_command_says_what_failed_without_absolute_paths(tmp_path: Path) -> None:
    _, repo = repository(tmp_path)
    with pytest.raises(SyncFailed) as failed:
        repo.run("fetch", "--quiet", str(tmp_path / "nowhere.git"))
    assert failed.value.message.startswith("git fetch failed: ")
    assert str(tmp_path) not in failed.value.message and ".../nowhere.git" in failed.value.message
    assert repo.run("fetch", str(tmp_path / "nowhere.git"), check=False).returncode != 0  # unchecked


def test_git_missing_from_path_gets_a_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no git on it
    with pytest.raises(SyncFailed, match="git is not installed"):
        git_repo.git(tmp_path, "status")


# ---------------------------------------------------------------- the repository around a vault


@needs_git
def test_a_vault_is_found_in_its_repository_at_the_top_or_inside(tmp_path: Path) -> None:
    top, repo = repository(tmp_path, "vaults/work")
    assert repo.top.resolve() == top.resolve() and repo.vault == "vaults/work"
    assert repo.git_dir.resolve() == (top / ".git").resolve()
    assert git_repo.find(top).vault == "."


def test_a_vault_outside_a_repository_or_missing_is_named_without_paths(tmp_path: Path) -> None:
    for folder, said in ((tmp_path / "absent", "does not exist yet"), (tmp_path, "not in a git repository")):
        with pytest.raises(SyncFailed, match=said) as failed:
            git_repo.find(folder)
        assert str(tmp_path) not in failed.value.message


def test_paths_git_names_are_read_relative_to_the_vault() -> None:
    inside = Repo(top=Path("top"), git_dir=Path("top/.git"), vault="vaults")
    assert inside.vault_relative("vaults/team/a.md") == "team/a.md"
    assert inside.vault_relative("vaults-old/a.md") is None and inside.vault_relative("README.md") is None
    whole = Repo(top=Path("top"), git_dir=Path("top/.git"), vault=".")
    assert whole.vault_relative("team/a.md") == "team/a.md"


@needs_git
@pytest.mark.parametrize("vault", ["vaults", "."])
def test_the_vaults_changes_leave_out_derived_state_writes_in_flight_and_other_files(
    tmp_path: Path, vault: str
) -> None:
    top, repo = repository(tmp_path, vault)
    root = top / vault if vault != "." else top
    write(root / "team" / "note.md")
    write(root / "team" / ".memvault" / "sidecar.sqlite3")
    write(root / "team" / "notes" / ".deploy.md.123.tmp")
    prefix = "" if vault == "." else vault + "/"
    if vault != ".":
        write(top / "outside.md")
    assert repo.changes() == [f"{prefix}team/note.md"]
    assert repo.changed({f"{prefix}team/note.md", "elsewhere.md"}) and not repo.changed({"elsewhere.md"})
    assert not repo.changed(set())


@needs_git
def test_a_half_done_operation_is_named(tmp_path: Path) -> None:
    _, repo = repository(tmp_path)
    assert repo.busy() is None
    (repo.git_dir / "MERGE_HEAD").write_text("0" * 40 + "\n", encoding="utf-8")
    assert repo.busy() == "a merge"


@needs_git
def test_a_detached_head_or_no_remote_says_what_to_do(tmp_path: Path) -> None:
    top, repo = repository(tmp_path)
    assert repo.branch() == "main"
    with pytest.raises(SyncFailed, match="git remote add"):
        repo.upstream("main")
    git_sync(top, "checkout", "-q", "--detach")
    with pytest.raises(SyncFailed, match="detached"):
        repo.branch()


@needs_git
def test_a_branch_syncs_with_its_upstream_else_origin_else_the_only_remote(tmp_path: Path) -> None:
    top, repo = repository(tmp_path)
    git_sync(top, "remote", "add", "backup", "https://git.example.invalid/b.git")
    assert repo.upstream("main") == ("backup", "main")
    git_sync(top, "remote", "add", "origin", "https://git.example.invalid/o.git")
    assert repo.upstream("main") == ("origin", "main")
    git_sync(top, "config", "branch.main.remote", "backup")
    git_sync(top, "config", "branch.main.merge", "refs/heads/trunk")
    assert repo.upstream("main") == ("backup", "trunk")


@needs_git
def test_commits_get_a_default_identity_only_when_none_is_configured(tmp_path: Path) -> None:
    top, repo = repository(tmp_path)
    assert f"user.email={DEFAULT_EMAIL}" in repo.identity()
    before = repo.config_stamp()
    git_sync(top, "config", "user.email", "ada@example.invalid")
    assert repo.identity() == []
    assert repo.config_stamp() != before  # the loop reads the identity again


@needs_git
def test_ahead_and_behind_count_commits_even_when_one_side_is_missing(tmp_path: Path) -> None:
    top, repo = repository(tmp_path)
    assert repo.ahead_behind("refs/remotes/origin/main") == (1, 0)  # never fetched
    git_sync(top, "update-ref", "refs/remotes/origin/main", "HEAD")
    write(top / "vaults" / "a.md")
    git_sync(top, "add", "-A")
    git_sync(top, "commit", "-q", "-m", "second")
    assert repo.ahead_behind("refs/remotes/origin/main") == (1, 0)
    git_sync(top, "update-ref", "refs/remotes/origin/main", "HEAD")
    git_sync(top, "reset", "-q", "--hard", "HEAD~1")
    assert repo.ahead_behind("refs/remotes/origin/main") == (0, 1)

    fresh = tmp_path / "fresh"
    git_sync(tmp_path, "init", "-b", "main", str(fresh))
    unborn = git_repo.find(fresh)
    assert unborn.head() is None and unborn.ahead_behind("refs/remotes/origin/main") == (0, 0)


@needs_git
def test_a_blob_is_read_as_git_holds_it_and_a_missing_one_fails_cleanly(tmp_path: Path) -> None:
    _, repo = repository(tmp_path)
    assert repo.blob("HEAD:README.md") == b"# Repo\n"
    with pytest.raises(SyncFailed, match="git cat-file failed") as failed:
        repo.blob("HEAD:missing.md")
    assert str(tmp_path) not in failed.value.message


@needs_git
def test_refs_are_read_as_git_reads_them_loose_packed_or_symbolic(tmp_path: Path) -> None:
    top, repo = repository(tmp_path)
    head = git_sync(top, "rev-parse", "HEAD").stdout.strip()
    git_sync(top, "update-ref", "refs/remotes/origin/main", "HEAD")
    assert repo.commit_of("HEAD") == repo.commit_of("refs/heads/main") == head  # HEAD names its branch
    assert repo.commit_of("refs/remotes/origin/main") == head
    git_sync(top, "pack-refs", "--all")
    assert not (repo.git_dir / "refs" / "remotes" / "origin" / "main").exists()
    assert repo.commit_of("refs/remotes/origin/main") == head  # from packed-refs
    write(top / "vaults" / "a.md")
    git_sync(top, "add", "-A")
    git_sync(top, "commit", "-q", "-m", "second")
    git_sync(top, "update-ref", "refs/remotes/origin/main", "HEAD")  # loose again, over the packed one
    assert repo.commit_of("refs/remotes/origin/main") == git_sync(top, "rev-parse", "HEAD").stdout.strip()
    for unknown in ("refs/remotes/origin/none", "refs/../../outside", "config"):
        assert repo.commit_of(unknown) is None  # git is asked instead
    git_sync(top, "checkout", "-q", "--detach")
    assert repo.commit_of("HEAD") == git_sync(top, "rev-parse", "HEAD").stdout.strip()


@needs_git
def test_ahead_and_behind_follow_a_ref_that_moved_behind_gits_back(tmp_path: Path) -> None:
    top, repo = repository(tmp_path)
    first = git_sync(top, "rev-parse", "HEAD").stdout.strip()
    git_sync(top, "update-ref", "refs/remotes/origin/main", "HEAD")
    assert repo.ahead_behind("refs/remotes/origin/main") == (0, 0)
    write(top / "vaults" / "a.md")
    git_sync(top, "add", "-A")
    git_sync(top, "commit", "-q", "-m", "second")
    assert repo.ahead_behind("refs/remotes/origin/main") == (1, 0)  # HEAD moved
    git_sync(top, "update-ref", "refs/remotes/origin/main", "HEAD")
    git_sync(top, "pack-refs", "--all")
    assert repo.ahead_behind("refs/remotes/origin/main") == (0, 0)  # the remote's ref moved, then packed
    git_sync(top, "reset", "-q", "--hard", first)
    assert repo.ahead_behind("refs/remotes/origin/main") == (0, 1)
