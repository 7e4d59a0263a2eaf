"""`memvault check`: files a person has to fix (errors) and things worth a look (notes)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from memvault.disk import safe
from memvault.disk.files import file_stamp
from memvault.disk.markdown import parse_memory
from memvault.disk.names import key
from memvault.disk.vault import Vault
from memvault.errors import MemvaultError
from memvault.git.mergememory import CONFLICT_KEY
from memvault.records import sync


@dataclass(frozen=True, slots=True)
class Finding:
    id: str  # relative to the token folder (archived ones under archive/)
    problem: str
    # An error is a file a person must fix (memvault serves it read-only or not at all); a note is
    # worth a look but normal (agents write standup.md and standup-2.md), so it never fails a check.
    error: bool = True


def conflict_copy_note(copy_of: str) -> str:
    """What a conflict copy is and how to settle it, in words."""
    return (
        f"the other side's version of {copy_of}, kept whole by a git merge because both sides changed "
        f"the same lines; move what you want to keep into {copy_of}, then delete this file"
    )


def check_vault(vault: Vault, progress: Callable[[int], None] | None = None) -> Iterator[Finding]:
    """Every problem in one token's folder, in path order. Reads files; never writes."""
    titles: dict[str, list[str]] = defaultdict(list)
    for id, archived, st in sorted(vault.scan(), key=lambda item: (item[1], item[0])):
        if progress is not None:
            progress(1)
        path_id = key(id, archived)
        try:
            # Never blocks on a FIFO, never reads through a link that leads out of the vault.
            raw, st = safe.read_file(vault.target_of(id, archived=archived), vault.dir)
        except safe.LinkRefused as exc:
            yield Finding(path_id, f"cannot be read ({exc.error()})")
            continue
        except MemvaultError:
            continue  # a link the scan would not list any more: gone since
        except OSError as exc:
            yield Finding(path_id, f"cannot be read ({exc.strerror or type(exc).__name__})")
            continue
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            yield Finding(path_id, "is not valid UTF-8 (shown with replacement characters)")
        memory = parse_memory(raw, id, archived=archived, **file_stamp(st))
        if memory.conflicted:
            yield Finding(path_id, "holds git conflict markers; resolve them, then commit")
        if memory.problem:
            yield Finding(path_id, f"broken frontmatter: {memory.problem}")
        copy_of = memory.meta.get(CONFLICT_KEY)
        if isinstance(copy_of, str) and copy_of.strip():
            yield Finding(path_id, conflict_copy_note(copy_of), error=False)
        elif not archived:  # a conflict copy's title is its memory's: the note above says why
            titles[memory.title.strip().casefold()].append(path_id)
    for ids in titles.values():
        if len(ids) > 1:
            for id in ids:
                others = ", ".join(other for other in ids if other != id)
                yield Finding(id, f"duplicate title (also {others})", error=False)
    for path, problem in sync.problems(vault.dir):
        yield Finding(path, problem)
