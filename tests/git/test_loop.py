"""The git sync loop with a real git: a bare remote on disk, clones of it, the loop's own syncs, and
servers that sync through the remote while agents write."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shlex
import stat
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import httpx2
import pytest
from commands import MEMVAULT, clean_env, run
from conftest import Running, run_server, wait_for
from gitrepo import GIT, call_ok, git_sync

from memvault.config import Settings
from memvault.disk.markdown import has_conflict_markers
from memvault.errors import SyncFailed
from memvault.git import repo as git_repo
from memvault.git.loop import LOOK_EVERY, SyncLoop, SyncTarget, merge, sync_vault

pytestmark = [
    pytest.mark.skipif(GIT is None, reason="git is not installed"),
    pytest.mark.slow,
    pytest.mark.anyio,
]


@pytest.fixture(autouse=True)
def no_git_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A user with no git identity of their own (as on a fresh server), whatever this machine has."""
    config = tmp_path / "gitconfig"
    config.write_text("[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n", encoding="utf-8")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def clones(tmp_path: Path, *names: str, vault: str = "") -> tuple[Path, list[Path]]:
    """A bare remote and clones of it; each clone's vault folder (the clone itself, or ``vault`` in it)."""
    remote = tmp_path / "remote.git"
    git_sync(tmp_path, "init", "--bare", "-b", "main", str(remote))
    roots = []
    for name in names:
        git_sync(tmp_path, "clone", str(remote), str(tmp_path / name))
        root = tmp_path / name / vault if vault else tmp_path / name
        root.mkdir(parents=True, exist_ok=True)
        roots.append(root)
    return remote, roots


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def entity(name: str, *observations: str) -> str:
    row = {"type": "entity", "name": name, "entityType": "person", "observations": list(observations)}
    return json.dumps(row)


def head(repo: Path, ref: str = "HEAD") -> str:
    return git_sync(repo, "rev-parse", ref).stdout.strip()


def tracked(repo: Path) -> list[str]:
    """The files HEAD holds."""
    return git_sync(repo, "ls-tree", "-r", "--name-only", "HEAD").stdout.split()


# ---------------------------------------------------------------- one sync


def test_two_clones_converge_and_concurrent_graph_lines_merge(tmp_path: Path) -> None:
    remote, (a, b) = clones(tmp_path, "a", "b")
    write(a / "team" / "one.md", "# One\n\nfrom a\n")
    write(a / "team" / "graph.jsonl", entity("ada", "from a") + "\n")
    first = sync_vault(a)
    assert first.pushed and first.committed and first.committed.startswith("memvault: team: 1 memory written")
    write(b / "team" / "two.md", "# Two\n\nfrom b\n")
    write(b / "team" / "graph.jsonl", entity("grace", "from b") + "\n")
    assert sync_vault(b).pushed  # its own history met a's at the merge: nothing replaced
    sync_vault(a)

    assert head(a) == head(b) == head(remote)
    for clone in (a, b):
        assert (clone / "team" / "one.md").exists() and (clone / "team" / "two.md").exists()
        graph = (clone / "team" / "graph.jsonl").read_text(encoding="utf-8")
        assert not has_conflict_markers(graph)
        assert {json.loads(line)["name"] for line in graph.splitlines()} == {"ada", "grace"}
        assert git_sync(clone, "status", "--porcelain").stdout == ""


def test_a_sync_commits_only_the_vault_and_never_its_derived_state(tmp_path: Path) -> None:
    _, (root,) = clones(tmp_path, "a", vault="vaults")
    clone = root.parent
    write(root / "team" / "note.md", "# Note\n")
    write(root / "team" / ".memvault" / "sidecar.sqlite3", "derived")
    write(root / "team" / ".note.md.1234.tmp", "a write in flight")
    write(clone / "README.md", "a person's file outside the vault\n")
    git_sync(clone, "add", "README.md")  # staged by the person, for their own commit

    sync_vault(root)

    assert sorted(tracked(clone)) == ["vaults/.gitattributes", "vaults/team/note.md"]
    assert git_sync(clone, "diff", "--cached", "--name-only").stdout.split() == ["README.md"]


