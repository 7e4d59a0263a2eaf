"""The mem-mcp tools over markdown memories: list, read, write, update, delete, archive, evict."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Annotated

from mcp.server.mcpserver import Context
from mcp.types import CallToolResult
from pydantic import Field

from memvault.clock import format_time
from memvault.config import Settings
from memvault.disk.markdown import Memory
from memvault.errors import InvalidArgument, quote
from memvault.git.running import stale_note_once
from memvault.ops.edits import Edit, version_of
from memvault.ops.store import Found, Store, Sweep, Written
from memvault.tools.common import (
    CHANGES,
    CREATES,
    EDITS,
    MOVES,
    READ_ONLY,
    RESTORES,
    Reply,
    Tools,
    cut_to,
    fit_names,
    noticed,
    read_only_call,
    show_time,
    text,
    token_of,
    tool,
)


def render_memory(memory: Memory, *, offset: int = 0, room: int | None = None) -> str:
    """One memory as read_memory shows it; its content from ``offset``, cut to fit ``room``
    characters with a note that says how to read on."""
    facts = [memory.id, memory.priority, f"version {version_of(memory)}"]
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
    head = f"## {memory.title}\n[{' | '.join(facts)}]\n"
    content = memory.content[offset:]
    if offset:
        head += f"[... from character {offset:,} of {len(memory.content):,}]\n"
    if room is not None and len(head) + len(content) + 1 > room:
        keep = max(0, room - len(head) - 160)
        end = offset + keep
        rest = len(memory.content) - end
        content = (
            content[:keep] + f"\n[... {rest:,} more characters: "
            f"read_memory(filenames=[{json.dumps(memory.id)}], offset={end})]"
        )
    return head + content + "\n"


def shares(sizes: list[int], budget: int) -> list[int]:
    """Room for each item: all of it when everything fits; else the small ones whole and the
    large ones an equal share of what is left (so one huge memory cannot crowd out the rest)."""
    if sum(sizes) <= budget:
        return sizes
    room = list(sizes)
    left, pending = budget, sorted(range(len(sizes)), key=lambda i: sizes[i])
    while pending:
        share = left // len(pending)
        i = pending[0]
        if sizes[i] > share:
            for j in pending:
                room[j] = share
            break
        left -= sizes[i]
        pending.pop(0)
    return room


MIN_SHOWN = 400  # below this, a shortened memory says too little: it is left out and named instead


def render_found(
    found: Found, settings: Settings, *, what: str, query: str | None, offset: int = 0
) -> tuple[str, list[Memory]]:
    """The reply text, and the memories it shows (whole or shortened; the rest are named)."""
    if not found.memories:
        hint = (
            " Try other words, or search_archive for older memories."
            if what != "archived"
            else " Try other words, or read_memory for hot memories."
        )
        if query:
            return f"No {what} memory matches {quote(query)}.{hint}", []
        return ("No archived memories yet." if what == "archived" else "No hot memories yet."), []
    reply = Reply(settings.max_reply_chars)
    head = f"{found.total} {what} memor{'y' if found.total == 1 else 'ies'}"
    if query:
        matches = "matches" if found.total == 1 else "match"
        head += (
            f" {matches} {quote(query)}"
            if found.matched_all
            else f" {matches} some words of {quote(query)} (none match all)"
        )
    budget = settings.max_reply_chars - len(head) - 300
    # Show as many as can each have a useful share of the reply, in rank order.
    full: list[str] = []
    floor = 0
    for memory in found.memories:
        rendered = render_memory(memory, offset=offset)
        floor += min(len(rendered) + 1, MIN_SHOWN)
        if full and floor > budget:
            break
        full.append(rendered)
    count = len(full)
    rooms = shares([len(f) + 1 for f in full[:count]], budget)
    parts, shown = [], []
    for memory, text_, room in zip(found.memories[:count], full, rooms, strict=False):
        parts.append(text_ if len(text_) < room else render_memory(memory, offset=offset, room=room - 1))
        shown.append(memory)
    left = found.total - len(shown)
    reply.add(head + (f"; showing {len(shown)}:" if left else ":"))
    reply.parts.extend(parts)
    add_notes(reply, found, len(shown), settings.max_reply_chars)
    return reply.text(), shown


def add_notes(reply: Reply, found: Found, shown: int, budget: int) -> None:
    """read_memory's notes after the memories it shows: what it left out for the reply's size or
    past the limit, and the names it did not find or found in the archive. They fit in what the
    body left of ``budget`` (it kept 300 characters for them)."""
    cut = len(found.memories) - shown  # found but left out for the reply's size
    beyond = found.total - len(found.memories)  # past the limit (limit=, or a query's default)
    if cut:
        note = (
            f"[{cut} more left out to keep this reply short.{{}} Narrow the query, or pass "
            "filenames=[...] to read specific ones.]"
        )
        rest = [m.id for m in found.memories[shown:]][:20]
        room = budget - len(reply.text()) - len(note) - 80
        names = fit_names(rest, room - len(" Next: .")) if rest else ""
        reply.parts.append(note.format(f" Next: {names}." if names else ""))
    if beyond:
        reply.parts.append(
            f"[{beyond} more not read: past the limit of {len(found.memories)}. Pass a larger limit "
            "to read more, or narrow the query.]"
        )
    gone = [id for id in found.missing if id not in found.in_archive]
    if gone:
        room = budget - len(reply.text()) - 60
        missing = fit_names(gone, room)
        reply.parts.append(f"[Not found: {missing}. Call list_memory_titles for names.]")
    if found.in_archive:
        room = budget - len(reply.text()) - 120
        archived = fit_names(list(found.in_archive), room)
        reply.parts.append(
            f"[In the archive, not hot: {archived}. restore_memory(filename) brings one back; "
            "search_archive reads them.]"
        )


def _conflict_copy_of(memory_id: str) -> str | None:
    # Imported here: the merge code is for vaults kept in git, and most names never get this far.
    from memvault.git.mergememory import conflict_copy_of

    return conflict_copy_of(memory_id)


def render_titles(
    rows: Sequence[Memory], last_access: Callable[[Memory], datetime | None], budget: int
) -> str:
    """list_memory_titles' lines, within the budget, each flagged with what needs fixing.

    One pass that counts the reply's length as it goes (what Reply does, without a call per line:
    a listing of a thousand memories shows a couple of hundred lines, and Reply's calls were a third
    of the listing's time)."""
    lines: list[str] = []
    size = 0  # of "\n".join(lines)
    for memory in rows:
        at = last_access(memory)
        line = (
            f"{memory.id}|{memory.title.replace('|', '/')}|{memory.priority}|{format_time(at) if at else ''}"
        )
        if memory.conflicted or memory.problem or ".conflict-" in memory.id:
            line += _title_flag(memory)
        if not lines:
            line = cut_to(line, budget)  # one line over the whole budget is cut, and says so
            size = len(line)
        elif size + 1 + len(line) > budget:
            break
        else:
            size += 1 + len(line)
        lines.append(line)
    if len(lines) < len(rows):

        def note(n: int) -> str:
            return f"[{n} more left out to keep this reply short; use read_memory(query=...) to search.]"

        # Make room for the note within the budget.
        while lines and size + 1 + len(note(len(rows) - len(lines))) > budget:
            size -= len(lines.pop()) + 1
        lines.append(note(len(rows) - len(lines)))
    return "\n".join(lines)


