"""Files a git pull or a hand edit can bring that must not stall or fool the server: a YAML alias
bomb in frontmatter, and the temp files of a write killed mid-way (issue 46, 2 and 7)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest
from conftest import wait_for

pytestmark = pytest.mark.anyio


def alias_bomb(levels: int = 9) -> str:
    """Nine levels of nine aliases, under 600 bytes: 9**9 (387 million) values once expanded."""
    lines = ["x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels):
        lines.append(f"x{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]")
    lines.append(f"tags: [{', '.join([f'*a{levels - 1}'] * 9)}]")
    return "---\npriority: P1\n" + "\n".join(lines) + "\n---\n# Bomb\n\nkaboom body\n"


async def test_a_yaml_alias_bomb_is_flagged_and_stalls_no_vault(server_factory, vault_root: Path) -> None:
    for token in ("alice", "bob"):
        (vault_root / token).mkdir()
        (vault_root / token / "plain.md").write_text(f"# Plain\n\n{token}'s plain memory\n", encoding="utf-8")
    bomb = alias_bomb()
    assert len(bomb.encode()) < 600
    async with server_factory() as srv, srv.session("alice") as alice, srv.session("bob") as bob:
        with anyio.fail_after(5):
            err, text = await srv.call(bob, "list_memory_titles")  # bob's vault loaded first
        assert not err and "plain.md" in text
        (vault_root / "alice" / "bomb.md").write_text(bomb, encoding="utf-8")  # by hand, or a pull
        with anyio.fail_after(5):
            err, listed = await srv.call(alice, "list_memory_titles")
        assert not err and "plain.md" in listed, listed
        with anyio.fail_after(3):
            err, text = await srv.call(bob, "read_memory", query="plain")
        assert not err and "bob's plain memory" in text
        with anyio.fail_after(5):
            await wait_for(lambda: srv.app.state.watcher.idle)
            err, text = await srv.call(alice, "read_memory", filenames=["bomb.md"])
        # Flagged, shown as the text it is (the nine literal values), never expanded.
        assert "kaboom body" in text and "read-only until fix" in text and text.count("lol") == 9, text
        with anyio.fail_after(3):
            err, text = await srv.call(bob, "read_memory", query="plain")
        assert not err


async def test_temp_files_of_a_killed_write_are_removed_in_every_folder(make_settings, vault_root) -> None:
    """A write killed (SIGKILL) between its temp file and the rename leaves `.memvault-*.tmp`:
    in the token folder, sessions/ and .memvault/ alike, the next load removes it once old."""
    from memvault.ops.service import Service

    folder = vault_root / "alice"
    for sub in ("", "sessions", ".memvault", "projects"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "note.md").write_text("# Note\n\na memory\n", encoding="utf-8")
    old = time.time() - 3600
    orphans = [
        folder / sub / f".memvault-{i}{i}cd34ef.tmp" for i, sub in enumerate(["", "sessions", ".memvault"])
    ]
    kept = folder / "sessions" / ".notes.tmp"  # not ours: never touched
    for path in [*orphans, kept]:
        path.write_text("partial", encoding="utf-8")
        os.utime(path, (old, old))
    service = Service(make_settings())
    try:
        found = await service.store.find("alice", query="memory")
        assert [m.id for m in found.memories] == ["note.md"]
        await wait_for(lambda: not any(p.exists() for p in orphans), timeout=10)
        assert kept.exists() and (folder / "note.md").exists()
    finally:
        await service.close()
