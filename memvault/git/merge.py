"""The merge driver's decision: which merge a file takes, by its path, and what it gives back.

Pure functions of bytes (the command line writes the result, see ``memvault merge-file``). A file
memvault owns never gets conflict markers: the graph and session files merge entry by entry, a
memory field by field and line by line, and when two bodies truly conflict the other version is
kept whole beside it as a sibling memory. Any other file merges as ``git merge-file`` would.
"""

from __future__ import annotations

from pathlib import PurePosixPath

from memvault.disk.names import SESSIONS_DIR
from memvault.git.mergegraph import merge_graph
from memvault.git.mergememory import Merged, merge_lines, merge_memory
from memvault.git.mergesessions import merge_history, merge_session_markdown
from memvault.records.summaryfiles import HISTORY_SUFFIX

GRAPH_FILE = "graph.jsonl"
__all__ = ["Merged", "kind_of", "merge_file", "resolve_modify_delete"]


def kind_of(path: str) -> str | None:
    """Which merge a file takes: "graph", "history", "session" (a summary's markdown), "memory"
    (any other markdown file), or None (not a file memvault owns)."""
    pure = PurePosixPath(path.replace("\\", "/"))
    in_sessions = pure.parent.name == SESSIONS_DIR
    if pure.name == GRAPH_FILE:
        return "graph"
    if in_sessions and pure.name.endswith(HISTORY_SUFFIX):
        return "history"
    if pure.suffix.lower() == ".md":
        return "session" if in_sessions else "memory"
    return None


def merge_file(base: bytes, ours: bytes, theirs: bytes, path: str, *, memory_id: str | None = None) -> Merged:
    """Merge two sides' versions of ``path`` (repository-relative, ``/``-separated) against their
    common base. ``memory_id`` names the memory in a sibling's ``conflictOf`` (default: the file's
    name)."""
    kind = kind_of(path)
    memory_id = memory_id or PurePosixPath(path).name
    if kind == "graph":
        return Merged(merge_graph(base, ours, theirs))
    if kind == "history":
        return Merged(merge_history(base, ours, theirs))
    if kind == "session":
        return merge_session_markdown(base, ours, theirs, path=path, memory_id=memory_id)
    if kind == "memory":
        return merge_memory(base, ours, theirs, path=path, memory_id=memory_id)
    data, clean = merge_lines(base, ours, theirs)
    return Merged(data, clean)


def resolve_modify_delete(base: bytes | None, ours: bytes | None, theirs: bytes | None) -> bytes | None:
    """What a path becomes when one side deleted it and the other changed it (git's modify/delete,
    which never reaches a merge driver): the change is kept, so no edit is ever lost to a deletion
    (an eviction, a person's clean-up). None: the path stays deleted (both sides deleted it, or one
    deleted it and the other left it as the base had it)."""
    if ours is None and theirs is None:
        return None
    if ours is None:
        return None if theirs == base else theirs
    if theirs is None:
        return None if ours == base else ours
    return ours
