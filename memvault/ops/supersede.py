"""Supersede links: which memories a write replaces, retiring them, and unlinking a restored one."""

from __future__ import annotations

from memvault.disk.markdown import Memory
from memvault.disk.vault import refuse_unwritable
from memvault.errors import Conflict, InvalidArgument, InvalidName, NotFound
from memvault.registry.state import TokenState


def unlink_restored(state: TokenState, archived: Memory, restored_id: str) -> None:
    """After ``archived`` came back as ``restored_id``: drop its ``supersededBy`` and its name from
    the replacing memory's ``supersedes`` (callers hold the token's locks). A replacing memory that
    is gone, changed by hand or unreadable keeps its frontmatter: the restore stood either way."""
    by = archived.meta.get("supersededBy")
    if not isinstance(by, str):
        return
    try:
        state.remember(state.vault.update(restored_id, {"supersededBy": None}))
        replacing = state.vault.read(by)
        listed = replacing.meta.get("supersedes")
        if isinstance(listed, list) and archived.id in listed:
            left = [name for name in listed if name != archived.id]
            updated = state.vault.update(by, {"supersedes": left or None}, expect_hash=replacing.hash)
            state.remember(updated)
    except (NotFound, Conflict, InvalidArgument, InvalidName, OSError):
        return


def targets(state: TokenState, ids: tuple[str, ...]) -> tuple[list[Memory], list[tuple[str, str]]]:
    """The hot memories a write will supersede, checked up front; P0 ones are kept, with the reason."""
    found: list[Memory] = []
    kept: list[tuple[str, str]] = []
    for id in ids:
        state.vault.existing(id)  # refuses archive/ names, escapes and links out of the vault
        current = state.vault.read(id)
        refuse_unwritable(current, "so it cannot be superseded; ask the user to fix it.")
        if current.priority == "P0":
            kept.append((id, "it is P0 (permanent)"))
        else:
            found.append(current)
    if found:
        state.vault.check_archive()  # before anything is written
    return found, kept


def retire(state: TokenState, target: Memory, by: str) -> str:
    """Mark ``target`` as superseded by ``by`` and move it to the archive; returns its archive id."""
    state.vault.update(target.id, {"supersededBy": by}, expect_hash=target.hash)
    return state.move(target.id, to_archive=True)
