"""memvault setup git with a real git: a bare remote, two clones, a person's own git pull."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pytest
from commands import MEMVAULT, clean_env, run
from conftest import run_server
from gitrepo import GIT, call_ok, git_sync

from memvault.config import Settings
from memvault.disk.markdown import has_conflict_markers
from memvault.records.summaryfiles import Version, history_line, paths, read, render_markdown, stored_as

pytestmark = [pytest.mark.skipif(GIT is None, reason="git is not installed"), pytest.mark.slow]

VAULT = "vaults/team"  # a folder inside the repository, as a vault usually is


def entity(name: str, *observations: str) -> str:
    row = {"type": "entity", "name": name, "entityType": "person", "observations": list(observations)}
    return json.dumps(row, separators=(",", ":"))


def relation(source: str, target: str) -> str:
    return json.dumps(
        {"type": "relation", "from": source, "to": target, "relationType": "knows"}, separators=(",", ":")
    )


def setup_git(vault: Path, *more: str) -> str:
    done = run([str(MEMVAULT), "setup", "git", "--root", str(vault), *more], env=clean_env())
    assert done.returncode == 0, done.stderr
    return done.stdout


def two_clones(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path]:
    """A bare remote holding ``files`` in the vault with the driver's .gitattributes, and two
    clones of it, each set up as its user would: ``memvault setup git``."""
    remote = tmp_path / "remote.git"
    git_sync(tmp_path, "init", "--bare", "-b", "main", str(remote))
    a, b = tmp_path / "a", tmp_path / "b"
    git_sync(tmp_path, "clone", str(remote), str(a))
    for name, text in files.items():
        (a / VAULT / name).parent.mkdir(parents=True, exist_ok=True)
        (a / VAULT / name).write_text(text, encoding="utf-8")
    setup_git(a / VAULT)
    git_sync(a, "add", "-A")
    git_sync(a, "commit", "-m", "the vault")
    git_sync(a, "push", "origin", "HEAD:main")
    git_sync(tmp_path, "clone", str(remote), str(b))
    setup_git(b / VAULT)
    return a, b


def concurrently(
    a: Path, b: Path, change_a: Callable[[Path], None], change_b: Callable[[Path], None]
) -> None:
    """Each clone changes and commits; a pushes first; b pulls (a merge) and pushes; a pulls."""
    change_a(a / VAULT)
    git_sync(a, "commit", "-am", "a's change")
    change_b(b / VAULT)
    git_sync(b, "commit", "-am", "b's change")
    git_sync(a, "push", "origin", "HEAD:main")
    pulled = git_sync(b, "pull", "--no-rebase", "origin", "main", check=False)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    git_sync(b, "push", "origin", "HEAD:main")
    git_sync(a, "pull", "--no-rebase", "origin", "main")
    assert git_sync(b, "status", "--porcelain").stdout.strip() == ""


def append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")


def test_a_git_pull_merges_graph_lines_both_clones_appended(tmp_path: Path) -> None:
    graph = entity("ada", "writes code") + "\n" + relation("ada", "ada") + "\n"
    a, b = two_clones(tmp_path, {"graph.jsonl": graph})

    def change_a(vault: Path) -> None:
        append(vault / "graph.jsonl", entity("grace", "wrote a compiler"))

    def change_b(vault: Path) -> None:
        text = (vault / "graph.jsonl").read_text(encoding="utf-8")
        text = text.replace('"writes code"]', '"writes code","likes tea"]')
        (vault / "graph.jsonl").write_text(text + entity("linus", "wrote a kernel") + "\n", encoding="utf-8")

    concurrently(a, b, change_a, change_b)
    for clone in (a, b):
        text = (clone / VAULT / "graph.jsonl").read_text(encoding="utf-8")
        assert not has_conflict_markers(text)
        rows = [json.loads(line) for line in text.splitlines()]
        entities = {r["name"]: r["observations"] for r in rows if r["type"] == "entity"}
        assert entities == {
            "ada": ["writes code", "likes tea"],
            "grace": ["wrote a compiler"],
            "linus": ["wrote a kernel"],
        }
        assert relation("ada", "ada") in text.splitlines()


def test_setup_git_is_idempotent_and_remove_undoes_it(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    git_sync(tmp_path, "init", "-b", "main", str(repo))
    vault = repo / "team"
    vault.mkdir()
    (vault / ".gitattributes").write_text("*.png binary\n", encoding="utf-8")
    config_before = (repo / ".git" / "config").read_text(encoding="utf-8")

    assert "dry run, not done: wrote .gitattributes" in setup_git(vault, "--dry-run")
    assert (vault / ".gitattributes").read_text(encoding="utf-8") == "*.png binary\n"
    assert (repo / ".git" / "config").read_text(encoding="utf-8") == config_before
    assert "gitattributes" in setup_git(vault)
    attributes = (vault / ".gitattributes").read_text(encoding="utf-8")
    assert attributes.startswith("*.png binary\n") and "graph.jsonl merge=memvault" in attributes
    config = (repo / ".git" / "config").read_text(encoding="utf-8")
    assert '[merge "memvault"]' in config and "merge-file %O %A %B %P" in config
    assert "python" not in attributes  # the interpreter's path stays in .git/config, never committed

    assert "already" in setup_git(vault)
    assert (vault / ".gitattributes").read_text(encoding="utf-8") == attributes

    setup_git(vault, "--remove")
    assert (vault / ".gitattributes").read_text(encoding="utf-8") == "*.png binary\n"
    assert (repo / ".git" / "config").read_text(encoding="utf-8").strip() == config_before.strip()


def test_setup_git_is_a_client_of_setup_and_takes_a_token_not_claude_codes_options(tmp_path: Path) -> None:
    helped = run([str(MEMVAULT), "setup", "--help"], env=clean_env())
    assert "{claude-code,git}" in helped.stdout and "memvault setup git --root R" in helped.stdout
    repo = tmp_path / "repo"
    git_sync(tmp_path, "init", "-b", "main", str(repo))
    (repo / "team").mkdir()

    assert "gitattributes" in setup_git(repo, "--token", "team")
    assert "graph.jsonl merge=memvault" in (repo / "team" / ".gitattributes").read_text(encoding="utf-8")
    assert not (repo / ".gitattributes").exists()
    for bad in (["--token", "../team"], ["--token", "nobody"]):
        done = run([str(MEMVAULT), "setup", "git", "--root", str(repo), *bad], env=clean_env())
        assert done.returncode == 2 and "token" in done.stderr and str(tmp_path) not in done.stderr
    done = run([str(MEMVAULT), "setup", "git", "--root", str(repo), "--stdio", "--key", "k"], env=clean_env())
    assert done.returncode == 2
    assert "setup git does not take --stdio, --key" in done.stderr
    assert sorted(p.name for p in repo.iterdir()) == [".git", "team"]  # nothing else written


def test_setup_git_outside_a_repository_says_what_to_do(tmp_path: Path) -> None:
    done = run(
        [str(MEMVAULT), "setup", "git", "--root", str(tmp_path)],
        env=clean_env(GIT_CEILING_DIRECTORIES=str(tmp_path)),
    )
    assert done.returncode == 1
    assert "not inside a git repository" in done.stderr and "git init" in done.stderr
    assert "Traceback" not in done.stderr and str(tmp_path) not in done.stderr


def test_a_git_pull_merges_a_session_summary_appended_on_both_clones(tmp_path: Path) -> None:
    first = Version("standup", 1, "2026-03-01T09:00:00.000Z", "Standup", (), "Monday: planned the week.")
    md, history = paths(Path(), "standup")
    files = {
        str(history): history_line(stored_as(first, None)) + "\n",
        str(md): render_markdown(first, first.ts).decode(),
    }
    a, b = two_clones(tmp_path, files)

    def appender(who: str, minute: int) -> Callable[[Path], None]:
        def change(vault: Path) -> None:
            new = replace(
                first,
                version=2,
                ts=f"2026-03-01T09:{minute:02d}:00.000Z",
                summary=f"{first.summary}\n\n{who}",
            )
            append(vault / history, history_line(stored_as(new, first.summary)))
            (vault / md).write_bytes(render_markdown(new, first.ts))

        return change

    concurrently(a, b, appender("Ada: fixed the build.", 5), appender("Grace: wrote docs.", 9))
    for clone in (a, b):
        found = read(clone / VAULT / md, clone / VAULT / history, mtime_ts=first.ts, stem="standup")
        assert not found.conflicted and not found.unrecorded and not found.stale
        assert found.latest is not None and found.latest.version == 3
        assert (
            found.latest.summary == "Monday: planned the week.\n\nAda: fixed the build.\n\nGrace: wrote docs."
        )


NOTE = (
    "---\npriority: P1\nupdatedAt: 2026-02-01T08:00:00.000Z\ntags: [deploy]\n---\n"
    "# Deploy\n\n## Staging\nmake stage\n\n## Production\nmake prod\n"
)


def test_a_git_pull_merges_a_memory_edited_in_two_sections(tmp_path: Path) -> None:
    a, b = two_clones(tmp_path, {"notes/deploy.md": NOTE})

    def edit(old: str, new: str, updated: str) -> Callable[[Path], None]:
        def change(vault: Path) -> None:
            path = vault / "notes/deploy.md"
            text = path.read_text(encoding="utf-8").replace(old, new)
            path.write_text(text.replace("2026-02-01T08:00:00.000Z", updated), encoding="utf-8")

        return change

    concurrently(
        a,
        b,
        edit("make stage\n", "make stage ENV=staging\n", "2026-02-02T08:00:00.000Z"),
        edit("make prod\n", "make prod\nthen check the dashboards\n", "2026-02-03T08:00:00.000Z"),
    )
    for clone in (a, b):
        text = (clone / VAULT / "notes/deploy.md").read_text(encoding="utf-8")
        assert "make stage ENV=staging\n" in text and "then check the dashboards\n" in text
        assert "updatedAt: 2026-02-03T08:00:00.000Z" in text and not has_conflict_markers(text)


def true_conflict(tmp_path: Path) -> tuple[Path, str]:
    """Both clones rewrite the same lines of a memory, b (updated last) pulls: b, and git's stderr."""
    a, b = two_clones(tmp_path, {"notes/deploy.md": NOTE})
    (a / VAULT / "notes/deploy.md").write_text(NOTE.replace("make stage", "make stage-a"), encoding="utf-8")
    git_sync(a, "commit", "-am", "a's change")
    git_sync(a, "push", "origin", "HEAD:main")
    theirs = NOTE.replace("make stage", "make stage-b").replace("2026-02-01", "2026-02-09")
    (b / VAULT / "notes/deploy.md").write_text(theirs, encoding="utf-8")
    git_sync(b, "commit", "-am", "b's change")

    pulled = git_sync(b, "pull", "--no-rebase", "origin", "main", check=False)
    assert pulled.returncode == 0, pulled.stdout + pulled.stderr
    return b, pulled.stderr


