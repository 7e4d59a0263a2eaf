"""The Memory of a file the server just wrote, built from what it wrote instead of parsing its bytes."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memvault.clock import parse_time
from memvault.disk.files import Stamp
from memvault.disk.markdown import (
    DEFAULT_PRIORITY,
    LITERAL_MARKERS,
    MAX_INDEXED_BYTES,
    NO_META,
    PRIORITIES,
    Memory,
    _later,
    _plain_frontmatter,
    _split,
    _tags,
    _time,
    content_hash,
    make_memory,
)

# A write's own bytes are parsed by parse_memory's rules; these are the cases where the outcome is
# known without the parse. Anything else (line endings, conflict-like lines, a frontmatter YAML
# must read, a missing time) returns None and the caller parses, as before.
_UNSURE = (b"\r", b"<<<<<<<", b"\xef\xbb\xbf")


def _plain_bytes(data: bytes) -> bool:
    return len(data) < MAX_INDEXED_BYTES and not any(mark in data for mark in _UNSURE)


def created(id: str, title: str, content: str, text: str, data: bytes, stamp: Stamp) -> Memory | None:
    """``parse_memory(data, id, **stamp)`` for ``text`` = render_new(title, content, ...) as written
    (``data`` its UTF-8), or None where the parse must decide. The parse of a new file's bytes was
    a seventh of a write's own work on the event loop."""
    if not title or title != title.strip() or "\n" in title or not _plain_bytes(data):
        return None
    fm_text, _, broken = _split(text)
    if fm_text is None or broken is not None:
        return None
    meta = _plain_frontmatter(fm_text)
    if meta is None or "title" in meta:
        return None
    # render_new's body: `# title`, a blank line, the content stripped, the created footer.
    return _finish(id, title, content.strip(), meta, False, data, stamp)


def rewritten(current: Memory, text: str, data: bytes, stamp: Stamp) -> Memory | None:
    """``parse_memory(data, current.id, archived=current.archived, **stamp)`` for ``text`` =
    rewrite(the bytes ``current`` was parsed from, owned fields, title=None, content=None), or None
    where the parse must decide. Only frontmatter lines of owned keys changed: the body, and with
    it the title and content, are what ``current`` holds."""
    if (
        current.meta is NO_META  # parsed without its frontmatter mapping (keep_meta=False)
        or not current.has_frontmatter
        or not current.writable
        or LITERAL_MARKERS in current.meta
        or not _plain_bytes(data)
    ):
        return None
    fm_text, _, broken = _split(text)
    if fm_text is None or broken is not None:
        return None
    meta = _plain_frontmatter(fm_text)
    if meta is None:
        return None
    return _finish(current.id, current.title, current.content, meta, current.archived, data, stamp)


def _finish(
    id: str, title: str, content: str, meta: dict[str, Any], archived: bool, data: bytes, stamp: Stamp
) -> Memory | None:
    """The rest of parse_memory's fields from the frontmatter, as memory_fields makes them."""
    created_at = _time(meta.get("createdAt"))
    if created_at is None:
        return None  # the parse would look for a footer, then at the file's time
    priority: Any = meta.get("priority", DEFAULT_PRIORITY)
    if priority.__class__ is not str or priority not in PRIORITIES:
        priority = str(priority).strip().upper()
        if priority not in PRIORITIES:
            priority = DEFAULT_PRIORITY
    importance = meta.get("importance")
    try:
        importance_value = None if importance is None else min(1.0, max(0.0, float(importance)))
    except (TypeError, ValueError):
        importance_value = None
    updated: datetime | None = _time(meta.get("updatedAt")) or created_at
    imported = meta.get("importedAt")
    if imported is not None:
        updated = _later(updated, parse_time(imported))
    return make_memory(
        id, title, content, priority, created_at, updated, _time(meta.get("lastAccessedAt")),
        _tags(meta.get("tags")), importance_value, archived, meta, True, None, False,
        stamp["mtime_ns"], stamp["size"], stamp["change"], content_hash(data),
    )  # fmt: skip
