"""The mem-mcp tools over markdown memories: list, read, write, update, delete, archive, evict."""

from __future__ import annotations

from typing import Annotated

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import Field

from memvault.config import Settings
from memvault.errors import quote
from memvault.markdown import Memory
from memvault.store import Found, Store
from memvault.tools.common import (
    CHANGES,
    CREATES,
    MOVES,
    READ_ONLY,
    Reply,
    fit_names,
    handles_errors,
    show_time,
    text,
    token_of,
)


def render_memory(memory: Memory) -> str:
    facts = [memory.id, memory.priority]
    if memory.tags:
        facts.append("tags: " + ", ".join(memory.tags))
    if memory.importance is not None:
        facts.append(f"importance: {memory.importance:g}")
    if memory.updated_at:
        facts.append("updated " + show_time(memory.updated_at))
    if memory.conflicted:
        facts.append("HAS GIT CONFLICT MARKERS (read-only until resolved)")
    if memory.problem:
        facts.append(f"read-only until fixed: {memory.problem}")
    return f"## {memory.title}\n[{' | '.join(facts)}]\n{memory.content}\n"


def render_found(found: Found, settings: Settings, *, what: str, query: str | None) -> tuple[str, int]:
    """The reply text, and how many of found.memories it shows in full (the rest were left out)."""
    if not found.memories:
        where = "archive" if what == "archived" else "hot memories"
        hint = (
            " Try other words, or search_archive for older memories."
            if what != "archived"
            else " Try other words, or read_memory for hot memories."
        )
        return (f"No {where} match {quote(query)}.{hint}" if query else f"No {where} yet."), 0
    reply = Reply(settings.max_reply_chars)
    head = f"{found.total} {what} memor{'y' if found.total == 1 else 'ies'}"
    if query:
        head += (
            f" match {quote(query)}"
            if found.matched_all
            else f" match some words of {quote(query)} (none match all)"
        )
    shown = 0
    body = Reply(settings.max_reply_chars - len(head) - 300)
    for memory in found.memories:
        if not body.add(render_memory(memory)):
            break
        shown += 1
    left = found.total - shown
    reply.add(head + (f"; showing {shown}:" if left else ":"))
    reply.parts.extend(body.parts)
    # The notes below must fit in what is left of the budget (the body kept 300 characters for them).
    if left:
        note = (
            f"[{left} more left out to keep this reply short.{{}} Narrow the query, or pass "
            "filenames=[...] to read specific ones.]"
        )
        rest = [m.id for m in found.memories[shown:]][:20]
        room = settings.max_reply_chars - len(reply.text()) - len(note) - 80
        names = fit_names(rest, room - len(" Next: .")) if rest else ""
        reply.parts.append(note.format(f" Next: {names}." if names else ""))
    if found.missing:
        room = settings.max_reply_chars - len(reply.text()) - 60
        missing = fit_names(found.missing, room)
        reply.parts.append(f"[Not found: {missing}. Call list_memory_titles for names.]")
    return reply.text(), shown


# ---------------------------------------------------------------------------- tools


