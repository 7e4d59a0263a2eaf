"""Scale-out through git: two `memvault serve` processes, each on its own clone of one bare remote,
behind a real nginx with `memvault nginx`'s configuration; one of them dies and comes back."""

from __future__ import annotations

import contextlib
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from commands import MEMVAULT, Server, clean_env, free_port, serving
from conftest import wait_for
from gitrepo import GIT, git_sync
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from nginxrun import NGINX, NO_NGINX, nginx_in_front

pytestmark = [
    pytest.mark.skipif(GIT is None, reason="git is not installed"),
    pytest.mark.skipif(
        NGINX is None,
        reason=NO_NGINX,
    ),
    pytest.mark.slow,
    pytest.mark.anyio,
]

TOKENS = [f"agent{i:02d}" for i in range(8)]


@contextlib.contextmanager
def replica(folder: Path, clone: Path, port: int, git_config: Path) -> Iterator[Server]:
    """``MEMVAULT_SYNC=git memvault serve`` on ``clone``, a process of its own (so it can be killed)."""
    folder.mkdir()
    env = clean_env(
        MEMVAULT_SYNC="git",
        MEMVAULT_SYNC_INTERVAL_SECONDS="1",
        MEMVAULT_EMBEDDER="hash",
        GIT_CONFIG_GLOBAL=str(git_config),  # no git identity of its own, as on a fresh server
        GIT_CONFIG_NOSYSTEM="1",
    )
    argv = [str(MEMVAULT), "serve", "--root", str(clone), "--host", "127.0.0.1", "--port", str(port)]
    with serving(folder, argv, env, port) as server:
        server.wait_healthy()
        yield server


async def call(url: str, tool: str, **args: Any) -> str:
    """One tool call in a session of its own (nginx may send the next one elsewhere)."""
    async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool(tool, args)
        text = "\n".join(c.text for c in result.content if hasattr(c, "text"))
        assert not result.is_error, f"{tool}: {text}"
        return text


async def converged(remote: Path, clones: list[Path], seen: set[str]) -> bool:
    """The remote and every clone at one commit with clean trees; every remote HEAD seen is noted."""

    def check() -> bool:
        heads = [git_sync(remote, "rev-parse", "HEAD", check=False).stdout.strip()]
        seen.add(heads[0])
        for clone in clones:
            heads.append(git_sync(clone, "rev-parse", "HEAD", check=False).stdout.strip())
            if git_sync(clone, "status", "--porcelain").stdout.strip():
                return False
        return bool(heads[0]) and len(set(heads)) == 1

    return await anyio.to_thread.run_sync(check)


def written_by(clone: Path, path: str) -> str:
    """The author of the commit that added ``path``."""
    return git_sync(clone, "log", "--diff-filter=A", "--format=%an", "--", path).stdout.strip()


def memories(clone: Path, token: str) -> set[str]:
    return {p.name for p in (clone / token).glob("*.md")}


async def test_two_replicas_on_their_own_clones_behind_nginx_converge_and_lose_nothing(
    tmp_path: Path,
) -> None:
    git_config = tmp_path / "gitconfig"
    git_config.write_text("[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n", encoding="utf-8")
    remote = tmp_path / "remote.git"
    git_sync(tmp_path, "init", "--bare", "-b", "main", str(remote))
    a, b = tmp_path / "a", tmp_path / "b"
    for clone in (a, b):
        git_sync(tmp_path, "clone", str(remote), str(clone))
    # B's commits name B, so the history says which replica nginx gave each vault; A's carry
    # memvault's default identity.
    git_sync(b, "config", "user.name", "replica b")
    git_sync(b, "config", "user.email", "b@example.invalid")
    port_a, port_b = free_port(), free_port()
    seen: set[str] = set()
    written: dict[str, set[str]] = {token: set() for token in TOKENS}

    async def write(front: str, token: str, title: str) -> None:
        reply = await call(f"{front}/mcp/{token}", "write_memory", title=title, content=f"walrus {title}")
        assert reply.startswith("Saved as "), reply  # acknowledged
        written[token].add(reply.removeprefix("Saved as ").split(" ", 1)[0])

    with replica(tmp_path / "run-a", a, port_a, git_config):
        stop_b = contextlib.ExitStack()
        server_b = stop_b.enter_context(replica(tmp_path / "run-b", b, port_b, git_config))
        with stop_b:
            async with nginx_in_front(
                [f"127.0.0.1:{port_a}", f"127.0.0.1:{port_b}"], tmp_path / "ngx"
            ) as front:
                # Each vault goes to one replica; both clones end up holding every vault.
                for token in TOKENS:
                    await write(front, token, f"First of {token}")
                await wait_for(lambda: converged(remote, [a, b], seen), timeout=60, interval=0.3)
                on_b = [
                    token for token in TOKENS if written_by(b, f"{token}/first-of-{token}.md") == "replica b"
                ]
                assert on_b and len(on_b) < len(TOKENS), on_b  # spread over both
                for token in TOKENS:
                    assert memories(a, token) == memories(b, token) == written[token]

                # B can no longer push; its agents write on (acknowledged, in its clone only); it dies.
                git_sync(b, "remote", "set-url", "origin", str(tmp_path / "unreachable.git"))
                for token in on_b:
                    await write(front, token, f"Late of {token}")
                server_b.process.send_signal(signal.SIGKILL)
                server_b.process.wait(10)
                on_remote = git_sync(remote, "ls-tree", "-r", "--name-only", "main").stdout.split()
                assert not [path for path in on_remote if "/late-of-" in path]  # B's alone, for now

                # nginx sends B's vaults to A, which serves what reached the remote, and takes writes.
                for token in on_b:
                    found = await call(f"{front}/mcp/{token}", "read_memory", query="walrus first")
                    assert f"walrus First of {token}" in found
                    await write(front, token, f"During of {token}")

                # B comes back (its remote reachable again): what it acknowledged arrives, nothing lost.
                git_sync(b, "remote", "set-url", "origin", str(remote))
                with replica(tmp_path / "run-b-again", b, port_b, git_config):
                    await wait_for(lambda: converged(remote, [a, b], seen), timeout=60, interval=0.3)
                    for token in TOKENS:
                        assert memories(a, token) == memories(b, token) == written[token]
                    for token in on_b:  # through nginx, whichever replica answers, all of it
                        found = await call(f"{front}/mcp/{token}", "list_memory_titles")
                        assert all(name in found for name in written[token]), (written[token], found)

    final = git_sync(remote, "rev-parse", "HEAD").stdout.strip()
    for commit in seen:  # the remote's history was never rewritten: no force push
        assert git_sync(remote, "merge-base", "--is-ancestor", commit, final, check=False).returncode == 0
    # A's own commits of its agents' writes, under memvault's identity. Their subject names the
    # vaults (``memvault: agent03: 1 memory written``), or counts them when more than three were
    # in one commit (``memvault: 4 vaults: 4 memories written``, as a slower machine batches them).
    log = git_sync(remote, "log", "--format=%an <%ae>|%s", "main").stdout.splitlines()
    by_a = [subject for line in log if line.startswith("memvault <memvault@localhost>|")
            for subject in [line.split("|", 1)[1]]]  # fmt: skip
    assert any(re.match(r"memvault: (agent\d\d: |\d+ vaults: )\d+ memor", s) for s in by_a), log
