"""A real git for the tests: a repository's commands run with a clean configuration, off the loop."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import anyio.to_thread
from conftest import Running

GIT = shutil.which("git")


def git_sync(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    assert GIT is not None
    env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
    }
    config = [
        "-c", "user.name=Memvault Test",
        "-c", "user.email=test@example.invalid",
        "-c", "commit.gpgsign=false",
        "-c", "init.defaultBranch=main",
        "-c", "core.autocrlf=false",
        "-c", "merge.conflictStyle=merge",
    ]  # fmt: skip
    result = subprocess.run(
        [GIT, *config, *args], cwd=repo, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"git {' '.join(args)} failed ({result.returncode}):\n{result.stdout}{result.stderr}"
        )
    return result


async def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """Run git off the event loop, so the server keeps serving (and watching) meanwhile."""
    return await anyio.to_thread.run_sync(lambda: git_sync(repo, *args, check=check))


async def call_ok(srv: Running, session: Any, tool: str, **args: Any) -> str:
    err, text = await srv.call(session, tool, **args)
    assert not err, f"{tool}: {text}"
    return text
