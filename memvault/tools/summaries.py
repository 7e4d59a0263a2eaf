"""The session-summary tools: versions of a running record per session id."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Literal

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from memvault.config import Settings
from memvault.errors import InvalidArgument, UnknownSession, quote
from memvault.ops.records import sidecar_read, sidecar_write
from memvault.ops.store import Store
from memvault.records.sidecar import Sidecar
from memvault.records.summaries import (
    Head,
    Page,
    SessionInfo,
    SessionSummaries,
    check_session_id,
    list_sessions,
)
from memvault.records.summaries import Version as SessionVersion
from memvault.records.sync import SessionFiles, conflicted_file
from memvault.tools.common import (
    CHANGES,
    CREATES,
    READ_ONLY,
    Reply,
    Tools,
    text,
    token_of,
    tool,
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


class SessionTools(Tools):
    """The tools over a token's session summaries (versions of a running record per session id)."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    def sessions(self, sidecar: Sidecar | Callable[[], Sidecar], folder: Path) -> SessionSummaries:
        return SessionSummaries(
            sidecar,
            max_chars=self.settings.max_content_chars,
            clock=self.store.clock,
            files=SessionFiles(folder),
        )

    async def new_version(
        self, ctx: Context, save: Callable[[SessionSummaries], SessionVersion], done: str
    ) -> CallToolResult:
        """Save a new version under the token's locks; ``done`` says what happened ("Saved session")."""
        v = await sidecar_write(self.store, token_of(ctx), lambda sc, folder: save(self.sessions(sc, folder)))
        return text(
            f"{done} {v.session_id!r}: version {v.version} at {v.ts} ({len(v.summary):,} characters)."
        )

    @tool("Save summary", CREATES)
    async def upsert_summary(
        self,
        ctx: Context,
        sessionId: SessionIdArg,
        summary: Annotated[str, Field(description="The whole summary, markdown.")],
        title: NewTitleArg = None,
        tags: NewTagsArg = None,
    ) -> CallToolResult:
        """Save a session's whole summary as a new version (earlier ones are kept)."""
        return await self.new_version(
            ctx, lambda s: s.upsert(sessionId, summary, title=title, tags=tags), "Saved session"
        )

    @tool("Append to summary", CREATES)
    async def append_summary(
        self,
        ctx: Context,
        sessionId: SessionIdArg,
        content: Annotated[str, Field(description="Text to add.")],
        title: NewTitleArg = None,
        tags: NewTagsArg = None,
    ) -> CallToolResult:
        """Add text to a session's summary as a new version (creates the session if new)."""
        return await self.new_version(
            ctx, lambda s: s.append(sessionId, content, title=title, tags=tags), "Appended to session"
        )

    @tool("Read summary", READ_ONLY)
    async def get_summary(
        self,
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
        found = await sidecar_read(
            self.store,
            token_of(ctx),
            lambda sidecar, folder: (
                pick_version(self.sessions(sidecar, folder), sessionId, version),
                conflicted_file(sidecar, folder, sessionId),
            ),
        )
        if found is None:
            raise UnknownSession(sessionId)
        (v, newest, count), conflict = found
        head = summary_head(v, newest, count, conflict)
        most = self.settings.max_reply_chars
        window = min(maxLength or most, most - len(head) - 300)
        return text(head + page(v.summary, offset, max(1, window), sessionId, version, maxLength))

    @tool("List summaries", READ_ONLY)
    async def list_summaries(
        self,
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
        infos = await sidecar_read(
            self.store, token_of(ctx), lambda sidecar, folder: self.sessions(sidecar, folder).infos()
        )
        found = list_sessions(infos or [], tag=tag, limit=limit, offset=offset, sort_by=sortBy, order=order)
        return text(render_sessions(found, tag, self.settings.max_reply_chars - 200))

    @tool("Edit summary metadata", CHANGES)
    async def update_summary_metadata(
        self,
        ctx: Context,
        sessionId: Annotated[str, Field(description="Session id.")],
        title: Annotated[str | None, Field(description="New title ('' removes it).")] = None,
        tags: Annotated[list[str] | None, Field(description="New tags.")] = None,
    ) -> CallToolResult:
        """Change a session's title or tags, without a new version."""
        v = await sidecar_write(
            self.store,
            token_of(ctx),
            lambda sc, folder: self.sessions(sc, folder).update_metadata(sessionId, title=title, tags=tags),
        )
        tags_text = ", ".join(v.tags) if v.tags else "(none)"
        return text(
            f"Updated session {v.session_id!r}: title {v.title or '(none)'}, tags {tags_text}. "
            f"Still version {v.version} of {v.ts}; no new version was made."
        )

    @tool("Summary history", READ_ONLY)
    async def get_session_history(
        self,
        ctx: Context,
        sessionId: Annotated[str, Field(description="Session id.")],
    ) -> CallToolResult:
        """Every version of a session's summary, newest first."""
        check_session_id(sessionId)
        room = self.settings.max_reply_chars - 300
        found = await sidecar_read(
            self.store,
            token_of(ctx),
            lambda sidecar, folder: (
                fitting_history(self.sessions(sidecar, folder), sessionId, room),
                conflicted_file(sidecar, folder, sessionId),
            ),
        )
        if found is None:
            raise UnknownSession(sessionId)
        (heads, texts), conflict = found
        return text(render_history(sessionId, heads, texts, conflict, room))


def pick_version(
    found: SessionSummaries, session_id: str, version: int | None
) -> tuple[SessionVersion, int, int]:
    """The version asked for (the latest by default), the newest version's number, and how many
    versions are kept; an unknown number is refused with the numbers there are."""
    latest, count = found.latest(session_id)
    chosen = latest if version is None else found.version(session_id, version)
    if chosen is None:
        numbers = [h.version for h in found.heads(session_id)][::-1]
        raise InvalidArgument(
            f"Session {session_id!r} has no version {version}; it has versions "
            f"{_numbers(numbers)}. Call get_session_history to see them."
        )
    return chosen, latest.version, count


def summary_head(v: SessionVersion, newest: int, count: int, conflict: str | None) -> str:
    """get_summary's heading: the title, then which version of how many, when, and the tags."""
    of = f"version {v.version} of {newest}"
    if count != newest:  # a history with gaps (lines removed by hand): say how many there are
        of += f" ({count} kept)"
    facts = [f"session {v.session_id}", of, f"updated {v.ts}"]
    if v.tags:
        facts.append("tags: " + ", ".join(v.tags))
    return f"# {v.title or v.session_id}\n[{' | '.join(facts)}]\n" + conflict_note(conflict) + "\n"


def render_sessions(found: Page, tag: str | None, budget: int) -> str:
    """list_summaries' reply: one line per session within the budget, and how to page on."""
    tagged = f" tagged {quote(tag.strip())}" if tag and tag.strip() else ""
    if found.total == 0:
        return f"No sessions{tagged} yet. Start one with upsert_summary."
    if not found.sessions:
        return f"{found.total} session(s){tagged}; none at offset {found.offset}; use a smaller one."
    first, last = found.offset + 1, found.offset + len(found.sessions)
    reply = Reply(budget)
    reply.add(f"{found.total} session{'s' if found.total != 1 else ''}{tagged}; showing {first}-{last}:")
    shown = 0
    for info in found.sessions:
        if not reply.add(_session_line(info)):
            break
        shown += 1
    end = found.offset + shown
    if end < found.total:
        reply.parts.append(f"[{found.total - end} more; call list_summaries with offset={end} next.]")
    return reply.text()


def fitting_history(found: SessionSummaries, session_id: str, room: int) -> tuple[list[Head], dict[int, str]]:
    """Every version's head, newest first, and the texts of those that fit ``room`` (judged from
    their lengths alone: only those texts are built)."""
    heads = found.heads(session_id)
    used, shown = 0, []
    for h in heads:
        cost = len(_version_head(h)) + h.chars + 2
        if used + cost <= room:
            used += cost
            shown.append(h.version)
        else:
            used += len(_version_head(h)) + 60
    return heads, found.texts(session_id, shown)


def render_history(
    session_id: str, heads: list[Head], texts: dict[int, str], conflict: str | None, room: int
) -> str:
    """get_session_history's reply: each version's head, with its text where it fits."""
    reply = Reply(room)
    plural = "s" if len(heads) != 1 else ""
    reply.add(
        f"Session {session_id!r}: {len(heads)} version{plural}, newest first." + conflict_note(conflict)
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
    return reply.text()


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
