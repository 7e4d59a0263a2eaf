"""A vault as MCP resources: its memories, archived memories, knowledge graph and session summaries.

URIs (the README documents them; none holds the token, so a URI shown to a user reveals no vault):

    memvault://vault                     an overview of the vault (what it holds, how to read it)
    memvault://memories/{+filename}      a hot memory's file, markdown (filename as read_memory takes it)
    memvault://archive/{+filename}       an archived memory's file, markdown
    memvault://sessions/{sessionId}      a session summary's latest text, markdown
    memory://knowledge-graph             the knowledge graph, JSON (the official memory server's URI)

Names are percent-encoded as RFC 3986 asks (a space is %20; the slashes of a memory in a folder
stay). Reading a resource is not an access: it never changes a memory's lastAccessedAt.
"""

from __future__ import annotations

import base64
import binascii
import bisect
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, unquote

import anyio.to_thread
from mcp.server.context import ServerRequestContext
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    Annotations,
    ListResourcesResult,
    ListResourceTemplatesResult,
    PaginatedRequestParams,
    ReadResourceRequestParams,
    ReadResourceResult,
    Resource,
    ResourceTemplate,
    TextResourceContents,
)

from memvault.clock import format_time
from memvault.config import Settings
from memvault.disk import files, safe
from memvault.disk.markdown import Memory
from memvault.disk.names import GRAPH_FILE, check_id
from memvault.errors import InvalidArgument, MemvaultError, NotFound, UnknownSession
from memvault.errors import quote as quoted
from memvault.ops import changes
from memvault.ops.records import sidecar_read
from memvault.ops.store import Store
from memvault.records import summaryfiles
from memvault.records.graphfile import parse
from memvault.records.graphsearch import Graph
from memvault.records.summaries import SessionInfo, SessionSummaries, check_session_id
from memvault.records.sync import SessionFiles
from memvault.tools.common import request_token

log = logging.getLogger("memvault")
T = TypeVar("T")

VAULT_URI = "memvault://vault"
GRAPH_URI = "memory://knowledge-graph"
MEMORIES = "memvault://memories/"
ARCHIVE = "memvault://archive/"
SESSIONS = "memvault://sessions/"
MEMORY_TEMPLATE = MEMORIES + "{+filename}"
ARCHIVE_TEMPLATE = ARCHIVE + "{+filename}"
SESSION_TEMPLATE = SESSIONS + "{sessionId}"
MARKDOWN = "text/markdown"
PAGE_SIZE = 500  # resources per resources/list page
MAX_CURSOR_CHARS = 16_384  # a cursor names one memory's id (at most a few hundred characters)
MAX_READ_BYTES = 8 * 1024 * 1024  # a larger file is refused (read_memory shows part of it)
RESOURCE_NOT_FOUND = -32002  # the code the MCP specification gives a read of an unknown resource

# The listing's sections, in order; a cursor says the last (section, name) a page held.
_VAULT, _GRAPH, _SESSIONS, _MEMORIES = range(4)

TEMPLATES = [
    ResourceTemplate(
        uri_template=MEMORY_TEMPLATE,
        name="memory",
        title="Memory",
        description="A memory's markdown file; filename as list_memory_titles shows it.",
        mime_type=MARKDOWN,
    ),
    ResourceTemplate(
        uri_template=ARCHIVE_TEMPLATE,
        name="archived-memory",
        title="Archived memory",
        description="An archived memory's markdown file; search_archive finds the names.",
        mime_type=MARKDOWN,
    ),
    ResourceTemplate(
        uri_template=SESSION_TEMPLATE,
        name="session-summary",
        title="Session summary",
        description="A session summary's latest version; list_summaries shows the ids.",
        mime_type=MARKDOWN,
    ),
]


@dataclass(frozen=True, slots=True)
class Target:
    """What a URI names: kind is "vault", "graph", "memory", "archive" or "session"."""

    kind: str
    name: str = ""

    @property
    def key(self) -> str | None:
        """The change key (memvault.ops.changes) of this resource; None for the whole vault."""
        if self.kind == "vault":
            return None
        if self.kind == "graph":
            return changes.GRAPH_KEY
        if self.kind == "session":
            return changes.SESSION_PREFIX + summaryfiles.file_stem(self.name)
        prefix = changes.ARCHIVE_PREFIX if self.kind == "archive" else changes.MEMORY_PREFIX
        return prefix + self.name


def memory_uri(id: str, archived: bool = False) -> str:
    return (ARCHIVE if archived else MEMORIES) + quote(id, safe="/")


def session_uri(session_id: str) -> str:
    return SESSIONS + quote(session_id, safe="")


