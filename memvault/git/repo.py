"""Running git safely, and the repository around a vault: its top, remote, branch, ahead and behind.

Every git command runs with a fixed environment (no prompt, no pager, one language) and a timeout.

No argument given to git here ever comes from a client: paths are the vault's own, refs are read
from the repository's configuration, and every pathspec follows ``--``.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from memvault.disk.names import STATE_DIR
from memvault.errors import SyncFailed

LOCAL_TIMEOUT = 60.0  # seconds: status, add, commit, merge
NETWORK_TIMEOUT = 120.0  # seconds: fetch, push (a remote that hangs must not hold the loop forever)
DEFAULT_NAME = "memvault"
DEFAULT_EMAIL = "memvault@localhost"
SYNC_LOCK = "memvault-sync.lock"  # in the git folder: one sync of a repository at a time, across processes

# Variables of the process's own environment that would point git at another repository or index.
_REDIRECTS = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_COMMON_DIR",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_NAMESPACE",
    "GIT_PREFIX",
)
_FIXED = {
    "GIT_TERMINAL_PROMPT": "0",  # a remote asking for a password fails at once instead of waiting
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_EDITOR": "true",
    "GIT_MERGE_AUTOEDIT": "no",
    "LC_ALL": "C",  # messages in one language, so they read the same in /healthz
    "LANGUAGE": "C",
}
_HASH = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")  # a commit's name, SHA-1 or SHA-256
_USERINFO = re.compile(r"(\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_ABSOLUTE = re.compile(r"(?<![\w:/.~-])/(?:[^\s'\"`:,;()]+/)*([^\s'\"`:,;()/]+)")


def clean(text: str) -> str:
    """Git's words made safe to show: credentials in a URL and absolute paths (only their last part
    stays) taken out, one line."""
    text = _USERINFO.sub(r"\1", text)
    text = _ABSOLUTE.sub(lambda m: ".../" + m.group(1), text)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    # git's hints are advice for a person at a terminal; the error lines say what happened.
    lines = [line for line in lines if not line.startswith("hint:")] or lines
    return " ".join(lines)[:500]


def child_env() -> dict[str, str]:
    """The environment git runs in: the process's own (HOME for the user's git configuration, PATH,
    an ssh agent) passed through, without what would redirect git, with prompts and pagers off."""
    env = {k: v for k, v in os.environ.items() if k not in _REDIRECTS}
    env.update(_FIXED)
    if "GIT_SSH_COMMAND" not in env and "GIT_SSH" not in env:
        env["GIT_SSH_COMMAND"] = "ssh -o BatchMode=yes"  # never wait for a host key or passphrase
    return env


def git(
    cwd: Path, *args: str, timeout: float = LOCAL_TIMEOUT, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """Run ``git args`` in ``cwd``; a failure (with ``check``) raises SyncFailed with git's own words."""
    command = args[0] if args else ""
    try:
        done = subprocess.run(
            ["git", "--no-pager", *args],
            cwd=cwd,
            env=child_env(),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            encoding="utf-8",
            errors="replace",
            timeout=timeout,
        )
    except FileNotFoundError:
        raise SyncFailed("git is not installed (or not on PATH); install git to sync.", command) from None
    except subprocess.TimeoutExpired:
        raise SyncFailed(
            f"git {command} took longer than {timeout:.0f} s and was stopped.", command
        ) from None
    if check and done.returncode != 0:
        why = clean(done.stderr or done.stdout) or f"exit status {done.returncode}"
        raise SyncFailed(f"git {command} failed: {why}", command)
    return done


