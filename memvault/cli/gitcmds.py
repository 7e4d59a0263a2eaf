"""memvault setup git and memvault merge-file: the merge driver, registered and run as git runs it."""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

from memvault.config import Settings
from memvault.errors import MemvaultError

# What only Claude Code's setup takes: refused with setup git rather than ignored.
CLAUDE_ONLY = ("url", "stdio", "key", "claude_dir", "plugin")


def add_parser(sub: Any) -> None:
    """``merge-file`` (``setup git`` is a choice of cli.setup's parser, run by :func:`command`)."""
    merge = sub.add_parser(
        "merge-file",
        help="git's merge driver for a vault's files (memvault setup git registers it)",
        description="Merge two versions of a vault file against their common base, as git's merge "
        "driver: the result goes into OURS. graph.jsonl merges entry by entry, session summaries keep "
        "every version of both sides, a memory merges field by field and line by line; when two "
        "memory bodies truly conflict, the other version is kept whole as a sibling memory. No "
        "conflict marker is ever written into these files (exit status 0). Other files merge as "
        "`git merge-file` does (exit status 1 with markers on a conflict).",
    )
    merge.add_argument("base", type=Path, help="the common ancestor's version (git's %%O)")
    merge.add_argument("ours", type=Path, help="our version, replaced by the result (git's %%A)")
    merge.add_argument("theirs", type=Path, help="their version (git's %%B)")
    merge.add_argument("path", help="the file's path in the repository (git's %%P)")


def command(settings: Settings, args: argparse.Namespace) -> int:
    if args.command == "merge-file":
        return merge_file(args.base, args.ours, args.theirs, args.path)
    from memvault.git import setup

    given = [f"--{name.replace('_', '-')}" for name in CLAUDE_ONLY if getattr(args, name, None)]
    if given:
        print(
            f"memvault: setup git does not take {', '.join(given)} (options of setup claude-code); "
            "it takes --root, --token, --dry-run and --remove.",
            file=sys.stderr,
        )
        return 2
    root = settings.root  # --root is in the settings already
    if args.token is not None:
        from memvault.cli.maintenance import tokens_of

        if tokens_of(settings, args.token) is None:
            return 2
        root = settings.token_dir(args.token)
    try:
        change = setup.remove if args.remove else setup.install
        done = change(root, dry_run=args.dry_run)
    except MemvaultError as exc:
        print(f"memvault: {exc}", file=sys.stderr)
        return 1
    if not done:
        done = [
            "nothing to change: "
            + (
                "memvault's merge driver is not set up here"
                if args.remove
                else "memvault's merge driver is already set up here"
            )
        ]
    for line in done:
        print(f"dry run, not done: {line}" if args.dry_run and not line.startswith("nothing") else line)
    return 0


def merge_file(base: Path, ours: Path, theirs: Path, path: str) -> int:
    """Git's driver contract: the result into ``ours``; 0 when no marker was written."""
    from memvault.git.merge import kind_of
    from memvault.git.merge import merge_file as merge
    from memvault.git.setup import vault_of

    try:
        sides = [p.read_bytes() for p in (base, ours, theirs)]
    except OSError as exc:
        print(f"memvault merge-file: cannot read a version of {path}: {exc.strerror}", file=sys.stderr)
        return 2
    top = _work_tree()
    memory_id = None
    if kind_of(path) == "memory" and top is not None:
        vault = vault_of(top / path)
        if vault is not None:
            memory_id = (top / path).relative_to(vault).as_posix()
    try:
        merged = merge(sides[0], sides[1], sides[2], path, memory_id=memory_id)
    except Exception as exc:  # ours stays as it was and git reports a conflict: nothing is lost
        print(
            f"memvault merge-file: could not merge {path} ({type(exc).__name__}); left as ours",
            file=sys.stderr,
        )
        return 1
    ours.write_bytes(merged.data)
    for extra, data in merged.extra:
        target = (top or Path.cwd()) / extra  # outside a work tree, PATH is taken from here
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        print(
            f"memvault: {path}: both sides changed the same lines; the other version is kept whole as "
            f"{PurePosixPath(extra).name}",
            file=sys.stderr,
        )
    if kind_of(path) is None:
        return 0 if merged.clean else 1
    return 0


def _work_tree() -> Path | None:
    """The top of the work tree git runs the driver in (None outside one)."""
    try:
        found = subprocess.run(
            ["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return None
    return Path(found.stdout.strip()) if found.returncode == 0 and found.stdout.strip() else None