def parse_uri(uri: str) -> Target:
    """The resource a URI names; InvalidArgument (with what to do) for any other URI."""
    if uri == VAULT_URI:
        return Target("vault")
    if uri == GRAPH_URI:
        return Target("graph")
    for prefix, kind in ((MEMORIES, "memory"), (ARCHIVE, "archive"), (SESSIONS, "session")):
        if uri.startswith(prefix) and len(uri) > len(prefix):
            name = unquote(uri[len(prefix) :], errors="strict")
            if kind == "session":
                return Target(kind, check_session_id(name))
            return Target(kind, check_id(name))
    raise InvalidArgument(
        f"Unknown resource URI {quoted(uri[:200])}. This server's resources are {VAULT_URI}, {GRAPH_URI}, "
        f"{MEMORY_TEMPLATE}, {ARCHIVE_TEMPLATE} and {SESSION_TEMPLATE}; resources/list shows them."
    )


def uri_of_key(key: str) -> str | None:
    """The URI of a change key; None for a session whose file name is not its id (a hashed one)."""
    if key == changes.GRAPH_KEY:
        return GRAPH_URI
    if key.startswith(changes.MEMORY_PREFIX):
        return memory_uri(key[len(changes.MEMORY_PREFIX) :])
    if key.startswith(changes.ARCHIVE_PREFIX):
        return memory_uri(key[len(changes.ARCHIVE_PREFIX) :], archived=True)
    if key.startswith(changes.SESSION_PREFIX):
        stem = key[len(changes.SESSION_PREFIX) :]
        return session_uri(stem) if summaryfiles.file_stem(stem) == stem else None
    return None


def rejected(exc: Exception, what: str) -> MCPError:
    """One place where a failure becomes the JSON-RPC error a client reads."""
    if isinstance(exc, NotFound | UnknownSession):
        return MCPError(code=RESOURCE_NOT_FOUND, message=str(exc))
    if isinstance(exc, MemvaultError):
        return MCPError(code=INVALID_PARAMS, message=str(exc))
    if isinstance(exc, UnicodeDecodeError):
        return MCPError(code=INVALID_PARAMS, message="The URI is not valid percent-encoded UTF-8.")
    log.exception("%s failed", what)
    return MCPError(
        code=INTERNAL_ERROR,
        message=f"{what} failed because of an internal error; the server log has details.",
    )


def guarded(what: str, fn: Callable[..., Awaitable[T]]) -> Callable[..., Awaitable[T]]:
    async def handler(*args: Any) -> T:
        try:
            return await fn(*args)
        except MCPError:
            raise
        except Exception as exc:
            raise rejected(exc, what) from None

    return handler


def encode_cursor(section: int, name: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([section, name]).encode()).decode()


def decode_cursor(cursor: str | None) -> tuple[int, str] | None:
    if not cursor:
        return None
    try:
        # Ours name a memory or session, so they are short: a longer one is refused unread (a
        # 500 KB nested one made json.loads raise RecursionError, an internal error).
        if len(cursor) <= MAX_CURSOR_CHARS:
            section, name = json.loads(base64.urlsafe_b64decode(cursor.encode()))
            if isinstance(section, int) and isinstance(name, str):
                return section, name
    except (ValueError, TypeError, binascii.Error, RecursionError):
        pass
    raise InvalidArgument("This cursor was not given by this server; list again without a cursor.")


def modified(mtime_ns: int) -> str:
    return format_time(datetime.fromtimestamp(mtime_ns / 1e9, UTC))


def memory_resource(memory: Memory) -> Resource:
    about = f"{memory.priority}" + (f"; tags: {', '.join(memory.tags)}" if memory.tags else "")
    return Resource(
        uri=memory_uri(memory.id, memory.archived),
        name=memory.id,
        title=memory.title,
        description=about,
        mime_type=MARKDOWN,
        size=memory.size or None,
        annotations=Annotations(last_modified=modified(memory.mtime_ns)) if memory.mtime_ns else None,
    )


def session_resource(info: SessionInfo) -> Resource:
    return Resource(
        uri=session_uri(info.session_id),
        name=info.session_id,
        title=info.title or f"Session {info.session_id}",
        description=f"Session summary, {info.versions} version(s)",
        mime_type=MARKDOWN,
        annotations=Annotations(last_modified=info.last_updated) if info.last_updated else None,
    )


FIXED = {
    _VAULT: Resource(
        uri=VAULT_URI,
        name="vault",
        title="This vault",
        description="What this vault holds and how to read it; subscribe to hear of every change.",
        mime_type=MARKDOWN,
    ),
    _GRAPH: Resource(
        uri=GRAPH_URI,
        name="knowledge-graph",
        title="Knowledge Graph",
        description="Entities and relations, as read_graph returns them.",
        mime_type="application/json",
    ),
}


def read_limited(path: Path, folder: Path, what: str, advice: str) -> str:
    """A file's text (worker thread), refused past MAX_READ_BYTES or when it, a folder on its way
    or the token folder ``folder`` is a link (LinkedFile, LinkedFolder: never read through)."""
    try:
        raw, _ = safe.read_file(path, folder, MAX_READ_BYTES + 1)
    except safe.LinkRefused as exc:
        raise exc.error() from None
    if len(raw) > MAX_READ_BYTES:
        raise InvalidArgument(
            f"{what} is larger than {MAX_READ_BYTES:,} bytes, too large to read whole. {advice}"
        )
    return raw.decode("utf-8", errors="replace").removeprefix("\ufeff")


