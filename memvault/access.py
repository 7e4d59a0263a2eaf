"""Access times: when a memory was last read, and writing that back to its file (the writeback policy).

The sidecar records every access; the file's ``lastAccessedAt`` follows at most once a day by default
(``MEMVAULT_ACCESS_WRITEBACK``), so reads do not churn a vault kept in git.
"""

from __future__ import annotations

from collections.abc import Sequence
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
    """Whether an access at ``now`` is written to the file under writeback ``mode``."""
    if memory.conflicted or memory.problem is not None:
        return False
    if not memory.has_frontmatter:
        return True  # legacy file: migrated once, on first access
    if mode == "never":
        return False
    if mode == "always":
        return True
    last = memory.last_accessed_at
    return last is None or last.date() != now.date()


def write_back(
    tokens: Tokens, state: TokenState, memories: Sequence[Memory], now: datetime, mode: str
) -> None:
    """Write the access time into each file (and frontmatter into a legacy one); a file changed or
    removed under us, or a full disk, skips it: the read stands either way."""
    with state.file_lock():
        for memory in memories:
            fields: dict[str, Any] = {}
            if mode != "never":
                fields["lastAccessedAt"] = now
            if not memory.has_frontmatter:
                fields = {
                    "priority": memory.priority,
                    "createdAt": memory.created_at or now,
                    "updatedAt": memory.updated_at or memory.created_at or now,
                    **fields,
                }
            try:
                updated = state.vault.update(memory.id, fields, expect_hash=memory.hash)
            except (NotFound, Conflict, InvalidArgument, InvalidName):
                continue  # changed or removed under us; the watcher will catch up
            except OSError as exc:  # a full disk: the read stands, the file keeps its old time
                note_failure("write lastAccessedAt back", exc)
                continue
            tokens.remember(state, updated)
