"""Commands that look after a vault's files: check, reindex, migrate, evict."""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from memvault.cli.progress import Progress
from memvault.config import Settings
from memvault.disk.names import valid_token
from memvault.errors import MemvaultError

if TYPE_CHECKING:
    from memvault.ops.service import Service


def tokens_of(settings: Settings, token: str | None) -> list[str] | None:
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

    tokens = tokens_of(settings, token)
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


async def reindex(settings: Settings, token: str | None) -> int:
    async def one(service: Service, name: str) -> list[str]:
        with Progress(name) as progress:  # the CLI's own loop: nothing else waits on it
            count = service.registry.reindex(name, progress)
        return [f"{name}: reindexed {count} memories"]

    return await _each_token(settings, token, one, load=False)


async def _each_token(
    settings: Settings,
    token: str | None,
    work: Callable[[Service, str], Awaitable[list[str]]],
    *,
    load: bool = True,
) -> int:
    """Run an operation of the store on one token or every token, printing what it reports. Each
    token is loaded first (unless ``load`` is false: reindex reads the files itself), with a progress
    bar: a cold load of 100,000 files takes seconds."""
    from memvault.ops.service import Service

    tokens = tokens_of(settings, token)
    if tokens is None:
        return 2
    service = Service(settings)
    registry = service.registry
    try:
        for name in tokens:
            if load:
                with Progress(f"load {name}") as progress:
                    await registry.ensure_loaded(registry.register(name), progress)
            for line in await work(service, name):
                print(line)
    except MemvaultError as exc:
        print(f"memvault: {exc}", file=sys.stderr)
        return 1
    finally:
        await service.close()
    return 0


async def migrate(settings: Settings, token: str | None, dry_run: bool) -> int:
    async def one(service: Service, name: str) -> list[str]:
        done = await service.store.migrate(name, dry_run=dry_run)
        verb = "would give" if dry_run else "gave"
        return [f"{name}: {verb} {len(done)} file(s) frontmatter", *(f"  {id}" for id in done)]

    return await _each_token(settings, token, one)


async def evict(settings: Settings, token: str | None, dry_run: bool, listed: bool) -> int:
    from memvault.ops.sweeps import kind as reason_kind

    async def one(service: Service, name: str) -> list[str]:
        swept = await service.store.sweep(name, dry_run=dry_run)
        evicted = swept.evicted
        verb = "would archive" if dry_run else "archived"
        kinds = Counter(reason_kind(item.reason) for item in evicted)
        summary = "; ".join(f"{count} {what}" for what, count in sorted(kinds.items()))
        lines = [f"{name}: {verb} {len(evicted)}" + (f" ({summary})" if summary else "")]
        if listed:
            lines += [f"  {item.id}: {item.reason}" for item in evicted]
        elif evicted:
            lines.append("  (--list shows each file and why)")
        # Kept back, always named: otherwise a person wonders why a stale file stays.
        lines += [f"  kept {item.id}: {item.reason}" for item in swept.held]
        return lines

    return await _each_token(settings, token, one)
