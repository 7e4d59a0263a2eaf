"""memvault import-from: other tools' memories into a vault, idempotently, all checked before any write.

Each kind of source is an importer of memvault.importers, found there by name; this module is the
command line around them: the parser (options before, between or after the paths), the vault
checks, how an importer speaks on a terminal, and what a refusal or Ctrl-C says. Ctrl-C during an
import of markdown files takes back what it wrote; during transcripts, the sessions done stay.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memvault import importers
from memvault.cli.progress import Progress
from memvault.config import Settings
from memvault.disk.names import valid_token


class _Intermixed(argparse.ArgumentParser):
    """A parser whose options may come before, between or after its positionals
    (`import-from notes --token t --dry-run DIR`): argparse's intermixed parsing, also when it is
    reached as a subcommand."""

    _inner = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._inner:
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def add_parser(sub: Any, vault: argparse.ArgumentParser) -> None:
    kinds = "; ".join(f"{kind.name}: {kind.help}" for kind in importers.KINDS if kind.import_from)
    parser = sub.add_parser(
        "import-from",
        parents=[vault],
        help="import Claude Code memories, CLAUDE.md files, transcripts, markdown notes or memory.jsonl",
        description=f"Import what other tools kept into a token's vault. {kinds}. Every source is "
        "checked before anything is written; running it twice adds nothing; --refresh brings in "
        "sources changed since, never over a copy changed since.",
    )
    parser.__class__ = _Intermixed
    parser.add_argument("kind", choices=importers.names())
    parser.add_argument("paths", nargs="*", type=Path, help="the files or folders to import")
    parser.add_argument(
        "--dry-run", action="store_true", help="list each file and what it would do; write nothing"
    )
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="bring in sources changed since their import (a copy changed since is kept)",
    )
    parser.add_argument(
        "--priority",
        choices=("P0", "P1", "P2"),
        help="the priority of the memories it writes (P0: never archived by capacity or age)",
    )
    parser.add_argument(
        "--into", help="notes: the folder in the vault they go to (default: the folder's name)"
    )


def command(settings: Settings, args: argparse.Namespace) -> int:
    if args.token is None or not valid_token(args.token):
        print("memvault: say which vault to import into: --token NAME.", file=sys.stderr)
        return 2
    if settings.token_dir(args.token).is_symlink():
        print(
            "memvault: the token's folder is a symbolic link; memvault never writes through one.",
            file=sys.stderr,
        )
        return 2
    options = importers.ImportOptions(
        args.token, list(args.paths), args.dry_run, args.refresh, args.priority, args.into
    )
    return run(settings, args.kind, options)


class Terminal:
    """How an importer speaks on the command line: progress bars on a terminal, lines on stdout,
    warnings and errors on stderr."""

    def progress(self, label: str, unit: str = " files") -> Progress:
        return Progress(label, unit)

    def say(self, line: str) -> None:
        print(line)

    def warn(self, line: str) -> None:
        print(line, file=sys.stderr)


def run(settings: Settings, kind: str, options: importers.ImportOptions) -> int:
    """Run the importer of ``kind``: a refused source and Ctrl-C each end it with one clear line."""
    importer = importers.find(kind)(settings, Terminal())
    try:
        with _interrupt_once():
            return importer.run(options)
    except importers.ImportRefused as exc:
        print(f"memvault: {exc}. Nothing was imported.", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"memvault: interrupted; {importer.on_interrupt}.", file=sys.stderr)
        return 130


@contextlib.contextmanager
def _interrupt_once() -> Iterator[None]:
    """Ctrl-C stops the import once; a second one does not cut short the taking back of the first."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)
