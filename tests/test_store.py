"""Store: token loading and unloading, reindex, and the check command."""

from __future__ import annotations

import pytest

from memvault.cli import main
from memvault.store import Store

pytestmark = pytest.mark.anyio


async def test_idle_tokens_unload_and_reload_from_the_parse_cache(make_settings):
    store = Store(make_settings(max_loaded_tokens=1))
    try:
        await store.write("alice", title="Alpha", content="apples and pears")
        await store.write("bob", title="Beta", content="bananas")
        assert store.tokens["bob"].loaded
        assert not store.tokens["alice"].loaded  # least recently used goes
        assert store.unloads == 1
        parses = store.parses
        found = await store.find("alice", query="pears")
        assert [m.id for m in found.memories] == ["alpha.md"]
        assert store.parses == parses  # reloaded from the cache, nothing parsed
        assert not store.tokens["bob"].loaded
    finally:
        await store.close()


async def test_reindex_rebuilds_from_files(make_settings, vault_root):
    store = Store(make_settings())
    try:
        await store.write("alice", title="Alpha", content="apples")
        (vault_root / "alice" / "hand.md").write_text("# Hand\n\nwritten by hand\n", encoding="utf-8")
        before = store.parses
        count = store.reindex("alice")
        assert count == 2
        assert store.parses - before == 2  # cache dropped: everything parsed again
        found = await store.find("alice", query="hand")
        assert [m.id for m in found.memories] == ["hand.md"]
    finally:
        await store.close()


def test_check_reports_problems_with_exit_status_1(vault_root, capsys):
    token = vault_root / "alice"
    token.mkdir()
    (token / "ok.md").write_text("---\npriority: P1\n---\n# Fine\n\nok\n", encoding="utf-8")
    (token / "broken.md").write_text("---\npriority: [P1\n---\n# Broken\n", encoding="utf-8")
    (token / "conflict.md").write_text("# C\n<<<<<<< HEAD\na\n=======\nb\n>>>>>>> other\n", encoding="utf-8")
    (token / "dup.md").write_text("# Fine\n\nsame title\n", encoding="utf-8")
    assert main(["check", "--root", str(vault_root)]) == 1
    out = capsys.readouterr().out
    assert "alice/broken.md: broken frontmatter" in out
    assert "alice/conflict.md: holds git conflict markers" in out
    assert "alice/dup.md: duplicate title (also ok.md)" in out
    assert "ok.md: duplicate" in out and "alice/ok.md: broken" not in out


def test_check_of_a_clean_vault_exits_0(vault_root, capsys):
    (vault_root / "bob").mkdir()
    (vault_root / "bob" / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    assert main(["check", "--root", str(vault_root), "--token", "bob"]) == 0
    assert main(["check", "--root", str(vault_root), "--token", "../etc"]) == 2


def test_reindex_command_reports_counts(vault_root, capsys):
    (vault_root / "bob").mkdir()
    (vault_root / "bob" / "a.md").write_text("# A\n\ntext\n", encoding="utf-8")
    assert main(["reindex", "--root", str(vault_root)]) == 0
    assert "bob: reindexed 1 memories" in capsys.readouterr().out
