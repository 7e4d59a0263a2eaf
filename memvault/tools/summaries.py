"""The session-summary tools: versions of a running record per session id."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult
from pydantic import Field

from memvault.config import Settings
from memvault.errors import InvalidArgument, UnknownSession, quote
from memvault.ops.records import sidecar_read, sidecar_write
from memvault.ops.store import Store
from memvault.records.sidecar import Sidecar
from memvault.records.summaries import Head, SessionInfo, SessionSummaries, check_session_id, list_sessions
from memvault.records.summaries import Version as SessionVersion
from memvault.records.sync import SessionFiles, conflicted_file
from memvault.tools.common import (
    CHANGES,
    CREATES,
    READ_ONLY,
    Reply,
    handles_errors,
    text,
    token_of,
)


def _session_line(info: SessionInfo) -> str:
    line = f"- {info.session_id} | {info.title or '(untitled)'} | updated {info.last_updated}"
    line += f" | {info.versions} version{'s' if info.versions != 1 else ''} | {info.chars:,} characters"
    if info.tags:
        line += " | tags: " + ", ".join(info.tags)
    return line


def conflict_note(path: str | None) -> str:
    if path is None:
        return ""
    return (
        f"\n[{path} holds git conflict markers or damaged lines: this is what it holds as far as it "
        "reads, and the session is read-only until a person resolves the file and commits.]"
    )


def _version_head(v: SessionVersion | Head) -> str:
    head = f"## Version {v.version} · {v.ts}"
    if v.title:
        head += f" · {v.title}"
    if v.tags:
        head += " · tags: " + ", ".join(v.tags)
    return head


# Tool annotations are evaluated in this module's namespace, so shared argument types live here.
SessionIdArg = Annotated[str, Field(description="Your id for this conversation.")]
NewTitleArg = Annotated[str | None, Field(description="Title (default: the previous).")]
NewTagsArg = Annotated[list[str] | None, Field(description="Tags (default: the previous).")]


def register_session_tools(server: MCPServer, store: Store, settings: Settings) -> None:
    def sessions(sidecar: Sidecar | Callable[[], Sidecar], folder: Path) -> SessionSummaries:
        return SessionSummaries(
            sidecar, max_chars=settings.max_content_chars, clock=store.clock, files=SessionFiles(folder)
        )

    async def new_version(
        ctx: Context, save: Callable[[SessionSummaries], SessionVersion], done: str
    ) -> CallToolResult:
        """Save a new version under the token's locks; ``done`` says what happened ("Saved session")."""
        v = await sidecar_write(store, token_of(ctx), lambda sc, folder: save(sessions(sc, folder)))
        return text(
            f"{done} {v.session_id!r}: version {v.version} at {v.ts} ({len(v.summary):,} characters)."
        )

    @server.tool(annotations=CREATES, structured_output=False)
    @handles_errors
    async def upsert_summary(
        ctx: Context,
        sessionId: SessionIdArg,
        summary: Annotated[str, Field(description="The whole summary, markdown.")],
        title: NewTitleArg = None,
        tags: NewTagsArg = None,
    ) -> CallToolResult:
        """Save a session's whole summary as a new version (earlier ones are kept)."""
        return await new_version(
            ctx, lambda s: s.upsert(sessionId, summary, title=title, tags=tags), "Saved session"
        )

    @server.tool(annotations=CREATES, structured_output=False)
    @handles_errors
    async def append_summary(
        ctx: Context,
        sessionId: SessionIdArg,
        content: Annotated[str, Field(description="Text to add.")],
        title: NewTitleArg = None,
        tags: NewTagsArg = None,
    ) -> CallToolResult:
        """Add text to a session's summary as a new version (creates the session if new)."""
        return await new_version(
            ctx, lambda s: s.append(sessionId, content, title=title, tags=tags), "Appended to session"
        )

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @handles_errors
    async def get_summary(
        ctx: Context,
        sessionId: Annotated[str, Field(description="Session id.")],
        maxLength: Annotated[int | None, Field(description="At most this many characters.")] = None,
        offset: Annotated[int | None, Field(description="Start at this character (to page).")] = None,
        version: Annotated[
            int | None, Field(description="An older version's number (default: latest).")
        ] = None,
    ) -> CallToolResult:
        """Read a session's summary (latest or an older version); a long one shows its newest text first."""
        if maxLength is not None and maxLength < 1:
            raise InvalidArgument("maxLength must be at least 1.")
        if offset is not None and offset < 0:
            raise InvalidArgument("offset must be 0 or more.")
        check_session_id(sessionId)

        def pick(sidecar: Sidecar, folder: Path) -> tuple[SessionVersion, int, int, str | None]:
            found = sessions(sidecar, folder)
            latest, count = found.latest(sessionId)
            chosen = latest if version is None else found.version(sessionId, version)
            if chosen is None:
                numbers = [h.version for h in found.heads(sessionId)][::-1]
                raise InvalidArgument(
                    f"Session {sessionId!r} has no version {version}; it has versions "
                    f"{_numbers(numbers)}. Call get_session_history to see them."
                )
            return chosen, latest.version, count, conflicted_file(sidecar, folder, sessionId)

        found = await sidecar_read(store, token_of(ctx), pick)
        if found is None:
            raise UnknownSession(sessionId)
        v, newest, count, conflict = found
        of = f"version {v.version} of {newest}"
        if count != newest:  # a history with gaps (lines removed by hand): say how many there are
            of += f" ({count} kept)"
        facts = [f"session {v.session_id}", of, f"updated {v.ts}"]
        if v.tags:
            facts.append("tags: " + ", ".join(v.tags))
        head = f"# {v.title or v.session_id}\n[{' | '.join(facts)}]\n" + conflict_note(conflict) + "\n"
        window = min(maxLength or settings.max_reply_chars, settings.max_reply_chars - len(head) - 300)
        return text(head + page(v.summary, offset, max(1, window), sessionId, version, maxLength))

    @server.tool(annotations=READ_ONLY, structured_output=False)
    @handles_errors
    async def list_summaries(
        ctx: Context,
        tag: Annotated[str | None, Field(description="Only this tag.")] = None,
        limit: Annotated[int | None, Field(description="Most (default 20).")] = None,
        offset: Annotated[int | None, Field(description="Skip this many.")] = None,
        sortBy: Annotated[
            Literal["lastUpdated", "title"] | None, Field(description="lastUpdated (default) or title.")
        ] = None,
        order: Annotated[
            Literal["asc", "desc"] | None,
            Field(description="asc or desc."),
        ] = None,
    ) -> CallToolResult:
        """List sessions: id, title, last update, versions, size, tags."""
        infos = (
            await sidecar_read(
                store, token_of(ctx), lambda sidecar, folder: sessions(sidecar, folder).infos()
            )
            or []
        )
        page = list_sessions(infos, tag=tag, limit=limit, offset=offset, sort_by=sortBy, order=order)
        tagged = f" tagged {quote(tag.strip())}" if tag and tag.strip() else ""
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
        sessionId: Annotated[str, Field(description="Session id.")],
        title: Annotated[str | None, Field(description="New title ('' removes it).")] = None,
        tags: Annotated[list[str] | None, Field(description="New tags.")] = None,
    ) -> CallToolResult:
        """Change a session's title or tags, without a new version."""
        v = await sidecar_write(
            store,
            token_of(ctx),
            lambda sc, folder: sessions(sc, folder).update_metadata(sessionId, title=title, tags=tags),
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
        sessionId: Annotated[str, Field(description="Session id.")],
    ) -> CallToolResult:
        """Every version of a session's summary, newest first."""
        check_session_id(sessionId)
        room = settings.max_reply_chars - 300

        def collect(sidecar: Sidecar, folder: Path) -> tuple[list[Head], dict[int, str], str | None]:
            found = sessions(sidecar, folder)
            heads = found.heads(sessionId)
            # Which texts fit, newest first, from their lengths alone: only those are built.
            used, shown = 0, []
            for h in heads:
                cost = len(_version_head(h)) + h.chars + 2
                if used + cost <= room:
                    used += cost
                    shown.append(h.version)
                else:
                    used += len(_version_head(h)) + 60
            return heads, found.texts(sessionId, shown), conflicted_file(sidecar, folder, sessionId)

        found = await sidecar_read(store, token_of(ctx), collect)
        if found is None:
            raise UnknownSession(sessionId)
        heads, texts, conflict = found
        reply = Reply(room)
        plural = "s" if len(heads) != 1 else ""
        reply.add(
            f"Session {sessionId!r}: {len(heads)} version{plural}, newest first." + conflict_note(conflict)
        )
        listed = without = 0
        for h in heads:
            if h.version in texts:
                part = _version_head(h) + "\n" + texts[h.version] + "\n"
            else:
                part = _version_head(h) + f" · {h.chars:,} characters (text left out)"
            if not reply.add(part):
                break
            listed += 1
            without += h.version not in texts
        left = len(heads) - listed
        if without or left:
            reply.parts.append(
                f"[{without + left} version(s) shown without text"
                + (f" ({left} not listed)" if left else "")
                + " to keep this reply short; every version is kept: get_summary(sessionId=..., "
                "version=N) reads one.]"
            )
        return text(reply.text())


