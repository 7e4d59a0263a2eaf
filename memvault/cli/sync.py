"""memvault sync: commit, fetch, merge and push the vault once (--once), or every interval until stopped."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from memvault.config import SETTINGS, Settings
from memvault.errors import MemvaultError


def add_parser(sub: Any) -> None:
    parser = sub.add_parser(
        "sync",
        help="commit what changed in the vault, fetch, merge with memvault's driver, push (git)",
        description="Sync the vault's git repository as `MEMVAULT_SYNC=git memvault serve` does: commit "
        "what changed in the vault (never .memvault/, nothing outside the vault), fetch, merge with "
        "memvault's merge driver (registered if it is not yet), push; never a force push. With --once, "
        "one sync and its outcome; without, one every MEMVAULT_SYNC_INTERVAL_SECONDS until Ctrl-C.",
    )
    parser.add_argument(
        "--root",
        type=Path,
        help=f"the folder of every vault (env {SETTINGS['root'].env}, default ./memories)",
    )
    parser.add_argument("--once", action="store_true", help="sync once, say what happened, and exit")


def command(settings: Settings, args: argparse.Namespace) -> int:
    from memvault.git.loop import SyncLoop, sync_vault

    if not args.once:
        loop = SyncLoop(settings.root, settings.sync_interval_seconds)
        loop.start()
        print(
            f"memvault: syncing every {settings.sync_interval_seconds:g} s; Ctrl-C (or SIGTERM) stops.",
            file=sys.stderr,
        )
        stop = threading.Event()
        # docker stop and systemd send SIGTERM: finish the sync in flight, then exit, as on Ctrl-C.
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            while not stop.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass
        finally:
            loop.stop()
        status = loop.status()
        how = f"last sync failed: {status.error}" if status.state == "failing" else "in sync"
        print(f"memvault: sync stopped ({how}).", file=sys.stderr)
        return 0
    try:
        outcome = sync_vault(settings.root)
    except MemvaultError as exc:
        print(f"memvault: sync failed: {exc}", file=sys.stderr)
        return 1
    said = [f"committed ({outcome.committed})" if outcome.committed else "nothing to commit"]
    if outcome.merged:
        said.append(f"merged {outcome.merged} commit(s) from the remote")
    if outcome.kept:
        said.append(f"kept the edits of {', '.join(outcome.kept)} against their deletion")
    said.append("pushed" if outcome.pushed else "nothing to push")
    print("memvault: " + "; ".join(said) + ".")
    return 0