class Resources:
    """The resources/* handlers (list, templates, read) over the vault of each request."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    async def sessions(self, token: str) -> list[SessionInfo]:
        def infos(sidecar: Any, folder: Path) -> list[SessionInfo]:
            found = SessionSummaries(
                sidecar,
                max_chars=self.settings.max_content_chars,
                clock=self.store.clock,
                files=SessionFiles(folder),
            )
            return found.infos()

        return sorted(await sidecar_read(self.store, token, infos) or [], key=lambda i: i.session_id)

    async def list_resources(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourcesResult:
        token = request_token(ctx.request)
        after = decode_cursor(params.cursor if params else None) or (-1, "")
        page: list[tuple[int, str, Resource]] = [
            (section, "", resource) for section, resource in FIXED.items() if (section, "") > after
        ]
        if after[0] <= _SESSIONS:
            for info in await self.sessions(token):
                if (_SESSIONS, info.session_id) > after:
                    page.append((_SESSIONS, info.session_id, session_resource(info)))
                if len(page) > PAGE_SIZE:
                    break
        if len(page) <= PAGE_SIZE:
            memories, _ = await self.store.list_hot(token)
            start = 0
            if after[0] == _MEMORIES:
                start = bisect.bisect_right(memories, after[1], key=lambda m: m.id)
            wanted = PAGE_SIZE + 1 - len(page)
            page += [(_MEMORIES, m.id, memory_resource(m)) for m in memories[start : start + wanted]]
        more = len(page) > PAGE_SIZE
        page = page[:PAGE_SIZE]
        cursor = encode_cursor(page[-1][0], page[-1][1]) if more else None
        return ListResourcesResult(resources=[r for _, _, r in page], next_cursor=cursor)

    async def list_templates(
        self, ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListResourceTemplatesResult:
        return ListResourceTemplatesResult(resource_templates=TEMPLATES)

    async def read(
        self, ctx: ServerRequestContext[Any], params: ReadResourceRequestParams
    ) -> ReadResourceResult:
        token = request_token(ctx.request)
        uri = str(params.uri)
        target = parse_uri(uri)
        if target.kind == "vault":
            text, mime = await self.overview(token), MARKDOWN
        elif target.kind == "graph":
            text, mime = await self.graph(token), "application/json"
        elif target.kind == "session":
            text, mime = await self.session(token, target.name), MARKDOWN
        else:
            text, mime = await self.memory(token, target.name, target.kind == "archive"), MARKDOWN
        return ReadResourceResult(contents=[TextResourceContents(uri=uri, text=text, mime_type=mime)])

    async def memory(self, token: str, id: str, archived: bool) -> str:
        async with self.store.using(token) as state:

            def read() -> str:
                try:
                    path = state.vault.target_of(id, archived=archived)
                    advice = "Read it with read_memory, or open the file in an editor."
                    return read_limited(path, state.vault.dir, f"'{id}'", advice)
                except (FileNotFoundError, NotADirectoryError, IsADirectoryError, files.NotRegularFile):
                    raise NotFound(id, archived=archived) from None

            return await anyio.to_thread.run_sync(read)

    async def session(self, token: str, session_id: str) -> str:
        folder = self.settings.root / token

        def read() -> str:
            md, _ = summaryfiles.paths(folder, session_id)
            try:
                what, advice = f"Session {quoted(session_id)}", "Page through it with get_summary."
                return read_limited(md, folder, what, advice)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError, files.NotRegularFile):
                raise UnknownSession(session_id) from None

        return await anyio.to_thread.run_sync(read)

    async def graph(self, token: str) -> str:
        folder = self.settings.root / token

        def read() -> str:
            what, advice = "The knowledge graph", "Use search_nodes or open_nodes."
            try:
                text = read_limited(folder / GRAPH_FILE, folder, what, advice)
            except (FileNotFoundError, NotADirectoryError, files.NotRegularFile):
                return json.dumps(Graph().to_json())
            parsed = parse(text)
            graph = Graph(tuple(e for e, _ in parsed.entities), tuple(r for r, _ in parsed.relations))
            return json.dumps(graph.to_json(), ensure_ascii=False)

        return await anyio.to_thread.run_sync(read)

    async def overview(self, token: str) -> str:
        memories, _ = await self.store.list_hot(token)
        sessions = await self.sessions(token)
        async with self.store.using(token) as state:
            archived = len(state.area(True).memories)
        return "\n".join(
            [
                "# This vault",
                "",
                f"- {counted(len(memories), 'memory', 'memories')}: {MEMORY_TEMPLATE} (resources/list "
                "pages through them)",
                f"- {counted(archived, 'archived memory', 'archived memories')}: {ARCHIVE_TEMPLATE} "
                "(search_archive finds them)",
                f"- {counted(len(sessions), 'session summary', 'session summaries')}: {SESSION_TEMPLATE}",
                f"- the knowledge graph: {GRAPH_URI}",
                "",
                "Subscribe to this resource to hear of every change in the vault, whoever makes it "
                "(an agent, the command line, a person's editor, a git pull).",
            ]
        )


def counted(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"
