"""Supersede links: a restored memory is no longer replaced, so neither side keeps the link."""

from __future__ import annotations

from memvault.errors import Conflict, InvalidArgument, InvalidName, NotFound
from memvault.markdown import Memory
from memvault.tokens import Tokens, TokenState


def unlink_restored(tokens: Tokens, state: TokenState, archived: Memory, restored_id: str) -> None:
    """After ``archived`` came back as ``restored_id``: drop its ``supersededBy`` and its name from
    the replacing memory's ``supersedes`` (callers hold the token's locks). A replacing memory that
    is gone, changed by hand or unreadable keeps its frontmatter: the restore stood either way."""
    by = archived.meta.get("supersededBy")
    if not isinstance(by, str):
        return
    try:
        tokens.remember(state, state.vault.update(restored_id, {"supersededBy": None}))
        replacing = state.vault.read(by)
        listed = replacing.meta.get("supersedes")
        if isinstance(listed, list) and archived.id in listed:
            left = [name for name in listed if name != archived.id]
            updated = state.vault.update(by, {"supersedes": left or None}, expect_hash=replacing.hash)
            tokens.remember(state, updated)
    except (NotFound, Conflict, InvalidArgument, InvalidName, OSError):
        return
