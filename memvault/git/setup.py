"""Registering the merge driver: the vault's .gitattributes and the repository's merge.memvault config.

``.gitattributes`` (in the vault, committed, the same on every clone) names the files memvault
merges; the command that merges them (this interpreter's absolute path) goes only into the
repository's own ``.git/config``, which no commit carries. Both are written idempotently between
lines memvault recognises, so ``remove`` takes out exactly what ``install`` put in. The vault may be
the repository's root or a folder inside it.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from memvault.disk.files import atomic_write
from memvault.errors import InvalidArgument

ATTRIBUTES = ".gitattributes"
DRIVER = "memvault"
BEGIN = "# memvault's merge driver (memvault setup git; --remove takes these lines out)"
END = "# end of memvault's lines"
# A pattern without a slash matches at any depth; "**/" lets the sessions' match at any depth too,
# so one file serves a token's folder or the folder of every token.
PATTERNS = ("graph.jsonl", "**/sessions/*.history.jsonl", "**/sessions/*.md", "*.md")
NAME = "memvault: graph, session summaries and memories merged without conflict markers"


def block() -> list[str]:
    return [BEGIN, *(f"{pattern} merge={DRIVER}" for pattern in PATTERNS), END]


def driver_command() -> str:
    """What git runs to merge: this interpreter, absolute, so the driver is the memvault installed
    here whatever PATH git sees."""
    return f"{shlex.quote(sys.executable)} -m memvault merge-file %O %A %B %P"


def _git(folder: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    git = shutil.which("git")
    if git is None:
        raise InvalidArgument("git is not installed (or not on PATH); install git, then run this again.")
    result = subprocess.run([git, *args], cwd=folder, capture_output=True, text=True, timeout=60, check=False)
    if check and result.returncode != 0:
        raise InvalidArgument(f"git {args[0]} failed: {result.stderr.strip() or result.stdout.strip()}")
    return result


def repository_of(root: Path) -> Path:
    """The top of the git work tree holding ``root``."""
    if not root.is_dir():
        raise InvalidArgument(f"The vault folder {root.name!r} does not exist; pass the vault's --root.")
    found = _git(root, "rev-parse", "--show-toplevel", check=False)
    if found.returncode != 0:
        raise InvalidArgument(
            f"The vault folder {root.name!r} is not inside a git repository; run `git init` there "
            "(or clone the vault's remote) first."
        )
    return Path(found.stdout.strip())


def _without_block(lines: list[str]) -> list[str]:
    out: list[str] = []
    inside = False
    for line in lines:
        if line == BEGIN:
            inside = True
        elif inside and line == END:
            inside = False
        elif not inside:
            out.append(line)
    return out


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return []


def install(root: Path, *, dry_run: bool = False) -> list[str]:
    """Register the driver for the vault at ``root``; what changed (or, with ``dry_run``, would),
    one line each (none: it already was)."""
    root = root.resolve()
    repository_of(root)
    done: list[str] = []
    path = root / ATTRIBUTES
    old = _read_lines(path)
    kept = _without_block(old)
    new = [*kept, *([""] if kept and kept[-1].strip() else []), *block()] if kept else block()
    if new != old:
        if not dry_run:
            atomic_write(path, ("\n".join(new) + "\n").encode("utf-8"), mode=0o644)
        done.append(f"wrote {ATTRIBUTES} in the vault (commit it: every clone then merges the same way)")
    for key, value in (("name", NAME), ("driver", driver_command())):
        current = _git(root, "config", "--local", "--get", f"merge.{DRIVER}.{key}", check=False)
        if current.returncode != 0 or current.stdout.rstrip("\n") != value:
            if not dry_run:
                _git(root, "config", "--local", f"merge.{DRIVER}.{key}", value)
            done.append(f"set merge.{DRIVER}.{key} in the repository's .git/config")
    return done


def remove(root: Path, *, dry_run: bool = False) -> list[str]:
    """Undo :func:`install`: memvault's lines out of .gitattributes (the file goes when nothing
    else is left in it) and merge.memvault out of the repository's config."""
    root = root.resolve()
    repository_of(root)
    done: list[str] = []
    path = root / ATTRIBUTES
    old = _read_lines(path)
    kept = _without_block(old)
    if kept != old:
        while kept and not kept[-1].strip():
            kept.pop()
        if dry_run:
            pass
        elif kept:
            atomic_write(path, ("\n".join(kept) + "\n").encode("utf-8"), mode=0o644)
        else:
            path.unlink()
        done.append(f"took memvault's lines out of {ATTRIBUTES}")
    present = _git(root, "config", "--local", "--get-regexp", rf"^merge\.{DRIVER}\.", check=False)
    if present.returncode == 0 and present.stdout.strip():
        if not dry_run:
            _git(root, "config", "--local", "--remove-section", f"merge.{DRIVER}")
        done.append(f"removed merge.{DRIVER} from the repository's .git/config")
    return done


def vault_of(file: Path) -> Path | None:
    """The vault a file in a work tree belongs to: the nearest folder above it that memvault serves
    (it holds ``.memvault/``) or that holds memvault's .gitattributes lines; None if none does."""
    marked = None
    for folder in file.parents:
        if (folder / ".memvault").is_dir():
            return folder
        if marked is None and BEGIN in _read_lines(folder / ATTRIBUTES):
            marked = folder
        if (folder / ".git").exists():
            break
    return marked
