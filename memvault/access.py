"""Access times: when a memory was last read, and writing that back to its file (the writeback policy).

The sidecar records every access; the file's ``lastAccessedAt`` follows at most once a day by default
(``MEMVAULT_ACCESS_WRITEBACK``), so reads do not churn a vault kept in git.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from memvault.errors import Conflict, InvalidArgument, InvalidName, NotFound
from memvault.markdown import Memory
from memvault.resources import note_failure
from memvault.tokens import Tokens, TokenState


def last_access(memory: Memory, recorded: datetime | None) -> datetime | None:
    """The later of the sidecar's record and the file's lastAccessedAt, else its last change."""
    times = [t for t in (recorded, memory.last_accessed_at) if t is not None]
    return max(times) if times else (memory.updated_at or memory.created_at)


def needs_file_write(memory: Memory, now: datetime, mode: str) -> bool:
    """Whether an access at ``now`` is written to the file under writeback ``mode``.

    A file a person made (no frontmatter) is theirs: reading it never rewrites it (its accesses
    live in the sidecar); ``memvault migrate`` gives such files frontmatter when asked.
    """
    if memory.conflicted or memory.problem is not None or not memory.has_frontmatter:
        return False
    if mode == "never":
        return False
    if mode == "always":
        return True
    last = memory.last_accessed_at
    return last is None or last.date() != now.date()


def frontmatter_for(memory: Memory, now: datetime) -> dict[str, Any]:
    """The frontmatter a file without any gets (memvault migrate): its priority and times."""
    return {
        "priority": memory.priority,
        "createdAt": memory.created_at or now,
        "updatedAt": memory.updated_at or memory.created_at or now,
    }


def write_back(tokens: Tokens, state: TokenState, memories: Sequence[Memory], now: datetime) -> None:
    """Write the access time into each file; a file changed or removed under us, or a full disk,
    skips it: the read stands either way."""
    _update_each(
        tokens, state, memories, lambda _memory: {"lastAccessedAt": now}, "write lastAccessedAt back"
    )


def add_frontmatter(
    tokens: Tokens, state: TokenState, memories: Sequence[Memory], now: datetime
) -> list[str]:
    """Give files without frontmatter memvault's (memvault migrate); returns the ids done."""
    return _update_each(tokens, state, memories, lambda m: frontmatter_for(m, now), "add frontmatter")


def _update_each(
    tokens: Tokens,
    state: TokenState,
    memories: Sequence[Memory],
    fields_for: Callable[[Memory], dict[str, Any]],
    what: str,
) -> list[str]:
    done: list[str] = []
    with state.file_lock():
        for memory in memories:
            try:
                updated = state.vault.update(memory.id, fields_for(memory), expect_hash=memory.hash)
            except (NotFound, Conflict, InvalidArgument, InvalidName):
                continue  # changed or removed under us; the watcher will catch up
            except OSError as exc:  # a full disk: the file keeps what it had
                note_failure(what, exc)
                continue
            tokens.remember(state, updated)
            done.append(memory.id)
    return done
