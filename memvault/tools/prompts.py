"""The prompts: recall before a task, save what a session learned, review stale memories.

Each is a user message that tells the agent which of the served tools to call; the first and the
last also show what the vault holds for it now (a few lines, never a whole memory).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import anyio.to_thread
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    GetPromptRequestParams,
    GetPromptResult,
    ListPromptsResult,
    PaginatedRequestParams,
    Prompt,
    PromptArgument,
    PromptMessage,
    TextContent,
)

from memvault.clock import format_time
from memvault.config import Settings
from memvault.disk.markdown import Memory
from memvault.errors import quote
from memvault.ops.store import Store
from memvault.tools.common import read_only, request_token
from memvault.tools.resources import guarded, memory_uri

RECALL = "recall-before-task"
SAVE = "save-session-learnings"
REVIEW = "review-stale-memories"
SHOWN = 10  # memories a prompt lists at most
MAX_ARGUMENT_CHARS = 500
DEFAULT_STALE_DAYS = 30

PROMPTS = [
    Prompt(
        name=RECALL,
        title="Recall before a task",
        description="Find what you already know about a topic before you start on it.",
        arguments=[
            PromptArgument(name="topic", description="The task or topic, in a few words.", required=True)
        ],
    ),
    Prompt(
        name=SAVE,
        title="Save what this session learned",
        description="Save the lasting facts, decisions and preferences of this conversation.",
        arguments=[
            PromptArgument(
                name="sessionId", description="An id for this conversation's summary.", required=False
            ),
            PromptArgument(name="focus", description="What to concentrate on (optional).", required=False),
        ],
    ),
    Prompt(
        name=REVIEW,
        title="Review stale memories",
        description="Go through memories nobody has read for a while: keep, fix or delete each.",
        arguments=[
            PromptArgument(
                name="days",
                description=f"Unread for at least this many days (default {DEFAULT_STALE_DAYS}).",
                required=False,
            )
        ],
    ),
]
READ_ONLY_PROMPTS = (RECALL,)  # the prompts whose steps are all read tools
ARGUMENTS = {p.name: {a.name: a for a in p.arguments or ()} for p in PROMPTS}


def invalid(message: str) -> MCPError:
    return MCPError(code=INVALID_PARAMS, message=message)


def checked(name: str, given: dict[str, str] | None) -> dict[str, str]:
    """The prompt's arguments, trimmed; a clear error for an unknown prompt or argument."""
    if name not in ARGUMENTS:
        raise invalid(
            f"No prompt named {quote(name[:100])}; prompts/list shows them: {', '.join(ARGUMENTS)}."
        )
    known = ARGUMENTS[name]
    args = {k: v.strip() for k, v in (given or {}).items()}
    unknown = [k for k in args if k not in known]
    if unknown:
        raise invalid(f"Prompt {name} takes {', '.join(known) or 'no arguments'}, not {', '.join(unknown)}.")
    for arg in known.values():
        if arg.required and not args.get(arg.name):
            raise invalid(f"Prompt {name} needs the argument '{arg.name}': {arg.description}")
    too_long = [k for k, v in args.items() if len(v) > MAX_ARGUMENT_CHARS]
    if too_long:
        raise invalid(f"Argument '{too_long[0]}' is longer than {MAX_ARGUMENT_CHARS} characters; shorten it.")
    return args


def line(memory: Memory, extra: str = "") -> str:
    title = memory.title if len(memory.title) <= 120 else memory.title[:117] + "..."
    return f"- {memory.id}: {title} ({memory.priority}{extra}) <{memory_uri(memory.id)}>"


