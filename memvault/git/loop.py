"""The git sync loop: commit what changed in the vault, fetch, merge with memvault's driver, push.

It runs every interval and soon after a write, on a thread of its own, and keeps its state for
/healthz and the tools. A sync never loses anything: it never force-pushes (a rejected push
fetches, merges and tries again), a modify/delete conflict keeps the edit, and a merge that still
leaves a conflict memvault cannot settle is aborted, the local commits kept, the file named.
"""

from __future__ import annotations

import contextlib
import logging
import math
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from filelock import FileLock, Timeout

from memvault.clock import Clock, format_time, utcnow
from memvault.disk.names import STATE_DIR
from memvault.disk.vault import LOCK_TIMEOUT, folder_lock
from memvault.errors import MemvaultError, SyncFailed
from memvault.git import repo as git_repo
from memvault.git import running as running_loops
from memvault.git.commit import commit
from memvault.git.repo import NETWORK_TIMEOUT, Repo, split_z
from memvault.git.running import Status

log = logging.getLogger("memvault")

DEBOUNCE_SECONDS = 2.0  # a write is committed and pushed this long after it, with what followed it
PUSH_TRIES = 4  # a push the remote rejects (it moved meanwhile): fetch, merge, push again
BACKOFF_SECONDS = 0.5  # doubled after each rejected push
STALE_INTERVALS = 3  # tools say the vault is not syncing once it failed this many intervals
LOOK_EVERY = 10  # an idle sync looks at the files (git status) once in this many intervals
MOVED = ("[rejected]", "non-fast-forward", "fetch first", "cannot lock ref")


# ---------------------------------------------------------------- one sync


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one sync did."""

    committed: str | None = None  # the new commit's subject
    merged: int = 0  # commits the remote brought
    pushed: bool = False
    ahead: int = 0
    behind: int = 0
    kept: tuple[str, ...] = ()  # files deleted on one side and edited on the other: the edit kept
    fetched: bool = False  # the remote was reached


@dataclass(slots=True)
class SyncTarget:
    """Where a repository's branch syncs to, read from its configuration once per loop."""

    branch: str
    remote: str
    remote_branch: str
    identity: list[str] = field(default_factory=list)

    @property
    def ref(self) -> str:
        return f"refs/remotes/{self.remote}/{self.remote_branch}"

    @classmethod
    def of(cls, repo: Repo) -> SyncTarget:
        branch = repo.branch()
        remote, remote_branch = repo.upstream(branch)
        return cls(branch, remote, remote_branch, repo.identity())


def _incoming(repo: Repo, root: Path, ref: str) -> tuple[set[str], list[Path]]:
    """What a merge of ``ref`` changes: the paths (as git names them), and the token folders among
    them that this machine uses (they have derived state, so a server or the CLI may write there):
    their locks are held during the merge."""
    # What the remote changed since the histories met (or all it differs in, when they never met).
    related = repo.run("merge-base", "HEAD", ref, check=False).returncode == 0
    span = [f"HEAD...{ref}"] if related else ["HEAD", ref]
    paths = set(
        split_z(repo.run("diff", "--name-only", "--no-renames", "-z", *span, "--", repo.vault).stdout)
    )
    tokens = set()
    for path in paths:
        inside = repo.vault_relative(path)
        if inside is not None and "/" in inside:
            tokens.add(inside.split("/", 1)[0])
    return paths, [root / t for t in sorted(tokens) if (root / t / STATE_DIR).is_dir()]


@contextlib.contextmanager
def _holding(folders: list[Path]) -> Iterator[None]:
    """The cross-process locks of these token folders, in name order (writes wait meanwhile)."""
    with contextlib.ExitStack() as stack:
        for folder in folders:
            try:
                stack.enter_context(folder_lock(folder))
            except Timeout:
                raise SyncFailed(
                    f"a write held a vault's lock for {LOCK_TIMEOUT:.0f} s, so the merge waits for the "
                    "next sync."
                ) from None
        yield


