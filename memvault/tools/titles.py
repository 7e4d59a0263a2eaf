"""Every tool's title: the short name a client shows a person (the tool's name is for the model)."""

from __future__ import annotations

TITLES = {
    # memories
    "list_memory_titles": "List memories",
    "read_memory": "Read memories",
    "write_memory": "Write memory",
    "update_memory": "Update memory",
    "delete_memory": "Delete memory",
    "search_archive": "Search archive",
    "restore_memory": "Restore memory",
    "evict_memories": "Evict stale memories",
    # recall
    "recall": "Recall",
    "memory_stats": "Memory stats",
    # sessions
    "upsert_summary": "Save summary",
    "append_summary": "Append to summary",
    "get_summary": "Read summary",
    "list_summaries": "List summaries",
    "update_summary_metadata": "Edit summary metadata",
    "get_session_history": "Summary history",
    # the knowledge graph
    "create_entities": "Create entities",
    "create_relations": "Create relations",
    "add_observations": "Add observations",
    "delete_entities": "Delete entities",
    "delete_observations": "Delete observations",
    "delete_relations": "Delete relations",
    "read_graph": "Read graph",
    "search_nodes": "Search graph",
    "open_nodes": "Open entities",
}
