"""The MCP tools: argument shapes, reply text and the one place errors become tool errors."""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime
from typing import Annotated, Any, Literal, ParamSpec, TypeVar

import anyio.to_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ContentBlock, TextContent, ToolAnnotations
from pydantic import BaseModel, Field

from memvault import __version__
from memvault.config import Settings
from memvault.errors import InvalidArgument, MemvaultError, UnknownSession
from memvault.graph import Entity, Graph, KnowledgeGraph, Relation, SearchLimits
from memvault.sessions import SessionInfo, Sessions, check_session_id, list_sessions
from memvault.sessions import Version as SessionVersion
from memvault.sidecar import Sidecar, sidecar_path
from memvault.recall import STALE_DAYS, Recall, Recalled, Recaller, Stats
from memvault.store import Found, Store
from memvault.vault import ARCHIVE, Memory, format_time

log = logging.getLogger("memvault")
P = ParamSpec("P")
T = TypeVar("T")

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
        facts.append(f"read-only until fixed: {memory.problem}")
    return f"## {memory.title}\n[{' | '.join(facts)}]\n{memory.content}\n"


class Reply:
    """Builds a reply within the character budget and says what had to be left out."""

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.parts: list[str] = []
        self.used = 0

    def add(self, part: str) -> bool:
        sep = 1 if self.parts else 0  # text() puts a newline between parts
        if self.used + sep + len(part) > self.budget:
            if self.parts:
                return False
            # A single item larger than the whole budget is cut, and says so.
            keep = max(0, self.budget - 200)
            part = part[:keep] + f"\n[... cut: {len(part) - keep:,} more characters over the reply limit]\n"
        self.parts.append(part)
        self.used += sep + len(part)
        return True

    def text(self) -> str:
        return "\n".join(self.parts)


def render_found(found: Found, settings: Settings, *, what: str, query: str | None) -> tuple[str, int]:
    """The reply text, and how many of found.memories it shows in full (the rest were left out)."""
    if not found.memories:
        where = "archive" if what == "archived" else "hot memories"
        hint = (
            " Try other words, or search_archive for older memories."
            if what != "archived"
            else " Try other words, or read_memory for hot memories."
        )
        return (f"No {where} match {query!r}.{hint}" if query else f"No {where} yet."), 0
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
    # The notes below must fit in what is left of the budget (the body kept 300 characters for them).
    if left:
        note = (
            f"[{left} more left out to keep this reply short.{{}} Narrow the query, or pass "
            "filenames=[...] to read specific ones.]"
        )
        rest = [m.id for m in found.memories[shown:]][:20]
        room = settings.max_reply_chars - len(reply.text()) - len(note) - 80
        names = _fit(rest, room - len(" Next: .")) if rest else ""
        reply.parts.append(note.format(f" Next: {names}." if names else ""))
    if found.missing:
        room = settings.max_reply_chars - len(reply.text()) - 60
        missing = _fit(found.missing, room)
        reply.parts.append(f"[Not found: {missing}. Call list_memory_titles for names.]")
    return reply.text(), shown


