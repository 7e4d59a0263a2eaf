"""The command line: memvault serve | evict."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from memvault import __version__
from memvault.config import SETTINGS, Settings
from memvault.errors import MemvaultError
from memvault.vault import valid_token


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memvault", description="A memory server for AI agents.")
    parser.add_argument("--version", action="version", version=f"memvault {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="serve the vault over MCP (streamable HTTP and SSE)")
    serve.add_argument("--root", type=Path, help=f"vault folder (env {SETTINGS['root'].env}, default ./memories)")
    serve.add_argument("--host", help=f"address to listen on (env {SETTINGS['host'].env}, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help=f"port (env {SETTINGS['port'].env}, default 3000)")

    evict = sub.add_parser("evict", help="archive stale memories now (safe while a server runs)")
    evict.add_argument("--root", type=Path, help="vault folder (default ./memories)")
    evict.add_argument("--token", help="only this token (default: every token in the vault)")
    evict.add_argument("--dry-run", action="store_true", help="only report what would be archived")
    return parser


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
    if args.command == "serve":
        return serve(settings)
    if args.command == "evict":
        return asyncio.run(evict(settings, args.token, args.dry_run))
    return 2  # pragma: no cover - argparse requires a command


def serve(settings: Settings) -> int:
    import uvicorn

    from memvault.app import create_app

    try:
        app = create_app(settings)
    except MemvaultError as exc:
        print(f"memvault: {exc}", file=sys.stderr)
        return 2
    print(f"memvault {__version__}: serving {settings.root} on http://{settings.host}:{settings.port}/mcp/<token>")
    uvicorn.run(app, host=settings.host, port=settings.port, log_level=settings.log_level, lifespan="on")
    return 0


async def evict(settings: Settings, token: str | None, dry_run: bool) -> int:
    from memvault.store import Store

    if token is not None and not valid_token(token):
        print(f"memvault: {token!r} is not a valid token.", file=sys.stderr)
        return 2
    if token is not None:
        tokens = [token]
    elif settings.root.is_dir():
        tokens = sorted(p.name for p in settings.root.iterdir() if p.is_dir() and valid_token(p.name))
    else:
        tokens = []
    store = Store(settings)
    try:
        for name in tokens:
            evicted = await store.evict(name, dry_run=dry_run)
            verb = "would archive" if dry_run else "archived"
            print(f"{name}: {verb} {len(evicted)}")
            for item in evicted:
                print(f"  {item.id}: {item.reason}")
    except MemvaultError as exc:
        print(f"memvault: {exc}", file=sys.stderr)
        return 1
    finally:
        await store.close()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