@dataclass(frozen=True, slots=True)
class Repo:
    """The repository holding a vault: its work tree's top, its git folder, and the vault's path
    inside it (``.`` when the vault is the top)."""

    top: Path
    git_dir: Path
    vault: str
    # The last ahead and behind counted, by the two commits counted from: an idle sync, whose
    # fetch brought nothing, asks git nothing more (one entry, so it never grows).
    _counted: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict, compare=False, repr=False)

    def run(
        self, *args: str, timeout: float = LOCAL_TIMEOUT, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        return git(self.top, *args, timeout=timeout, check=check)

    def pathspecs(self) -> list[str]:
        """The vault, without its derived state and the temp files of writes in flight."""
        inside = "" if self.vault == "." else self.vault + "/"
        return [
            self.vault,
            f":(exclude,glob){inside}**/{STATE_DIR}/**",
            f":(exclude,glob){inside}**/.*.tmp",
        ]

    def vault_relative(self, path: str) -> str | None:
        """A path git names (relative to the top) relative to the vault, or None if outside it."""
        if self.vault == ".":
            return path
        prefix = self.vault + "/"
        return path[len(prefix) :] if path.startswith(prefix) else None

    def changes(self) -> list[str]:
        """The vault's paths (as git names them) that differ in the work tree or index from HEAD,
        new files included: one git call."""
        listed = self.run(
            "status", "--porcelain", "-z", "--no-renames", "--untracked-files=all", "--", *self.pathspecs()
        ).stdout
        return [entry[3:] for entry in split_z(listed)]

    def changed(self, paths: set[str]) -> bool:
        """Whether any of ``paths`` (as git names them) has changed since HEAD (see :meth:`changes`)."""
        return bool(paths) and any(path in paths for path in self.changes())

    def config_stamp(self) -> tuple[object, ...]:
        """What changes when the branch, its remote or the git identity may have: the repository's
        HEAD and config files and the user's git config files, as stat sees them (no git call)."""
        home = Path(os.environ.get("HOME") or "~").expanduser()
        files = [
            self.git_dir / "HEAD",
            self.git_dir / "config",
            Path(os.environ.get("GIT_CONFIG_GLOBAL") or home / ".gitconfig"),
            Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config") / "git" / "config",
        ]
        stamp: list[object] = []
        for file in files:
            try:
                st = file.stat()
            except OSError:
                stamp.append(None)
            else:
                stamp.append((st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(stamp)

    def blob(self, spec: str) -> bytes:
        """The bytes of a blob (``:2:path``: our side of a conflicted file), as git holds them."""
        try:
            done = subprocess.run(
                ["git", "--no-pager", "cat-file", "blob", spec],
                cwd=self.top,
                env=child_env(),
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=LOCAL_TIMEOUT,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise SyncFailed("git cat-file took too long and was stopped.") from None
        if done.returncode != 0:
            raise SyncFailed(f"git cat-file failed: {clean(done.stderr.decode('utf-8', 'replace'))}")
        return done.stdout

    def busy(self) -> str | None:
        """What a person (or a crash) left half done in the repository, which a sync must not touch."""
        for name, what in (
            ("MERGE_HEAD", "a merge"),
            ("rebase-merge", "a rebase"),
            ("rebase-apply", "a rebase or git am"),
            ("CHERRY_PICK_HEAD", "a cherry-pick"),
            ("REVERT_HEAD", "a revert"),
        ):
            if (self.git_dir / name).exists():
                return what
        return None

    def identity(self) -> list[str]:
        """``-c`` options giving commits a clear default author when none is configured."""
        email = self.run("config", "user.email", check=False).stdout.strip()
        if email:
            return []
        return ["-c", f"user.name={DEFAULT_NAME}", "-c", f"user.email={DEFAULT_EMAIL}"]

    def branch(self) -> str:
        done = self.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        name = done.stdout.strip()
        if done.returncode != 0 or not name:
            raise SyncFailed(
                "the repository's HEAD is detached: check out a branch (git switch NAME) to sync."
            )
        return name

    def upstream(self, branch: str) -> tuple[str, str]:
        """(remote, branch on the remote) the branch syncs with: its configured upstream, else the
        only remote (or ``origin``) and the same branch name."""
        remote = self.run("config", f"branch.{branch}.remote", check=False).stdout.strip()
        merge = self.run("config", f"branch.{branch}.merge", check=False).stdout.strip()
        if not remote or remote == ".":
            remotes = self.run("remote").stdout.split()
            if not remotes:
                raise SyncFailed(
                    "the repository has no remote to sync with: add one (git remote add origin URL)."
                )
            remote = "origin" if "origin" in remotes else remotes[0]
        return remote, merge.removeprefix("refs/heads/") or branch

    def has(self, ref: str) -> bool:
        return self.run("rev-parse", "--verify", "--quiet", ref + "^{commit}", check=False).returncode == 0

    def head(self) -> str | None:
        done = self.run("rev-parse", "--verify", "--quiet", "HEAD", check=False)
        return done.stdout.strip() if done.returncode == 0 else None

    def ahead_behind(self, ref: str) -> tuple[int, int]:
        """Commits HEAD has that ``ref`` lacks, and the other way round: no git call when neither
        moved since the last count (read from the ref files), else one, as a sync mostly makes."""
        key = self._commits("HEAD", ref)
        if key is not None and key in self._counted:
            return self._counted[key]
        done = self.run("rev-list", "--left-right", "--count", f"HEAD...{ref}", check=False)
        counts = done.stdout.split()
        if done.returncode == 0 and len(counts) == 2:
            found = int(counts[0]), int(counts[1])
            if key is not None and key == self._commits("HEAD", ref):  # neither moved meanwhile
                self._counted.clear()
                self._counted[key] = found
            return found
        if self.head() is None:
            return 0, (self.count(ref) if self.has(ref) else 0)
        if not self.has(ref):
            return self.count("HEAD"), 0
        raise SyncFailed(f"git rev-list failed: {clean(done.stderr or done.stdout)}", "rev-list")

    def _commits(self, first: str, second: str) -> tuple[str, str] | None:
        """The commits two refs name, or None when either cannot be read without git."""
        one, two = self.commit_of(first), self.commit_of(second)
        return (one, two) if one is not None and two is not None else None

    def commit_of(self, ref: str) -> str | None:
        """The commit ``ref`` (``HEAD`` or a full ref name) names, read from the git folder's files
        without a git call; None when it cannot be read so (no such ref, an unborn branch, a linked
        worktree or another ref storage: the caller asks git)."""
        if (self.git_dir / "commondir").exists() or (self.git_dir / "reftable").exists():
            return None
        for _ in range(3):  # HEAD -> its branch (-> a symbolic ref, rarely)
            if ref != "HEAD" and (not ref.startswith("refs/") or ".." in ref.split("/")):
                return None
            try:
                value = (self.git_dir / ref).read_text(encoding="ascii").strip()
            except FileNotFoundError:
                return self._packed(ref)
            except (OSError, UnicodeDecodeError):
                return None
            if not value.startswith("ref: "):
                return value if _HASH.fullmatch(value) else None
            ref = value.removeprefix("ref: ").strip()
        return None

    def _packed(self, ref: str) -> str | None:
        """``ref`` in packed-refs (where git keeps refs it packed; a loose file wins over it)."""
        try:
            lines = (self.git_dir / "packed-refs").read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError):  # none packed, or unreadable: git is asked
            return None
        for line in lines:
            value, _, name = line.partition(" ")
            if name == ref:
                return value if _HASH.fullmatch(value) else None
        return None

    def count(self, ref: str) -> int:
        return int(self.run("rev-list", "--count", ref).stdout.strip() or 0)

    def lock_file(self) -> Path:
        return self.git_dir / SYNC_LOCK


def find(vault: Path) -> Repo:
    """The repository whose work tree holds ``vault`` (an existing folder)."""
    if not vault.is_dir():
        raise SyncFailed("the vault's folder does not exist yet: create it, then git init (or clone) it.")
    done = git(vault, "rev-parse", "--show-toplevel", "--absolute-git-dir", check=False)
    lines = done.stdout.splitlines()
    if done.returncode != 0 or len(lines) < 2:
        raise SyncFailed(
            "the vault is not in a git repository: run git init (or git clone) there, then "
            "memvault setup git."
        )
    top, git_dir = Path(lines[0]), Path(lines[1])
    try:
        inside = vault.resolve().relative_to(top.resolve())
    except ValueError:
        raise SyncFailed("the vault is not inside its repository's work tree.") from None
    return Repo(top=top, git_dir=git_dir, vault=inside.as_posix() or ".")


def split_z(output: str) -> Sequence[str]:
    """Fields of git's ``-z`` output."""
    return [part for part in output.split("\0") if part]