def register_memory_tools(server: MCPServer, store: Store, settings: Settings) -> None:
    @server.tool(annotations=READ_ONLY, structured_output=False)
    @handles_errors
    async def list_memory_titles(ctx: Context) -> CallToolResult:
        """List every hot memory, one per line: filename|title|priority|lastAccessedAt.

        A fifth field flags a file a person must fix (git conflict markers, broken frontmatter).
        """
        rows = await store.list_hot(token_of(ctx))
        if not rows:
            return text("No memories yet. Save one with write_memory.")
        reply = Reply(settings.max_reply_chars)
        shown = 0
        for memory, last in rows:
            line = f"{memory.id}|{memory.title.replace('|', '/')}|{memory.priority}|{show_time(last)}"
            if memory.conflicted:
                line += "|CONFLICT: git conflict markers, read-only until a person resolves them"
            elif memory.problem:
                line += f"|NEEDS FIXING: {memory.problem}"
            if not reply.add(line):
                break
            shown += 1
        if shown < len(rows):

            def note(n: int) -> str:
                return f"[{n} more left out to keep this reply short; use read_memory(query=...) to search.]"

            # Make room for the note within the budget.
            budget = settings.max_reply_chars
            while reply.parts and len(reply.text()) + 1 + len(note(len(rows) - shown)) > budget:
                reply.parts.pop()
                shown -= 1
            reply.parts.append(note(len(rows) - shown))
        return text(reply.text())

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @handles_errors
    async def read_memory(
        ctx: Context,
        query: Annotated[
            str | None, Field(description="Words to search for in titles, filenames, tags and bodies.")
        ] = None,
        filenames: Annotated[
            list[str] | None, Field(description="Exact memory filenames to read (from list_memory_titles).")
        ] = None,
        limit: Annotated[
            int | None, Field(description="Most memories to return (default 10 for a query).")
        ] = None,
    ) -> CallToolResult:
        """Read hot memories: the best matches for a query, the named files, or all of them.

        Every query word must match (typos and word prefixes are tolerated); when no memory
        matches all words, the memories matching the most words are returned.
        """
        token = token_of(ctx)
        found = await store.find(token, query=query, filenames=filenames, limit=limit)
        reply, shown = render_found(found, settings, what="hot", query=query)
        # Only what the agent actually saw counts as an access.
        await store.touch(token, found.memories[:shown], hit=not filenames)
        return text(reply)

    @server.tool(annotations=CREATES, structured_output=False)
    @handles_errors
    async def write_memory(
        ctx: Context,
        title: Annotated[str, Field(description="Short title; it also names the file.")],
        content: Annotated[str, Field(description="The memory itself, in markdown.")],
        priority: Annotated[
            str | None,
            Field(description="P0 permanent, P1 project (90 days), P2 temporary (30 days, default)."),
        ] = None,
        tags: Annotated[list[str] | None, Field(description="Optional tags.")] = None,
        importance: Annotated[float | None, Field(description="Optional importance from 0 to 1.")] = None,
        supersedes: Annotated[
            list[str] | None,
            Field(
                description="Filenames of memories this one replaces; they are archived, marked supersededBy."
            ),
        ] = None,
    ) -> CallToolResult:
        """Save a new memory as a markdown file and return its filename. Never overwrites another memory.

        With supersedes, the outdated memories it replaces are archived (P0 ones stay; the reply says so).
        """
        written = await store.write_superseding(
            token_of(ctx),
            title=title,
            content=content,
            priority=priority,
            tags=tags,
            importance=importance,
            supersedes=supersedes,
        )
        memory = written.memory
        if written.reused:
            return text(f"Already saved as {memory.id} a moment ago; no duplicate written.")
        reply = f"Saved as {memory.id} ({memory.priority})."
        if written.superseded:
            moved = [old if old == new else f"{old} (as archive/{new})" for old, new in written.superseded]
            reply += f" Superseded and archived: {', '.join(moved)}."
        for id, why in written.kept:
            reply += (
                f" NOT superseded: {id}, because {why}; it stays as it is. If it is really outdated, "
                "change its priority with update_memory first, or delete it."
            )
        return text(reply)

    @server.tool(annotations=CHANGES, structured_output=False)
    @handles_errors
    async def update_memory(
        ctx: Context,
        filename: Annotated[str, Field(description="The memory's filename, from list_memory_titles.")],
        title: Annotated[str | None, Field(description="New title (the filename stays).")] = None,
        content: Annotated[str | None, Field(description="New content; replaces the old content.")] = None,
        priority: Annotated[str | None, Field(description="New priority: P0, P1 or P2.")] = None,
        tags: Annotated[list[str] | None, Field(description="New tags; replace the old ones.")] = None,
        importance: Annotated[float | None, Field(description="New importance from 0 to 1.")] = None,
    ) -> CallToolResult:
        """Change a memory in place; fields not given stay as they are. The filename does not change."""
        memory = await store.update(
            token_of(ctx),
            filename,
            title=title,
            content=content,
            priority=priority,
            tags=tags,
            importance=importance,
        )
        return text(f"Updated {memory.id}.")

    @server.tool(annotations=CHANGES, structured_output=False)
    @handles_errors
    async def delete_memory(
        ctx: Context,
        filename: Annotated[str, Field(description="The memory's filename, from list_memory_titles.")],
    ) -> CallToolResult:
        """Delete a hot memory's file for good."""
        id = await store.delete(token_of(ctx), filename)
        return text(f"Deleted {id}.")

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @handles_errors
    async def search_archive(
        ctx: Context,
        query: Annotated[str, Field(description="Words to search for in archived memories.")],
        limit: Annotated[int | None, Field(description="Most memories to return (default 10).")] = None,
    ) -> CallToolResult:
        """Search memories that were archived as stale. Bring one back with restore_memory."""
        found = await store.find(token_of(ctx), query=query, limit=limit, archived=True)
        return text(render_found(found, settings, what="archived", query=query)[0])

    @server.tool(annotations=MOVES, structured_output=False)
    @handles_errors
    async def restore_memory(
        ctx: Context,
        filename: Annotated[str, Field(description="The archived memory's filename, from search_archive.")],
    ) -> CallToolResult:
        """Move an archived memory back to the hot memories."""
        id = await store.restore(token_of(ctx), filename)
        return text(f"Restored as {id}.")

    @server.tool(annotations=MOVES, structured_output=False)
    @handles_errors
    async def evict_memories(
        ctx: Context,
        dryRun: Annotated[bool, Field(description="Only report what would be archived.")] = False,
    ) -> CallToolResult:
        """Archive stale memories now (P1 after 90 days, P2 after 30 days without access, then over capacity)."""  # noqa: E501
        evicted = await store.evict(token_of(ctx), dry_run=dryRun)
        if not evicted:
            return text("Nothing to archive: every hot memory is fresh and within capacity.")
        verb = "Would archive" if dryRun else "Archived"
        lines = [f"{verb} {len(evicted)} memor{'y' if len(evicted) == 1 else 'ies'}:"]
        lines += [
            f"- {e.id}: {e.reason}"
            + (f" (now archive/{e.archived_as})" if e.archived_as and e.archived_as != e.id else "")
            for e in evicted
        ]
        reply = Reply(settings.max_reply_chars)
        for line in lines:
            if not reply.add(line):
                reply.parts.append(f"[... and more; {len(evicted)} in all]")
                break
        return text(reply.text())
