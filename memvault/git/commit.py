"""What a sync commits, and the commit message that says what changed in which vault.

A commit takes the vault's changed paths only: nothing outside it, nothing under .memvault/.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from memvault.disk.names import ARCHIVE, GRAPH_FILE, SESSIONS_DIR
from memvault.git.repo import Repo, split_z

MAX_LISTED = 40  # paths named in a commit message's body
MAX_VAULTS_NAMED = 3  # more vaults in one commit are summed up in its subject


@dataclass(frozen=True, slots=True)
class ChangedPath:
    """One path the commit changes: git's status letter (A, M, D), the path inside the vault, and the
    lines added and removed (for the graph)."""

    status: str
    path: str
    added: int = 0
    removed: int = 0


def _plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n} {one if n == 1 else (many or one + 's')}"


def _counts(changes: list[ChangedPath]) -> Counter[str]:
    """What changed in one vault (token folder), by kind."""
    counts: Counter[str] = Counter()
    hot_gone = {c.path for c in changes if c.status == "D" and not c.path.startswith(ARCHIVE + "/")}
    archived = {
        c.path.removeprefix(ARCHIVE + "/")
        for c in changes
        if c.status == "A" and c.path.startswith(ARCHIVE + "/")
    }
    sessions = set()
    for c in changes:
        parts = c.path.split("/")
        if c.path == GRAPH_FILE:
            counts["graph"] += max(c.added, c.removed, 1)
        elif parts[0] == SESSIONS_DIR and len(parts) == 2:
            sessions.add(parts[1].split(".", 1)[0])
        elif not c.path.endswith(".md"):
            counts["other"] += 1
        elif parts[0] == ARCHIVE:
            inner = "/".join(parts[1:])
            if c.status == "A" and inner in hot_gone:
                counts["archived"] += 1
            elif c.status == "D":
                counts[
                    "restored" if any(x.path == inner and x.status == "A" for x in changes) else "dropped"
                ] += 1
            else:
                counts["archive"] += 1
        elif c.status == "D":
            if c.path not in archived:
                counts["deleted"] += 1
        elif c.status == "A" and any(x.path == f"{ARCHIVE}/{c.path}" and x.status == "D" for x in changes):
            pass  # counted as restored
        else:
            counts["written"] += 1
    if sessions:
        counts["sessions"] = len(sessions)
    return counts


_PHRASES: tuple[tuple[str, Callable[[int], str]], ...] = (
    ("written", lambda n: _plural(n, "memory", "memories") + " written"),
    ("deleted", lambda n: _plural(n, "memory", "memories") + " deleted"),
    ("archived", lambda n: _plural(n, "memory", "memories") + " archived"),
    ("restored", lambda n: _plural(n, "memory", "memories") + " restored"),
    ("archive", lambda n: _plural(n, "archived memory", "archived memories") + " changed"),
    ("dropped", lambda n: _plural(n, "archived memory", "archived memories") + " deleted"),
    ("graph", lambda n: _plural(n, "graph change")),
    ("sessions", lambda n: _plural(n, "session summary", "session summaries")),
    ("other", lambda n: _plural(n, "other file")),
)


def _phrase(counts: Counter[str]) -> str:
    return ", ".join(say(counts[kind]) for kind, say in _PHRASES if counts[kind])


def describe(changes: list[ChangedPath]) -> str:
    """The commit message for ``changes``: a subject saying what changed in which vault
    (``memvault: team: 3 memories written, 1 graph change``), then the paths."""
    by_vault: dict[str, list[ChangedPath]] = {}
    for c in changes:
        token, _, rest = c.path.partition("/")
        key, inner = (token, rest) if rest else ("", token)  # a file at the root: the vault's own settings
        by_vault.setdefault(key, []).append(ChangedPath(c.status, inner, c.added, c.removed))
    parts = []
    named = sorted(k for k in by_vault if k)
    if len(named) > MAX_VAULTS_NAMED:
        total: Counter[str] = Counter()
        for key in named:
            total.update(_counts(by_vault[key]))
        parts.append(f"{len(named)} vaults: {_phrase(total)}")
    else:
        parts += [f"{key}: {_phrase(_counts(by_vault[key]))}" for key in named]
    if "" in by_vault:
        parts.append(", ".join(sorted(c.path for c in by_vault[""])[:3]))
    subject = "memvault: " + "; ".join(parts)
    listed = [f"{c.status} {c.path}" for c in sorted(changes, key=lambda c: c.path)[:MAX_LISTED]]
    if len(changes) > MAX_LISTED:
        listed.append(f"... and {len(changes) - MAX_LISTED} more")
    return subject + "\n\n" + "\n".join(listed) + "\n"


def commit(repo: Repo, identity: Sequence[str] = ()) -> str | None:
    """Commit everything that changed in the vault (its own writes, a person's edits), nothing
    outside it and nothing under .memvault/; the subject, or None when nothing changed. ``identity``:
    ``-c`` options naming the author (Repo.identity)."""
    if not repo.changes():  # nothing changed: one git call, as an idle vault's sync mostly is
        return None
    specs = repo.pathspecs()
    repo.run("add", "-A", "--", *specs)
    names = split_z(repo.run("diff", "--cached", "--no-renames", "--name-status", "-z", "--", *specs).stdout)
    if not names:
        return None
    numbers: dict[str, tuple[int, int]] = {}
    for line in repo.run("diff", "--cached", "--no-renames", "--numstat", "--", *specs).stdout.splitlines():
        added, removed, path = [*line.split("\t", 2), "", ""][:3]
        numbers[path] = (int(added) if added.isdigit() else 0, int(removed) if removed.isdigit() else 0)
    changes = []
    for status, path in zip(names[::2], names[1::2], strict=False):
        inside = repo.vault_relative(path)
        if inside is not None:
            changes.append(ChangedPath(status[:1], inside, *numbers.get(path, (0, 0))))
    if not changes:
        return None
    message = describe(changes)
    # `commit -- paths` commits only the vault, whatever else a person has staged.
    repo.run(*identity, "commit", "--quiet", "--no-edit", "-m", message, "--", *specs)
    return message.split("\n", 1)[0]
