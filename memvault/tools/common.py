"""What every tool module shares: declaring and registering tools, the token, replies, errors."""

from __future__ import annotations

import contextvars
import functools
import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, TextContent, ToolAnnotations

from memvault.clock import format_time
from memvault.errors import DiskFull, MemvaultError, is_disk_full
from memvault.ops.store import Store
from memvault.records.graph import Entity, Graph

log = logging.getLogger("memvault")
P = ParamSpec("P")
T = TypeVar("T")

READ_ONLY = ToolAnnotations(
    read_only_hint=True, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)
CREATES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=False, open_world_hint=False
)
CHANGES = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=True, open_world_hint=False
)
MOVES = ToolAnnotations(
    read_only_hint=False, destructive_hint=True, idempotent_hint=False, open_world_hint=False
)
# Changes in place that a repeat would repeat (an append appends again).
EDITS = MOVES
# Brings something back; nothing is lost, and a second call finds it back already.
RESTORES = ToolAnnotations(
    read_only_hint=False, destructive_hint=False, idempotent_hint=True, open_world_hint=False
)


# The one token a `memvault stdio` process serves (there is no request path to take it from).
SERVED_TOKEN: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "memvault_served_token", default=None
)


def token_of(ctx: Context) -> str:
    """The token comes from the path of the request being served, or over stdio from the command line."""
    return request_token(ctx.request_context.request)


def request_token(request: Any) -> str:
    """The token of a request (token_of, for handlers that get the SDK's request context)."""
    token = getattr(request, "path_params", {}).get("token") if request is not None else SERVED_TOKEN.get()
    if not isinstance(token, str):
        raise MemvaultError("This endpoint has no token; connect to /mcp/<token>.")
    return token


def read_only(request: Any) -> bool:
    """Whether the request came with a read-only key (app.BearerAuth marks it in its state)."""
    state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
    return bool(state.get("memvault_read_only", False))


def read_only_call(ctx: Context) -> bool:
    """Whether the tool call being served came with a read-only key: it must change no file."""
    return read_only(ctx.request_context.request)


def text(message: str, *, error: bool = False) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=error)


def noticed(store: Store, token: str, reply: str) -> str:
    """The reply, followed by what a lazy sweep archived since the last one (told once)."""
    notice = store.take_notice(token)
    return f"{reply}\n{notice}" if notice else reply


def handles_errors(fn: Callable[P, Awaitable[CallToolResult]]) -> Callable[P, Awaitable[CallToolResult]]:
    """Deliberate errors become tool errors with their message; anything else, a generic one."""

    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> CallToolResult:
        try:
            return await fn(*args, **kwargs)
        except MemvaultError as exc:
            return text(str(exc), error=True)
        except Exception as exc:
            if is_disk_full(exc):  # raised before the change took effect (bookkeeping never raises)
                log.warning("tool %s: the disk is full", fn.__name__)
                return text(str(DiskFull()), error=True)
            log.exception("tool %s failed", fn.__name__)
            return text(
                f"{fn.__name__} failed because of an internal error; the server log has details. "
                "Nothing was lost; try again, or tell the user.",
                error=True,
            )

    # Tool descriptions come from docstrings: without the source's indentation an agent reads less.
    wrapper.__doc__ = inspect.cleandoc(fn.__doc__ or "")
    return wrapper


# ---------------------------------------------------------------------------- declaring tools


@dataclass(frozen=True, slots=True)
class ToolMark:
    """How a tool is listed beside its name and description: a title for a person, annotations for
    the client, and whether its reply is structured (then the SDK reads its return annotation)."""

    title: str
    annotations: ToolAnnotations
    structured: bool


MARK = "__memvault_tool__"


def tool(
    title: str, annotations: ToolAnnotations, *, structured: bool = False
) -> Callable[[Callable[P, Awaitable[CallToolResult]]], Callable[P, Awaitable[CallToolResult]]]:
    """Declares a method of a `Tools` class as one tool: named after the method, described by its
    docstring, its arguments its parameters after ``ctx``; its errors go through handles_errors."""

    def mark(fn: Callable[P, Awaitable[CallToolResult]]) -> Callable[P, Awaitable[CallToolResult]]:
        handled = handles_errors(fn)
        setattr(handled, MARK, ToolMark(title, annotations, structured))
        return handled

    return mark


class Tools:
    """A group of tools over the parts they share (the store, the settings): each method declared
    with @tool is one tool, listed in the order the class defines them."""

    def marked(self) -> Iterator[tuple[Callable[..., Awaitable[CallToolResult]], ToolMark]]:
        """Each tool of this group, bound to it, with how it is listed."""
        for name, member in vars(type(self)).items():
            mark = getattr(member, MARK, None)
            if isinstance(mark, ToolMark):
                yield getattr(self, name), mark

    def register(self, server: MCPServer) -> None:
        """Adds this group's tools to the server: the one place a tool is registered."""
        for fn, mark in self.marked():
            server.add_tool(
                fn,
                title=mark.title,
                annotations=mark.annotations,
                structured_output=mark.structured,
            )


# ---------------------------------------------------------------------------- reply text


def show_time(at: datetime | None) -> str:
    return format_time(at) if at else ""


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
            part = cut_to(part, self.budget)  # a single item larger than the whole budget
        self.parts.append(part)
        self.used += sep + len(part)
        return True

    def text(self) -> str:
        return "\n".join(self.parts)


