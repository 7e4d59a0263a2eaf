"""Temp files left by a write that was killed: gone once old enough, without waiting for another load."""

from __future__ import annotations

import os
import time

import pytest
from conftest import wait_for

from memvault.ops.service import Service

pytestmark = pytest.mark.anyio


async def test_a_temp_file_too_young_at_load_is_removed_once_old_enough(make_settings, vault_root) -> None:
    folder = vault_root / "alice"
    folder.mkdir()
    (folder / "note.md").write_text("# Note\n\na memory\n", encoding="utf-8")
    orphan = folder / ".memvault-ab12cd34.tmp"  # a server was killed mid-write, then restarted
    orphan.write_text("partial", encoding="utf-8")
    almost = time.time() - 59.5  # a second short of the age at which a temp file is surely an orphan
    os.utime(orphan, (almost, almost))
    service = Service(make_settings())
    store = service.store
    try:
        found = await store.find("alice", query="memory")
        assert [m.id for m in found.memories] == ["note.md"] and orphan.exists()
        await wait_for(lambda: not orphan.exists(), timeout=10)
        assert (folder / "note.md").exists()
    finally:
        await service.close()
