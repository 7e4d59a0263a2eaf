"""completion/complete: memory filenames, session ids and entity names for template and prompt arguments.

Bounded and quick: at most MAX_VALUES values; filenames by prefix from the sorted ids (a binary
search), then, if room is left, names that contain the text anywhere (a scan of at most SCAN_LIMIT
ids); session ids and entity names by a LIKE prefix query on the sidecar, with a LIMIT.
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import Any

import anyio.to_thread
from mcp.server.context import ServerRequestContext
from mcp.types import CompleteRequestParams, CompleteResult, Completion, PromptReference

from memvault.config import Settings
from memvault.ops.records import sidecar_read
from memvault.ops.store import Store
from memvault.records.graph import entity_names
from memvault.records.sidecar import Sidecar
from memvault.records.summaries import session_ids
from memvault.registry.state import TokenState
from memvault.tools import prompts
from memvault.tools.common import request_token
from memvault.tools.resources import ARCHIVE_TEMPLATE, MEMORY_TEMPLATE, SESSION_TEMPLATE, guarded

MAX_VALUES = 100  # the most values one completion may hold (the MCP specification's cap)
SCAN_LIMIT = 200_000  # ids looked through for names that contain the text (after the prefix matches)
MAX_VALUE_CHARS = 200  # longer typed text completes to nothing


def matching_ids(state: TokenState, typed: str, archived: bool) -> tuple[list[str], bool]:
    """Ids starting with ``typed``, then ids containing it (any case); and whether more exist."""
    with state.mem_lock:
        memories = state.area(archived).in_order()
    found: list[str] = []
    start = bisect.bisect_left(memories, typed, key=lambda m: m.id)
    for i in range(start, len(memories)):
        id = memories[i].id
        if not id.startswith(typed):
            break
        found.append(id)
        if len(found) > MAX_VALUES:
            return found[:MAX_VALUES], True
    if typed:
        lowered, seen = typed.lower(), set(found)
        for i in range(min(len(memories), SCAN_LIMIT)):
            id = memories[i].id
            if lowered in id.lower() and id not in seen:
                found.append(id)
                if len(found) > MAX_VALUES:
                    return found[:MAX_VALUES], True
    return found, False


class Completer:
    """The completion/complete handler."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    async def complete(self, ctx: ServerRequestContext[Any], params: CompleteRequestParams) -> CompleteResult:
        return await guarded("completion/complete", self._complete)(ctx, params)

    async def _complete(
        self, ctx: ServerRequestContext[Any], params: CompleteRequestParams
    ) -> CompleteResult:
        token = request_token(ctx.request)
        name, typed = params.argument.name, params.argument.value
        values: list[str] = []
        more = False
        if len(typed) <= MAX_VALUE_CHARS:
            kind = self.kind(params.ref, name)
            if kind in ("memory", "archive"):
                values, more = await self.filenames(token, typed, kind == "archive")
            elif kind == "session":
                values, more = await self.names(token, lambda conn: session_ids(conn, typed, MAX_VALUES + 1))
            elif kind == "topic":
                values, more = await self.names(token, lambda conn: entity_names(conn, typed, MAX_VALUES + 1))
            elif kind == "days":
                values = [d for d in ("7", "30", "90", "180", "365") if d.startswith(typed)]
        return CompleteResult(completion=Completion(values=values, has_more=more or None))

    @staticmethod
    def kind(ref: Any, argument: str) -> str | None:
        """What an argument names: "memory", "archive", "session", "topic", "days", or None."""
        if isinstance(ref, PromptReference):
            if ref.name == prompts.REVIEW and argument == "days":
                return "days"
            if ref.name == prompts.SAVE and argument == "sessionId":
                return "session"
            if ref.name == prompts.RECALL and argument == "topic":
                return "topic"
            return None
        uri = getattr(ref, "uri", None)
        if uri == MEMORY_TEMPLATE and argument == "filename":
            return "memory"
        if uri == ARCHIVE_TEMPLATE and argument == "filename":
            return "archive"
        if uri == SESSION_TEMPLATE and argument == "sessionId":
            return "session"
        return None

    async def filenames(self, token: str, typed: str, archived: bool) -> tuple[list[str], bool]:
        async with self.store.using(token) as state:
            return await anyio.to_thread.run_sync(matching_ids, state, typed, archived)

    async def names(self, token: str, query: Any) -> tuple[list[str], bool]:
        def run(sidecar: Sidecar, folder: Path) -> list[str]:
            with sidecar.snapshot() as conn:
                return list(query(conn))

        found = await sidecar_read(self.store, token, run) or []
        return found[:MAX_VALUES], len(found) > MAX_VALUES
