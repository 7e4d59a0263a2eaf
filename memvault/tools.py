"""The MCP tools: argument shapes, reply text and the one place errors become tool errors."""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Annotated, Any, ParamSpec

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from memvault import __version__
from memvault.config import Settings
from memvault.errors import MemvaultError
from memvault.store import Found, Store
from memvault.vault import Memory, format_time

log = logging.getLogger("memvault")
P = ParamSpec("P")

READ_ONLY = ToolAnnotations(read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False)
CREATES = ToolAnnotations(read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False)
CHANGES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False)
MOVES = ToolAnnotations(read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False)

INSTRUCTIONS = """\
memvault keeps your long-term memories as markdown files the user can read and edit.
Call list_memory_titles or read_memory(query=...) at the start of a task to recall what you know;
write_memory to save something worth keeping (priority P0 = permanent, P1 = project, kept 90 days
without use, P2 = temporary, kept 30 days). Stale memories move to an archive on their own;
search_archive and restore_memory bring them back."""


def token_of(ctx: Context) -> str:
    """The token always comes from the path of the request being served."""
    request = ctx.request_context.request
    token = getattr(request, "path_params", {}).get("token")
    if not isinstance(token, str):
        raise MemvaultError("This endpoint has no token; connect to /mcp/<token>.")
    return token


def text(message: str, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=error)


def handles_errors(fn: Callable[P, Awaitable[CallToolResult]]) -> Callable[P, Awaitable[CallToolResult]]:
    """Deliberate errors become tool errors with their message; anything else, a generic one."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
        try:
            return await fn(*args, **kwargs)
        except MemvaultError as exc:
            return text(str(exc), error=True)
        except Exception:
            log.exception("tool %s failed", fn.__name__)
            return text(
                f"{fn.__name__} failed because of an internal error; the server log has details. "
                "Nothing was lost; try again, or tell the user.",
                error=True,
            )

    return wrapper


# ---------------------------------------------------------------------------- reply text


def _time(at: datetime | None) -> str:
    return format_time(at) if at else ""


def render_memory(memory: Memory) -> str:
    facts = [memory.id, memory.priority]
    if memory.tags:
        facts.append("tags: " + ", ".join(memory.tags))
    if memory.importance is not None:
        facts.append(f"importance: {memory.importance:g}")
    if memory.updated_at:
        facts.append("updated " + _time(memory.updated_at))
    if memory.conflicted:
        facts.append("HAS GIT CONFLICT MARKERS (read-only until resolved)")
    if memory.problem:
        facts.append(f"broken frontmatter: {memory.problem}")
    return f"## {memory.title}\n[{' | '.join(facts)}]\n{memory.content}\n"


class Reply:
    """Builds a reply within the character budget and says what had to be left out."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.parts: list[str] = []
        self.used = 0

    def add(self, part: str) -> bool:
        if self.used + len(part) > self.budget:
            if self.parts:
                return False
            # A single item larger than the whole budget is cut, and says so.
            keep = max(0, self.budget - 200)
            part = part[:keep] + f"\n[... cut: {len(part) - keep:,} more characters over the reply limit]\n"
        self.parts.append(part)
        self.used += len(part)
        return True

    def text(self) -> str:
        return "\n".join(self.parts)