def _numbers(numbers: list[int]) -> str:
    """Version numbers as ranges: 1 to 4, 6, 9 to 12."""
    spans: list[list[int]] = []
    for n in numbers:
        if spans and n == spans[-1][1] + 1:
            spans[-1][1] = n
        else:
            spans.append([n, n])
    parts = [f"{a}" if a == b else f"{a} to {b}" for a, b in spans]
    return ", ".join(parts[:20]) + (", ..." if len(parts) > 20 else "")


def page(
    summary: str,
    offset: int | None,
    window: int,
    session_id: str,
    version: int | None,
    max_length: int | None = None,
) -> str:
    """The part of a summary that fits ``window``: from ``offset`` when given, else all of it or,
    when it is too long, its newest end; with a note that says how to read the rest."""
    size = len(summary)
    if offset is None and size <= window:
        return summary
    if offset is not None and offset >= size > 0:
        raise InvalidArgument(f"offset {offset:,} is past the end: the summary has {size:,} characters.")
    start = max(0, size - window) if offset is None else offset
    end = min(size, start + window)
    call = f"get_summary(sessionId={json.dumps(session_id)}" + (f", version={version}" if version else "")
    # The next page as long as this one: without maxLength it would be a whole reply long.
    tail = "" if max_length is None else f", maxLength={max_length}"
    notes = []
    if start > 0:
        notes.append(f"earlier text from {call}, offset={max(0, start - window)}{tail})")
    if end < size:
        notes.append(f"the rest from {call}, offset={end}{tail})")
    shown = f"[characters {start:,} to {end:,} of {size:,}" + ("; the newest" if offset is None else "")
    return summary[start:end] + f"\n{shown}; " + "; ".join(notes) + "]"


# Tool argument and result shapes of the official MCP memory server (camelCase on the wire).
