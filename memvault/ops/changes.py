"""What changed in a vault, told to whoever listens to that vault (the resource subscriptions).

The files are the truth, so changes are announced from the one place that sees every change to
them: the watcher's batches (an agent's write through this server, the CLI, another server on the
same vault, a person's editor, a git pull). A change is named by keys, vault-relative:

- ``memory:<id>`` and ``archive:<id>``: a hot or an archived memory;
- ``graph``: the knowledge graph file;
- ``session:<stem>``: a session summary's files (see memvault.records.summaryfiles.file_stem).

Listeners are registered per token: a vault never hears of another vault's changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from memvault.disk.names import ARCHIVE, GRAPH_FILE, SESSIONS_DIR, is_memory_path
from memvault.records.summaryfiles import stem_of

log = logging.getLogger("memvault")

GRAPH_KEY = "graph"
MEMORY_PREFIX = "memory:"
ARCHIVE_PREFIX = "archive:"
SESSION_PREFIX = "session:"


@dataclass(frozen=True, slots=True)
class Change:
    """One batch of changes to one vault.

    ``listing``: something may have been added, removed or renamed (the resource list changed).
    ``everything``: the vault was rescanned (lost events, a folder moved): anything may have changed.
    """

    keys: frozenset[str]
    listing: bool = False
    everything: bool = False


Listener = Callable[[Change], None]


def key_of(rel_parts: tuple[str, ...]) -> str | None:
    """The change key of a path relative to its token folder, or None for a file that is no resource."""
    if not rel_parts:
        return None
    if rel_parts == (GRAPH_FILE,):
        return GRAPH_KEY
    if len(rel_parts) == 2 and rel_parts[0] == SESSIONS_DIR:
        stem = stem_of(rel_parts[1])
        return SESSION_PREFIX + stem if stem else None
    if rel_parts[0] == ARCHIVE:
        inner = rel_parts[1:]
        return ARCHIVE_PREFIX + "/".join(inner) if is_memory_path(inner) else None
    return MEMORY_PREFIX + "/".join(rel_parts) if is_memory_path(rel_parts) else None


class Changes:
    """Listeners per token, and the announcements that reach them (on the event loop)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._listeners: dict[str, dict[object, Listener]] = {}
        # Told (token, True) when a token's first listener comes, before listen returns, and
        # (token, False) when its last one goes: the store watches the folders of listened tokens.
        self.on_listened: Callable[[str, bool], None] | None = None
        # Told the token of every batch, listened to or not (the git sync loop commits soon after).
        self.on_batch: Callable[[str], None] | None = None

    def listen(self, token: str, listener: Listener) -> Callable[[], None]:
        """Register ``listener`` for ``token``'s changes; returns an idempotent unsubscribe."""
        handle = object()
        first = token not in self._listeners
        self._listeners.setdefault(token, {})[handle] = listener
        if first and self.on_listened is not None:
            self.on_listened(token, True)

        def unsubscribe() -> None:
            mine = self._listeners.get(token)
            if mine is not None and mine.pop(handle, None) is not None and not mine:
                del self._listeners[token]
                if self.on_listened is not None:
                    self.on_listened(token, False)

        return unsubscribe

    def listening(self, token: str) -> int:
        return len(self._listeners.get(token, ()))

    def announce(self, token: str, paths: Iterable[Path], listing: bool, everything: bool) -> None:
        """A watcher batch for ``token``: the paths it saw change, whether some were added, removed or
        renamed, whether the token folder was rescanned."""
        if self.on_batch is not None:
            self.on_batch(token)
        mine = self._listeners.get(token)
        if not mine:
            return  # nobody listens: not even the paths are looked at
        folder = self.root / token
        keys = set()
        for path in paths:
            try:
                rel = path.relative_to(folder)
            except ValueError:
                continue
            key = key_of(rel.parts)
            if key is not None:
                keys.add(key)
        if not keys and not everything:
            return
        self.publish(token, Change(frozenset(keys), listing or everything, everything))

    def publish(self, token: str, change: Change) -> None:
        for listener in list(self._listeners.get(token, {}).values()):
            try:
                listener(change)
            except Exception:  # one listener's fault must not starve the others
                log.exception("a change listener failed; the others were told")
