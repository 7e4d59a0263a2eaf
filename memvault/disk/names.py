"""Names: tokens, memory ids (safe relative paths), slugs for new files, the archive key."""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

from memvault.errors import InvalidName

ARCHIVE = "archive"
STATE_DIR = ".memvault"
SNAPSHOT_FILE = "snapshot.npz"  # the index snapshot, in STATE_DIR (memvault.load.snapshot)
LOCK_FILE = "lock"  # the cross-process lock, in STATE_DIR (memvault.disk.vault.folder_lock)
# Reserved in a token folder: the session files and the knowledge graph (memvault.records.sync).
SESSIONS_DIR = "sessions"
GRAPH_FILE = "graph.jsonl"
MAX_NAME_CHARS = 255
MAX_ID_CHARS = 1024
SLUG_MAX = 80
SLUG_MAX_BYTES = 240  # leaves room for "-NNNN.md" under the usual 255-byte file name limit
TOKEN_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SLUG_DROP = re.compile(r"[\W_]+")


def key(id: str, archived: bool) -> str:
    """A memory's id relative to the token folder: archived ones under ``archive/``."""
    return f"{ARCHIVE}/{id}" if archived else id


def split_key(key: str) -> tuple[str, bool]:
    """Inverse of :func:`key`: (id, archived)."""
    if key.startswith(f"{ARCHIVE}/"):
        return key[len(ARCHIVE) + 1 :], True
    return key, False


def valid_token(token: str) -> bool:
    """Tokens name a folder: a strict pattern, never only dots, checked before any file access."""
    return bool(TOKEN_RE.fullmatch(token)) and token.strip(".") != "" and token != STATE_DIR


def slugify(title: str) -> str:
    """Readable filename stem: NFKC, lowercase, letters and digits kept, other runs to '-'."""
    text = unicodedata.normalize("NFKC", title).lower()
    slug = _SLUG_DROP.sub("-", text).strip("-")
    slug = slug[:SLUG_MAX]
    while len(slug.encode("utf-8")) > SLUG_MAX_BYTES:  # 4-byte letters (CJK extension B) x 80
        slug = slug[:-1]
    slug = slug.rstrip("-")
    return slug or "memory"


_CONTROL = re.compile(r"[\x00-\x1f]")  # control characters (what ord(ch) < 32 is)


def check_id(name: str) -> str:
    """Validate a memory name from a client and return its id (with '.md'). Raises InvalidName."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidName(str(name), "it is empty")
    value = name.strip()
    if "\x00" in value:
        raise InvalidName(value.replace("\x00", "\\0"), "it contains a NUL character")
    if "\\" in value:
        raise InvalidName(value, "backslashes are not allowed; use '/' between folders")
    if value.startswith("/") or re.match(r"^[A-Za-z]:", value) or value.startswith("~"):
        raise InvalidName(value, "it must be relative to your vault, not an absolute path")
    if len(value) > MAX_ID_CHARS:
        raise InvalidName(value, f"it is longer than {MAX_ID_CHARS} characters")
    if not value.lower().endswith(".md"):
        value += ".md"
    parts = value.split("/")
    if parts[0] == SESSIONS_DIR and len(parts) > 1:
        raise InvalidName(name, f"'{SESSIONS_DIR}/' holds the session summaries; pick another folder")
    for part in parts:
        if part in ("", ".", ".."):
            raise InvalidName(name, "empty, '.' or '..' path segments are not allowed")
        if part.startswith("."):
            raise InvalidName(name, "names starting with '.' are hidden files, not memories")
        if len(part.encode("utf-8")) > MAX_NAME_CHARS:
            raise InvalidName(name, f"a path segment is longer than {MAX_NAME_CHARS} bytes")
        if _CONTROL.search(part):
            raise InvalidName(name, "control characters are not allowed")
    return value


def is_memory_path(rel_parts: Sequence[str]) -> bool:
    """A file (parts relative to the hot or archive folder) that counts as a memory."""
    return (
        bool(rel_parts)
        and rel_parts[-1].endswith(".md")
        and not any(p.startswith(".") for p in rel_parts)
        and not (len(rel_parts) > 1 and rel_parts[0] == SESSIONS_DIR)
    )
