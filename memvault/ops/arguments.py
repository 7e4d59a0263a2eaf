"""Arguments of the memory operations, checked before anything is read or written; each says what to do."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memvault.disk.markdown import PRIORITIES, clean_tags
from memvault.errors import InvalidArgument, TooLarge, quote
from memvault.ops.edits import Edit

MAX_TITLE_CHARS = 200
MAX_QUERY_CHARS = 2048  # as the graph tools (and the official memory server's search_nodes)


def check_query(query: str | None) -> str | None:
    """A search query of a bounded length: a pasted document is not a query, and its words would
    cost the search (on the event loop) and the embedder time and memory for nothing."""
    if query is not None and len(query) > MAX_QUERY_CHARS:
        raise TooLarge(
            "query", len(query), MAX_QUERY_CHARS, "Search with a few words the memory would contain."
        )
    return query


def check_title(title: str) -> str:
    title = (title or "").strip()
    if not title:
        raise InvalidArgument("title is empty; give the memory a short title.")
    if "\n" in title or "\r" in title:
        raise InvalidArgument("title must be one line; put details in content.")
    if len(title) > MAX_TITLE_CHARS:
        raise TooLarge("title", len(title), MAX_TITLE_CHARS, "Shorten it; details belong in content.")
    return title


def check_content(content: str, limit: int) -> str:
    if content is None or not content.strip():
        raise InvalidArgument("content is empty; say what the memory should hold.")
    if len(content) > limit:
        raise TooLarge("content", len(content), limit)
    return content


def check_priority(priority: str | None) -> str | None:
    if priority is None:
        return None
    value = priority.strip().upper()
    if value not in PRIORITIES:
        raise InvalidArgument(
            f"priority must be P0 (permanent), P1 (90 days) or P2 (30 days), not {quote(priority)}."
        )
    return value


def check_importance(importance: float | None) -> None:
    if importance is not None and not 0.0 <= importance <= 1.0:
        raise InvalidArgument("importance must be between 0 and 1.")


def update_fields(
    id: str,
    priority: str | None,
    tags: Sequence[str] | None,
    importance: float | None,
    edit: Edit,
    title: str | None,
    limit: int,
) -> dict[str, Any]:
    """The frontmatter fields an update sets, its content checked; refuses an update of nothing."""
    if edit.content is not None:
        check_content(edit.content, limit)
    for name, part in (("append", edit.append), ("newText", edit.new_text)):
        if part is not None and len(part) > limit:
            raise TooLarge(name, len(part), limit, f"Make the {name} shorter, or write a new memory.")
    prio = check_priority(priority)
    check_importance(importance)
    fields: dict[str, Any] = {}
    if prio is not None:
        fields["priority"] = prio
    if tags is not None:
        fields["tags"] = list(clean_tags(tags))
    if importance is not None:
        fields["importance"] = importance
    if not fields and title is None and not edit.given:
        raise InvalidArgument(
            f"Nothing to change in '{id}': give content, append, section with content, oldText with "
            "newText, title, priority, tags or importance."
        )
    return fields
