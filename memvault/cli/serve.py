"""Commands that serve: serve (HTTP), stdio, and what sits around a server (keys, nginx)."""

from __future__ import annotations

import argparse
import errno
import socket
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memvault import __version__
from memvault.cli.output import write_out
from memvault.config import SETTINGS, Settings
from memvault.disk.names import valid_token
from memvault.errors import MemvaultError

if TYPE_CHECKING:
    from memvault.ops.service import Service


def serve(settings: Settings, child: str | None = None) -> int:
    """``child``: this is one server process of ``--processes`` (``FD:INDEX``, from the router)."""
    if child is None and settings.processes > 1:
        return _route(settings)
    from memvault.load import processes

    # A restart: the token whose snapshot was written last is loaded while the server imports
    # (see _run), and a large one's folder scan helper imports on the other core meanwhile.
    saved = processes.snapshots(settings.root)
    channel, index = None, 0
    if child is not None:  # only the tokens the router sends here
        from memvault.server.shard import shard_of

        fd, index = (int(part) for part in child.split(":"))
        saved = [(t, size) for t, size in saved if shard_of(t, settings.processes) == index]
        channel = socket.socket(fileno=fd)
    if processes.scan_helpers(settings.load_processes) and any(
        size >= processes.HELPER_MIN_BYTES for _, size in saved
    ):
        processes.start_spare("folderscan")
    try:
        return _serve(settings, [token for token, _ in saved[:1]], channel, index)
    finally:
        processes.drop_spare()


def _route(settings: Settings) -> int:
    """``--processes N``: bind, start N server processes and hand each connection to its vault's."""
    from memvault.server import limits, router

    if not router.supported():
        print("memvault: --processes needs Linux (epoll, descriptor passing).", file=sys.stderr)
        return 2
    limits.raise_open_file_limit(settings.max_connections + 1024)
    sock = listen(settings.host, settings.port)
    if sock is None:
        return 1

    def command(index: int, fd: int) -> list[str]:
        return [
            sys.executable, "-m", "memvault", "serve", "--root", str(settings.root),
            "--host", settings.host, "--port", str(settings.port),
            "--processes", str(settings.processes), "--child", f"{fd}:{index}",
        ]  # fmt: skip

    def announce() -> None:
        print(
            f"memvault {__version__}: serving {settings.root.resolve()} on "
            f"http://{settings.host}:{settings.port}/mcp/<token> ({settings.processes} processes)",
            flush=True,
        )

    with sock:
        return router.Router(settings, sock, command, announce).run()


def _serve(settings: Settings, early: list[str], channel: socket.socket | None = None, index: int = 0) -> int:
    from memvault import heap

    heap.configure()  # before the first large allocation (see heap)
    with heap.uncollected():  # (see _imported)
        import asyncio

        from memvault.ops import service  # what a load needs: no SDK
        from memvault.server import limits
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
        return asyncio.run(_run(settings, service.Service(settings), early, channel, index))
    except KeyboardInterrupt:
        # Ctrl-C: uvicorn has shut down cleanly, then raises the signal again; the traceback that
        # followed said nothing a person could act on.
        return 0


def _imported() -> tuple[Any, Callable[..., Any]]:
    """uvicorn and create_app, imported: the MCP SDK is most of a start's time (bench/RESULTS.md)."""
    from memvault import heap

    # The imports make the SDK's 100,000 long-lived objects: collector passes over them while
    # importing found nothing and were a tenth of the start-up (uncollected also freezes them).
    with heap.uncollected():
        import uvicorn

        from memvault.server import app
    return uvicorn, app.create_app


async def _run(
    settings: Settings, service: Service, early: list[str], channel: socket.socket | None, index: int = 0
) -> int:
    """Serve until stopped. The ``early`` tokens' loads (a restart's) begin first and run while
    the SDK is imported in a worker thread; the first request finds them loaded or loading.
    With a ``channel`` this is a server process of ``--processes``: the router hands it connections."""
    import anyio.to_thread

    from memvault import heap

    started = False
    try:
        if early:
            await service.begin(early)
        uvicorn, create_app = await anyio.to_thread.run_sync(_imported)
        from memvault.server import limits

        # Only now: while the imports and the early loads share the GIL, handing it over every
        # half millisecond only added the switches' own cost.
        limits.favour_the_event_loop()
        try:
            app = create_app(settings, service=service)
        except MemvaultError as exc:
            print(f"memvault: {exc}", file=sys.stderr)
            return 2
        # The imports' 100,000 objects (the SDK's models) live as long as the process; no request
        # has run yet to leave garbage worth a collection first.
        heap.keep(collect=False)
        sock = listen(settings.host, settings.port) if channel is None else None
        if channel is None:
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
            loop="asyncio",  # not uvloop: it resets a refused connection before its 503 is read
            http=limits.guarded_protocol(settings.max_connections, settings.header_timeout_seconds),
        )
        started = True  # the app's lifespan starts the service and closes it
        if channel is not None:
            from memvault.server.worker import HandedServer

            await HandedServer(config, channel, index, settings.processes).serve()
        else:
            assert sock is not None
            await uvicorn.Server(config).serve(sockets=[sock])
        return 0
    finally:
        if not started:
            await service.close()  # the early loads, the watcher


def listen(host: str, port: int) -> socket.socket | None:
    """The bound socket, before anything says it is serving; None (after one clear line) when the
    address is taken or cannot be used."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not 0: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say
    # they are TCP. Without it every reply waited for the client's delayed ACK.
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
    from memvault import heap

    with heap.uncollected():  # as serve's imports: collector passes over them find nothing
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


def nginx_config(backends: str, listen: str, whole: bool, out: Path | None) -> int:
    from memvault.server import nginx

    try:
        names = backends.split(",")
        text = nginx.standalone(names, listen=listen) if whole else nginx.http_block(names, listen=listen)
    except MemvaultError as exc:
        print(f"memvault: {exc}", file=sys.stderr)
        return 2
    return write_out(text, out, f"wrote {out}")