def _keep_edits(repo: Repo) -> tuple[str, ...]:
    """Settle the conflicts where one side deleted a file and the other changed it: the change is
    kept (memvault.git.merge.resolve_modify_delete). Other conflicts are left as they are."""
    from memvault.git.merge import resolve_modify_delete

    stages: dict[str, set[int]] = {}
    for entry in split_z(repo.run("ls-files", "-u", "-z").stdout):
        info, _, path = entry.partition("\t")
        stages.setdefault(path, set()).add(int(info.split()[2]))
    kept = []
    for path, present in sorted(stages.items()):
        if 1 not in present or len(present) != 2:
            continue  # both sides changed it (the driver's case), or both added it

        def blob(stage: int, path: str = path, present: set[int] = present) -> bytes | None:
            if stage not in present:
                return None
            return repo.blob(f":{stage}:{path}")

        result = resolve_modify_delete(blob(1), blob(2), blob(3))
        target = repo.top / path
        if result is None:
            repo.run("rm", "--quiet", "--cached", "--ignore-unmatch", "--", path)
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(result)
            repo.run("add", "--", path)
            kept.append(repo.vault_relative(path) or path)
    return tuple(kept)


def merge(
    repo: Repo, root: Path, target: SyncTarget, behind: int | None = None
) -> tuple[int, tuple[str, ...]]:
    """Merge what the remote has (already fetched) with memvault's driver; (commits brought, files
    whose edit was kept against a deletion). A conflict that still remains aborts the merge.
    ``behind``: the commits the remote has that HEAD lacks, when the caller has counted them."""
    if behind is None:
        _, behind = repo.ahead_behind(target.ref)
    if not behind:
        return 0, ()
    unborn = repo.head() is None
    incoming, tokens = _incoming(repo, root, target.ref) if not unborn else (set(), [])
    with _holding(tokens):
        # Writes go on until the lock is held. The merge leaves alone what it does not change, so
        # a write since the sync's commit waits in the work tree for the next commit, unless the
        # merge changes that very file: only then is it committed first, while writes wait.
        if unborn or repo.changed(incoming):
            commit(repo, target.identity)
        done = repo.run(
            *target.identity,
            "merge",
            "--no-edit",
            "--quiet",
            "--no-stat",
            # Two clones of an empty remote that both wrote first share no history; their vaults
            # still merge (nothing is replaced by a merge).
            "--allow-unrelated-histories",
            "-m",
            f"memvault: merge {target.remote}/{target.remote_branch}",
            target.ref,
            check=False,
        )
        kept: tuple[str, ...] = ()
        if done.returncode != 0:
            kept = _settle(repo, target, done)
    # What the driver set beside a file (both bodies of a conflict), and writes since: committing
    # changes no file, so writes need not wait for it.
    commit(repo, target.identity)
    return behind, kept


def _settle(repo: Repo, target: SyncTarget, done: subprocess.CompletedProcess[str]) -> tuple[str, ...]:
    """A merge git stopped: the files deleted on one side and edited on the other keep the edit and
    the merge is committed; any other conflict aborts it (SyncFailed)."""
    if not (repo.git_dir / "MERGE_HEAD").exists():
        # The merge never began (a file it would change has edits not yet committed, outside
        # the vault or made a moment ago): nothing changed, the next sync tries again.
        raise SyncFailed(f"git merge did not start: {git_repo.clean(done.stderr or done.stdout)}")
    kept = _keep_edits(repo)
    left = split_z(repo.run("diff", "--name-only", "--diff-filter=U", "-z").stdout)
    if left:
        repo.run("merge", "--abort", check=False)
        shown = ", ".join(repo.vault_relative(p) or p for p in left[:5])
        more = f" and {len(left) - 5} more" if len(left) > 5 else ""
        raise SyncFailed(
            f"git merge stopped at {shown}{more}: a conflict memvault cannot settle (a file it does "
            "not merge itself). The merge was aborted and nothing was lost: local commits stay and "
            "are pushed once a person merges (git pull, settle the file, git commit)."
        )
    repo.run(*target.identity, "commit", "--quiet", "--no-edit")
    return kept


def _push(repo: Repo, target: SyncTarget) -> bool:
    """Push HEAD to the remote branch, never forced; False when the remote refused it because it moved."""
    done = repo.run(
        "push",
        "--porcelain",
        target.remote,
        f"HEAD:refs/heads/{target.remote_branch}",
        timeout=NETWORK_TIMEOUT,
        check=False,
    )
    if done.returncode == 0:
        return True
    said = done.stdout + "\n" + done.stderr
    # The remote moved since the fetch: before the push began (rejected, non-fast-forward), or
    # while it ran (the remote could not move its branch from the commit it had announced).
    if any(why in said for why in MOVED):
        return False
    raise SyncFailed(f"git push failed: {git_repo.clean(done.stderr or done.stdout)}")