def render_found(found: Found, settings: Settings, *, what: str, query: str | None) -> str:
    if not found.memories:
        where = "archive" if what == "archived" else "hot memories"
        hint = (
            " Try other words, or search_archive for older memories."
            if what != "archived"
            else " Try other words, or read_memory for hot memories."
        )
        return f"No {where} match {query!r}.{hint}" if query else f"No {where} yet."
    reply = Reply(settings.max_reply_chars)
    head = f"{found.total} {what} memor{'y' if found.total == 1 else 'ies'}"
    if query:
        head += f" match {query!r}" if found.matched_all else f" match some words of {query!r} (none match all)"
    shown = 0
    body = Reply(settings.max_reply_chars - len(head) - 300)
    for memory in found.memories:
        if not body.add(render_memory(memory)):
            break
        shown += 1
    left = found.total - shown
    reply.add(head + (f"; showing {shown}:" if left else ":"))
    reply.parts.extend(body.parts)
    if left:
        rest = [m.id for m in found.memories[shown:]][:20]
        names = f" Next: {', '.join(rest)}." if rest else ""
        reply.parts.append(
            f"[{left} more left out to keep this reply short.{names} Narrow the query, or pass "
            "filenames=[...] to read specific ones.]"
        )
    if found.missing:
        reply.parts.append("[Not found: " + ", ".join(found.missing) + ". Call list_memory_titles for names.]")
    return reply.text()


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
            line = f"{memory.id}|{memory.title.replace('|', '/')}|{memory.priority}|{_time(last)}"
            if memory.conflicted:
                line += "|CONFLICT: git conflict markers, read-only until a person resolves them"
            elif memory.problem:
                line += f"|BROKEN FRONTMATTER: {memory.problem}"
            if not reply.add(line):
                break
            shown += 1
        if shown < len(rows):
            reply.parts.append(
                f"[{len(rows) - shown} more left out to keep this reply short; use read_memory(query=...) to search.]"
            )
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
        limit: Annotated[int | None, Field(description="Most memories to return (default 10 for a query).")] = None,
    ) -> CallToolResult:
        """Read hot memories: the best matches for a query, the named files, or all of them.

        Every query word must match (typos and word prefixes are tolerated); when no memory
        matches all words, the memories matching the most words are returned.
        """
        token = token_of(ctx)
        found = await store.find(token, query=query, filenames=filenames, limit=limit)
        reply = render_found(found, settings, what="hot", query=query)
        await store.touch(token, found.memories, hit=not filenames)
        return text(reply)

    @server.tool(annotations=CREATES, structured_output=False)
    @handles_errors
    async def write_memory(
        ctx: Context,
        title: Annotated[str, Field(description="Short title; it also names the file.")],
        content: Annotated[str, Field(description="The memory itself, in markdown.")],
        priority: Annotated[
            str | None, Field(description="P0 permanent, P1 project (90 days), P2 temporary (30 days, default).")
        ] = None,
        tags: Annotated[list[str] | None, Field(description="Optional tags.")] = None,
        importance: Annotated[float | None, Field(description="Optional importance from 0 to 1.")] = None,
    ) -> CallToolResult:
        """Save a new memory as a markdown file and return its filename. Never overwrites another memory."""
        memory, reused = await store.write(
            token_of(ctx), title=title, content=content, priority=priority, tags=tags, importance=importance
        )
        if reused:
            return text(f"Already saved as {memory.id} a moment ago; no duplicate written.")
        return text(f"Saved as {memory.id} ({memory.priority}).")

    @server.tool(annotations=CHANGES, structured_output=False)
    @handles_errors
    async def update_memory(
        ctx: Context,
        filename: Annotated[str, Field(description="The memory's filename, from list_memory_titles.")],
        title: str | None = None,
        content: Annotated[str | None, Field(description="New content; replaces the old content.")] = None,
        priority: str | None = None,
        tags: Annotated[list[str] | None, Field(description="New tags; replace the old ones.")] = None,
        importance: float | None = None,
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
        return text(render_found(found, settings, what="archived", query=query))

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
        dryRun: Annotated[bool, Field(description="Only report what would be archived.")] = False,  # noqa: N803
    ) -> CallToolResult:
        """Archive stale memories now (P1 after 90 days, P2 after 30 days without access, then over capacity)."""
        evicted = await store.evict(token_of(ctx), dry_run=dryRun)
        if not evicted:
            return text("Nothing to archive: every hot memory is fresh and within capacity.")
        verb = "Would archive" if dryRun else "Archived"
        lines = [f"{verb} {len(evicted)} memor{'y' if len(evicted) == 1 else 'ies'}:"]
        lines += [
            f"- {e.id}: {e.reason}" + (f" (now archive/{e.archived_as})" if e.archived_as and e.archived_as != e.id else "")
            for e in evicted
        ]
        reply = Reply(settings.max_reply_chars)
        for line in lines:
            if not reply.add(line):
                reply.parts.append(f"[... and more; {len(evicted)} in all]")
                break
        return text(reply.text())


def build_server(store: Store, settings: Settings) -> MCPServer:
    server = MCPServer(name="memvault", version=__version__, instructions=INSTRUCTIONS)
    if "memories" in settings.tools:
        register_memory_tools(server, store, settings)
    return server


def tool_names(server: MCPServer) -> Sequence[str]:
    return [tool.name for tool in server._tool_manager.list_tools()]


_ = Any