def test_commits_go_through_under_a_default_identity_or_the_configured_one(tmp_path: Path) -> None:
    _, (a,) = clones(tmp_path, "a")
    write(a / "team" / "note.md", "# Note\n")
    sync_vault(a)
    assert git_sync(a, "log", "-1", "--format=%an <%ae>").stdout.strip() == "memvault <memvault@localhost>"

    git_sync(a, "config", "user.name", "Ada Lovelace")
    git_sync(a, "config", "user.email", "ada@example.invalid")
    write(a / "team" / "second.md", "# Second\n")
    sync_vault(a)
    author = git_sync(a, "log", "-1", "--format=%an <%ae>").stdout.strip()
    assert author == "Ada Lovelace <ada@example.invalid>"


def test_a_deletion_against_an_edit_keeps_the_edit(tmp_path: Path) -> None:
    remote, (a, b) = clones(tmp_path, "a", "b")
    write(a / "team" / "note.txt", "first\n")
    sync_vault(a)
    sync_vault(b)
    (a / "team" / "note.txt").unlink()
    sync_vault(a)
    write(b / "team" / "note.txt", "first\nand an edit\n")

    outcome = sync_vault(b)

    assert outcome.kept == ("team/note.txt",) and outcome.pushed
    sync_vault(a)
    for clone in (a, b):
        assert (clone / "team" / "note.txt").read_text(encoding="utf-8") == "first\nand an edit\n"
    assert head(a) == head(b) == head(remote)


def test_writes_between_a_syncs_commit_and_its_merge_are_merged_or_left_then_committed(
    tmp_path: Path,
) -> None:
    _, (a, b) = clones(tmp_path, "a", "b")
    write(a / "team" / "graph.jsonl", entity("ada", "base") + "\n")
    sync_vault(a)
    sync_vault(b)
    write(a / "team" / "graph.jsonl", entity("ada", "base", "from a") + "\n")
    sync_vault(a)
    # b's sync has committed and fetched; its server writes on before the merge begins.
    repo = git_repo.find(b)
    target = SyncTarget.of(repo)
    repo.run("fetch", "--quiet", target.remote)
    write(b / "team" / "graph.jsonl", entity("ada", "base", "from b") + "\n")  # a file the merge changes
    write(b / "team" / "new.md", "# New\n\nwritten during the sync\n")  # one it leaves alone

    brought, kept = merge(repo, b, target)
    assert brought and not kept

    graph = json.loads((b / "team" / "graph.jsonl").read_text(encoding="utf-8"))
    assert set(graph["observations"]) == {"base", "from a", "from b"}
    assert (b / "team" / "new.md").read_text(encoding="utf-8") == "# New\n\nwritten during the sync\n"
    assert git_sync(b, "status", "--porcelain").stdout == ""  # both committed
    assert {"team/graph.jsonl", "team/new.md"} <= set(tracked(b))


def test_a_conflict_memvault_cannot_settle_aborts_the_merge_and_names_the_file(tmp_path: Path) -> None:
    remote, (a, b) = clones(tmp_path, "a", "b", vault="vaults")
    write(a / "team" / "table.csv", "x,1\n")
    sync_vault(a)
    sync_vault(b)
    write(a / "team" / "table.csv", "x,2\n")
    sync_vault(a)
    write(b / "team" / "table.csv", "x,3\n")

    with pytest.raises(SyncFailed) as failed:
        sync_vault(b)

    assert "team/table.csv" in failed.value.message and "aborted" in failed.value.message
    assert str(tmp_path) not in failed.value.message
    clone = b.parent
    assert not (clone / ".git" / "MERGE_HEAD").exists()
    assert (b / "team" / "table.csv").read_text(encoding="utf-8") == "x,3\n"  # nothing lost
    assert git_sync(clone, "show", "HEAD:vaults/team/table.csv").stdout == "x,3\n"  # committed, kept
    assert git_sync(clone, "status", "--porcelain").stdout == ""
    assert head(remote) == head(a.parent)  # the remote was left as it was


