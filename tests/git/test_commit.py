"""What a sync commits and what its message says: the vault's own changes under a subject naming
what changed in which vault."""

from __future__ import annotations

from pathlib import Path

import pytest
from gitrepo import GIT, git_sync

from memvault.git import repo as git_repo
from memvault.git.commit import ChangedPath, commit, describe

# ---------------------------------------------------------------- what a commit says


def test_a_commit_message_says_what_changed_in_which_vault() -> None:
    message = describe(
        [
            ChangedPath("A", "team/deploy.md"),
            ChangedPath("M", "team/notes/db.md"),
            ChangedPath("A", "team/setup.md"),
            ChangedPath("M", "team/graph.jsonl", added=1, removed=0),
            ChangedPath("M", "team/sessions/standup.md"),
            ChangedPath("M", "team/sessions/standup.history.jsonl"),
            ChangedPath("D", "alice/old.md"),
            ChangedPath("A", "alice/archive/stale.md"),
            ChangedPath("D", "alice/stale.md"),
        ]
    )
    subject, _, body = message.partition("\n\n")
    assert subject == (
        "memvault: alice: 1 memory deleted, 1 memory archived; "
        "team: 3 memories written, 1 graph change, 1 session summary"
    )
    assert "A team/deploy.md" in body.splitlines()


def test_a_commit_of_many_vaults_sums_them_up() -> None:
    changes = [ChangedPath("A", f"v{i}/note.md") for i in range(5)]
    assert describe(changes).startswith("memvault: 5 vaults: 5 memories written\n")


def test_a_long_commit_lists_its_first_paths_and_counts_the_rest() -> None:
    changes = [ChangedPath("A", f"team/n{i:03}.md") for i in range(100)]
    body = describe(changes).partition("\n\n")[2].splitlines()
    assert body[0] == "A team/n000.md" and body[-1].startswith("... and ") and len(body) < 100


# ---------------------------------------------------------------- making the commit


@pytest.mark.skipif(GIT is None, reason="git is not installed")
def test_a_commit_takes_only_the_vaults_own_changes(tmp_path: Path) -> None:
    git_sync(tmp_path, "init", "-b", "main", "repo")
    top = tmp_path / "repo"
    vault = top / "vaults"
    (vault / "team" / ".memvault").mkdir(parents=True)
    (vault / "team" / "note.md").write_text("# Note\n", encoding="utf-8")
    (vault / "team" / ".memvault" / "sidecar.sqlite3").write_text("derived", encoding="utf-8")
    (top / "README.md").write_text("a person's file\n", encoding="utf-8")
    git_sync(top, "add", "README.md")  # staged by a person, for their own commit
    repo = git_repo.find(vault)
    identity = ["-c", "user.name=Ada", "-c", "user.email=ada@example.invalid"]

    assert commit(repo, identity) == "memvault: team: 1 memory written"
    files = git_sync(top, "ls-tree", "-r", "--name-only", "HEAD").stdout.split()
    assert files == ["vaults/team/note.md"]
    assert git_sync(top, "diff", "--cached", "--name-only").stdout.split() == ["README.md"]
    assert git_sync(top, "log", "-1", "--format=%an").stdout.strip() == "Ada"
    assert commit(repo, identity) is None  # nothing changed since: no commit
    assert git_sync(top, "rev-list", "--count", "HEAD").stdout.strip() == "1"