def _title_flag(memory: Memory) -> str:
    """What a listing's line says of a memory that needs fixing ("" for one that does not)."""
    if memory.conflicted:
        return "|CONFLICT: git conflict markers, read-only until a person resolves them"
    if memory.problem:
        return f"|NEEDS FIXING: {memory.problem}"
    if ".conflict-" in memory.id and (copy_of := _conflict_copy_of(memory.id)) is not None:
        return (
            f"|CONFLICT COPY of {copy_of}, kept by a git merge: move what to keep "
            "into that memory with update_memory, then delete_memory this one"
        )
    return ""


def render_written(written: Written) -> str:
    """What write_memory says it did: the new filename, what it superseded and what it kept."""
    memory = written.memory
    if written.reused:
        return f"Already saved as {memory.id} a moment ago; no duplicate written."
    reply = f"Saved as {memory.id} ({memory.priority})."
    if written.superseded:
        moved = [old if old == new else f"{old} (as archive/{new})" for old, new in written.superseded]
        reply += f" Superseded and archived: {', '.join(moved)}."
    for id, why in written.kept:
        reply += (
            f" NOT superseded: {id}, because {why}; it stays as it is. If it is really outdated, "
            "change its priority with update_memory first, or delete it."
        )
    return reply


def render_sweep(swept: Sweep, dry_run: bool, budget: int) -> str:
    """What evict_memories archived (or would), and what it kept back, within the budget."""
    evicted = swept.evicted
    held = [f"- kept {e.id}: {e.reason}" for e in swept.held]
    if not evicted:
        nothing = "Nothing to archive: every hot memory is fresh and within capacity."
        return "\n".join([nothing, *held])
    verb = "Would archive" if dry_run else "Archived"
    lines = [f"{verb} {len(evicted)} memor{'y' if len(evicted) == 1 else 'ies'}:"]
    lines += held
    lines += [
        f"- {e.id}: {e.reason}"
        + (f" (now archive/{e.archived_as})" if e.archived_as and e.archived_as != e.id else "")
        for e in evicted
    ]
    reply = Reply(budget)
    for line in lines:
        if not reply.add(line):
            reply.parts.append(f"[... and more; {len(evicted)} in all]")
            break
    return reply.text()


