"""Git fidelity with a real `git`: reads cause no churn, `.memvault/` ignores itself, `.git/` is
never indexed, and files with merge conflict markers are listed, searchable, flagged and never written.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from conftest import Running, wait_for
from gitrepo import GIT, call_ok, git

pytestmark = [pytest.mark.anyio, pytest.mark.skipif(GIT is None, reason="git is not installed")]

TOKEN = "alice"
DEADLINE = 5.0
NOW = datetime.now(UTC).replace(hour=8, minute=0, second=0, microsecond=0)


def iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.000Z")


class SameDayClock:
    """Moves on by a second at every look, and stays within one UTC day: a read that wrote the
    time back to the file would change its bytes, yet the writeback policy's day never ends."""

    def __init__(self) -> None:
        self.ticks = 0

    def __call__(self) -> datetime:
        self.ticks += 1
        return NOW + timedelta(seconds=self.ticks)


def server(**changes: Any) -> dict[str, Any]:
    return {"clock": SameDayClock(), "capacity": 100_000, "access_writeback": "day", **changes}


def hand_note(title: str, body: str, *, accessed: datetime = NOW) -> str:
    return (
        f"---\npriority: P1\ncreatedAt: {iso(accessed)}\nupdatedAt: {iso(accessed)}\n"
        f"lastAccessedAt: {iso(accessed)}\nowner: someone  # unknown key, kept\n---\n# {title}\n\n{body}\n"
    )


async def porcelain(repo: Path) -> str:
    return (await git(repo, "status", "--porcelain", "--untracked-files=all")).stdout


def state_of(srv: Running, token: str = TOKEN) -> Any:
    return srv.app.state.service.registry.states[token]


def hot_hits(srv: Running, query: str, token: str = TOKEN) -> set[str]:
    state = state_of(srv, token)
    with state.mem_lock:
        hits, _ = state.hot.index.search(query, limit=None)
    return {h.id for h in hits}


def hot_ids(srv: Running, token: str = TOKEN) -> set[str]:
    state = state_of(srv, token)
    with state.mem_lock:
        return set(state.hot.memories)


