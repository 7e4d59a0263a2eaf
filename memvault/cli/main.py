"""The command line: the parser and dispatch; each group of commands lives in a module beside it."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from memvault import __version__
from memvault.config import SETTINGS, Settings
from memvault.errors import MemvaultError


def _vault_options(
    token_help: str = "only this token (default: every token under the root)",
) -> argparse.ArgumentParser:
    """--root and --token, shared by the commands that work on a vault's files."""
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--root",
        type=Path,
        help=f"the folder of every vault (env {SETTINGS['root'].env}, default ./memories)",
    )
    options.add_argument("--token", help=token_help)
    return options


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memvault", description="A memory server for AI agents.")
    parser.add_argument("--version", action="version", version=f"memvault {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    vault = _vault_options()

    serve = sub.add_parser("serve", help="serve the vaults under the root over MCP (streamable HTTP and SSE)")
    serve.add_argument(
        "--root",
        type=Path,
        help=f"the folder of every vault (env {SETTINGS['root'].env}, default ./memories)",
    )
    serve.add_argument("--host", help=f"address to listen on (env {SETTINGS['host'].env}, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help=f"port (env {SETTINGS['port'].env}, default 3000)")
    serve.add_argument(
        "--processes",
        type=int,
        help=f"server processes, each vault always served by the same one (env {SETTINGS['processes'].env}, "
        "default 1)",
    )
    serve.add_argument("--child", help=argparse.SUPPRESS)  # a server process of --processes: FD:INDEX

    sub.add_parser(
        "stdio",
        parents=[_vault_options("the token (vault) to serve")],
        help="serve one token's vault over stdio (for desktop clients)",
    )

    keys = sub.add_parser("keys", help="add, list or revoke bearer keys (MEMVAULT_KEYS_FILE)")
    keys.add_argument("action", choices=("add", "list", "revoke"))
    keys.add_argument("name", nargs="?", help="the key's name (add, revoke), e.g. laptop-claude")
    keys.add_argument("--token", help="the vault the key opens (add)")
    keys.add_argument("--read-only", action="store_true", help="the key may only read (add)")
    keys.add_argument("--file", type=Path, help="the keys file (default: MEMVAULT_KEYS_FILE)")

    evict = sub.add_parser(
        "evict", parents=[vault], help="archive stale memories now (safe while a server runs)"
    )
    evict.add_argument("--dry-run", action="store_true", help="only report what would be archived")
    evict.add_argument("--list", action="store_true", help="list each file and why (default: counts only)")

    sub.add_parser(
        "check", parents=[vault], help="report files to fix: broken frontmatter, conflicts, duplicate titles"
    )

    migrate = sub.add_parser(
        "migrate",
        parents=[vault],
        help="give hand-made files without frontmatter memvault's (priority, times), as mem-mcp did on "
        "a first read; memvault never does it by itself",
    )
    migrate.add_argument("--dry-run", action="store_true", help="only list the files it would change")

    sub.add_parser("reindex", parents=[vault], help="rebuild the derived state (parse cache) from the files")

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

    export = sub.add_parser(
        "export", parents=[vault], help="write session summaries and knowledge graphs as JSON lines"
    )
    export.add_argument("--out", type=Path, help="write to this file instead of stdout")

    load = sub.add_parser(
        "import",
        parents=[_vault_options("load every line into this token (default: the token on each line)")],
        help="load an export back (idempotent: what is there already stays)",
    )
    load.add_argument("file", type=Path, help="the file written by memvault export ('-' for stdin)")
    from memvault.cli import gitcmds, hooks, importers, setup
    from memvault.cli import sync as sync_cli

    sync_cli.add_parser(sub)
    hooks.add_parser(sub, _vault_options("the vault (token) the hooks use"))
    setup.add_parser(sub, _vault_options("the vault (token) Claude Code uses"))
    gitcmds.add_parser(sub)
    importers.add_parser(sub, _vault_options("the vault (token) to import into"))
    for name, command in sub.choices.items():
        command.description = command.description or DESCRIPTIONS[name]
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
    "look (duplicate titles, the conflict copies a git merge kept beside a memory; exit status 0). "
    "Usable as a pre-commit check.",
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
    if (sys.argv[1:] if argv is None else list(argv))[:1] == ["hook"]:
        from memvault.cli import hooks

        hooks.watch(os.environ)  # a hook's deadline holds from here on, even while the rest imports
    args = _parser().parse_args(argv)
    try:
        overrides = {k: getattr(args, k, None) for k in ("root", "host", "port", "processes")}
        settings = Settings.from_env(os.environ, **overrides)
    except MemvaultError as exc:
        print(f"memvault: {exc}", file=sys.stderr)
        return 0 if args.command == "hook" else 2  # a hook never fails its client
    logging.basicConfig(
        level=getattr(logging, settings.log_level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "hook":
        logging.disable(logging.CRITICAL)  # a hook says at most one line on stderr, its own
    if settings.log_level != "debug":
        # The SDK logs every session's start and end at info; that drowns our own lines.
        logging.getLogger("mcp").setLevel(logging.WARNING)
    if args.command in ("serve", "stdio", "keys", "nginx"):
        from memvault.cli import serve

        if args.command == "stdio" and args.token is None:
            print("memvault: stdio serves one vault: pass --token NAME.", file=sys.stderr)
            return 2
        return {
            "serve": lambda: serve.serve(settings, getattr(args, "child", None)),
            "stdio": lambda: serve.stdio(settings, args.token),
            "keys": lambda: serve.keys_command(settings, args),
            "nginx": lambda: serve.nginx_config(args.backends, args.listen, args.standalone, args.out),
        }[args.command]()
    if args.command == "merge-file" or (args.command == "setup" and args.client == "git"):
        from memvault.cli import gitcmds

        return gitcmds.command(settings, args)
    if args.command in ("hook", "setup", "import-from"):
        from memvault.cli import hooks, importers, setup

        return {"hook": hooks.command, "setup": setup.command, "import-from": importers.command}[
            args.command
        ](settings, args)
    if args.command == "sync":
        from memvault.cli import sync as sync_cli

        return sync_cli.command(settings, args)
    if args.command in ("export", "import"):
        from memvault.cli import transfer

        if args.command == "export":
            return transfer.export(settings, args.token, args.out)
        return transfer.import_(settings, args.token, args.file)
    import asyncio  # here, not at the top: a hook starts without it (its deadline counts imports)

    from memvault.cli import maintenance

    if args.command == "evict":
        return asyncio.run(maintenance.evict(settings, args.token, args.dry_run, args.list))
    if args.command == "check":
        return maintenance.check(settings, args.token)
    if args.command == "migrate":
        return asyncio.run(maintenance.migrate(settings, args.token, args.dry_run))
    if args.command == "reindex":
        return asyncio.run(maintenance.reindex(settings, args.token))
    return 2  # pragma: no cover - argparse requires a command


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