def test_a_git_pull_keeps_both_bodies_of_a_true_conflict_and_no_marker(tmp_path: Path) -> None:
    b, said = true_conflict(tmp_path)
    assert "kept whole as deploy.conflict-" in said
    notes = b / VAULT / "notes"
    theirs = NOTE.replace("make stage", "make stage-b").replace("2026-02-01", "2026-02-09")
    assert (notes / "deploy.md").read_text(encoding="utf-8") == theirs  # updated last: in place
    (sibling,) = notes.glob("deploy.conflict-*.md")
    text = sibling.read_text(encoding="utf-8")
    assert "make stage-a" in text and 'conflictOf: "notes/deploy.md"' in text
    assert not any(has_conflict_markers(p.read_text(encoding="utf-8")) for p in notes.iterdir())
    # The sibling is a new file in the work tree: the next commit (or the sync loop's) takes it.
    assert git_sync(b, "status", "--porcelain").stdout.strip() == f"?? {VAULT}/notes/{sibling.name}"


@pytest.mark.anyio
async def test_a_conflict_copy_is_flagged_by_check_and_list_memory_titles_with_what_to_do(
    tmp_path: Path,
) -> None:
    b, _ = true_conflict(tmp_path)
    (sibling,) = (b / VAULT / "notes").glob("deploy.conflict-*.md")
    vaults, token = (b / VAULT).parent, (b / VAULT).name

    done = run([str(MEMVAULT), "check", "--root", str(vaults)], env=clean_env())
    assert done.returncode == 0, done.stdout + done.stderr  # a note, not an error: both files are fine
    (note,) = [line for line in done.stdout.splitlines() if sibling.name in line]
    assert note.startswith(f"note: {token}/notes/{sibling.name}: the other side's version of notes/deploy.md")
    assert "move what you want to keep into notes/deploy.md, then delete this file" in note
    assert "duplicate title" not in done.stdout  # the copy's title is its memory's, and that is said

    async with run_server(Settings(root=vaults, embedder="hash")) as srv, srv.session(token) as agent:
        rows = {
            line.split("|", 1)[0]: line
            for line in (await call_ok(srv, agent, "list_memory_titles")).splitlines()
        }
    assert "CONFLICT COPY of notes/deploy.md" in rows[f"notes/{sibling.name}"]
    assert (
        "update_memory" in rows[f"notes/{sibling.name}"] and "delete_memory" in rows[f"notes/{sibling.name}"]
    )
    assert "CONFLICT" not in rows["notes/deploy.md"]