class Prompts:
    """The prompts/list and prompts/get handlers, for the tool groups this server serves."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings
        self.groups = set(settings.tools)

    async def list_prompts(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListPromptsResult:
        # A read-only key is not asked to save or delete what it cannot (it sees the read tools only).
        listed = [p for p in PROMPTS if p.name in READ_ONLY_PROMPTS] if read_only(ctx.request) else PROMPTS
        return ListPromptsResult(prompts=listed)

    async def get_prompt(
        self, ctx: ServerRequestContext[Any], params: GetPromptRequestParams
    ) -> GetPromptResult:
        args = checked(params.name, params.arguments)
        if read_only(ctx.request) and params.name not in READ_ONLY_PROMPTS:
            raise invalid(
                f"This key is read-only, so the prompt {params.name} (which asks for changes) is not "
                f"offered; {', '.join(READ_ONLY_PROMPTS)} is."
            )
        token = request_token(ctx.request)
        if params.name == RECALL:
            text = await guarded("prompts/get", self.recall)(token, args["topic"])
        elif params.name == SAVE:
            text = self.save(args.get("sessionId") or "", args.get("focus") or "")
        else:
            text = await guarded("prompts/get", self.review)(token, self.days(args.get("days")))
        description = next(p.description for p in PROMPTS if p.name == params.name)
        return GetPromptResult(
            description=description,
            messages=[PromptMessage(role="user", content=TextContent(type="text", text=text))],
        )

    @staticmethod
    def days(value: str | None) -> int:
        if not value:
            return DEFAULT_STALE_DAYS
        # ASCII digits only: "²" passes isdigit() but not int(), and "١٢" would be read as 12.
        if not (value.isascii() and value.isdigit()) or not 1 <= int(value) <= 3650:
            raise invalid(f"'days' must be a whole number from 1 to 3650, not {quote(value[:40])}.")
        return int(value)

    async def recall(self, token: str, topic: str) -> str:
        found = await self.store.find(token, query=topic, limit=SHOWN)  # a look: records no access
        steps = []
        if "recall" in self.groups:
            steps.append(f"Call recall(query={topic!r}) for the memories that bear on it, best first.")
        if "memories" in self.groups:
            steps.append("Read the full text of the few that matter with read_memory(filenames=[...]).")
        if "graph" in self.groups:
            steps.append(f"Call search_nodes(query={topic!r}) for the people and things involved.")
        if "sessions" in self.groups:
            steps.append("If an earlier conversation was about this, list_summaries and get_summary find it.")
        shown = "\n".join(line(m) for m in found.memories) or "(no memory matches these words yet)"
        return "\n".join(
            [
                f"Before you start on this task, recall what you already know about: {topic}",
                "",
                *(f"{i}. {step}" for i, step in enumerate(steps, 1)),
                "",
                f"Memories whose words match now ({found.total} in all, the best {len(found.memories)}):",
                shown,
                "",
                "Then say in two or three lines what you found that matters for the task (or that you "
                "found nothing), and go on with the task.",
            ]
        )

    def save(self, session_id: str, focus: str) -> str:
        about = f" Concentrate on: {focus}." if focus else ""
        steps = []
        if "recall" in self.groups:
            steps.append(
                "Check what is already saved with recall(query=...) so you update instead of duplicating."
            )
        if "memories" in self.groups:
            steps += [
                "For each lasting fact, decision or preference, call write_memory(title, content, priority) "
                "with a short specific title and self-contained content. Priority P0 for what must never "
                "expire, P1 for project knowledge, P2 for what matters only for a few weeks.",
                "Where a saved memory is now wrong or incomplete, call update_memory(filename, ...) instead; "
                "where a new one replaces old ones, pass supersedes=[...] to write_memory.",
            ]
        if "graph" in self.groups:
            steps.append(
                "Record people, projects and how they relate with create_entities, create_relations "
                "and add_observations."
            )
        if "sessions" in self.groups:
            sid = session_id or "<an id for this conversation>"
            steps.append(
                f"Write a summary of this conversation (goal, what was done, what is left) and save it with "
                f"upsert_summary(sessionId={sid!r}, summary=<your summary>, title=<a short title>)."
            )
        return "\n".join(
            [
                f"This conversation is ending. Save what it taught you that will matter later.{about}",
                "",
                *(f"{i}. {step}" for i, step in enumerate(steps, 1)),
                "",
                "Save facts, not the conversation: leave out greetings, dead ends and what is already saved. "
                "Finish with one line per memory you saved or changed.",
            ]
        )

    async def review(self, token: str, days: int) -> str:
        memories, last_access = await self.store.list_hot(token)
        cutoff = self.store.clock() - timedelta(days=days)

        def stale() -> tuple[int, list[tuple[datetime | None, Memory]]]:
            old = [(at, m) for m in memories if (at := last_access(m)) is None or at < cutoff]
            old.sort(key=lambda pair: (pair[0] is not None, pair[0] or cutoff))
            return len(old), old[:SHOWN]

        count, oldest = await anyio.to_thread.run_sync(stale)
        if not count:
            return f"No memory has gone unread for {days} days or more; there is nothing to review."
        listed = "\n".join(line(m, f", last read {format_time(at) if at else 'never'}") for at, m in oldest)
        return "\n".join(
            [
                f"{count} memor{'y has' if count == 1 else 'ies have'} not been read for {days} days or "
                f"more. Review the {len(oldest)} unread longest:",
                listed,
                "",
                "For each: read it with read_memory(filenames=[...]) (which also marks it as used, if it is "
                "worth keeping), fix it with update_memory if it is out of date, or remove it with "
                "delete_memory if it is wrong or no longer useful. Unused P1 and P2 memories move to the "
                "archive on their own; evict_memories(dryRun=true) shows which would go now.",
                "Ask the user before deleting anything you are not sure about. Finish with one line per "
                "memory: kept, updated or deleted.",
            ]
        )
