"""The command line: memvault serve | evict | check | reindex."""

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

    check = sub.add_parser("check", help="report files to fix: broken frontmatter, conflicts, duplicate titles")
    check.add_argument("--root", type=Path, help="vault folder (default ./memories)")
    check.add_argument("--token", help="only this token (default: every token in the vault)")

    reindex = sub.add_parser("reindex", help="rebuild the derived state (parse cache) from the files")
    reindex.add_argument("--root", type=Path, help="vault folder (default ./memories)")
    reindex.add_argument("--token", help="only this token (default: every token in the vault)")
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
    if args.command == "check":
        return check(settings, args.token)
    if args.command == "reindex":
        return reindex(settings, args.token)
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


def _tokens(settings: Settings, token: str | None) -> list[str] | None:
    """The tokens a command works on; None (after a message) for an invalid --token."""
    if token is not None:
        if not valid_token(token):
            print(f"memvault: {token!r} is not a valid token.", file=sys.stderr)
            return None
        return [token]
    if not settings.root.is_dir():
        return []
    return sorted(p.name for p in settings.root.iterdir() if p.is_dir() and valid_token(p.name))


def check(settings: Settings, token: str | None) -> int:
    from memvault.check import check_vault
    from memvault.vault import Vault

    tokens = _tokens(settings, token)
    if tokens is None:
        return 2
    problems = 0
    for name in tokens:
        for finding in check_vault(Vault(settings.token_dir(name))):
            print(f"{name}/{finding.id}: {finding.problem}")
            problems += 1
    print(f"{problems} problem(s) in {len(tokens)} token(s).", file=sys.stderr)
    return 1 if problems else 0


class _Progress:
    """A one-line progress counter on a terminal; silent otherwise."""

    def __init__(self, label: str) -> None:
        self.label = label
        self.count = 0
        self.tty = sys.stderr.isatty()

    def __call__(self, step: int) -> None:
        self.count += step
        if self.tty and self.count % 500 == 0:
            print(f"\r{self.label}: {self.count:,} files", end="", file=sys.stderr, flush=True)

    def done(self) -> None:
        if self.tty:
            print(f"\r{self.label}: {self.count:,} files", file=sys.stderr)


def reindex(settings: Settings, token: str | None) -> int:
    from memvault.store import Store

    tokens = _tokens(settings, token)
    if tokens is None:
        return 2
    store = Store(settings)
    try:
        for name in tokens:
            progress = _Progress(name)
            count = store.reindex(name, progress)
            progress.done()
            print(f"{name}: reindexed {count} memories")
    finally:
        asyncio.run(store.close())
    return 0


async def evict(settings: Settings, token: str | None, dry_run: bool) -> int:
    from memvault.store import Store

    tokens = _tokens(settings, token)
    if tokens is None:
        return 2
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