def test_merge_file_run_by_hand_writes_into_ours_and_keeps_a_conflict_beside_it(tmp_path: Path) -> None:
    sides = {
        "base": NOTE,
        "ours": NOTE.replace("make prod", "make prod-1"),
        "theirs": NOTE.replace("make prod", "make prod-2"),
    }
    for name, text in sides.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    args = [str(MEMVAULT), "merge-file", "base", "ours", "theirs", "notes/deploy.md"]
    done = run(args, env=clean_env(GIT_CEILING_DIRECTORIES=str(tmp_path)), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    merged = (tmp_path / "ours").read_text(encoding="utf-8")
    (sibling,) = (tmp_path / "notes").glob("deploy.conflict-*.md")
    assert {merged, sibling.read_text(encoding="utf-8").replace('conflictOf: "deploy.md"\n', "")} == {
        sides["ours"],
        sides["theirs"],
    }

    (tmp_path / "a.txt").write_text("1\n", encoding="utf-8")
    (tmp_path / "b.txt").write_text("2\n", encoding="utf-8")
    (tmp_path / "o.txt").write_text("0\n", encoding="utf-8")
    done = run(
        [str(MEMVAULT), "merge-file", "o.txt", "a.txt", "b.txt", "x.txt"], env=clean_env(), cwd=tmp_path
    )
    assert done.returncode == 1  # not a file memvault owns: git's markers, and a conflict
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "<<<<<<< ours\n1\n=======\n2\n>>>>>>> theirs\n"
