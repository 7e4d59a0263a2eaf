"""The recall and memory_stats tools: hybrid ranking in compact lines."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from memvault.config import Settings
from memvault.errors import quote
from memvault.git.running import stale_note
from memvault.ops.arguments import check_query
from memvault.ops.recall import STALE_DAYS, Recall, Recalled, Recaller, Stats, accessed
from memvault.ops.store import Store
from memvault.tools.common import (
    READ_ONLY,
    Reply,
    Tools,
    joined,
    noticed,
    read_only_call,
    show_time,
    text,
    token_of,
    tool,
)

# ---------------------------------------------------------------------------- recall


def _recall_line(hit: Recalled) -> str:
    name = hit.memory.path_id
    title = hit.memory.title.replace("|", "/")
    return f"{name} | {title} | {hit.score:.2f} | {hit.snippet}"


def render_recall(found: Recall, query: str, budget: int) -> tuple[str, int]:
    """Compact lines, best first, within the budget; returns the text and how many results it shows."""
    archived = ""
    if found.in_archive:
        n = found.in_archive
        archived = (
            f" {n} archived memor{'y' if n == 1 else 'ies'} also match{'es' if n == 1 else ''}: "
            "includeArchive=true shows them."
        )
    if not found.results:
        if archived:
            return f"No hot memory matches {quote(query)}.{archived}", 0
        return (
            f"Nothing matches {quote(query)}. Try other words, includeArchive=true, or list_memory_titles.",
            0,
        )
    how = f"words and {found.vectors} vectors" if found.vectors else "words only (vectors not ready)"
    count = len(found.results)
    head = f"{count} memor{'y' if count == 1 else 'ies'} for {quote(query)} ({how}), best first:"
    if not found.worded:
        head = (
            f"No memory holds the words of {quote(query)}; the {count} closest in meaning "
            f"({found.vectors} vectors), best first:"
        )
    tail = "Read one in full with read_memory(filenames=[...])." + archived
    reply = Reply(budget - len(tail) - 80)
    reply.add(head)
    shown = 0
    for hit in found.results:
        if not reply.add(_recall_line(hit)):
            break
        shown += 1
    if shown < len(found.results):
        reply.parts.append(f"[{count - shown} more left out to keep this reply short; lower limit.]")
    if any(hit.memory.archived for hit in found.results[:shown]):
        tail += " archive/... ones are archived: restore_memory brings one back."
    reply.parts.append(tail)
    return reply.text(), shown


def render_stats(stats: Stats) -> str:
    hot = sum(stats.hot.values())
    lines = [
        f"Memories: {hot} hot ({', '.join(f'{p} {n}' for p, n in stats.hot.items())}), "
        f"{stats.archived} archived.",
    ]
    model = stats.embedder or "loading"
    vectors = f"Vectors: {stats.embedded}/{stats.rows} memories embedded with {model}"
    vectors += f" ({stats.pending} pending)." if stats.pending else "."
    if stats.fallback:
        vectors += f" Fallback: {stats.fallback}."
    lines.append(vectors)
    if stats.searches:
        rate = 100.0 * stats.misses / stats.searches
        lines.append(f"Searches: {stats.searches}, {stats.misses} found nothing ({rate:.1f}% miss rate).")
    else:
        lines.append("Searches: none yet.")
    stale = f"Not accessed in {STALE_DAYS} days: {len(stats.stale)} hot memor"
    stale += "y" if len(stats.stale) == 1 else "ies"
    lines.append(stale + (f" ({joined(stats.stale, 300)})." if stats.stale else "."))
    if stats.oldest is not None and stats.newest is not None:
        lines.append(
            f"Oldest: {stats.oldest.id} ({show_time(stats.oldest.created_at)}); "
            f"newest: {stats.newest.id} ({show_time(stats.newest.created_at)})."
        )
    if stats.last_sweep is not None:
        at, what = stats.last_sweep
        lines.append(f"Last sweep that archived ({show_time(at)}): {what}; search_archive finds them.")
    if stats.next_eviction:
        items = [f"{e.id} ({e.reason})" for e in stats.next_eviction]
        lines.append(f"Next eviction would archive {len(items)}: {joined(items, 1500)}.")
    else:
        lines.append("Next eviction would archive nothing.")
    return "\n".join(lines)


class RecallTools(Tools):
    """recall (hybrid ranking over words and vectors) and memory_stats (the vault's health)."""

    def __init__(self, store: Store, recaller: Recaller, settings: Settings) -> None:
        self.store = store
        self.recaller = recaller
        self.settings = settings

    @tool("Recall", READ_ONLY)
    async def recall(
        self,
        ctx: Context,
        query: Annotated[str, Field(description="What you look for, in your words.")],
        limit: Annotated[int, Field(description="Most results (default 10, at most 100).")] = 10,
        includeArchive: Annotated[bool, Field(description="Also search the archive.")] = False,
        tags: Annotated[list[str] | None, Field(description="Only memories with all these tags.")] = None,
        priority: Annotated[str | None, Field(description="Only these, e.g. P0 or P0,P1.")] = None,
        after: Annotated[str | None, Field(description="Created at or after (ISO date, UTC).")] = None,
        before: Annotated[str | None, Field(description="Created before (ISO date, UTC).")] = None,
    ) -> CallToolResult:
        """Find memories by meaning and words, best first: filename | title | score | snippet per line."""
        token = token_of(ctx)
        check_query(query)
        found = await self.recaller.recall(
            token,
            query,
            limit=limit,
            include_archive=includeArchive,
            tags=tags,
            priority=priority,
            after=after,
            before=before,
        )
        reply, shown = render_recall(found, query, self.settings.max_reply_chars)
        hot = [hit.memory for hit in accessed(found.results[:shown]) if not hit.memory.archived]
        await self.store.touch(token, hot, read_only=read_only_call(ctx))
        return text(noticed(self.store, token, reply))

    @tool("Memory stats", READ_ONLY)
    async def memory_stats(self, ctx: Context) -> CallToolResult:
        """Vault health: counts, vector coverage, search misses, unused memories, next eviction."""
        token = token_of(ctx)
        stats = await self.recaller.stats(token)
        note = stale_note(self.settings.root)  # git sync failing for a while (MEMVAULT_SYNC=git)
        return text(noticed(self.store, token, render_stats(stats) + (f"\n{note}" if note else "")))