def cut_to(part: str, budget: int) -> str:
    """``part`` as it fits ``budget``: whole, or cut with a note that says how much is left out."""
    if len(part) <= budget:
        return part
    keep = max(0, budget - 200)
    return part[:keep] + f"\n[... cut: {len(part) - keep:,} more characters over the reply limit]\n"


def fit_names(names: Sequence[str], room: int) -> str:
    """As many names as fit in ``room`` characters, comma-separated, '...' when some are dropped."""
    out = ""
    for name in names:
        longer = f"{out}, {name}" if out else name
        if len(longer) + 5 > room:
            return f"{out}, ..." if out else "..."
        out = longer
    return out


def fit_prefix(count: int, size: Callable[[int], int], budget: int) -> int:
    """The largest k <= count with size(k) <= budget (size grows with k)."""
    lo, hi = 0, count
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if size(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def joined(names: Sequence[str], room: int) -> str:
    """Names, comma-separated, cut with '...' to about ``room`` characters."""
    text = ", ".join(names)
    return text if len(text) <= room else text[: max(0, room - 3)].rsplit(", ", 1)[0] + ", ..."


def dumps(payload: Any) -> str:
    return json.dumps(payload, ensure_ascii=False)


def json_result(payload: Any, structured: dict[str, Any], *notes: str) -> CallToolResult:
    """One JSON text, as the official memory server replies, and the same as structured content.

    Notes for the agent (skipped names, a cut reply) go in a "notes" field, so the text stays one
    JSON document: then the text is the structured object, never the payload plus loose lines."""
    told = [note for note in notes if note]
    if told:
        structured = {**structured, "notes": told}
        payload = structured
    return CallToolResult(
        content=[TextContent(type="text", text=dumps(payload))], structured_content=structured
    )


def graph_result(
    found: Graph, budget: int, *, either_end: bool = False, notes: Sequence[str] = ()
) -> CallToolResult:
    """The graph as JSON within the reply budget; entities past it are left out (with their relations).

    Entries are sized one at a time, in order, until the budget is spent: a 100,000-entity graph
    costs what its reply holds (and one pass over its relations), not the whole graph in JSON."""
    budget -= sum(len(note) for note in notes)
    relations = found.relations
    touching: dict[str, list[int]] = {}
    for i, r in enumerate(relations):
        touching.setdefault(r.source, []).append(i)
        if r.target != r.source:
            touching.setdefault(r.target, []).append(i)
    used = len(dumps({"entities": [], "relations": []}))
    names: set[str] = set()
    taken: set[int] = set()
    steps: list[tuple[int, list[int]]] = []  # each shown entity: the reply's size after it, its relations
    for entity in found.entities:
        names.add(entity.name)
        new = [
            i
            for i in touching.get(entity.name, ())
            if i not in taken
            and (either_end or (relations[i].source in names and relations[i].target in names))
        ]
        used += len(dumps(entity.to_json())) + 2 + sum(len(dumps(relations[i].to_json())) + 2 for i in new)
        if used > budget:
            break
        taken.update(new)
        steps.append((used, new))
    if len(steps) == len(found.entities):
        rest = sum(len(dumps(r.to_json())) + 2 for i, r in enumerate(relations) if i not in taken)
        if used + rest <= budget:
            full = found.to_json()
            return json_result(full, full, *notes)

    room = budget - 300  # for the note
    while steps and steps[-1][0] > room:
        steps.pop()
    k = len(steps)
    places = sorted(i for _, new in steps for i in new)
    payload = Graph(found.entities[:k], tuple(relations[i] for i in places)).to_json()
    if k == 0 and found.entities:
        # One entity larger than the whole budget: show it with its observations cut short.
        first = found.entities[0]
        each = max(40, room // (4 * max(1, len(first.observations))))
        cut = tuple(o if len(o) <= each else o[:each] + " [...cut]" for o in first.observations)
        payload = {"entities": [Entity(first.name, first.entity_type, cut).to_json()], "relations": []}
        while len(dumps(payload)) > room and payload["entities"][0]["observations"]:
            payload["entities"][0]["observations"].pop()
        k = 1
    note = (
        f"[Reply limit: showing {k} of {len(found.entities)} entities and {len(payload['relations'])} of "
        f"{len(relations)} relations. Narrow with search_nodes(query) or open_nodes(names).]"
    )
    return json_result(payload, payload, *notes, note)


def list_result(key: str, items: list[Any], budget: int, what: str, *notes: str) -> CallToolResult:
    """A JSON array reply (the official create/add replies) within the budget, structured as {key: [...]}."""
    room = budget - 300 - sum(len(n) for n in notes)
    k = fit_prefix(len(items), lambda k: len(dumps(items[:k])), room)
    extra = ""
    if k < len(items):
        extra = f"[{len(items) - k} more {what} not shown to keep this reply short; all were saved.]"
    return json_result(items[:k], {key: items[:k]}, *notes, extra)


def outcome(message: str) -> CallToolResult:
    """A deletion's result, as JSON like every graph reply (the official server answers plain text)."""
    structured = {"success": True, "message": message}
    return CallToolResult(
        content=[TextContent(type="text", text=dumps(structured))], structured_content=structured
    )
