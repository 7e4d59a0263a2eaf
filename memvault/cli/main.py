"""The command line: memvault serve | evict | check | reindex | export | import."""

from __future__ import annotations

import argparse
import asyncio
import errno
import json
import logging
import os
import socket
import sqlite3
import sys
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from memvault import __version__
from memvault.cli.progress import Progress
from memvault.config import SETTINGS, Settings
from memvault.disk.names import valid_token
from memvault.errors import MemvaultError

if TYPE_CHECKING:
    from memvault.ops.store import Store


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memvault", description="A memory server for AI agents.")
    parser.add_argument("--version", action="version", version=f"memvault {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the vault over MCP (streamable HTTP and SSE)")
    serve.add_argument(
        "--root", type=Path, help=f"vault folder (env {SETTINGS['root'].env}, default ./memories)"
    )
    serve.add_argument("--host", help=f"address to listen on (env {SETTINGS['host'].env}, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help=f"port (env {SETTINGS['port'].env}, default 3000)")

    stdio = sub.add_parser("stdio", help="serve one token's vault over stdio (for desktop clients)")
    stdio.add_argument("--root", type=Path, help="vault folder (default ./memories)")
    stdio.add_argument("--token", required=True, help="the token (vault folder) to serve")

    keys = sub.add_parser("keys", help="add, list or revoke bearer keys (MEMVAULT_KEYS_FILE)")
    keys.add_argument("action", choices=("add", "list", "revoke"))
    keys.add_argument("name", nargs="?", help="the key's name (add, revoke), e.g. laptop-claude")
    keys.add_argument("--token", help="the vault the key opens (add)")
    keys.add_argument("--read-only", action="store_true", help="the key may only read (add)")
    keys.add_argument("--file", type=Path, help="the keys file (default: MEMVAULT_KEYS_FILE)")

    evict = sub.add_parser("evict", help="archive stale memories now (safe while a server runs)")
    evict.add_argument("--root", type=Path, help="vault folder (default ./memories)")
    evict.add_argument("--token", help="only this token (default: every token in the vault)")
    evict.add_argument("--dry-run", action="store_true", help="only report what would be archived")
    evict.add_argument("--list", action="store_true", help="list each file and why (default: counts only)")

    check = sub.add_parser(
        "check", help="report files to fix: broken frontmatter, conflicts, duplicate titles"
    )
    check.add_argument("--root", type=Path, help="vault folder (default ./memories)")
    check.add_argument("--token", help="only this token (default: every token in the vault)")

    migrate = sub.add_parser(
        "migrate",
        help="give hand-made files without frontmatter memvault's (priority, times), as mem-mcp did on "
        "a first read; memvault never does it by itself",
    )
    migrate.add_argument("--root", type=Path, help="vault folder (default ./memories)")
    migrate.add_argument("--token", help="only this token (default: every token in the vault)")
    migrate.add_argument("--dry-run", action="store_true", help="only list the files it would change")

    reindex = sub.add_parser("reindex", help="rebuild the derived state (parse cache) from the files")
    reindex.add_argument("--root", type=Path, help="vault folder (default ./memories)")
    reindex.add_argument("--token", help="only this token (default: every token in the vault)")

    proxy = sub.add_parser(
        "nginx",
        help="write an nginx configuration that spreads tokens over several memvault processes "
        "(each token always to the same one)",
    )
    proxy.add_argument("--backends", required=True, help="memvault processes, host:port,host:port,...")
    proxy.add_argument("--listen", default="3000", help="what nginx listens on (default 3000)")
    proxy.add_argument(
        "--standalone", action="store_true", help="a whole nginx.conf, not an http-level include"
    )
    proxy.add_argument("--out", type=Path, help="write to this file instead of stdout")

    export = sub.add_parser("export", help="write session summaries and knowledge graphs as JSON lines")
    export.add_argument("--root", type=Path, help="vault folder (default ./memories)")
    export.add_argument("--token", help="only this token (default: every token in the vault)")
    export.add_argument("--out", type=Path, help="write to this file instead of stdout")

    load = sub.add_parser("import", help="load an export back (idempotent: what is there already stays)")
    load.add_argument("--root", type=Path, help="vault folder (default ./memories)")
    load.add_argument("--token", help="load every line into this token (default: the token on each line)")
    load.add_argument("file", type=Path, help="the file written by memvault export ('-' for stdin)")
    for name, command in sub.choices.items():
        command.description = DESCRIPTIONS[name]
    return parser


# What each subcommand's --help says it does (the listing of `memvault --help` shows the short help).
DESCRIPTIONS = {
    "serve": "Serve the vault to agents over MCP: streamable HTTP at /mcp/<token> and the legacy SSE "
    "transport at /mcp/<token>/sse. Each token is a folder of markdown files under the root; edits "
    "made by hand are picked up live. Settings come from MEMVAULT_* variables (see the README).",
    "stdio": "Serve one token's vault over stdio, for clients that start their server themselves "
    "(desktop apps). Same tools, same file locks and live index as serve, so a stdio client and an "
    "HTTP server can share a vault. Protocol on stdout, logs on stderr.",
    "keys": "Manage the bearer keys of MEMVAULT_KEYS_FILE: `add NAME --token T [--read-only]` prints a "
    "new key once (only its hash is stored), `list` shows names, vaults and scopes (never keys), "
    "`revoke NAME` removes one; a running server applies changes at once.",
    "evict": "Archive stale memories now, as the server does lazily: P1 unused for 90 days, P2 for 30, "
    "then the least recently used over the capacity. P0 and important memories stay. Prints a "
    "summary per token; --list names each file and why. Safe while a server runs.",
    "check": "Read every memory file and report, without changing anything, errors a person must fix "
    "(broken frontmatter, git conflict markers, unreadable files; exit status 1) and notes worth a "
    "look (duplicate titles; exit status 0). Usable as a pre-commit check.",
    "migrate": "Give hand-made files without frontmatter memvault's (priority, times), as mem-mcp did on "
    "a first read. memvault never changes them by itself; --dry-run lists them.",
    "reindex": "Rebuild the derived state of each token (parse cache, search snapshot) from its files, "
    "now rather than at the server's next load of the token.",
    "nginx": "Print an nginx configuration that spreads tokens over several memvault processes by a "
    "consistent hash of the token, so each token always reaches the same process.",
    "export": "Write session summaries (every version) and knowledge graphs as JSON lines, one token "
    "after another; memvault import loads them back.",
    "import": "Load a file written by memvault export. Every line is checked before anything is "
    "written; what is there already stays (running it twice changes nothing).",
}


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        overrides = {k: getattr(args, k, None) for k in ("root", "host", "port")}
        settings = Settings.from_env(os.environ, **overrides)
    except MemvaultError as exc:
        print(f"memvault: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=getattr(logging, settings.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if settings.log_level != "debug":
        # The SDK logs every session's start and end at info; that drowns our own lines.
        logging.getLogger("mcp").setLevel(logging.WARNING)
    if args.command == "serve":
        return serve(settings)
    if args.command == "stdio":
        return stdio(settings, args.token)
    if args.command == "keys":
        return keys_command(settings, args)
    if args.command == "evict":
        return asyncio.run(evict(settings, args.token, args.dry_run, args.list))
    if args.command == "check":
        return check(settings, args.token)
    if args.command == "migrate":
        return asyncio.run(migrate(settings, args.token, args.dry_run))
    if args.command == "reindex":
        return reindex(settings, args.token)
    if args.command == "nginx":
        return nginx_config(args.backends, args.listen, args.standalone, args.out)
    if args.command == "export":
        return export(settings, args.token, args.out)
    if args.command == "import":
        return import_(settings, args.token, args.file)
    return 2  # pragma: no cover - argparse requires a command


def serve(settings: Settings) -> int:
    from memvault.load import processes

    # Before our imports: a restart's folder scan helper imports on the other core meanwhile.
    if processes.scan_helpers(settings.load_processes) and processes.worth_a_spare(
        settings.root, processes.HELPER_MIN_BYTES
    ):
        processes.start_spare("folderscan")
    try:
        return _serve(settings)
    finally:
        processes.drop_spare()


def _serve(settings: Settings) -> int:
    from memvault import heap

    heap.configure()  # before the first large allocation (see heap)
    # The imports make the SDK's 100,000 long-lived objects: collector passes over them while
    # importing found nothing and were a tenth of the start-up (uncollected also freezes them).
    with heap.uncollected():
        import uvicorn

        from memvault.server import limits
        from memvault.server.app import create_app
    limits.favour_the_event_loop()
    _, now = limits.raise_open_file_limit(settings.max_connections + 1024)
    if now < settings.max_connections + 256:
        print(
            f"memvault: warning: only {now} open files allowed (ulimit -n) for up to "
            f"{settings.max_connections} connections (MEMVAULT_MAX_CONNECTIONS); lower the setting "
            "or raise the limit.",
            file=sys.stderr,
        )
    limits.quiet_accept_failures()

    try:
        app = create_app(settings)
    except MemvaultError as exc:
        print(f"memvault: {exc}", file=sys.stderr)
        return 2
    heap.keep()  # the imports' 100,000 objects (the SDK's models) live as long as the process
    sock = listen(settings.host, settings.port)
    if sock is None:
        return 1
    print(
        f"memvault {__version__}: serving {settings.root.resolve()} "
        f"on http://{settings.host}:{settings.port}/mcp/<token>"
    )
    config = uvicorn.Config(
        app,
        log_level=settings.log_level,
        lifespan="on",
        http=limits.guarded_protocol(settings.max_connections, settings.header_timeout_seconds),
    )
    uvicorn.Server(config).run(sockets=[sock])
    return 0


def listen(host: str, port: int) -> socket.socket | None:
    """The bound socket, before anything says it is serving; None (after one clear line) when the
    address is taken or cannot be used."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say
    # they are TCP. Without it every reply waited for the client's delayed ACK: 44 ms a call.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: restarts need no wait
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        taken = exc.errno == errno.EADDRINUSE
        why = "another program (maybe another memvault serve) uses it" if taken else exc.strerror or str(exc)
        print(
            f"memvault: cannot listen on {host}:{port}: {why}. Stop that program, or choose another "
            f"port with --port or {SETTINGS['port'].env}.",
            file=sys.stderr,
        )
        return None
    sock.set_inheritable(True)
    return sock


def keys_command(settings: Settings, args: argparse.Namespace) -> int:
    from memvault.server import keys

    path = args.file or settings.keys_file
    if path is None:
        print("memvault: no keys file: pass --file PATH or set MEMVAULT_KEYS_FILE.", file=sys.stderr)
        return 2
    return keys.command(path, args.action, args.name, args.token, read_only=args.read_only)


def stdio(settings: Settings, token: str) -> int:
    import anyio

    from memvault.server.stdio import serve_stdio

    if not valid_token(token) or settings.token_dir(token).is_symlink():
        print(
            f"memvault: {token!r} is not a token memvault can serve (see the README's tokens).",
            file=sys.stderr,
        )
        return 2
    anyio.run(serve_stdio, settings, token)
    return 0


def _tokens(settings: Settings, token: str | None) -> list[str] | None:
    """The tokens a command works on; None (after a message) when there is nothing to work on.

    Run from the wrong folder, a command must say so rather than report a clean, empty vault.
    """
    if not settings.root.is_dir():
        print(f"memvault: no vault at {settings.root} (use --root DIR or MEMVAULT_ROOT).", file=sys.stderr)
        return None
    if token is not None:
        if not valid_token(token):
            print(f"memvault: {token!r} is not a valid token.", file=sys.stderr)
            return None
        if settings.token_dir(token).is_symlink():
            why = "is a symbolic link; memvault never follows those"
            print(f"memvault: the folder of token {token!r} {why}.", file=sys.stderr)
            return None
        if not settings.token_dir(token).is_dir():
            print(f"memvault: the vault has no folder for token {token!r}.", file=sys.stderr)
            return None
        return [token]
    # A token folder that is a link (to another token, or out of the root) is never followed.
    return sorted(
        p.name for p in settings.root.iterdir() if p.is_dir() and not p.is_symlink() and valid_token(p.name)
    )


def check(settings: Settings, token: str | None) -> int:
    from memvault.cli.check import check_vault
    from memvault.disk.vault import Vault

    tokens = _tokens(settings, token)
    if tokens is None:
        return 2
    errors = notes = 0
    for name in tokens:
        with Progress(f"check {name}") as progress:
            findings = list(check_vault(Vault(settings.token_dir(name)), progress))
        for finding in findings:
            print(f"{'error' if finding.error else 'note'}: {name}/{finding.id}: {finding.problem}")
            errors += finding.error
            notes += not finding.error
    print(
        f"{errors} error(s) to fix and {notes} note(s) in {len(tokens)} token(s)"
        + ("; notes do not fail the check." if notes else "."),
        file=sys.stderr,
    )
    return 1 if errors else 0


def reindex(settings: Settings, token: str | None) -> int:
    from memvault.ops.store import Store

    tokens = _tokens(settings, token)
    if tokens is None:
        return 2
    store = Store(settings)
    try:
        for name in tokens:
            with Progress(name) as progress:
                count = store.reindex(name, progress)
            print(f"{name}: reindexed {count} memories")
    finally:
        asyncio.run(store.close())
    return 0


async def _each_token(
    settings: Settings, token: str | None, work: Callable[[Store, str], Awaitable[list[str]]]
) -> int:
    """Run an operation of the store on one token or every token, printing what it reports. Each
    token is loaded first, with a progress bar: a cold load of 100,000 files takes seconds."""
    from memvault.ops.store import Store

    tokens = _tokens(settings, token)
    if tokens is None:
        return 2
    store = Store(settings)
    try:
        for name in tokens:
            with Progress(f"load {name}") as progress:
                await store.registry.ensure_loaded(store.registry.register(name), progress)
            for line in await work(store, name):
                print(line)
    except MemvaultError as exc:
        print(f"memvault: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    return 0


async def migrate(settings: Settings, token: str | None, dry_run: bool) -> int:
    async def one(store: Store, name: str) -> list[str]:
        done = await store.migrate(name, dry_run=dry_run)
        verb = "would give" if dry_run else "gave"
        return [f"{name}: {verb} {len(done)} file(s) frontmatter", *(f"  {id}" for id in done)]

    return await _each_token(settings, token, one)


async def evict(settings: Settings, token: str | None, dry_run: bool, listed: bool) -> int:
    async def one(store: Store, name: str) -> list[str]:
        evicted = await store.evict(name, dry_run=dry_run)
        verb = "would archive" if dry_run else "archived"
        kinds = Counter(_why(item.reason) for item in evicted)
        summary = "; ".join(f"{count} {kind}" for kind, count in sorted(kinds.items()))
        lines = [f"{name}: {verb} {len(evicted)}" + (f" ({summary})" if summary else "")]
        if listed:
            lines += [f"  {item.id}: {item.reason}" for item in evicted]
        elif evicted:
            lines.append("  (--list shows each file and why)")
        return lines

    return await _each_token(settings, token, one)


def _why(reason: str) -> str:
    """A line of evict's summary: "P2 past their TTL" or "over capacity" (see eviction.plan)."""
    first = reason.split(",")[0]
    return f"{first} past their TTL" if first in ("P1", "P2") else "over capacity"


# Characters str.splitlines (and some editors) take for line ends; JSON allows them raw in strings,
# so an export escapes them and every line of it survives any line splitter.
_LINE_BREAKS = {"\u2028": "\\u2028", "\u2029": "\\u2029", "\x85": "\\u0085"}


def export_line(row: Mapping[str, object]) -> str:
    """One export row as a JSON line: UTF-8 kept readable, line separators escaped."""
    line = json.dumps(row, ensure_ascii=False)
    for char, escape in _LINE_BREAKS.items():
        line = line.replace(char, escape)
    return line


def nginx_config(backends: str, listen: str, whole: bool, out: Path | None) -> int:
    from memvault.disk.files import atomic_write
    from memvault.server import nginx

    try:
        names = backends.split(",")
        text = nginx.standalone(names, listen=listen) if whole else nginx.http_block(names, listen=listen)
    except MemvaultError as exc:
        print(f"memvault: {exc}", file=sys.stderr)
        return 2
    if out is None:
        sys.stdout.write(text)
    else:
        atomic_write(out, text.encode("utf-8"))
        print(f"wrote {out}", file=sys.stderr)
    return 0


def export(settings: Settings, token: str | None, out: Path | None) -> int:
    """Sessions and graphs as JSON lines: per token, entities, relations, then session versions, sorted."""
    from memvault.disk.files import atomic_write
    from memvault.records import sync
    from memvault.records.graph import KnowledgeGraph
    from memvault.records.sidecar import Sidecar, sidecar_path
    from memvault.records.summaries import Sessions

    tokens = _tokens(settings, token)
    if tokens is None:
        return 2
    lines: list[str] = []
    for name in tokens:
        folder = settings.token_dir(name)
        if not sidecar_path(folder).is_file() and not sync.has_files(folder):
            continue  # nothing stored yet; exporting must not create a folder
        with Sidecar.open(folder) as sidecar:
            sync.sync(sidecar, folder)  # the files are canonical: a pull since is included
            rows = KnowledgeGraph(sidecar, max_chars=settings.max_content_chars).export_rows()
            rows += Sessions(sidecar, max_chars=settings.max_content_chars).export_rows()
        lines += [export_line({"token": name, **row}) for row in rows]
    text = "".join(line + "\n" for line in lines)
    if out is None:
        sys.stdout.write(text)
    else:
        atomic_write(out, text.encode("utf-8"))
        print(f"wrote {len(lines)} line(s) to {out}", file=sys.stderr)
    return 0


class ImportRefused(Exception):
    """An import file that cannot be loaded; the message names the line and says why."""


def _import_lines(handle: BinaryIO, limit: int) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, row) of each non-blank line. Lines end at "\n" only (export escapes every other
    line separator); a line is read with a bound, so a huge one never fills the memory."""
    number = 0
    while True:
        raw = handle.readline(limit + 2)
        if not raw:
            return
        number += 1
        if len(raw.rstrip(b"\r\n")) > limit:
            raise ImportRefused(
                f"line {number} is longer than {limit:,} bytes (MEMVAULT_MAX_IMPORT_LINE_BYTES); "
                "raise the setting if the file is yours"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ImportRefused(f"line {number} is not valid UTF-8") from None
        if not text.strip():
            continue
        try:
            row = json.loads(text)
        except (ValueError, RecursionError) as exc:
            # ValueError: not JSON, or a number past Python's digit limit; RecursionError: deep nesting.
            why = "nested too deeply" if isinstance(exc, RecursionError) else "not valid JSON"
            raise ImportRefused(f"line {number} is {why}") from None
        if not isinstance(row, dict) or row.get("kind") not in ("entity", "relation", "session"):
            raise ImportRefused(f"line {number} is not a memvault export line")
        yield number, row


def import_(settings: Settings, token: str | None, file: Path) -> int:
    """Load an export: every line is read and checked before anything is written, each token is
    written in one transaction (graph and sessions together), and every row already present is
    left as it is, so importing twice changes nothing."""
    from filelock import FileLock

    from memvault.disk.names import STATE_DIR
    from memvault.records import sync
    from memvault.records.graph import GraphRows, KnowledgeGraph
    from memvault.records.sidecar import Sidecar
    from memvault.records.summaries import Sessions, Version

    if token is not None and not valid_token(token):
        print(f"memvault: {token!r} is not a valid token.", file=sys.stderr)
        return 2

    # Checked without a sidecar: nothing is opened or created until the whole file passed.
    def unopened() -> Sidecar:
        raise AssertionError("checking rows must not open a sidecar")

    checker_graph = KnowledgeGraph(unopened, max_chars=settings.max_content_chars)
    checker_sessions = Sessions(unopened, max_chars=settings.max_content_chars)
    graphs: dict[str, GraphRows] = {}
    versions: dict[str, list[Version]] = {}
    try:
        handle: BinaryIO = sys.stdin.buffer if str(file) == "-" else open(file, "rb")
    except OSError as exc:
        print(f"memvault: cannot read {file}: {exc.strerror or type(exc).__name__}", file=sys.stderr)
        return 2
    try:
        with handle, Progress("import (checking)", unit=" lines") as progress:
            for number, row in _import_lines(handle, settings.max_import_line_bytes):
                progress(1)
                name = token or row.get("token")
                if not isinstance(name, str) or not valid_token(name):
                    raise ImportRefused(f"line {number} has no valid token; pass --token")
                if settings.token_dir(name).is_symlink():
                    raise ImportRefused(f"line {number}: the folder of token {name!r} is a symbolic link")
                try:
                    if row["kind"] == "session":
                        versions.setdefault(name, []).extend(checker_sessions.parse_rows([row]))
                    else:
                        part = checker_graph.parse_rows([row])
                        graph = graphs.setdefault(name, GraphRows([], []))
                        graph.entities.extend(part.entities)
                        graph.relations.extend(part.relations)
                except MemvaultError as exc:
                    raise ImportRefused(f"line {number} holds {exc}") from None
    except OSError as exc:
        print(f"memvault: cannot read {file}: {exc.strerror or type(exc).__name__}", file=sys.stderr)
        return 2
    except ImportRefused as exc:
        print(f"memvault: {exc}. Nothing was imported.", file=sys.stderr)
        return 1
    done: list[str] = []
    for name in sorted(set(graphs) | set(versions)):
        folder = settings.token_dir(name)
        try:
            with Sidecar.open(folder) as sidecar, FileLock(str(folder / STATE_DIR / "lock"), timeout=30):
                sync.sync(sidecar, folder)
                with sidecar.transaction() as conn:
                    g = KnowledgeGraph.import_into(conn, graphs.get(name, GraphRows([], [])))
                    s = Sessions.import_into(conn, versions.get(name, []))
                    # The files first, inside the transaction: they are what a clone or a backup keeps.
                    if g.entities or g.observations or g.relations:
                        sync.GraphFile(folder).written(conn)
                    if s.added:
                        for session_id in sorted({v.session_id for v in versions.get(name, [])}):
                            sync.SessionFiles(folder).rewrite(conn, session_id)
        except (OSError, sqlite3.Error, MemvaultError) as exc:
            why = (
                exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc) or type(exc).__name__
            )
            left = [n for n in sorted(set(graphs) | set(versions)) if n not in done]
            print(
                f"memvault: writing token {name!r} failed ({why}); it is unchanged. "
                f"Imported: {', '.join(done) or 'none'}; not imported: {', '.join(left)}. "
                "Importing the file again adds only what is missing.",
                file=sys.stderr,
            )
            return 1
        done.append(name)
        report = (
            f"{name}: added {g.entities} entities, {g.observations} observations, "
            f"{g.relations} relations, {s.added} session versions ({s.unchanged} already there)"
        )
        if s.conflicts:
            report += f"; kept {s.conflicts} existing versions that differ from the file"
        if g.skipped_relations:
            report += f"; skipped {g.skipped_relations} relations to missing entities"
        print(report)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