def sync(
    repo: Repo,
    root: Path,
    target: SyncTarget,
    *,
    network: bool | None = True,
    wait: Callable[[float], bool] | None = None,
    look: bool = True,
) -> Outcome:
    """One sync: commit, then fetch, merge and push until the remote takes the push. ``network``:
    True always, False never, None only when there is something to push. ``wait(seconds)`` sleeps
    between tries and says whether to give up (the loop is stopping). ``look``: False skips the
    commit's look at the files (``git status``) when nothing is known to have changed."""
    busy = repo.busy()
    if busy:
        raise SyncFailed(
            f"{busy} is in progress in the repository; a person finishes or aborts it (git status says "
            "how), then syncing resumes."
        )
    committed = commit(repo, target.identity) if look else None
    if not network:
        ahead, behind = repo.ahead_behind(target.ref)
        if network is False or not (committed or ahead):
            return Outcome(committed, ahead=ahead, behind=behind)
    merged, pushed = 0, False
    kept: tuple[str, ...] = ()
    for attempt in range(PUSH_TRIES):
        repo.run("fetch", "--quiet", target.remote, timeout=NETWORK_TIMEOUT)
        ahead, behind = repo.ahead_behind(target.ref)
        if behind:
            brought, settled = merge(repo, root, target, behind)
            merged, kept = merged + brought, kept + settled
            ahead, behind = repo.ahead_behind(target.ref)
        if not ahead:  # (an unborn HEAD is never ahead)
            break
        if _push(repo, target):
            pushed = True
            repo.run("fetch", "--quiet", target.remote, timeout=NETWORK_TIMEOUT)
            ahead, behind = repo.ahead_behind(target.ref)
            break
        if attempt == PUSH_TRIES - 1 or (wait or _sleep)(BACKOFF_SECONDS * 2**attempt):
            raise SyncFailed(
                f"git push was refused {attempt + 1} times because the remote kept moving; the next "
                "sync tries again (never forced)."
            )
    return Outcome(committed, merged, pushed, ahead, behind, kept, fetched=True)


def _sleep(seconds: float) -> bool:
    time.sleep(seconds)
    return False  # never gives up


@contextlib.contextmanager
def one_at_a_time(repo: Repo) -> Iterator[None]:
    """One sync of a repository at a time, across processes (a server's loop, memvault sync)."""
    try:
        with FileLock(str(repo.lock_file()), timeout=NETWORK_TIMEOUT):
            yield
    except Timeout:
        raise SyncFailed(
            "another memvault sync of this repository has not finished; trying again later."
        ) from None


def sync_vault(root: Path) -> Outcome:
    """One whole sync of the vault at ``root`` (memvault sync --once)."""
    repo = git_repo.find(root)
    ensure_driver(root)
    with one_at_a_time(repo):
        return sync(repo, root, SyncTarget.of(repo))


def ensure_driver(root: Path) -> None:
    """Register memvault's merge driver for the vault (idempotent): a merge without it would stop
    at every concurrent graph or session line."""
    from memvault.git import setup

    setup.install(root)


# ---------------------------------------------------------------- the loop