def test_a_rejected_push_fetches_merges_and_tries_again_never_forcing(tmp_path: Path) -> None:
    remote, (a, b) = clones(tmp_path, "a", "b")
    write(a / "team" / "base.md", "# Base\n")
    sync_vault(a)
    sync_vault(b)
    write(b / "team" / "from-b.md", "# From b\n")
    git_sync(b, "add", "-A")
    git_sync(b, "commit", "-m", "b's own commit")
    # a's first push meets a remote that moved after a fetched: b pushes just before it.
    hook = a / ".git" / "hooks" / "pre-push"
    once = tmp_path / "pushed-once"
    hook.write_text(
        f'#!/bin/sh\n[ -e "{once}" ] && exit 0\ntouch "{once}"\n'
        f'cd "{b}" && env -u GIT_DIR git push -q origin HEAD:main\n',
        encoding="utf-8",
    )
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR)
    b_commit = head(b)
    write(a / "team" / "from-a.md", "# From a\n")

    outcome = sync_vault(a)

    assert outcome.pushed and outcome.merged >= 1
    assert head(remote) == head(a)
    assert git_sync(a, "merge-base", "--is-ancestor", b_commit, head(remote), check=False).returncode == 0
    assert (a / "team" / "from-b.md").exists()


def test_a_half_done_merge_of_a_person_is_left_alone(tmp_path: Path) -> None:
    _, (a,) = clones(tmp_path, "a")
    write(a / "team" / "note.md", "# Note\n")
    sync_vault(a)
    (a / ".git" / "MERGE_HEAD").write_text(head(a) + "\n", encoding="utf-8")
    write(a / "team" / "later.md", "# Later\n")

    with pytest.raises(SyncFailed, match="a merge is in progress"):
        sync_vault(a)
    assert "team/later.md" not in tracked(a)


def test_a_remote_that_is_gone_fails_without_paths_or_credentials(tmp_path: Path) -> None:
    remote, (a,) = clones(tmp_path, "a")
    write(a / "team" / "note.md", "# Note\n")
    remote.rename(tmp_path / "elsewhere.git")

    with pytest.raises(SyncFailed) as failed:
        sync_vault(a)

    assert "git fetch failed" in failed.value.message and str(tmp_path) not in failed.value.message
    assert "team/note.md" in tracked(a)  # committed locally all the same


def test_memvault_sync_once_says_what_it_did_and_why_it_failed(tmp_path: Path) -> None:
    remote, (a, b) = clones(tmp_path, "a", "b", vault="memories")
    write(a / "team" / "note.md", "# Note\n\nfrom a\n")
    done = run([str(MEMVAULT), "sync", "--once", "--root", str(a)], env=clean_env())
    assert done.returncode == 0, done.stderr
    assert "committed (memvault: team: 1 memory written" in done.stdout and "pushed" in done.stdout
    assert head(a.parent) == head(remote)

    remote.rename(tmp_path / "gone.git")
    done = run([str(MEMVAULT), "sync", "--once", "--root", str(b)], env=clean_env())
    assert done.returncode == 1
    assert done.stderr.startswith("memvault: sync failed: git fetch failed")
    assert str(tmp_path) not in done.stderr and "Traceback" not in done.stderr


# ---------------------------------------------------------------- the loop


async def test_the_loop_logs_a_change_of_state_once_not_every_attempt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    remote, (a,) = clones(tmp_path, "a")
    write(a / "team" / "note.md", "# Note\n")
    away = tmp_path / "away.git"
    remote.rename(away)
    loop = SyncLoop(a, 0.1, debounce=0.1)
    caplog.set_level(logging.INFO, logger="memvault")
    loop.start()
    try:
        await wait_for(lambda: loop.syncs >= 4, timeout=30)
        assert loop.status().state == "failing"
        away.rename(remote)
        await wait_for(lambda: loop.status().state == "ok", timeout=30)
        synced = loop.syncs
        await wait_for(lambda: loop.syncs >= synced + 3, timeout=30)
    finally:
        await anyio.to_thread.run_sync(loop.stop)
    said = [r.getMessage() for r in caplog.records if r.name == "memvault" and "git sync" in r.getMessage()]
    assert len([m for m in said if m.startswith("git sync failing")]) == 1
    assert len([m for m in said if m == "git sync works again"]) == 1
    assert head(a) == head(remote)


