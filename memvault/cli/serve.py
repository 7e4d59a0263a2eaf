"""Commands that serve: serve (HTTP), stdio, and what sits around a server (keys, nginx)."""

from __future__ import annotations

import argparse
import errno
import socket
import sys
from pathlib import Path

from memvault import __version__
from memvault.cli.output import write_out
from memvault.config import SETTINGS, Settings
from memvault.disk.names import valid_token
from memvault.errors import MemvaultError


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
        loop="asyncio",  # not uvloop: it resets a refused connection before its 503 is read
        http=limits.guarded_protocol(settings.max_connections, settings.header_timeout_seconds),
    )
    try:
        uvicorn.Server(config).run(sockets=[sock])
    except KeyboardInterrupt:
        # Ctrl-C: uvicorn has shut down cleanly, then raises the signal again; the traceback that
        # followed said nothing a person could act on.
        pass
    return 0


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