class SyncLoop:
    """Syncs one vault root on its own thread: a full sync every ``interval`` seconds, and one
    ``DEBOUNCE_SECONDS`` after a change (:meth:`soon`); one sync at a time per repository, across
    processes too (a lock file in the git folder)."""

    def __init__(
        self,
        root: Path,
        interval: float,
        *,
        clock: Clock = utcnow,
        debounce: float = DEBOUNCE_SECONDS,
    ) -> None:
        self.root = root
        self.interval = interval
        self.debounce = min(debounce, interval)
        self.clock = clock
        self._status = Status("starting")
        self._started = clock()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._due: float | None = None  # monotonic time of a sync asked for by a change
        self._thread: threading.Thread | None = None
        self._repo: Repo | None = None
        self._target: SyncTarget | None = None
        self._stamp: tuple[object, ...] = ()  # the repository's config_stamp when _target was read
        self._told: set[str] = set()  # vaults told that syncing fails, this failing spell
        self.syncs = 0  # finished syncs, ok or not (tests wait on it)

    # -- life

    def start(self) -> None:
        running_loops.register(self.root, self)
        self._thread = threading.Thread(target=self._run, name="memvault-git-sync", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop after the sync in flight; a change not yet synced gets one last sync (blocking)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        running_loops.unregister(self.root, self)

    def soon(self) -> None:
        """Something in the vault changed: sync it shortly (changes that follow join the same sync).
        Any thread; returns at once."""
        with self._lock:
            if self._due is None:
                self._due = time.monotonic() + self.debounce
        self._wake.set()

    def status(self) -> Status:
        return self._status

    def stale_note(self, *, once_for: str | None = None) -> str | None:
        status = self._status
        if status.state != "failing":
            return None
        since = status.last_ok or self._started
        if (self.clock() - since).total_seconds() < STALE_INTERVALS * self.interval:
            return None
        with self._lock:
            if once_for is not None:
                if once_for in self._told:
                    return None
                self._told.add(once_for)
        when = "since " + format_time(status.last_ok) if status.last_ok else "since the server started"
        return (
            f"Note: this vault has not synced with git {when} ({status.error}). Writes are saved here "
            "and sync once it works again; tell the user, who can see it in /healthz."
        )

    # -- the thread

    def _run(self) -> None:
        next_full = time.monotonic()  # the first sync at once: what changed while no server ran
        unlooked = LOOK_EVERY  # full syncs since the last look at the files: the first one looks
        while True:
            now = time.monotonic()
            due = self._due
            if self._stopping.is_set():
                if due is not None:
                    self._once(network=None)  # a write acknowledged just before the stop
                return
            wake_at = min(next_full, due if due is not None else math.inf)
            if wake_at > now:
                self._wake.wait(wake_at - now)
                self._wake.clear()
                continue
            full = now >= next_full
            with self._lock:
                self._due = None
            # After a change, the remote is only asked when there is something to push: the change a
            # pull itself brings (the watcher announces it too) costs one look at the files.
            # An idle full sync is one call to the remote (fetch): the files are looked at (git
            # status) after a change the watcher announced, and every LOOK_EVERY full syncs for an
            # edit it could not see (a vault nobody has loaded or listens to is not watched).
            look = not full or due is not None or unlooked >= LOOK_EVERY
            unlooked = 0 if look else unlooked + 1
            outcome = self._once(network=True if full else None, look=look)
            if full or outcome is None or outcome.fetched:
                next_full = time.monotonic() + self.interval

    def _once(self, *, network: bool | None, look: bool = True) -> Outcome | None:
        """One sync, its outcome recorded in the status; None when it failed."""
        try:
            repo = self._repo or git_repo.find(self.root)
            if self._repo is None:
                ensure_driver(self.root)
                self._repo = repo
            stamp = repo.config_stamp()
            if self._target is None or stamp != self._stamp:  # branch, remote or identity may differ
                self._target, self._stamp = SyncTarget.of(repo), stamp
            target = self._target
            with one_at_a_time(repo):
                outcome = sync(repo, self.root, target, network=network, wait=self._stopping.wait, look=look)
        except MemvaultError as exc:
            self._repo = self._target = None  # read the repository afresh next time
            self._failed(exc.message)
            return None
        except Exception as exc:  # a bug must not end the loop: it is reported as a failing sync
            self._repo = self._target = None
            log.debug("git sync failed", exc_info=True)
            self._failed(f"unexpected error ({type(exc).__name__}); see the server's log")
            return None
        finally:
            self.syncs += 1
        if outcome.kept:
            log.info("git sync kept edits of files deleted on the other side: %s", ", ".join(outcome.kept))
        if outcome.fetched:
            self._ok(outcome)
        elif self._status.state == "ok":
            self._status = Status("ok", self._status.last_ok, None, outcome.ahead, outcome.behind)
        return outcome

    def _ok(self, outcome: Outcome) -> None:
        before = self._status
        self._status = Status("ok", self.clock(), None, outcome.ahead, outcome.behind)
        with self._lock:
            self._told.clear()
        if before.state == "failing":
            log.info("git sync works again")
        elif before.state == "starting":
            log.info("git sync: on (every %g s)", self.interval)

    def _failed(self, error: str) -> None:
        before = self._status
        since = before.failing_since if before.state == "failing" else self.clock()
        self._status = Status("failing", before.last_ok, error, before.ahead, before.behind, since)
        if before.state != "failing":
            log.warning("git sync failing: %s", error)
        elif before.error != error:
            log.debug("git sync still failing: %s", error)