def with_note(reply: str, note: str | None) -> str:
    return f"{reply}\n{note}" if note else reply


# ---------------------------------------------------------------------------- tools


class MemoryTools(Tools):
    """The tools over a token's markdown memories."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    @tool("List memories", READ_ONLY)
    async def list_memory_titles(self, ctx: Context) -> CallToolResult:
        """List hot memories, one per line: filename|title|priority|lastAccessedAt[|problem to fix]."""
        token = token_of(ctx)
        rows, last_access = await self.store.list_hot(token)
        if not rows:
            return text("No memories yet. Save one with write_memory.")
        reply = render_titles(rows, last_access, self.settings.max_reply_chars)
        return text(noticed(self.store, token, reply))

    @tool("Read memories", READ_ONLY)
    async def read_memory(
        self,
        ctx: Context,
        query: Annotated[
            str | None, Field(description="Words to find in titles, filenames, tags, bodies.")
        ] = None,
        filenames: Annotated[list[str] | None, Field(description="Filenames to read.")] = None,
        limit: Annotated[int | None, Field(description="Most memories (default 10 for a query).")] = None,
        offset: Annotated[
            int | None, Field(description="With one filename: start at this character (to read on).")
        ] = None,
    ) -> CallToolResult:
        """Read whole memories: best matches for a query (typos ok), named files, or all; with versions."""
        if offset and len(filenames or ()) != 1:
            raise InvalidArgument("offset reads on in one memory: pass it with exactly one filename.")
        token = token_of(ctx)
        found = await self.store.find(token, query=query, filenames=filenames, limit=limit)
        if offset and found.memories and offset >= len(found.memories[0].content):
            size = len(found.memories[0].content)
            raise InvalidArgument(
                f"offset {offset:,} is past the end: '{found.memories[0].id}' has {size:,} characters."
            )
        reply, shown = render_found(found, self.settings, what="hot", query=query, offset=max(0, offset or 0))
        # Only what the agent actually saw counts as an access.
        await self.store.touch(token, shown, hit=not filenames, read_only=read_only_call(ctx))
        return text(noticed(self.store, token, reply))

    @tool("Write memory", CREATES)
    async def write_memory(
        self,
        ctx: Context,
        title: Annotated[str, Field(description="Short title; names the file.")],
        content: Annotated[str, Field(description="Markdown.")],
        priority: Annotated[
            str | None,
            Field(description="P0 permanent, P1 90 days, P2 30 days (default)."),
        ] = None,
        tags: Annotated[list[str] | None, Field(description="Tags.")] = None,
        importance: Annotated[float | None, Field(description="0 to 1.")] = None,
        supersedes: Annotated[
            list[str] | None,
            Field(description="Filenames this replaces (archived)."),
        ] = None,
    ) -> CallToolResult:
        """Save a new memory as a markdown file; returns its filename. Never overwrites."""
        token = token_of(ctx)
        written = await self.store.write(
            token,
            title=title,
            content=content,
            priority=priority,
            tags=tags,
            importance=importance,
            supersedes=supersedes,
        )
        if written.reused:
            return text(render_written(written))
        note = stale_note_once(self.settings.root, token)  # said once while git sync keeps failing
        return text(noticed(self.store, token, with_note(render_written(written), note)))

    @tool("Update memory", EDITS)
    async def update_memory(
        self,
        ctx: Context,
        filename: Annotated[str, Field(description="The memory's filename.")],
        title: Annotated[str | None, Field(description="New title (the filename stays).")] = None,
        content: Annotated[
            str | None, Field(description="New content (or, with section, that section's).")
        ] = None,
        priority: Annotated[str | None, Field(description="P0, P1 or P2.")] = None,
        tags: Annotated[list[str] | None, Field(description="New tags, replacing the old.")] = None,
        importance: Annotated[float | None, Field(description="0 to 1.")] = None,
        append: Annotated[str | None, Field(description="Text to add at the end.")] = None,
        section: Annotated[
            str | None, Field(description="A heading, e.g. '## Setup': content replaces its body.")
        ] = None,
        oldText: Annotated[str | None, Field(description="A unique passage to replace with newText.")] = None,
        newText: Annotated[str | None, Field(description="Replacement for oldText.")] = None,
        expectedVersion: Annotated[
            str | None, Field(description="Version read_memory showed; refused if changed since.")
        ] = None,
    ) -> CallToolResult:
        """Change a memory in place: all content, an append, a section or a passage; title, priority, tags."""
        edit = Edit(content, append, section, oldText, newText, expected=expectedVersion)
        token = token_of(ctx)
        memory = await self.store.update(
            token, filename, title=title, priority=priority, tags=tags, importance=importance, edit=edit
        )
        reply = f"Updated {memory.id} (version {version_of(memory)})."
        return text(with_note(reply, stale_note_once(self.settings.root, token)))

    @tool("Delete memory", CHANGES)
    async def delete_memory(
        self,
        ctx: Context,
        filename: Annotated[str, Field(description="Its filename.")],
    ) -> CallToolResult:
        """Delete a hot memory for good."""
        id = await self.store.delete(token_of(ctx), filename)
        return text(f"Deleted {id}.")

    @tool("Search archive", READ_ONLY)
    async def search_archive(
        self,
        ctx: Context,
        query: Annotated[str, Field(description="Words to find.")],
        limit: Annotated[int | None, Field(description="Most results (default 10).")] = None,
    ) -> CallToolResult:
        """Search archived (stale) memories; restore_memory brings one back."""
        found = await self.store.find(token_of(ctx), query=query, limit=limit, archived=True)
        return text(render_found(found, self.settings, what="archived", query=query)[0])

    @tool("Restore memory", RESTORES)
    async def restore_memory(
        self,
        ctx: Context,
        filename: Annotated[str, Field(description="From search_archive.")],
    ) -> CallToolResult:
        """Move an archived memory back to the hot ones."""
        id = await self.store.restore(token_of(ctx), filename)
        return text(f"Restored as {id}.")

    @tool("Evict stale memories", MOVES)
    async def evict_memories(
        self,
        ctx: Context,
        dryRun: Annotated[bool, Field(description="Only report.")] = False,
    ) -> CallToolResult:
        """Archive stale memories now (P1 unused 90 days, P2 30 days, then over capacity)."""
        swept = await self.store.sweep(token_of(ctx), dry_run=dryRun)
        return text(render_sweep(swept, dryRun, self.settings.max_reply_chars))