async def settle(srv: Running) -> None:
    """Let the watcher apply what it has seen and any background sweep finish."""
    await wait_for(lambda: srv.app.state.watcher.idle, DEADLINE)
    await srv.app.state.service.idle()


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file outside dot-folders, by relative path."""
    out = {}
    for path in folder.rglob("*"):
        rel = path.relative_to(folder)
        if path.is_file() and not any(part.startswith(".") for part in rel.parts):
            out[rel.as_posix()] = path.read_bytes()
    return out


async def read_everything_repeatedly(srv: Running, session: Any, names: list[str]) -> None:
    for _ in range(3):
        await call_ok(srv, session, "read_memory", query="ferret")
        await call_ok(srv, session, "read_memory", query="gondola lantern")
        await call_ok(srv, session, "read_memory", filenames=names)
        await call_ok(srv, session, "read_memory")
        await call_ok(srv, session, "list_memory_titles")
        await call_ok(srv, session, "search_archive", query="ferret")


# ---------------------------------------------------------------------------- no churn


@pytest.mark.slow
@pytest.mark.parametrize("repo_at", ["vault root", "token folder"])
async def test_reads_after_a_commit_leave_git_status_clean(server_factory, vault_root: Path, repo_at: str):
    folder = vault_root / TOKEN
    folder.mkdir()
    repo = vault_root if repo_at == "vault root" else folder
    await git(repo, "init", "-q")

    async with server_factory(**server()) as srv:
        async with srv.session(TOKEN) as s:
            await call_ok(srv, s, "list_memory_titles")  # loads the token
            await call_ok(
                srv, s, "write_memory", title="Ferret care", content="the ferret eats at noon", priority="P1"
            )
            await call_ok(
                srv, s, "write_memory", title="Gondola", content="the gondola lantern is blue; ferret too"
            )
            await call_ok(
                srv, s, "write_memory", title="Pinned", content="ferret rules", priority="P0", tags=["pets"]
            )
            # Hand-made files: one last read yesterday (written back once, today), one legacy file
            # without frontmatter (migrated once, on first access).
            (folder / "by hand.md").write_text(
                hand_note("By hand", "a ferret note made by hand", accessed=NOW - timedelta(days=1)),
                encoding="utf-8",
            )
            (folder / "legacy.md").write_text(
                "# Legacy\n\nan old ferret note with no frontmatter\n", encoding="utf-8"
            )
            await wait_for(lambda: {"by hand.md", "legacy.md"} <= hot_hits(srv, "ferret"), DEADLINE)
            names = sorted(hot_ids(srv))
            assert len(names) == 5

            # The first reads of the day may write (writeback of the day, the one-time migration).
            await call_ok(srv, s, "read_memory", query="ferret")
            await settle(srv)

        if repo_at == "vault root":
            # A second token in the same repository: its .memvault/ ignores itself as well.
            async with srv.session("bob") as s:
                await call_ok(srv, s, "write_memory", title="Bob", content="bob's ferret")
            await settle(srv)

        await git(repo, "add", "-A")
        await git(repo, "commit", "-q", "-m", "snapshot of memories")
        tracked = (await git(repo, "ls-files")).stdout.splitlines()
        assert not [t for t in tracked if ".memvault" in t], tracked
        assert any(t.endswith("ferret-care.md") for t in tracked), tracked
        assert await porcelain(repo) == ""
        committed = snapshot(folder)

        # Now read everything, many times, the same day: nothing may change.
        async with srv.session(TOKEN) as s:
            await read_everything_repeatedly(srv, s, names)
        await settle(srv)
        assert await porcelain(repo) == ""
        assert snapshot(folder) == committed

    # A restart (cache reload) and more reads: still no churn.
    async with server_factory(**server()) as srv:
        async with srv.session(TOKEN) as s:
            await read_everything_repeatedly(srv, s, names)
        await settle(srv)
    assert await porcelain(repo) == ""
    assert snapshot(folder) == committed
    for gitignore in vault_root.rglob(".memvault/.gitignore"):
        assert gitignore.read_text(encoding="utf-8").strip() == "*"


# ---------------------------------------------------------------------------- .git is never indexed


@pytest.mark.slow
async def test_git_folder_is_never_indexed(server_factory, vault_root: Path):
    folder = vault_root / TOKEN
    folder.mkdir()
    (folder / "visible.md").write_text(
        hand_note("Visible", "an ordinary memory about otters"), encoding="utf-8"
    )
    async with server_factory(**server()) as srv:
        async with srv.session(TOKEN) as s:
            await call_ok(srv, s, "list_memory_titles")  # loads the token; the watcher sees what follows
            await git(folder, "init", "-q")
            await git(folder, "add", "-A")
            await git(folder, "commit", "-q", "-m", "xylocarpcommit in the message only")
            await git(folder, "branch", "vervetbranch")
            await git(folder, "tag", "quetzaltag")
            # Not something git makes, but a markdown file in .git/ is still no memory.
            (folder / ".git" / "info" / "wapitinote.md").write_text(
                hand_note("Inside git", "wapitinote inside the git folder"), encoding="utf-8"
            )
            (folder / "sentinel.md").write_text(
                hand_note("Sentinel", "made after git: dugongbell"), encoding="utf-8"
            )
            await wait_for(lambda: hot_hits(srv, "dugongbell") == {"sentinel.md"}, DEADLINE)
            await settle(srv)
            for word in ("xylocarpcommit", "vervetbranch", "quetzaltag", "wapitinote"):
                assert not hot_hits(srv, word), word
                text = await call_ok(srv, s, "read_memory", query=word)
                assert "No hot memory matches" in text, text
            assert hot_ids(srv) == {"visible.md", "sentinel.md"}

    # A fresh load (folder scan, not watcher events) skips .git/ too.
    async with server_factory(**server()) as srv:
        async with srv.session(TOKEN) as s:
            titles = await call_ok(srv, s, "list_memory_titles")
            assert {line.split("|", 1)[0] for line in titles.splitlines()} == {"visible.md", "sentinel.md"}
            for word in ("xylocarpcommit", "vervetbranch", "quetzaltag", "wapitinote"):
                assert not hot_hits(srv, word), word
    assert await porcelain(folder) == "?? sentinel.md\n"


# ---------------------------------------------------------------------------- conflict markers


@pytest.mark.slow
async def test_merge_conflict_is_listed_searchable_flagged_and_never_written(
    server_factory, vault_root: Path
):
    folder = vault_root / TOKEN
    folder.mkdir()
    path = folder / "deploy.md"
    path.write_text(
        hand_note("Deploy", "The deploy window is monday.\n\nOther facts stay."), encoding="utf-8"
    )
    await git(folder, "init", "-q")
    await git(folder, "add", "-A")
    await git(folder, "commit", "-q", "-m", "base")

    async with server_factory(**server()) as srv:
        async with srv.session(TOKEN) as s:
            await call_ok(srv, s, "list_memory_titles")  # loads the token
            # Two machines edit the same line.
            await git(folder, "checkout", "-q", "-b", "laptop")
            path.write_text(
                hand_note("Deploy", "The deploy window is wednesday quokkaharbor.\n\nOther facts stay."),
                encoding="utf-8",
            )
            await git(folder, "commit", "-q", "-am", "laptop edit")
            await git(folder, "checkout", "-q", "main")
            path.write_text(
                hand_note("Deploy", "The deploy window is thursday narwhalpier.\n\nOther facts stay."),
                encoding="utf-8",
            )
            await git(folder, "commit", "-q", "-am", "desktop edit")
            merge = await git(folder, "merge", "--no-edit", "laptop", check=False)
            assert merge.returncode != 0 and "CONFLICT" in merge.stdout, merge.stdout + merge.stderr
            raw = path.read_bytes()
            assert b"<<<<<<< " in raw and b"\n=======\n" in raw and b">>>>>>> laptop" in raw

            # Both sides of the conflict are searchable.
            await wait_for(
                lambda: (
                    hot_hits(srv, "quokkaharbor") == {"deploy.md"}
                    and hot_hits(srv, "narwhalpier") == {"deploy.md"}
                ),
                DEADLINE,
            )
            titles = await call_ok(srv, s, "list_memory_titles")
            line = next(line for line in titles.splitlines() if line.startswith("deploy.md|"))
            assert "CONFLICT" in line, titles
            text = await call_ok(srv, s, "read_memory", query="quokkaharbor")
            assert "deploy.md" in text and "quokkaharbor" in text and "narwhalpier" in text, text
            assert "CONFLICT" in text.upper(), text
            await call_ok(srv, s, "read_memory", filenames=["deploy.md"])
            await call_ok(srv, s, "read_memory")

            # Writes are refused with a message that says what to do.
            err, text = await srv.call(
                s, "update_memory", filename="deploy.md", content="resolved by the agent"
            )
            assert err, text
            assert "conflict" in text.lower() and "resolve" in text.lower(), text
            err, text = await srv.call(s, "update_memory", filename="deploy.md", priority="P0")
            assert err and "conflict" in text.lower(), text
            err, text = await srv.call(s, "delete_memory", filename="deploy.md")
            assert err and "conflict" in text.lower(), text
            await call_ok(srv, s, "evict_memories")
            await settle(srv)
            assert path.read_bytes() == raw, "a file with conflict markers was written"
            assert await porcelain(folder) == "UU deploy.md\n"

            # A person resolves it: the flag goes, and the server may write it again.
            path.write_text(
                hand_note("Deploy", "The deploy window is thursday narwhalpier.\n\nOther facts stay."),
                encoding="utf-8",
            )
            await git(folder, "commit", "-q", "-am", "resolve")
            await wait_for(lambda: not hot_hits(srv, "quokkaharbor"), DEADLINE)
            titles = await call_ok(srv, s, "list_memory_titles")
            assert "CONFLICT" not in titles, titles
            await call_ok(srv, s, "update_memory", filename="deploy.md", priority="P0")
            assert "owner: someone  # unknown key, kept\n" in path.read_text(encoding="utf-8")


@pytest.mark.slow
async def test_hand_written_conflict_markers_in_a_legacy_file_are_never_migrated(
    server_factory, vault_root: Path
):
    """A file with no frontmatter is normally migrated on first read; not while it holds markers."""
    folder = vault_root / TOKEN
    folder.mkdir()
    raw = (
        b"# Build notes\n\n<<<<<<< HEAD\nuse the ibexcompiler flags\n=======\nuse the default flags\n"
        b">>>>>>> origin/main\n"
    )
    (folder / "build.md").write_bytes(raw)
    async with server_factory(**server()) as srv:
        async with srv.session(TOKEN) as s:
            titles = await call_ok(srv, s, "list_memory_titles")
            assert "build.md|" in titles and "CONFLICT" in titles, titles
            text = await call_ok(srv, s, "read_memory", query="ibexcompiler")
            assert "build.md" in text, text
            await call_ok(srv, s, "read_memory", filenames=["build.md"])
            err, text = await srv.call(s, "update_memory", filename="build.md", title="Build")
            assert err and "conflict" in text.lower(), text
        await settle(srv)
    assert (folder / "build.md").read_bytes() == raw
