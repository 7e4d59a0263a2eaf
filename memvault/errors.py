"""Errors memvault raises on purpose, each with a message an agent can act on.

    MemvaultError
     ├── NotFound(id)               no such memory (hot or archived)
     ├── InvalidName(value, why)    a filename argument that is unsafe or malformed
     ├── InvalidArgument(why)       any other bad argument (empty title, bad priority, ...)
     ├── TooLarge(what, limit)      content or request over a configured cap
     ├── Conflict(id)               file holds git conflict markers; a person must resolve it
     ├── FileConflict(path)         a session or graph file holds conflict markers or bad lines
     ├── LinkedFolder()             the token's folder is a symbolic link (never followed)
     ├── LinkedFile(name)           a vault file, or a folder on its way, is a link (never read through)
     ├── DiskFull()                 the disk (or quota) is full: nothing was written
     ├── UnknownSession(id)         no session summary under that session id
     ├── UnknownEntity(name)        no knowledge-graph entity of that name
     └── SyncFailed(why)            git sync could not commit, fetch, merge or push (the vault is fine)

Messages never hold absolute paths, stack traces or another token. They are mapped to
tool errors in one place (``tools/common.py``) and to HTTP responses in one place (``app.py``).
"""

from __future__ import annotations

import errno
import sys

_SQLITE_FULL = 13


def quote(value: object, limit: int = 80) -> str:
    """User input as it appears in a message: quoted, and cut to ``limit`` characters, so that a
    reply never echoes a pasted document (a 840,000-character query once came back whole)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) > limit:
        return repr(text[: limit - 3]) + f"... ({len(text):,} characters)"
    return repr(text)


class MemvaultError(Exception):
    """Root of all deliberate memvault errors; ``str(err)`` is safe to show a client."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NotFound(MemvaultError):
    def __init__(self, id: str, *, archived: bool = False, in_archive: bool = False) -> None:
        self.id = id
        self.archived = archived
        self.in_archive = in_archive
        if in_archive:
            super().__init__(
                f"'{id}' is in the archive, not among the hot memories (the eviction sweep moved it). "
                f"Call restore_memory(filename='{id}') to bring it back, or search_archive to read it."
            )
        elif archived:
            hint = "Call search_archive to find archived memories."
            super().__init__(f"No archived memory named '{id}'. {hint}")
        else:
            hint = "Call list_memory_titles to see the names."
            super().__init__(f"No memory named '{id}'. {hint}")


class InvalidName(MemvaultError):
    def __init__(self, value: str, why: str) -> None:
        self.value = value
        self.why = why
        super().__init__(
            f"Invalid filename {quote(value)}: {why}. Use a name from list_memory_titles, "
            "e.g. 'note-one.md' or 'projects/alpha.md'."
        )


class InvalidArgument(MemvaultError):
    def __init__(self, why: str) -> None:
        self.why = why
        super().__init__(why)


class TooLarge(MemvaultError):
    def __init__(
        self, what: str, size: int, limit: int, advice: str = "Split it into several smaller memories."
    ) -> None:
        self.what = what
        self.size = size
        self.limit = limit
        super().__init__(f"{what} is {size:,} characters; the limit is {limit:,}. {advice}")


class Conflict(MemvaultError):
    def __init__(self, id: str) -> None:
        self.id = id
        super().__init__(
            f"'{id}' holds git merge conflict markers (<<<<<<<, =======, >>>>>>>), so the server "
            "will not write it. Ask the user to resolve the conflict in an editor and commit; "
            "until then the memory can still be read."
        )


class FileConflict(MemvaultError):
    """A session or graph file git left conflict markers in (or that does not parse)."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(
            f"'{path}' holds git merge conflict markers or lines that do not parse, so the server "
            "will not write it. Ask the user to resolve it in an editor and commit; until then "
            "what it holds can still be read."
        )


class LinkedFolder(MemvaultError):
    def __init__(self) -> None:
        super().__init__(
            "This vault's folder is a symbolic link, which memvault never follows (it could lead into "
            "another vault or out of the memories folder), so nothing was read or written. Ask the user "
            "to replace the link with a real folder."
        )


class LinkedFile(MemvaultError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"{quote(name)} in this vault is a symbolic link, which memvault never reads through (it "
            "could lead into another vault or out of the memories folder), so it was not read. Ask the "
            "user to replace the link with the file or folder itself."
        )


class DiskFull(MemvaultError):
    def __init__(self) -> None:
        super().__init__(
            "The disk is full (or over its quota), so nothing was written. Ask the user to free some "
            "space, then try again."
        )


def is_disk_full(exc: BaseException) -> bool:
    """True for the ways a full disk shows: ENOSPC/EDQUOT from the OS, SQLITE_FULL from SQLite."""
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    sqlite3 = sys.modules.get("sqlite3")  # not imported (a loader helper): no SQLite error to be
    if sqlite3 is not None and isinstance(exc, sqlite3.OperationalError):
        return getattr(exc, "sqlite_errorcode", None) == _SQLITE_FULL or "disk is full" in str(exc)
    return False


class UnknownSession(MemvaultError):
    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        super().__init__(
            f"No session {quote(session_id)}. Call list_summaries to see the session ids, "
            "or upsert_summary to start this session."
        )


class UnknownEntity(MemvaultError):
    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(
            f"No entity named {quote(name)}; nothing was changed. Create it with create_entities first, "
            "or call search_nodes to find the exact name."
        )


class SyncFailed(MemvaultError):
    """Git sync could not run a step; the message is git's own words, cleaned of paths and credentials."""

    def __init__(self, why: str, command: str = "") -> None:
        self.why = why
        self.command = command
        super().__init__(why)
