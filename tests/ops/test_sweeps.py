"""What reads, sweeps and migrate change: a read-only key nothing, a listing no sweep; what they say."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import keyed, text_of

from memvault.cli.main import main
from memvault.ops.service import Service
from memvault.server import keys

pytestmark = pytest.mark.anyio

OLD = "2020-01-01T00:00:00.000Z"


def stale_vault(folder: Path, count: int = 5) -> None:
    """Memories that a read would write back (an old lastAccessedAt) and a sweep would archive."""
    folder.mkdir(parents=True)
    for i in range(count):
        (folder / f"note-{i}.md").write_text(
            f"---\npriority: P2\ncreatedAt: {OLD}\nupdatedAt: {OLD}\nlastAccessedAt: {OLD}\n---\n"
            f"# Note {i}\n\nkiwi orchard number {i}\n",
            encoding="utf-8",
        )


def file_hashes(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".memvault" not in p.relative_to(folder).parts
    }


async def test_a_read_only_key_neither_writes_access_times_back_nor_archives(
    server_factory: Callable[..., Any], vault_root: Path, tmp_path: Path
) -> None:
    stale_vault(vault_root / "alice")
    before = file_hashes(vault_root / "alice")
    keys_file = tmp_path / "keys.txt"
    viewer = keys.add(keys_file, "viewer", "alice", read_only=True)
    async with server_factory(keys_file=keys_file, access_writeback="always") as srv:
        async with keyed(srv.url, viewer) as s:
            for tool, args in (
                ("read_memory", {}),
                ("read_memory", {"query": "kiwi"}),
                ("read_memory", {"filenames": ["note-1.md"]}),
                ("list_memory_titles", {}),
                ("recall", {"query": "kiwi orchard"}),
            ):
                result = await s.call_tool(tool, args)
                assert not result.is_error, text_of(result)
        await srv.app.state.service.idle()
    assert file_hashes(vault_root / "alice") == before
    assert not (vault_root / "alice" / "archive").exists()


async def test_listing_titles_archives_nothing_and_reading_may(make_settings, vault_root: Path) -> None:
    stale_vault(vault_root / "alice")
    service = Service(make_settings())
    store = service.store
    try:
        rows, _ = await store.list_hot("alice")
        assert len(rows) == 5
        await service.idle()
        assert not (vault_root / "alice" / "archive").exists()
        found = await store.find("alice", filenames=["note-0.md"])
        await store.touch("alice", found.memories)
        await service.idle()
        assert (vault_root / "alice" / "archive").is_dir()  # the lazy sweep follows a read
    finally:
        await service.close()


def test_migrate_writes_last_accessed_at_as_mem_mcp_expects(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    folder.mkdir()
    (folder / "plain.md").write_text("just my text\n", encoding="utf-8")
    assert main(["migrate", "--root", str(tmp_path)]) == 0
    head = (folder / "plain.md").read_text(encoding="utf-8").split("---\n")[1]
    fields = dict(line.split(": ", 1) for line in head.splitlines())
    assert {"priority", "createdAt", "updatedAt", "lastAccessedAt"} <= set(fields)
    assert fields["lastAccessedAt"].endswith("Z")


def test_evict_dry_run_names_a_conflicted_file_it_keeps_and_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale_vault(tmp_path / "alice", count=2)
    path = tmp_path / "alice" / "note-0.md"
    path.write_text(path.read_text() + "<<<<<<< HEAD\nmine\n=======\nyours\n>>>>>>> b\n", encoding="utf-8")
    assert main(["evict", "--root", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "alice: would archive 1" in out
    kept = [line for line in out.splitlines() if "note-0.md" in line]
    assert len(kept) == 1 and "conflict markers" in kept[0] and "resolve" in kept[0], out
