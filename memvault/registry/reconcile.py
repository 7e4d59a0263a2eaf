"""Outside changes: files a person or git changed, added or removed, brought into a loaded token.

The watcher hands paths (or "rescan this token" after a folder event or lost events) to
:func:`apply_changes`, in a worker thread. Our own writes are recognised by their stat and cost
one ``stat`` each; changed files are read again (parsed only if their bytes changed).
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable
from pathlib import Path

from memvault.disk.files import unchanged
from memvault.disk.names import ARCHIVE, is_memory_path
from memvault.errors import InvalidName
from memvault.load.folderscan import FolderDiff
from memvault.registry.state import TokenState
from memvault.threads import ON_LOOP, NeedsThread

MAX_IN_LINE = 32  # paths in_line looks at on the event loop (a stat each); more go to a thread


def apply_changes(state: TokenState, paths: Iterable[Path], rescan: bool) -> int:
    """Bring a loaded token in line with files changed outside the server (worker thread).

    Returns how many memories changed. Our own writes are recognised by mtime and size and
    cost a stat each.
    """
    paths = list(paths)
    with state.mem_lock:
        if not state.loaded:
            if state.loading:  # applied when the load is done (see _load)
                state.missed.update(paths)
                state.missed_rescan |= rescan
            return 0
    if rescan:
        return rescan_folder(state)
    changed = 0
    parents: dict[str, bool] = {}
    for path in paths:
        located = _locate(state, path)
        if located is None:
            continue
        id, archived = located
        with state.mem_lock:
            before = state.area(archived).memories.get(id)
        try:
            # A link (or a folder link above it) may point out of the token folder: to another
            # token or anywhere on the machine. The scan skips those; events must too.
            if not _plainly_inside(state, path, parents):
                state.vault.path_of(id, archived=archived)
        except InvalidName:
            if before is not None:
                state.drop(id, archived)
                changed += 1
            continue
        after = state.fresh(id, archived)
        if before is not after:
            changed += 1
    return changed


def in_line(state: TokenState, paths: Collection[Path]) -> bool:
    """Whether each of these files is the one the loaded token holds, as the server's own writes
    are: apply_changes would then change nothing, and need not take a worker thread. On the event
    loop: a stat a path, at most MAX_IN_LINE of them; False when unsure (apply_changes decides)."""
    if len(paths) > MAX_IN_LINE:
        return False
    parents: dict[str, bool] = {}
    try:
        with state.looking(ON_LOOP):
            if not state.loaded:
                return False
        for path in paths:
            located = _locate(state, path)
            if located is None:
                continue
            id, archived = located
            if not _plainly_inside(state, path, parents):
                return False
            with state.looking(ON_LOOP):
                known = state.area(archived).memories.get(id)
            if known is None or not unchanged(known, os.stat(state.vault.file_name(id, archived))):
                return False
    except (NeedsThread, OSError):
        return False
    return True


def _plainly_inside(state: TokenState, path: Path, parents: dict[str, bool]) -> bool:
    """True when no link is involved: the file is not a link and its folder resolves to itself.

    Cheap (one lstat, one realpath per folder per batch); anything else gets the full check.
    """
    folder = os.path.dirname(path)
    plain = parents.get(folder)
    if plain is None:
        plain = parents[folder] = os.path.realpath(folder) == os.path.abspath(folder)
    return plain and not os.path.islink(path)


def _locate(state: TokenState, path: Path) -> tuple[str, bool] | None:
    try:
        rel = path.relative_to(state.dir)
    except ValueError:
        return None
    parts = rel.parts
    archived = bool(parts) and parts[0] == ARCHIVE
    if archived:
        parts = parts[1:]
    if not is_memory_path(parts):
        return None
    return "/".join(parts), archived


def rescan_folder(state: TokenState, found: FolderDiff | None = None) -> int:
    """Bring the loaded memories in line with the folder (``found``: a helper's scan of it,
    compared with the snapshot just loaded)."""
    if found is not None:
        state.vault.leftovers = found.leftovers
        return _refresh(state, [*found.changed, *found.gone])
    changed = 0
    # What the scan has not seen yet: the memories held, each popped as the scan finds its file.
    # (A set of the scan's own ids and tuples grew with the vault and was left behind as free pools.)
    with state.mem_lock:
        unseen = (dict(state.hot.memories), dict(state.archive.memories))
    for id, archived, st in state.vault.scan():
        before = unseen[archived].pop(id, None)
        if before is not None and unchanged(before, st):
            continue  # unchanged: the scan's stat is enough
        if state.fresh(id, archived) is not before:
            changed += 1
    # Gone, unless written again after the scan passed it (fresh looks); a memory first written
    # while the scan ran was never in `unseen`.
    return changed + _refresh(
        state, [(id, archived) for archived in (False, True) for id in unseen[archived]]
    )


def stale_paths(state: TokenState) -> set[Path] | None:
    """The files a rescan would read again (worker thread): each memory file whose stat differs
    from the memory held, each new one, and the file of each memory held whose file is gone; the
    scan's stats alone, nothing parsed, so the watcher can apply them in chunks as it does events.
    None for a token not loaded (its load reads the folder)."""
    with state.mem_lock:
        if not state.loaded:
            return None
        unseen = (dict(state.hot.memories), dict(state.archive.memories))
    found: set[Path] = set()
    for id, archived, st in state.vault.scan():
        before = unseen[archived].pop(id, None)
        if before is None or not unchanged(before, st):
            found.add(_path(state, id, archived))
    found.update(_path(state, id, archived) for archived in (False, True) for id in unseen[archived])
    return found


def _path(state: TokenState, id: str, archived: bool) -> Path:
    return state.dir / ARCHIVE / id if archived else state.dir / id


def _refresh(state: TokenState, located: list[tuple[str, bool]]) -> int:
    """Look at these files again; how many memories changed."""
    changed = 0
    for id, archived in located:
        with state.mem_lock:
            before = state.area(archived).memories.get(id)
        if state.fresh(id, archived) is not before:
            changed += 1
    return changed