def command_of(argv: list[str]) -> str:
    """git's command in its arguments: the first word that is no option (nor an option's value)."""
    words = iter(argv)
    for word in words:
        if word in ("-c", "-C"):
            next(words, None)
        elif not word.startswith("-"):
            return word
    return ""


async def test_an_idle_vaults_sync_is_one_git_call_to_the_remote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    remote, (a,) = clones(tmp_path, "a")
    write(a / "team" / "note.md", "# Note\n")
    sync_vault(a)
    calls = tmp_path / "git-calls"
    shim = tmp_path / "bin" / "git"
    shim.parent.mkdir()
    assert GIT is not None
    log, real = shlex.quote(str(calls)), shlex.quote(GIT)
    shim.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {real} "$@"\n', encoding="utf-8")
    shim.chmod(0o755)
    monkeypatch.setenv("PATH", f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    loop = SyncLoop(a, 0.2)
    loop.start()
    try:
        await wait_for(lambda: loop.syncs >= 2, timeout=30)  # the first reads the repository
        calls.write_text("", encoding="utf-8")
        synced = loop.syncs
        await wait_for(lambda: loop.syncs >= synced + 5, timeout=30)
        done = loop.syncs - synced
        made = [command_of(line.split()) for line in calls.read_text(encoding="utf-8").splitlines()]
    finally:
        await anyio.to_thread.run_sync(loop.stop)
    assert loop.status().state == "ok"
    # A sync may be under way when counting starts or ends: at most one more sync's calls. Each
    # asks the remote (fetch); the files are looked at (status) once in LOOK_EVERY idle syncs; with
    # nothing new on either side nothing is counted again (rev-list).
    assert 0 < made.count("fetch") <= done + 1  # the remote is asked once a sync
    assert made.count("status") <= 2, made
    assert len(made) <= (done + 1) + 2, made
    assert not {"push", "add", "commit", "config", "rev-list"} & set(made)
    assert head(a) == head(remote)


async def test_an_edit_nobody_announced_is_still_committed_within_a_few_intervals(tmp_path: Path) -> None:
    # A person's edit in a vault the server does not watch (not loaded, nobody listening): no
    # change is announced, and the idle syncs that skip the look at the files must not lose it.
    remote, (a,) = clones(tmp_path, "a")
    write(a / "team" / "note.md", "# Note\n")
    sync_vault(a)
    loop = SyncLoop(a, 0.1)
    loop.start()
    try:
        await wait_for(lambda: loop.syncs >= LOOK_EVERY + 2, timeout=60)  # idle, past a look
        write(a / "team" / "by-hand.md", "# By hand\n")

        def pushed() -> bool:
            return head(a) == head(remote) and not git_sync(a, "status", "--porcelain").stdout.strip()

        await wait_for(pushed, timeout=60)
    finally:
        await anyio.to_thread.run_sync(loop.stop)
    assert "team/by-hand.md" in git_sync(a, "log", "-1", "--name-only").stdout


async def test_a_change_is_synced_soon_without_waiting_for_the_interval(tmp_path: Path) -> None:
    remote, (a,) = clones(tmp_path, "a")
    loop = SyncLoop(a, 3600, debounce=0.1)
    loop.start()
    try:
        await wait_for(lambda: loop.status().state == "ok", timeout=30)  # the first sync, at start
        write(a / "team" / "note.md", "# Note\n")
        loop.soon()
        await wait_for(lambda: "team/note.md" in tracked(remote), timeout=30, interval=0.1)
    finally:
        await anyio.to_thread.run_sync(loop.stop)


# ---------------------------------------------------------------- servers syncing through a remote

INTERVAL = 1.0  # seconds: MEMVAULT_SYNC_INTERVAL_SECONDS of the served clones


@contextlib.asynccontextmanager
async def served(root: Path) -> AsyncIterator[Running]:
    """``MEMVAULT_SYNC=git memvault serve`` on ``root``, syncing every second."""
    settings = Settings(root=root, sync="git", sync_interval_seconds=INTERVAL, embedder="hash")
    async with run_server(settings) as srv:
        yield srv


async def sync_state(srv: Running) -> dict[str, Any]:
    async with httpx2.AsyncClient() as client:
        body = (await client.get(f"{srv.url}/healthz")).json()
    return dict(body["sync"])


async def git_out(repo: Path, *args: str) -> str:
    done = await anyio.to_thread.run_sync(lambda: git_sync(repo, *args, check=False))
    return str(done.stdout).strip() if done.returncode == 0 else ""


def files_with_markers(clone: Path) -> list[str]:
    found = []
    for path in clone.rglob("*"):
        rel = path.relative_to(clone)
        if path.is_file() and not any(part in (".git", ".memvault") for part in rel.parts):
            if has_conflict_markers(path.read_text(encoding="utf-8", errors="replace")):
                found.append(rel.as_posix())
    return found


async def test_a_write_succeeds_locally_whatever_the_remote_does(tmp_path: Path) -> None:
    remote, (a,) = clones(tmp_path, "a")
    remote.rename(tmp_path / "gone.git")
    async with served(a) as srv, srv.session("team") as agent:
        assert "Saved as first.md" in await call_ok(srv, agent, "write_memory", title="First", content="kept")
        state = await wait_for(lambda: _failing(srv), timeout=10 * INTERVAL + 10, interval=0.1)
        assert "git fetch failed" in state["error"] and str(tmp_path) not in state["error"]
        assert state["last_ok"] is None

        replies: list[str] = []

        async def warned() -> bool:
            replies.append(
                await call_ok(srv, agent, "write_memory", title=f"Note {len(replies)}", content="more")
            )
            return "has not synced with git" in replies[-1]

        await wait_for(warned, timeout=10 * INTERVAL + 10, interval=0.2)
        assert all(reply.startswith("Saved as ") for reply in replies)  # every write went through
        assert str(tmp_path) not in replies[-1]
        again = await call_ok(srv, agent, "write_memory", title="After the note", content="quiet")
        assert "has not synced" not in again  # said once, not with every write
        stats = await call_ok(srv, agent, "memory_stats")
        assert "has not synced with git" in stats and "git fetch failed" in stats
    written = {p.name for p in (a / "team").glob("*.md")}
    assert {"first.md", "after-the-note.md"} <= written and len(written) == len(replies) + 2
    assert "team/after-the-note.md" in tracked(a)  # committed locally all the same


async def _failing(srv: Running) -> dict[str, Any] | None:
    state = await sync_state(srv)
    return state if state["state"] == "failing" else None


async def _converged(remote: Path, clones: list[Path], seen: set[str]) -> bool:
    """Both clones and the remote at one commit, with clean trees; every remote HEAD seen is noted."""
    heads = [await git_out(remote, "rev-parse", "HEAD")]
    seen.add(heads[0])
    for clone in clones:
        heads.append(await git_out(clone, "rev-parse", "HEAD"))
        if await git_out(clone, "status", "--porcelain") != "":
            return False
    return bool(heads[0]) and len(set(heads)) == 1


async def test_two_served_clones_converge_without_losing_a_write(tmp_path: Path) -> None:
    remote, (a, b) = clones(tmp_path, "a", "b")
    seen: set[str] = set()
    async with served(a) as srv_a, served(b) as srv_b:
        async with srv_a.session("team") as agent_a, srv_b.session("team") as agent_b:

            async def work(srv: Running, agent: Any, side: str) -> list[str]:
                saved = []
                for n in range(3):
                    reply = await call_ok(
                        srv, agent, "write_memory", title=f"{side} note {n}", content=f"written on {side}"
                    )
                    saved.append(reply.removeprefix("Saved as ").split(" ", 1)[0])
                entities = [{"name": "Ada", "entityType": "person", "observations": [f"met on {side}"]}]
                entities.append({"name": f"Host {side}", "entityType": "machine", "observations": []})
                await call_ok(srv, agent, "create_entities", entities=entities)
                await call_ok(
                    srv,
                    agent,
                    "add_observations",
                    observations=[{"entityName": "Ada", "contents": [f"likes {side}"]}],
                )
                await call_ok(srv, agent, "upsert_summary", sessionId="standup", summary=f"{side} says hi")
                return saved

            sections = "## One\n\nfirst\n\n## Two\n\nsecond\n"
            await call_ok(srv_a, agent_a, "write_memory", title="Shared", content=sections)
            await call_ok(srv_a, agent_a, "write_memory", title="Contested", content="the first words")
            saved_a, saved_b = await asyncio.gather(work(srv_a, agent_a, "a"), work(srv_b, agent_b, "b"))
            write(a / "team" / "by-hand.md", "# By hand\n\nA person's note.\n")

            await wait_for(lambda: _converged(remote, [a, b], seen), timeout=90, interval=0.5)
            for clone in (a, b):
                assert files_with_markers(clone) == []
                names = {p.relative_to(clone / "team").as_posix() for p in (clone / "team").rglob("*.md")}
                assert set(saved_a) | set(saved_b) | {"by-hand.md"} <= names
                lines = (clone / "team" / "graph.jsonl").read_text(encoding="utf-8").splitlines()
                graph = [json.loads(line) for line in lines]
                ada = next(row for row in graph if row.get("name") == "Ada")
                assert {"met on a", "met on b", "likes a", "likes b"} <= set(ada["observations"])
            # What a pull brought reached each server's index, as any outside edit does.
            for srv, agent, other in ((srv_a, agent_a, saved_b), (srv_b, agent_b, saved_a)):
                titles = await call_ok(srv, agent, "list_memory_titles")
                assert all(name in titles for name in other)
                graph_text = await call_ok(srv, agent, "open_nodes", names=["Ada"])
                assert "likes a" in graph_text and "likes b" in graph_text
                history = await call_ok(srv, agent, "get_session_history", sessionId="standup")
                assert "a says hi" in history and "b says hi" in history
            assert (await sync_state(srv_a))["state"] == (await sync_state(srv_b))["state"] == "ok"

            # Two sections of one memory, and both bodies of another, changed on both sides at once.
            async def edit(srv: Running, agent: Any, side: str, section: str) -> None:
                shared = {"filename": "shared.md", "section": section, "content": side}
                await call_ok(srv, agent, "update_memory", **shared)
                await call_ok(srv, agent, "update_memory", filename="contested.md", content=f"by {side}")

            await asyncio.gather(edit(srv_a, agent_a, "a", "## One"), edit(srv_b, agent_b, "b", "## Two"))
            await wait_for(lambda: _converged(remote, [a, b], seen), timeout=90, interval=0.5)
            for clone in (a, b):
                assert files_with_markers(clone) == []
                shared = (clone / "team" / "shared.md").read_text(encoding="utf-8")
                assert "## One\n\na\n" in shared and "## Two\n\nb\n" in shared
                both = [p.read_text(encoding="utf-8") for p in (clone / "team").glob("contested*.md")]
                assert any("by a" in text for text in both) and any("by b" in text for text in both)
            # The memory stays writable, on either side.
            await call_ok(srv_b, agent_b, "update_memory", filename="contested.md", append="settled")
    final = await git_out(remote, "rev-parse", "HEAD")
    for commit in seen:  # the remote's history was never rewritten
        assert git_sync(remote, "merge-base", "--is-ancestor", commit, final, check=False).returncode == 0


async def test_a_remote_that_goes_away_shows_failing_and_catches_up_when_back(tmp_path: Path) -> None:
    remote, (a, b) = clones(tmp_path, "a", "b")
    async with served(a) as srv_a, served(b) as srv_b:
        async with srv_a.session("team") as agent_a, srv_b.session("team") as agent_b:
            await call_ok(srv_a, agent_a, "write_memory", title="Before", content="the remote went away")
            await wait_for(lambda: (b / "team" / "before.md").exists(), timeout=30, interval=0.2)

            away = tmp_path / "away.git"
            await anyio.to_thread.run_sync(remote.rename, away)
            state = await wait_for(lambda: _failing(srv_a), timeout=10 * INTERVAL + 10, interval=0.2)
            assert state["error"] and str(tmp_path) not in state["error"]
            await call_ok(srv_a, agent_a, "write_memory", title="Meanwhile", content="written while away")

            await anyio.to_thread.run_sync(away.rename, remote)

            async def ok_again() -> bool:
                return (await sync_state(srv_a))["state"] == "ok"

            await wait_for(ok_again, timeout=10 * INTERVAL + 10, interval=0.2)
            await wait_for(lambda: (b / "team" / "meanwhile.md").exists(), timeout=30, interval=0.2)

            async def found() -> bool:
                said = await call_ok(srv_b, agent_b, "read_memory", query="written while away")
                return "meanwhile.md" in said

            await wait_for(found, timeout=10, interval=0.2)


async def test_a_big_pull_reaches_the_other_servers_search(tmp_path: Path) -> None:
    _, (a, b) = clones(tmp_path, "a", "b")
    count = 1000
    async with served(b) as srv_b, srv_b.session("team") as agent_b:
        await call_ok(srv_b, agent_b, "write_memory", title="Already here", content="loaded first")
        for n in range(count):  # another machine, its memories copied in by a person, synced once
            write(a / "team" / "bulk" / f"note-{n:04d}.md", f"# Bulk {n}\n\nbulkword{n:04d}\n")
        await anyio.to_thread.run_sync(sync_vault, a)

        async def all_there() -> bool:
            stats = await call_ok(srv_b, agent_b, "memory_stats")
            return stats.startswith(f"Memories: {count + 1} hot")

        await wait_for(all_there, timeout=60, interval=0.5)
        for n in (0, count // 2, count - 1):
            found = await call_ok(srv_b, agent_b, "read_memory", query=f"bulkword{n:04d}")
            assert f"bulk/note-{n:04d}.md" in found


async def test_a_served_write_reaches_the_remote_long_before_the_interval(tmp_path: Path) -> None:
    remote, (a,) = clones(tmp_path, "a")
    settings = Settings(root=a, sync="git", sync_interval_seconds=3600, embedder="hash")
    async with run_server(settings) as srv, srv.session("team") as agent:
        await wait_for(lambda: _synced(srv), timeout=30, interval=0.1)
        await call_ok(srv, agent, "write_memory", title="Soon", content="pushed a moment after the write")
        await wait_for(lambda: "team/soon.md" in tracked(remote), timeout=30, interval=0.2)
        state = await sync_state(srv)
        assert (state["state"], state["ahead"], state["behind"], state["error"]) == ("ok", 0, 0, None)


async def _synced(srv: Running) -> bool:
    return (await sync_state(srv))["state"] == "ok"


@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_what_a_pull_brings_reaches_a_subscribed_client(tmp_path: Path) -> None:
    from mcp.client.client import Client
    from mcp.types import ResourceUpdatedNotification

    remote, (a, b) = clones(tmp_path, "a", "b")
    write(a / "team" / "deploy.md", "# Deploy\n\nPostgres on Fridays.\n")
    write(a / "team" / "graph.jsonl", entity("ada", "from a") + "\n")
    sync_vault(a)
    sync_vault(b)
    heard: list[str] = []

    async def handler(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            heard.append(message.params.uri)

    async with served(a) as srv:
        async with Client(srv.mcp_url("team"), mode="legacy", message_handler=handler) as client:
            for uri in ("memvault://memories/deploy.md", "memory://knowledge-graph"):
                await client.subscribe_resource(uri)
            await wait_for(lambda: _synced(srv), timeout=30, interval=0.1)
            write(b / "team" / "deploy.md", "# Deploy\n\nPostgres on Mondays.\n")
            write(b / "team" / "graph.jsonl", entity("ada", "from a", "from b") + "\n")
            await anyio.to_thread.run_sync(sync_vault, b)  # another machine pushes

            wanted = {"memvault://memories/deploy.md", "memory://knowledge-graph"}
            await wait_for(lambda: wanted <= set(heard), timeout=10 * INTERVAL + 10, interval=0.1)
            read = await client.read_resource("memvault://memories/deploy.md")
            assert "Mondays" in str(read.contents)
    assert head(a) == head(remote)
