"""The server's instructions: when to use which tool, for the tool groups this server serves."""

from __future__ import annotations

from collections.abc import Collection

OPENING = "memvault keeps your long-term memory as markdown files the user can also read and edit."

PARTS = {
    "recall": (
        "To find what you know, call recall(query) first: one short line per memory, best first, "
        "cheap in tokens. Then read_memory(filenames=[...]) for the full text of the few you need."
    ),
    "memories": (
        "read_memory(query=...) returns whole memories that contain the words; list_memory_titles "
        "lists them all. Save what is worth keeping with write_memory (priority P0 = permanent, "
        "P1 = project, kept 90 days without use, P2 = temporary, 30 days). Stale memories move to "
        "an archive on their own; search_archive and restore_memory bring them back."
    ),
    "sessions": (
        "Keep a running summary of a conversation with append_summary or upsert_summary under one "
        "sessionId; get_summary reads it back in a later conversation."
    ),
    "graph": "The knowledge graph tools hold facts about people and things as entities and relations.",
}


def instructions(groups: Collection[str]) -> str:
    """The instructions for a server that serves these tool groups (MEMVAULT_TOOLS)."""
    return "\n".join([OPENING, *(text for group, text in PARTS.items() if group in groups)])