def _fit(names: Sequence[str], room: int) -> str:
    """As many names as fit in ``room`` characters, comma-separated, '...' when some are dropped."""
    out = ""
    for name in names:
        longer = f"{out}, {name}" if out else name
        if len(longer) + 5 > room:
            return f"{out}, ..." if out else "..."
        out = longer
    return out


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
        limit: Annotated[int | None, Field(description="Most memories to return (default 10 for a query).")] = None,
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
            str | None, Field(description="P0 permanent, P1 project (90 days), P2 temporary (30 days, default).")
        ] = None,
        tags: Annotated[list[str] | None, Field(description="Optional tags.")] = None,
        importance: Annotated[float | None, Field(description="Optional importance from 0 to 1.")] = None,
        supersedes: Annotated[
            list[str] | None,
            Field(description="Filenames of memories this one replaces; they are archived, marked supersededBy."),
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
    if "sessions" in settings.tools:
        register_session_tools(server, store, settings)
    if "graph" in settings.tools:
        register_graph_tools(server, store, settings)
    if "recall" in settings.tools:
        register_recall_tools(server, store, settings)
    return server


def tool_names(server: MCPServer) -> Sequence[str]:
    return [tool.name for tool in server._tool_manager.list_tools()]


_ = Any


# ---------------------------------------------------------------------------- sessions and graph


async def _sidecar_to_read(store: Store, token: str) -> Sidecar | None:
    """The token's sidecar for a read, or None while it has none: a read never creates a folder."""
    state = await store.state(token)
    if state.sidecar is None:
        if not sidecar_path(state.dir).is_file():
            return None
        async with state.lock:
            await anyio.to_thread.run_sync(state.ensure_sidecar)
    return state.sidecar


async def _sidecar_write(store: Store, token: str, work: Callable[[Callable[[], Sidecar]], T]) -> T:
    """Run ``work`` under the token's lock in a worker thread; it opens (creates) the sidecar as needed."""
    state = await store.state(token)
    async with state.lock:
        return await anyio.to_thread.run_sync(work, state.ensure_sidecar)


def _fit_prefix(count: int, size: Callable[[int], int], budget: int) -> int:
    """The largest k <= count with size(k) <= budget (size grows with k)."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def _joined(names: Sequence[str], room: int) -> str:
    """Names, comma-separated, cut with '...' to about ``room`` characters."""
    text = ", ".join(names)
    return text if len(text) <= room else text[: max(0, room - 3)].rsplit(", ", 1)[0] + ", ..."


def _dumps(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False)


def _json_result(payload: Any, structured: dict[str, Any], *notes: str) -> CallToolResult:
    """JSON text (as the official memory server replies) plus structured content, plus notes for the agent."""
    texts = [_dumps(payload), *(note for note in notes if note)]
    blocks: list[ContentBlock] = [TextContent(type="text", text=t) for t in texts]
    return CallToolResult(content=blocks, structured_content=structured)


def _graph_result(found: Graph, budget: int, *, either_end: bool = False) -> CallToolResult:
    """The graph as JSON within the reply budget; entities past it are left out (with their relations)."""
    full = found.to_json()
    if len(_dumps(full)) <= budget:
        return _json_result(full, full)

    def part(k: int) -> dict[str, Any]:
        names = {e.name for e in found.entities[:k]}
        kept = [
            r
            for r in found.relations
            if (r.source in names or r.target in names)
            if either_end or (r.source in names and r.target in names)
        ]
        return Graph(found.entities[:k], tuple(kept)).to_json()

    room = budget - 300
    k = _fit_prefix(len(found.entities), lambda k: len(_dumps(part(k))), room)
    payload = part(k)
    if k == 0 and found.entities:
        # One entity larger than the whole budget: show it with its observations cut short.
        first = found.entities[0]
        each = max(40, room // (4 * max(1, len(first.observations))))
        cut = tuple(o if len(o) <= each else o[:each] + " [...cut]" for o in first.observations)
        payload = {"entities": [Entity(first.name, first.entity_type, cut).to_json()], "relations": []}
        while len(_dumps(payload)) > room and payload["entities"][0]["observations"]:
            payload["entities"][0]["observations"].pop()
        k = 1
    note = (
        f"[Reply limit: showing {k} of {len(found.entities)} entities and {len(payload['relations'])} of "
        f"{len(found.relations)} relations. Narrow with search_nodes(query) or open_nodes(names).]"
    )
    return _json_result(payload, payload, note)


def _list_result(key: str, items: list[Any], budget: int, what: str, *notes: str) -> CallToolResult:
    """A JSON array reply (the official create/add replies) within the budget, structured as {key: [...]}."""
    room = budget - 300 - sum(len(n) for n in notes)
    k = _fit_prefix(len(items), lambda k: len(_dumps(items[:k])), room)
    extra = ""
    if k < len(items):
        extra = f"[{len(items) - k} more {what} not shown to keep this reply short; all were saved.]"
    return _json_result(items[:k], {key: items[:k]}, *notes, extra)


def _outcome(message: str) -> CallToolResult:
    structured = {"success": True, "message": message}
    return CallToolResult(content=[TextContent(type="text", text=message)], structured_content=structured)


def _session_line(info: SessionInfo) -> str:
    line = f"- {info.session_id} | {info.title or '(untitled)'} | updated {info.last_updated}"
    line += f" | {info.versions} version{'s' if info.versions != 1 else ''} | {info.chars:,} characters"
    if info.tags:
        line += " | tags: " + ", ".join(info.tags)
    return line


def _version_head(v: SessionVersion) -> str:
    head = f"## Version {v.version} · {v.ts}"
    if v.title:
        head += f" · {v.title}"
    if v.tags:
        head += " · tags: " + ", ".join(v.tags)
    return head


# Tool annotations are evaluated in this module's namespace, so shared argument types live here.
SessionIdArg = Annotated[str, Field(description="Your id for this conversation; reuse it to update.")]
NewTitleArg = Annotated[str | None, Field(description="Optional title; else the previous version's.")]
NewTagsArg = Annotated[list[str] | None, Field(description="Optional tags; else the previous version's.")]


def register_session_tools(server: MCPServer, store: Store, settings: Settings) -> None:
    def sessions(sidecar: Sidecar | Callable[[], Sidecar]) -> Sessions:
        return Sessions(sidecar, max_chars=settings.max_content_chars, clock=store.clock)

    @server.tool(annotations=CREATES, structured_output=False)
    @handles_errors
    async def upsert_summary(
        ctx: Context,
        sessionId: SessionIdArg,
        summary: Annotated[str, Field(description="The whole summary so far, in markdown.")],
        title: NewTitleArg = None,
        tags: NewTagsArg = None,
    ) -> CallToolResult:
        """Save a session summary as a new version (creates the session if new); returns its timestamp.

        Earlier versions are kept: get_session_history shows them.
        """
        v = await _sidecar_write(
            store, token_of(ctx), lambda sc: sessions(sc).upsert(sessionId, summary, title=title, tags=tags)
        )
        size = f"{len(v.summary):,} characters"
        return text(f"Saved session {v.session_id!r} version {v.version} at {v.ts} ({size}).")

    @server.tool(annotations=CREATES, structured_output=False)
    @handles_errors
    async def append_summary(
        ctx: Context,
        sessionId: SessionIdArg,
        content: Annotated[str, Field(description="Text to add at the end of the latest summary.")],
        title: NewTitleArg = None,
        tags: NewTagsArg = None,
    ) -> CallToolResult:
        """Add text to a session's summary as a new version: the latest text, a blank line, then the content.

        Creates the session if it is new. Earlier versions are kept.
        """
        v = await _sidecar_write(
            store, token_of(ctx), lambda sc: sessions(sc).append(sessionId, content, title=title, tags=tags)
        )
        size = f"{len(v.summary):,} characters"
        return text(f"Appended to session {v.session_id!r}: version {v.version} at {v.ts} ({size}).")

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @handles_errors
    async def get_summary(
        ctx: Context,
        sessionId: Annotated[str, Field(description="The session id.")],
        maxLength: Annotated[
            int | None, Field(description="Return at most this many characters of the summary.")
        ] = None,
    ) -> CallToolResult:
        """Read the latest version of a session's summary."""
        if maxLength is not None and maxLength < 1:
            raise InvalidArgument("maxLength must be at least 1.")
        check_session_id(sessionId)
        sidecar = await _sidecar_to_read(store, token_of(ctx))
        if sidecar is None:
            raise UnknownSession(sessionId)
        v, count = await anyio.to_thread.run_sync(sessions(sidecar).latest, sessionId)
        facts = [f"session {v.session_id}", f"version {v.version} of {count}", f"updated {v.ts}"]
        if v.tags:
            facts.append("tags: " + ", ".join(v.tags))
        head = f"# {v.title or v.session_id}\n[{' | '.join(facts)}]\n"
        body, note = v.summary, ""
        if maxLength is not None and len(body) > maxLength:
            body = body[:maxLength]
            note = (
                f"\n[truncated to {maxLength:,} of {len(v.summary):,} characters; "
                "call get_summary without maxLength for the whole text]"
            )
        room = settings.max_reply_chars - len(head) - len(note) - 200
        if len(body) > room:
            shown = max(0, room)
            body = body[:shown]
            note = (
                f"\n[cut at the reply limit: showing {shown:,} of {len(v.summary):,} characters; "
                "pass a smaller maxLength, or keep the summary shorter]"
            )
        return text(head + "\n" + body + note)

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @handles_errors
    async def list_summaries(
        ctx: Context,
        tag: Annotated[str | None, Field(description="Only sessions with this tag (any case).")] = None,
        limit: Annotated[int | None, Field(description="Most sessions to list (default 20).")] = None,
        offset: Annotated[int | None, Field(description="Sessions to skip, for the next page.")] = None,
        sortBy: Annotated[
            Literal["lastUpdated", "title"] | None, Field(description="lastUpdated (default) or title.")
        ] = None,
        order: Annotated[
            Literal["asc", "desc"] | None,
            Field(description="desc (default for lastUpdated) or asc (default for title)."),
        ] = None,
    ) -> CallToolResult:
        """List sessions (their latest versions): id, title, last update, version count, size and tags."""
        sidecar = await _sidecar_to_read(store, token_of(ctx))
        infos = [] if sidecar is None else await anyio.to_thread.run_sync(sessions(sidecar).infos)
        page = list_sessions(infos, tag=tag, limit=limit, offset=offset, sort_by=sortBy, order=order)
        tagged = f" tagged {tag.strip()!r}" if tag and tag.strip() else ""
        if page.total == 0:
            return text(f"No sessions{tagged} yet. Start one with upsert_summary.")
        if not page.sessions:
            return text(f"{page.total} session(s){tagged}; none at offset {page.offset}; use a smaller one.")
        first, last = page.offset + 1, page.offset + len(page.sessions)
        reply = Reply(settings.max_reply_chars - 200)
        reply.add(f"{page.total} session{'s' if page.total != 1 else ''}{tagged}; showing {first}-{last}:")
        shown = 0
        for info in page.sessions:
            if not reply.add(_session_line(info)):
                break
            shown += 1
        end = page.offset + shown
        if end < page.total:
            reply.parts.append(f"[{page.total - end} more; call list_summaries with offset={end} next.]")
        return text(reply.text())

    @server.tool(annotations=CHANGES, structured_output=False)
    @handles_errors
    async def update_summary_metadata(
        ctx: Context,
        sessionId: Annotated[str, Field(description="The session id.")],
        title: Annotated[str | None, Field(description="New title (an empty string removes it).")] = None,
        tags: Annotated[list[str] | None, Field(description="New tags; replace the old ones.")] = None,
    ) -> CallToolResult:
        """Change the title and/or tags of a session's latest version; no new version, timestamp unchanged."""
        v = await _sidecar_write(
            store, token_of(ctx), lambda sc: sessions(sc).update_metadata(sessionId, title=title, tags=tags)
        )
        tags_text = ", ".join(v.tags) if v.tags else "(none)"
        return text(
            f"Updated session {v.session_id!r}: title {v.title or '(none)'}, tags {tags_text}. "
            f"Still version {v.version} of {v.ts}; no new version was made."
        )

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @handles_errors
    async def get_session_history(
        ctx: Context,
        sessionId: Annotated[str, Field(description="The session id.")],
    ) -> CallToolResult:
        """Every version of a session's summary, newest first."""
        check_session_id(sessionId)
        sidecar = await _sidecar_to_read(store, token_of(ctx))
        if sidecar is None:
            raise UnknownSession(sessionId)
        versions = await anyio.to_thread.run_sync(sessions(sidecar).history, sessionId)
        reply = Reply(settings.max_reply_chars - 300)
        plural = "s" if len(versions) != 1 else ""
        reply.add(f"Session {sessionId!r}: {len(versions)} version{plural}, newest first.")
        full = 0
        for v in versions:
            if not reply.add(_version_head(v) + "\n" + v.summary + "\n"):
                break
            full += 1
        headers = 0
        for v in versions[full:]:
            if not reply.add(_version_head(v) + f" · {len(v.summary):,} characters (text left out)"):
                break
            headers += 1
        left = len(versions) - full - headers
        if full < len(versions):
            reply.parts.append(
                f"[{len(versions) - full} older version(s) shown without text"
                + (f", {left} not listed" if left else "")
                + " to keep this reply short; every version is kept.]"
            )
        return text(reply.text())


# Tool argument and result shapes of the official MCP memory server (camelCase on the wire).


class EntityArg(BaseModel):
    name: str = Field(description="The name of the entity")
    entityType: str = Field(description="The type of the entity")
    observations: list[str] = Field(
        default_factory=list, description="An array of observation contents associated with the entity"
    )


class RelationArg(BaseModel):
    source: str = Field(alias="from", description="The name of the entity where the relation starts")
    to: str = Field(description="The name of the entity where the relation ends")
    relationType: str = Field(description="The type of the relation")

    def relation(self) -> Relation:
        return Relation(self.source, self.to, self.relationType)


class ObservationAdditionArg(BaseModel):
    entityName: str = Field(description="The name of the entity to add the observations to")
    contents: list[str] = Field(description="An array of observation contents to add")


class ObservationDeletionArg(BaseModel):
    entityName: str = Field(description="The name of the entity containing the observations")
    observations: list[str] = Field(description="An array of observations to delete")


class GraphOut(BaseModel):
    entities: list[EntityArg]
    relations: list[RelationArg]


class EntitiesOut(BaseModel):
    entities: list[EntityArg]


class RelationsOut(BaseModel):
    relations: list[RelationArg]


class AddedObservationsOut(BaseModel):
    entityName: str
    addedObservations: list[str]


class ObservationResultsOut(BaseModel):
    results: list[AddedObservationsOut]


class OutcomeOut(BaseModel):
    success: bool
    message: str


def register_graph_tools(server: MCPServer, store: Store, settings: Settings) -> None:
    limits = SearchLimits(
        max_path_len=settings.graph_max_path_len,
        entries_per_term=settings.graph_entries_per_term,
        max_results=settings.graph_max_results,
    )
    budget = settings.max_reply_chars

    def graph(sidecar: Sidecar | Callable[[], Sidecar]) -> KnowledgeGraph:
        return KnowledgeGraph(sidecar, max_chars=settings.max_content_chars, clock=store.clock, limits=limits)

    async def read(ctx: Context, work: Callable[[KnowledgeGraph], Graph]) -> Graph:
        sidecar = await _sidecar_to_read(store, token_of(ctx))
        if sidecar is None:
            return Graph()
        return await anyio.to_thread.run_sync(work, graph(sidecar))

    @server.tool(annotations=CREATES)
    @handles_errors
    async def create_entities(
        ctx: Context, entities: Annotated[list[EntityArg], Field(description="The entities to create")]
    ) -> Annotated[CallToolResult, EntitiesOut]:
        """Create multiple new entities in the knowledge graph. Names that exist already are skipped."""
        wanted = [Entity(e.name, e.entityType, tuple(e.observations)) for e in entities]
        created = await _sidecar_write(store, token_of(ctx), lambda sc: graph(sc).create_entities(wanted))
        made = {e.name for e in created}
        skipped = list(dict.fromkeys(e.name for e in wanted if e.name not in made))
        note = (
            f"[Skipped {len(skipped)} that exist already: {_joined(skipped, 300)}. "
            "Use add_observations to add facts to an existing entity.]"
            if skipped
            else ""
        )
        return _list_result("entities", [e.to_json() for e in created], budget, "entities", note)

    @server.tool(annotations=CREATES)
    @handles_errors
    async def create_relations(
        ctx: Context,
        relations: Annotated[list[RelationArg], Field(description="The relations to create")],
    ) -> Annotated[CallToolResult, RelationsOut]:
        """Create multiple new relations between entities in the knowledge graph.

        Relations should be in active voice. Both entities must exist; a relation that exists
        already is skipped.
        """
        wanted = [r.relation() for r in relations]
        created = await _sidecar_write(store, token_of(ctx), lambda sc: graph(sc).create_relations(wanted))
        skipped = len(wanted) - len(created)
        note = f"[Skipped {skipped} relation(s) that exist already.]" if skipped else ""
        return _list_result("relations", [r.to_json() for r in created], budget, "relations", note)

    @server.tool(annotations=CREATES)
    @handles_errors
    async def add_observations(
        ctx: Context,
        observations: Annotated[
            list[ObservationAdditionArg], Field(description="Observations to add, per entity")
        ],
    ) -> Annotated[CallToolResult, ObservationResultsOut]:
        """Add new observations to existing entities in the knowledge graph; ones they have are skipped."""
        wanted = [(o.entityName, list(o.contents)) for o in observations]
        results = await _sidecar_write(store, token_of(ctx), lambda sc: graph(sc).add_observations(wanted))
        items = [{"entityName": name, "addedObservations": added} for name, added in results]
        return _list_result("results", items, budget, "results")

    @server.tool(annotations=CHANGES)
    @handles_errors
    async def delete_entities(
        ctx: Context,
        entityNames: Annotated[list[str], Field(description="An array of entity names to delete")],
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Delete multiple entities and their associated relations from the knowledge graph."""
        deleted, not_found = await _sidecar_write(
            store, token_of(ctx), lambda sc: graph(sc).delete_entities(entityNames)
        )
        if not not_found:
            return _outcome("Entities deleted successfully")
        asked = len(dict.fromkeys(entityNames))
        return _outcome(f"Deleted {len(deleted)} of {asked} entities. Not found: {_joined(not_found, 1000)}")

    @server.tool(annotations=CHANGES)
    @handles_errors
    async def delete_observations(
        ctx: Context,
        deletions: Annotated[
            list[ObservationDeletionArg], Field(description="Observations to delete, per entity")
        ],
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Delete specific observations from entities in the knowledge graph."""
        wanted = [(d.entityName, list(d.observations)) for d in deletions]
        count, missing = await _sidecar_write(
            store, token_of(ctx), lambda sc: graph(sc).delete_observations(wanted)
        )
        requested = sum(len(set(obs)) for _, obs in wanted)
        if count == requested:
            return _outcome("Observations deleted successfully")
        message = f"Deleted {count} of {requested} observations."
        if missing:
            message += f" Entities not found: {_joined(missing, 1000)}"
        return _outcome(message)

    @server.tool(annotations=CHANGES)
    @handles_errors
    async def delete_relations(
        ctx: Context,
        relations: Annotated[list[RelationArg], Field(description="An array of relations to delete")],
    ) -> Annotated[CallToolResult, OutcomeOut]:
        """Delete multiple relations from the knowledge graph."""
        wanted = list(dict.fromkeys(r.relation() for r in relations))
        count = await _sidecar_write(store, token_of(ctx), lambda sc: graph(sc).delete_relations(wanted))
        if count == len(wanted):
            return _outcome("Relations deleted successfully")
        return _outcome(f"Deleted {count} of {len(wanted)} relations. The rest matched nothing.")

    @server.tool(annotations=READ_ONLY)
    @handles_errors
    async def read_graph(ctx: Context) -> Annotated[CallToolResult, GraphOut]:
        """Read the entire knowledge graph."""
        return _graph_result(await read(ctx, KnowledgeGraph.read_graph), budget)

    @server.tool(annotations=READ_ONLY)
    @handles_errors
    async def search_nodes(
        ctx: Context,
        query: Annotated[
            str,
            Field(
                description="The search query to match against entity names, types, and observation content"
            ),
        ],
    ) -> Annotated[CallToolResult, GraphOut]:
        """Search for nodes in the knowledge graph based on a query.

        Each word picks its best matching entities (name, type, observations; case-insensitive);
        the entities on short paths connecting the words' matches are added, so a query for two
        concepts also returns what links them. Returns the entities and the relations among them.
        """
        return _graph_result(await read(ctx, lambda g: g.search_nodes(query)), budget)

    @server.tool(annotations=READ_ONLY)
    @handles_errors
    async def open_nodes(
        ctx: Context,
        names: Annotated[list[str], Field(description="An array of entity names to retrieve")],
    ) -> Annotated[CallToolResult, GraphOut]:
        """Open specific nodes in the knowledge graph by their names, with every relation from or to them."""
        return _graph_result(await read(ctx, lambda g: g.open_nodes(names)), budget, either_end=True)


# ---------------------------------------------------------------------------- recall


def _recall_line(hit: Recalled) -> str:
    name = f"{ARCHIVE}/{hit.memory.id}" if hit.memory.archived else hit.memory.id
    title = hit.memory.title.replace("|", "/")
    return f"{name} | {title} | {hit.score:.2f} | {hit.snippet}"


def render_recall(found: Recall, query: str, budget: int) -> tuple[str, int]:
    """Compact lines, best first, within the budget; returns the text and how many results it shows."""
    if not found.results:
        return (
            f"Nothing matches {query!r}. Try other words, includeArchive=true, or list_memory_titles.",
            0,
        )
    how = f"words and {found.vectors} vectors" if found.vectors else "words only (vectors not ready)"
    count = len(found.results)
    head = f"{count} memor{'y' if count == 1 else 'ies'} for {query!r} ({how}), best first:"
    tail = "Read one in full with read_memory(filenames=[...])."
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
    lines.append(stale + (f" ({_joined(stats.stale, 300)})." if stats.stale else "."))
    if stats.oldest is not None and stats.newest is not None:
        lines.append(
            f"Oldest: {stats.oldest.id} ({_time(stats.oldest.created_at)}); "
            f"newest: {stats.newest.id} ({_time(stats.newest.created_at)})."
        )
    if stats.next_eviction:
        items = [f"{e.id} ({e.reason})" for e in stats.next_eviction]
        lines.append(f"Next eviction would archive {len(items)}: {_joined(items, 1500)}.")
    else:
        lines.append("Next eviction would archive nothing.")
    return "\n".join(lines)


def register_recall_tools(server: MCPServer, store: Store, settings: Settings) -> None:
    recaller = Recaller(store)

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @handles_errors
    async def recall(
        ctx: Context,
        query: Annotated[str, Field(description="What you are looking for, in your own words.")],
        limit: Annotated[int, Field(description="Most memories to return (default 10, at most 100).")] = 10,
        includeArchive: Annotated[  # noqa: N803
            bool, Field(description="Also search memories archived as stale.")
        ] = False,
        tags: Annotated[
            list[str] | None, Field(description="Only memories with every one of these tags.")
        ] = None,
        priority: Annotated[
            str | None, Field(description="Only these priorities, e.g. P0 or P0,P1.")
        ] = None,
    ) -> CallToolResult:
        """Find memories by meaning and by words, best first, as one short line each.

        Each line: filename | title | score (1.00 = best) | a snippet around the match. Ranking
        fuses word search and vector similarity, reads each memory with the ones written just
        before and after it, and prefers important, recently used and higher-priority memories.
        Then read_memory(filenames=[...]) for the full text.
        """
        token = token_of(ctx)
        found = await recaller.recall(
            token, query, limit=limit, include_archive=includeArchive, tags=tags, priority=priority
        )
        reply, shown = render_recall(found, query, settings.max_reply_chars)
        await store.touch(token, [hit.memory for hit in found.results[:shown] if not hit.memory.archived])
        return text(reply)

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @handles_errors
    async def memory_stats(ctx: Context) -> CallToolResult:
        """How this vault is doing: counts by priority, hot and archived, vector coverage, search miss
        rate, memories not used for 30 days, oldest and newest, and what the next eviction would archive."""
        stats = await recaller.stats(token_of(ctx))
        return text(render_stats(stats))
