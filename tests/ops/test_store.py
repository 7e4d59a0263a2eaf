"""Store: token loading and unloading, reindex, and the check command."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio.to_thread
import numpy as np
import pytest
from filelock import FileLock

from memvault.cli.main import main
from memvault.disk import files
from memvault.disk.markdown import MAX_INDEXED_BYTES
from memvault.disk.names import STATE_DIR
from memvault.errors import InvalidArgument, InvalidName
from memvault.load.snapshot import READABLE as SNAPSHOT_READABLE
from memvault.load.snapshot import VERSION as SNAPSHOT_VERSION
from memvault.ops.recall import Recaller
from memvault.ops.service import Service
from memvault.registry.state import TokenState

pytestmark = pytest.mark.anyio


async def test_idle_tokens_unload_and_reload_from_the_parse_cache(make_settings):
    service = Service(make_settings(max_loaded_tokens=1))
    store = service.store
    try:
        await store.write("alice", title="Alpha", content="apples and pears")
        await service.idle()  # alice's access is recorded (a token being recorded is held loaded)
        await store.write("bob", title="Beta", content="bananas")
        assert service.registry.states["bob"].loaded
        assert (
            "alice" not in service.registry.states or not service.registry.states["alice"].loaded
        )  # least recently used goes
        assert service.registry.unloads == 1
        parses = service.registry.parses
        await service.idle()
        found = await store.find("alice", query="pears")
        assert [m.id for m in found.memories] == ["alpha.md"]
        assert service.registry.parses == parses  # reloaded from the cache, nothing parsed
        assert "bob" not in service.registry.states or not service.registry.states["bob"].loaded
    finally:
        await service.close()


async def test_reindex_rebuilds_from_files(make_settings, vault_root):
    service = Service(make_settings())
    store = service.store
    try:
        await store.write("alice", title="Alpha", content="apples")
        (vault_root / "alice" / "hand.md").write_text("# Hand\n\nwritten by hand\n", encoding="utf-8")
        before = service.registry.parses
        count = service.registry.reindex("alice")
        assert count == 2
        assert service.registry.parses - before == 2  # cache dropped: everything parsed again
        found = await store.find("alice", query="hand")
        assert [m.id for m in found.memories] == ["hand.md"]
    finally:
        await service.close()


def test_check_reports_problems_with_exit_status_1(vault_root, capsys):
    token = vault_root / "alice"
    token.mkdir()
    (token / "ok.md").write_text("---\npriority: P1\n---\n# Fine\n\nok\n", encoding="utf-8")
    (token / "broken.md").write_text("---\npriority: [P1\n---\n# Broken\n", encoding="utf-8")
    (token / "conflict.md").write_text("# C\n<<<<<<< HEAD\na\n=======\nb\n>>>>>>> other\n", encoding="utf-8")
    (token / "dup.md").write_text("# Fine\n\nsame title\n", encoding="utf-8")
    assert main(["check", "--root", str(vault_root)]) == 1
    out = capsys.readouterr().out
    assert "error: alice/broken.md: broken frontmatter" in out
    assert "error: alice/conflict.md: holds git conflict markers" in out
    assert "note: alice/dup.md: duplicate title (also ok.md)" in out
    assert "note: alice/ok.md: duplicate" in out and "alice/ok.md: broken" not in out


def test_duplicate_titles_are_notes_that_do_not_fail_check(vault_root, capsys):
    token = vault_root / "alice"
    token.mkdir()
    (token / "standup.md").write_text("# Standup\n\nMonday\n", encoding="utf-8")
    (token / "standup-2.md").write_text("# Standup\n\nTuesday\n", encoding="utf-8")
    assert main(["check", "--root", str(vault_root)]) == 0
    captured = capsys.readouterr()
    assert "note: alice/standup-2.md: duplicate title" in captured.out
    assert "0 error(s) to fix and 2 note(s)" in captured.err


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


def _count_thread_trips(monkeypatch, which):
    """The worker-thread trips ``which(func, args)`` picks, as (func, args), from now on."""

    trips = []
    real = anyio.to_thread.run_sync

    async def counted(func, *args, **kwargs):
        if which(func, args):
            trips.append((func, args))
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    return trips


def _alice_with(vault_root, body):
    """Token alice's folder with one hand-written memory, a.md."""
    folder = vault_root / "alice"
    folder.mkdir()
    _hand_write(folder, "a.md", body)
    return folder


def _hand_write(folder, name, body):
    (folder / name).write_text(f"---\npriority: P1\n---\n# {name[:-3]}\n\n{body}\n", encoding="utf-8")


def _with_archived(make_settings, vault_root):
    """A service, and its store, over token alice with one memory in its archive: old.md."""
    folder = vault_root / "alice" / "archive"
    folder.mkdir(parents=True)
    _hand_write(folder, "old.md", "archived words")
    service = Service(make_settings())
    return service, service.store


async def _alice_snapshotted(make_settings, vault_root, monkeypatch):
    """Token alice with 30 hand-written memories, loaded once and closed: its snapshot written."""
    monkeypatch.setattr("memvault.load.snapshot.MIN_MEMORIES", 0)
    folder = vault_root / "alice"
    folder.mkdir()
    for i in range(30):
        _hand_write(folder, f"note-{i}.md", f"ordinary words number{i}")
    first_service = Service(make_settings())
    first = first_service.store
    await first.state("alice")
    assert first_service.registry.parses == 30
    await first_service.close()  # writes the snapshot
    assert (folder / ".memvault" / "snapshot.npz").is_file()
    return folder


async def test_restart_from_the_index_snapshot_reads_only_what_changed(
    make_settings, vault_root, monkeypatch
):
    folder = await _alice_snapshotted(make_settings, vault_root, monkeypatch)

    _hand_write(folder, "note-1.md", "changed zebra")
    _hand_write(folder, "note-2.md", "changed giraffe")
    (folder / "note-3.md").unlink()
    _hand_write(folder, "fresh.md", "brand new okapi")
    stat = (folder / "note-4.md").stat()
    os.utime(folder / "note-4.md", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # git touches mtimes

    second_service = Service(make_settings())
    second = second_service.store
    try:
        state = await second.state("alice")
        assert (
            second_service.registry.parses == 3
        )  # two edits and one new file; the touched file is not parsed
        assert "note-3.md" not in state.hot.memories
        for word, expected in (("zebra", ["note-1.md"]), ("okapi", ["fresh.md"]), ("number4", ["note-4.md"])):
            found = await second.find("alice", query=word)
            assert [m.id for m in found.memories] == expected
        old = await second.find("alice", query="number1", limit=50)
        assert "note-1.md" not in [m.id for m in old.memories]  # its old words are gone
        assert len(state.hot.memories) == 30
    finally:
        await second_service.close()


@pytest.mark.slow
async def test_a_restored_token_answers_before_its_memories_are_built(make_settings, vault_root, monkeypatch):
    monkeypatch.setattr("memvault.load.snapshot.MIN_MEMORIES", 0)
    # The folder compared with the snapshot by a helper process, as for a large vault (the scan
    # in this process looks at every memory, which builds them all).
    monkeypatch.setattr("memvault.load.processes.HELPER_MIN_BYTES", 0)
    monkeypatch.setattr("memvault.load.processes.usable_cpus", lambda: 2)
    await _alice_snapshotted(make_settings, vault_root, monkeypatch)

    second_service = Service(make_settings())
    second = second_service.store
    try:
        state = await second.state("alice")
        # Loaded, and nothing built yet: the settling work was only scheduled.
        assert state.loaded and not state.settled
        assert state.hot.memories.unbuilt == 30 and state.vectors.counts() == (0, 0)
        # Written before the vectors are served: it is among them once they are.
        await second.write("alice", title="Fresh", content="a quokka arrived")
        # Recall's candidates are the vectors' rows: it settles the token first, not answer empty.
        found = await Recaller(second, second_service.registry, second_service.embeddings).recall(
            "alice", "number7"
        )
        assert found.results[0].memory.id == "note-7.md"
        assert state.settled and state.hot.memories.unbuilt == 0
        assert state.vectors.counts()[1] == 31
        assert (
            await Recaller(second, second_service.registry, second_service.embeddings).recall(
                "alice", "quokka"
            )
        ).results[0].memory.title == "Fresh"
        await second_service.idle()
    finally:
        await second_service.close()

    # Unloaded before it settled: the settling stops, and serves no vectors for it.
    third_service = Service(make_settings())
    third = third_service.store
    try:
        state = await third.state("alice")
        hot = state.hot
        third_service.registry.settings = third_service.registry.settings.replace(max_loaded_tokens=0)
        third_service.registry.unload_idle()
        assert not state.loaded
        await third_service.idle()
        assert not state.settled and hot.memories.unbuilt == 31 and state.vectors.counts() == (0, 0)
    finally:
        await third_service.close()


async def test_a_corrupt_snapshot_is_ignored(make_settings, vault_root, monkeypatch):
    monkeypatch.setattr("memvault.load.snapshot.MIN_MEMORIES", 0)
    folder = vault_root / "alice"
    folder.mkdir()
    for i in range(5):
        _hand_write(folder, f"note-{i}.md", f"words number{i}")
    first_service = Service(make_settings())
    first = first_service.store
    await first.state("alice")
    await first_service.close()
    (folder / ".memvault" / "snapshot.npz").write_bytes(b"not a snapshot at all")
    second_service = Service(make_settings())
    second = second_service.store
    try:
        found = await second.find("alice", query="number3")
        assert [m.id for m in found.memories] == ["note-3.md"]
        assert (
            second_service.registry.parses == 5
        )  # fell back to the files (vaults with a snapshot skip the parse cache)
    finally:
        await second_service.close()


async def test_a_snapshot_in_an_older_format_is_ignored(make_settings, vault_root, monkeypatch, caplog):
    monkeypatch.setattr("memvault.load.snapshot.MIN_MEMORIES", 0)
    folder = vault_root / "alice"
    folder.mkdir()
    for i in range(4):
        _hand_write(folder, f"note-{i}.md", f"words number{i}")
    (folder / ".memvault").mkdir()
    # The first format: one JSON "meta" array and the index arrays, no "version" array.
    with open(folder / ".memvault" / "snapshot.npz", "wb") as handle:
        np.savez(handle, meta=np.frombuffer(b'{"version": 1}', dtype=np.uint8), **{"hot.dl": np.zeros(4)})
    await _found_by_reading_every_file(make_settings, "number2", "note-2.md")
    assert "index snapshot not usable (KeyError)" in caplog.text
    with np.load(folder / ".memvault" / "snapshot.npz") as data:
        assert data["version"].tolist() == [SNAPSHOT_VERSION]  # rewritten in the current format
    # A snapshot of another version (an upgrade) is read from the files too, said without alarm.
    with np.load(folder / ".memvault" / "snapshot.npz") as data:
        arrays = dict(data)
    arrays["version"] = np.array([min(SNAPSHOT_READABLE) - 1])
    with open(folder / ".memvault" / "snapshot.npz", "wb") as handle:
        np.savez(handle, **arrays)
    caplog.clear()
    caplog.set_level(logging.INFO, logger="memvault")
    await _found_by_reading_every_file(make_settings, "number3", "note-3.md")
    assert "index snapshot in another format" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def _found_by_reading_every_file(make_settings, query: str, expected: str) -> None:
    service = Service(make_settings())
    store = service.store
    try:
        found = await store.find("alice", query=query)
        assert [m.id for m in found.memories] == [expected]
        assert service.registry.parses == 4  # the snapshot was not used
    finally:
        await service.close()


async def test_restore_accepts_the_archive_path_as_seen_in_the_folder(make_settings, vault_root):
    service, store = _with_archived(make_settings, vault_root)
    try:
        assert await store.restore("alice", "archive/old.md") == "old.md"
        assert (vault_root / "alice" / "old.md").is_file()
    finally:
        await service.close()


async def test_an_update_of_an_archived_or_missing_memory_says_which(make_settings, vault_root):
    from memvault.errors import NotFound

    service, store = _with_archived(make_settings, vault_root)
    try:
        for _ in range(2):  # before and after the token's sidecar is open
            with pytest.raises(NotFound) as archived:
                await store.update("alice", "old.md", tags=["x"])
            assert archived.value.in_archive
            with pytest.raises(NotFound) as missing:
                await store.update("alice", "never.md", tags=["x"])
            assert not missing.value.in_archive
            await store.write("alice", title="Fresh", content="opens the sidecar")
        assert (await store.update("alice", "fresh.md", tags=["x"])).tags == ("x",)
        assert not (vault_root / "alice" / "old.md").exists()
        with pytest.raises(NotFound):
            await store.update("ghost", "never.md", tags=["x"])
        assert not (vault_root / "ghost").exists()  # no folder made for a token with nothing
    finally:
        await service.close()


async def test_reads_of_made_up_tokens_do_not_pile_up_state(make_settings, vault_root):
    service = Service(make_settings(max_loaded_tokens=2))
    store = service.store
    try:
        await store.write("alice", title="Alpha", content="apples")
        for i in range(20):
            found = await store.find(f"nobody{i}", query="apples")
            assert found.total == 0
        assert len(service.registry.states) <= 3  # at most alice and the two most recent
        assert len(service.embeddings._tokens) <= 2  # the worker serves loaded tokens only
        assert not any((vault_root / f"nobody{i}").exists() for i in range(20))
        found = await store.find("alice", query="apples")
        assert [m.id for m in found.memories] == ["alpha.md"]
    finally:
        await service.close()


async def test_an_outside_change_reported_during_a_load_is_applied_after_it(
    make_settings, vault_root, monkeypatch
):
    folder = vault_root / "alice"
    folder.mkdir()
    for i in range(5):
        _hand_write(folder, f"note-{i}.md", f"ordinary words number{i}")
    service = Service(make_settings())
    store = service.store
    real_read = TokenState.read_file
    edited = []

    def read_then_edit(self, id, archived, previous=None, opened=None):
        memory = real_read(self, id, archived, previous, opened)
        if id == "note-2.md" and not edited:
            # A person saves the file just after the load read it; the watcher reports it at once.
            _hand_write(folder, "note-2.md", "fresh zebra words")
            edited.append(service.apply_changes("alice", [folder / "note-2.md"], False))
        return memory

    monkeypatch.setattr(TokenState, "read_file", read_then_edit)
    try:
        found = await store.find("alice", query="zebra")
        assert edited == [0]  # not applied then: the token was still loading
        assert [m.id for m in found.memories] == ["note-2.md"]
        assert (await store.find("alice", query="number2")).total == 0
    finally:
        await service.close()


@pytest.mark.timeout(20)
async def test_a_fifo_named_like_a_memory_never_blocks_a_load_or_a_read(make_settings, vault_root):
    folder = vault_root / "alice"
    folder.mkdir()
    _hand_write(folder, "real.md", "ordinary words")
    os.mkfifo(folder / "pipe.md")  # no writer: opening it for reading the usual way would block
    os.mkdir(folder / "dir.md")
    service = Service(make_settings())
    store = service.store
    try:
        found = await store.find("alice", query="ordinary")
        assert [m.id for m in found.memories] == ["real.md"]
        state = await store.state("alice")
        assert sorted(state.hot.memories) == ["real.md"]
        found = await store.find("alice", filenames=["pipe.md", "real.md"])
        assert [m.id for m in found.memories] == ["real.md"]
        assert "pipe.md" in found.missing
        assert service.apply_changes("alice", [folder / "pipe.md"], False) == 0
        assert service.apply_changes("alice", [folder], True) == 0
    finally:
        await service.close()


@pytest.mark.slow
async def test_a_huge_hand_placed_file_is_indexed_on_its_start_and_never_rewritten(make_settings, vault_root):
    folder = vault_root / "alice"
    folder.mkdir()
    line = b"filler words for a very large log file\n"
    big = (
        b"# Huge log\n\nokapi at the start\n"
        + line * (MAX_INDEXED_BYTES // len(line))
        + b"quagga at the end\n"
    )
    (folder / "huge.md").write_bytes(big)
    service = Service(make_settings())
    store = service.store
    try:
        found = await store.find("alice", query="okapi")
        assert [m.id for m in found.memories] == ["huge.md"]
        memory = found.memories[0]
        assert memory.problem is not None and "over 8 MiB" in memory.problem
        assert memory.size == len(big) and len(memory.content) < MAX_INDEXED_BYTES
        assert (await store.find("alice", query="quagga")).total == 0  # past the indexed start
        with pytest.raises(InvalidArgument, match="will not rewrite"):
            await store.update("alice", "huge.md", content="replaced")
        assert (folder / "huge.md").read_bytes() == big  # untouched
    finally:
        await service.close()


async def test_reindex_reports_progress_file_by_file(make_settings, vault_root):
    folder = vault_root / "alice"
    folder.mkdir()
    for i in range(6):
        _hand_write(folder, f"note-{i}.md", f"words number{i}")
    service = Service(make_settings())
    try:
        steps: list[int] = []
        assert service.registry.reindex("alice", steps.append) == 6
        assert sum(steps) == 6
        assert steps.count(1) >= 6  # a bar moves with each file read, not once at the end
    finally:
        await service.close()


# ---------------------------------------------------------------------------- files replaced unseen


def _replace_keeping_size_and_mtime(path: Path, old: str, new: str, *, in_place: bool) -> None:
    """`cp -p`/`rsync -a` onto ``path``: new bytes of the same size, the old mtime put back."""
    text = path.read_text(encoding="utf-8")
    assert len(old) == len(new) and old in text
    st = path.stat()
    if in_place:
        path.write_text(text.replace(old, new), encoding="utf-8")
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        tmp = path.with_name(f".{path.name}.rsync")
        tmp.write_text(text.replace(old, new), encoding="utf-8")
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, path)
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (st.st_size, st.st_mtime_ns)


@pytest.mark.parametrize("in_place", [False, True], ids=["rename-over", "in-place"])
async def test_a_file_replaced_with_the_same_size_and_mtime_is_read_again(
    make_settings, vault_root, in_place
):
    """Issue 9, 3: a rename-over keeping size and mtime was never seen, not even after a restart."""
    folder = vault_root / "alice"
    folder.mkdir()
    _hand_write(folder, "note.md", "the word is gorillakazoo")
    service = Service(make_settings())
    store = service.store
    try:
        found = await store.find("alice", query="gorillakazoo")
        assert [m.id for m in found.memories] == ["note.md"]
        _replace_keeping_size_and_mtime(folder / "note.md", "gorillakazoo", "tapirvoodoo1", in_place=in_place)
        found = await store.find("alice", filenames=["note.md"])
        assert "tapirvoodoo1" in found.memories[0].content  # read while running
    finally:
        await service.close()
    _replace_keeping_size_and_mtime(folder / "note.md", "tapirvoodoo1", "okapiwaltz99", in_place=in_place)
    restarted_service = Service(make_settings())  # changed while the server was down
    restarted = restarted_service.store
    try:
        found = await restarted.find("alice", query="okapiwaltz99")
        assert [m.id for m in found.memories] == ["note.md"]
        assert not (await restarted.find("alice", query="tapirvoodoo1")).memories
    finally:
        await restarted_service.close()


async def test_a_large_vault_restart_sees_a_file_replaced_with_the_same_size_and_mtime(
    make_settings, vault_root, monkeypatch
):
    monkeypatch.setattr("memvault.load.snapshot.MIN_MEMORIES", 0)  # restart from the index snapshot
    folder = vault_root / "alice"
    folder.mkdir()
    for i in range(5):
        _hand_write(folder, f"note-{i}.md", f"filler number{i}")
    _hand_write(folder, "note.md", "the word is gorillakazoo")
    service = Service(make_settings())
    store = service.store
    try:
        assert (await store.find("alice", query="gorillakazoo")).memories
    finally:
        await service.close()  # writes the snapshot
    assert (folder / ".memvault" / "snapshot.npz").is_file()
    _replace_keeping_size_and_mtime(folder / "note.md", "gorillakazoo", "okapiwaltz99", in_place=False)
    restarted_service = Service(make_settings())
    restarted = restarted_service.store
    try:
        state = await restarted.state("alice")
        with state.mem_lock:
            hits, _ = state.hot.index.search("okapiwaltz99")
        assert [h.id for h in hits] == ["note.md"]  # the index itself, not a re-read by find
    finally:
        await restarted_service.close()


def _scan_within(vault_dir: Path, seconds: float) -> list[str] | None:
    """The ids Vault.scan lists, or None if it did not finish in time (an endless walk)."""
    import threading

    from memvault.disk.vault import Vault

    out: list[str] = []
    done = threading.Event()

    def walk() -> None:
        for id, _, _ in Vault(vault_dir).scan():
            out.append(id)
            if len(out) > 10_000:
                return
        done.set()

    threading.Thread(target=walk, daemon=True).start()
    return out if done.wait(seconds) else None


async def test_link_loops_in_a_token_folder_end_the_load_and_list_each_file_once(make_settings, vault_root):
    """Issue 9, 4: `ln -s . a; ln -s . b` made the load endless; one `self -> .` listed 3 files as 123."""
    folder = vault_root / "alice"
    (folder / "sub").mkdir(parents=True)
    for name in ("one.md", "two.md", "sub/three.md"):
        _hand_write(folder, name, f"loop test {name[:-3]}")
    os.symlink(".", folder / "a")
    os.symlink(".", folder / "b")
    os.symlink("..", folder / "sub" / "up")
    os.symlink(".", folder / "self")
    os.symlink("one.md", folder / "same.md")  # a file link inside the folder is still followed
    assert sorted(_scan_within(folder, 5.0) or ["<did not finish>"]) == [
        "one.md",
        "same.md",
        "sub/three.md",
        "two.md",
    ]
    service = Service(make_settings())
    store = service.store
    try:
        titles, _ = await store.list_hot("alice")
        assert sorted(m.id for m in titles) == ["one.md", "same.md", "sub/three.md", "two.md"]
        with pytest.raises(InvalidName, match="symbolic link"):
            await store.find("alice", filenames=["a/one.md"])
    finally:
        await service.close()


# ---------------------------------------------------------------------------- tokens in use


@pytest.mark.slow
async def test_reads_racing_unloads_never_see_an_emptied_token(make_settings):
    """Issue 9, 7: with MAX_LOADED_TOKENS=2, 8 tokens and 6 readers, 666 of 3,396 replies were empty."""
    import asyncio

    service = Service(make_settings(max_loaded_tokens=2))
    store = service.store
    tokens = [f"t{i}" for i in range(8)]
    try:
        for token in tokens:
            await store.write(token, title=f"Note of {token}", content=f"shared word quetzal for {token}")
        empty = 0

        async def reader(n: int) -> None:
            nonlocal empty
            for i in range(60):
                token = tokens[(n * 3 + i) % len(tokens)]
                found = await store.find(token, query="quetzal")
                if not found.memories:
                    empty += 1
                listed, _ = await store.list_hot(token)
                if not listed:
                    empty += 1

        await asyncio.gather(*(reader(n) for n in range(6)))
        assert empty == 0
        assert service.registry.unloads > 0  # the race was on: tokens did unload meanwhile
    finally:
        await service.close()


@pytest.mark.slow
async def test_unloaded_tokens_give_their_descriptors_back(make_settings):
    """Issue 9, 6: an unloaded token kept its SQLite connection (3 descriptors per token)."""

    def open_fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    service = Service(make_settings(max_loaded_tokens=2))
    store = service.store
    try:
        await store.write("warm", title="Warm", content="first token, so lazy imports are done")
        before = open_fds()
        for i in range(60):
            await store.write(f"t{i}", title="Note", content="one memory each")
        await service.idle()  # an unloaded token's sidecar is closed in a worker thread
        assert open_fds() - before < 20  # two loaded tokens' sidecars, not sixty
        found = await store.find("t0", query="memory")  # an unloaded token reopens on use
        assert [m.id for m in found.memories] == ["note.md"]
    finally:
        await service.close()


# ------------------------------------------------------------------- marker-like lines an agent wrote

MERGE_NOTES = (
    "How to read a merge conflict:\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> feature\nPick one side."
)


async def test_content_with_conflict_like_lines_stays_writable(make_settings, vault_root):
    """Issue 9, 9: such content turned the memory read-only forever (update, delete, supersede refused)."""
    from memvault.errors import Conflict

    service = Service(make_settings(capacity=1, ttl_p2_days=0, evict_grace_hours=0))
    store = service.store
    try:
        memory = (await store.write("alice", title="Git merges", content=MERGE_NOTES)).memory
        assert not memory.conflicted
        assert "literalMarkers: h" in (vault_root / "alice" / memory.id).read_text(encoding="utf-8")
        updated = await store.update("alice", memory.id, content=MERGE_NOTES + "\nAnd commit.")
        assert not updated.conflicted and "And commit." in updated.content
        written = await store.write(
            "alice", title="Git merges v2", content=MERGE_NOTES, supersedes=[memory.id]
        )
        assert [old for old, _ in written.superseded] == [memory.id]
        await store.update("alice", written.memory.id, content="no markers any more")
        text = (vault_root / "alice" / written.memory.id).read_text(encoding="utf-8")
        assert "literalMarkers" not in text  # dropped with the lines it vouched for
        await store.update("alice", written.memory.id, content=MERGE_NOTES)
        evicted = await store.evict("alice")  # capacity 1, TTL 0: nothing pinned by the markers
        assert written.memory.id in {e.id for e in evicted}
        third = (await store.write("alice", title="Third", content=MERGE_NOTES + " (3)")).memory
        assert await store.delete("alice", third.id) == third.id

        # A real conflict in such a file (git adds markers to the body) is still refused.
        made = (await store.write("alice", title="Real", content=MERGE_NOTES + " (real)")).memory
        path = vault_root / "alice" / made.id
        text = path.read_text(encoding="utf-8")
        path.write_text(
            text.replace("Pick one side.", "<<<<<<< HEAD\nmine\n=======\nyours\n>>>>>>> b\n"), "utf-8"
        )
        with pytest.raises(Conflict):
            await store.update("alice", made.id, content="overwrite")
    finally:
        await service.close()


async def test_a_temp_file_left_by_a_crash_is_removed_when_the_token_loads(make_settings, vault_root):
    """Issue 9, 11: an orphan .tmp after SIGKILL stayed in the token folder and in `git status`."""
    folder = vault_root / "alice"
    (folder / "sub").mkdir(parents=True)
    (folder / STATE_DIR).mkdir()
    _hand_write(folder, "note.md", "a memory")
    old = os.stat(folder / "note.md").st_mtime - 3600
    ours = [folder / ".memvault-ab12cd34.tmp", folder / "sub" / ".k3j4h5g6.tmp"]  # now, and before 0.2
    ours.append(folder / STATE_DIR / ".memvault-0a1b2c3d.tmp")  # where a memory's temp file is made now
    theirs = [folder / ".notes.tmp", folder / ".memvault-mine.tmp", folder / "keep.tmp"]
    fresh = folder / ".memvault-zz99yy88.tmp"  # a write in progress elsewhere: too young to touch
    for path in [*ours, *theirs, fresh]:
        path.write_text("partial", encoding="utf-8")
    for path in [*ours, *theirs]:
        os.utime(path, (old, old))
    service = Service(make_settings())
    store = service.store
    try:
        found = await store.find("alice", query="memory")
        assert [m.id for m in found.memories] == ["note.md"]
        assert [p.exists() for p in ours] == [False, False, False]
        assert all(p.exists() for p in theirs) and fresh.exists()
    finally:
        await service.close()


async def test_an_archive_that_is_a_file_makes_the_sweep_say_so(make_settings, vault_root):
    """Issue 9, 11: eviction failed, yet evict_memories answered 'Nothing to archive'."""
    folder = vault_root / "alice"
    folder.mkdir()
    (folder / "archive").write_text("not a folder", encoding="utf-8")
    for i in range(3):
        _hand_write(folder, f"note-{i}.md", f"memory {i}")
    service = Service(make_settings(capacity=1, evict_grace_hours=0))
    store = service.store
    try:
        with pytest.raises(InvalidArgument, match="'archive' in this vault is a file"):
            await store.evict("alice")
        assert len((await store.list_hot("alice"))[0]) == 3  # nothing moved, nothing lost
        written = (await store.write("alice", title="New", content="supersedes nothing yet")).memory
        with pytest.raises(InvalidArgument, match="'archive' in this vault is a file"):
            await store.write("alice", title="Newer", content="x", supersedes=[written.id])
        assert (folder / written.id).read_text(encoding="utf-8").count("supersededBy") == 0
        assert not (folder / "newer.md").exists()  # checked before anything was written
    finally:
        await service.close()


@pytest.mark.slow
async def test_a_read_records_its_access_after_the_reply_not_before(make_settings, vault_root):
    """The access write-back left the read's path (issue 12): the file changes once the token's
    background drain has run, never inside the call."""
    folder = vault_root / "alice"
    folder.mkdir()
    path = folder / "old.md"
    path.write_text(
        "---\npriority: P1\ncreatedAt: 2026-01-01T00:00:00.000Z\nlastAccessedAt: 2026-01-01T00:00:00.000Z\n"
        "---\n# Old\n\nan old note about walruses\n"
    )
    before = path.read_bytes()
    service = Service(make_settings())
    store = service.store
    try:
        found = await store.find("alice", query="walruses")
        await store.touch("alice", found.memories)
        assert path.read_bytes() == before  # queued, not written in the call
        await service.idle()
        assert b"lastAccessedAt: 2026-01-01" not in path.read_bytes()
        state = await store.state("alice")
        assert state.sidecar is not None and "old.md" in state.sidecar.last_access()
    finally:
        await service.close()


async def test_writes_and_updates_record_their_access_in_the_background(make_settings):
    """A write or an update is an access: queued like a read's (no SQLite transaction in the
    call), visible at once to the listing's access times, in the sidecar once drained."""
    service = Service(make_settings())
    store = service.store
    try:
        await store.write("alice", title="First", content="makes the token")
        await service.idle()
        state = await store.state("alice")
        memory = (await store.write("alice", title="Fresh", content="new words")).memory
        assert memory.id in state.pending.latest()  # queued; the drain waits a moment for more
        await store.update("alice", memory.id, tags=["later"])
        await service.idle()
        assert state.sidecar is not None and memory.id in state.sidecar.last_access()
        assert not state.pending.latest()
    finally:
        await service.close()


async def test_an_access_time_alone_leaves_the_index_untouched(make_settings, vault_root, monkeypatch):
    folder = vault_root / "alice"
    folder.mkdir()
    _hand_write(folder, "a.md", "ordinary words")
    service = Service(make_settings())
    store = service.store
    try:
        state = await store.state("alice")
        memory = state.hot.memories["a.md"]
        calls = []
        monkeypatch.setattr(state.hot.index, "upsert", lambda *a, **k: calls.append(a))
        state.hot.put(dataclasses.replace(memory, priority="P0", mtime_ns=memory.mtime_ns + 1))
        assert calls == []
        state.hot.put(dataclasses.replace(memory, content="other words"))
        assert len(calls) == 1
    finally:
        await service.close()


async def test_a_sweep_moves_in_batches_and_keeps_what_was_read_since_its_plan(
    make_settings, vault_root, monkeypatch
):
    import memvault.ops.sweeps as sweeps

    folder = vault_root / "alice"
    folder.mkdir()
    old = (
        "---\npriority: P2\ncreatedAt: 2026-01-01T00:00:00.000Z\n"
        "lastAccessedAt: 2026-01-01T00:00:00.000Z\n---\n"
    )
    for name in ("a", "b", "c", "d", "e"):
        (folder / f"{name}.md").write_text(f"{old}# {name}\n\nstale note {name}\n")
    service = Service(make_settings(capacity=100, ttl_p2_days=30))
    store = service.store
    monkeypatch.setattr(sweeps, "CHUNK", 2)
    real_move = sweeps.Sweeps._move
    batches = []

    def move_and_read(self, state, batch, planned, give_way):
        batches.append([e.id for e in batch])
        if len(batches) == 1:  # between two batches, someone reads d.md
            state.pending.add(["d.md"], planned + timedelta(seconds=1), True)
        return real_move(self, state, batch, planned, give_way)

    monkeypatch.setattr(sweeps.Sweeps, "_move", move_and_read)
    try:
        evicted = await store.evict("alice")
        assert [len(b) for b in batches] == [2, 2, 1]
        assert sorted(e.id for e in evicted) == ["a.md", "b.md", "c.md", "e.md"]
        assert (folder / "d.md").exists() and not (folder / "archive" / "d.md").exists()
    finally:
        await service.close()


async def test_reads_of_unchanged_files_stay_on_the_loop_and_changed_ones_go_to_a_thread(
    make_settings, vault_root, monkeypatch
):
    folder = _alice_with(vault_root, "the word is wombatique")
    service = Service(make_settings())
    store = service.store
    try:
        await store.state("alice")
        # the read's own work, not the background access records
        hops = _count_thread_trips(monkeypatch, lambda func, args: "Store._" in repr(func))
        assert [m.id for m in (await store.find("alice", query="wombatique")).memories] == ["a.md"]
        assert [m.id for m in (await store.find("alice", filenames=["a.md"])).memories] == ["a.md"]
        assert hops == []  # memory and a stat: no worker thread
        _hand_write(folder, "a.md", "the word is now quokkaroo, and longer")  # the watcher may lag
        found = await store.find("alice", filenames=["a.md"])
        assert "quokkaroo" in found.memories[0].content
        assert len(hops) == 1  # the changed file was read and parsed in a worker thread
    finally:
        await service.close()


async def test_a_read_never_makes_the_event_loop_wait_for_a_worker_threads_lock(make_settings, vault_root):
    import asyncio
    import threading

    _alice_with(vault_root, "the word is wombatique")
    service = Service(make_settings())
    store = service.store
    try:
        state = await store.state("alice")
        release = threading.Event()
        held = threading.Event()

        def hold() -> None:  # a worker thread busy with the token's memories (a long recall, say)
            with state.mem_lock:
                held.set()
                release.wait(5)  # a read that blocked the loop would see the lock free after this

        holder = threading.Thread(target=hold)
        holder.start()
        held.wait(10)
        read = asyncio.create_task(store.find("alice", query="wombatique"))
        ticks = 0
        while not read.done() and ticks < 20:  # the loop keeps turning meanwhile
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 20 and not read.done()  # the read waits in a thread, not on the loop
        release.set()
        found = await asyncio.wait_for(read, 10)
        assert [m.id for m in found.memories] == ["a.md"]
        holder.join()
    finally:
        await service.close()


@pytest.mark.slow
async def test_reads_of_many_tokens_are_recorded_in_one_worker_thread_trip(
    make_settings, vault_root, monkeypatch
):

    tokens = [f"agent{i}" for i in range(6)]
    for token in tokens:
        (vault_root / token).mkdir()
        _hand_write(vault_root / token, "note.md", f"a note about capybaras of {token}")
    service = Service(make_settings())
    store = service.store
    try:
        found = {token: await store.find(token, filenames=["note.md"]) for token in tokens}
        await service.idle()
        trips = _count_thread_trips(
            monkeypatch, lambda func, args: getattr(func, "__name__", "") == "_flush_each"
        )
        for token in tokens:
            await store.touch(token, found[token].memories)
        await service.idle()
        assert [len(args[0]) for _, args in trips] == [len(tokens)]  # one trip for all tokens' rows
        for token in tokens:
            state = await store.state(token)
            assert state.sidecar is not None and "note.md" in state.sidecar.last_access()
    finally:
        await service.close()


@pytest.mark.slow
async def test_a_token_that_cannot_be_held_does_not_stop_the_others_accesses_being_recorded(
    make_settings, vault_root
):
    for token in ("alice", "bob"):
        (vault_root / token).mkdir()
        _hand_write(vault_root / token, "note.md", f"a note of {token}")
    service = Service(make_settings())
    store = service.store
    try:
        found = {token: await store.find(token, filenames=["note.md"]) for token in ("alice", "bob")}
        for token in ("alice", "bob"):  # a first access each, and the day's sweep, done with
            await store.touch(token, found[token].memories)
        await service.idle()
        bob = await store.state("bob")
        assert bob.sidecar is not None
        first = bob.sidecar.last_access()["note.md"]
        alice = await store.state("alice")
        (vault_root / "alice").rename(vault_root / "elsewhere")
        (vault_root / "alice").symlink_to(vault_root / "elsewhere")  # now refused as a linked folder
        alice.link_checked = 0.0  # looked at again on its next use
        await store.touch("bob", found["bob"].memories)
        alice.pending.add(["note.md"], store.clock(), True)
        service.recorder.noted(alice)  # due in the same round as bob
        await service.idle()
        assert bob.sidecar.last_access()["note.md"] > first
    finally:
        await service.close()


async def test_writes_run_on_the_event_loop_unless_they_would_wait(make_settings, monkeypatch, request):
    """Issue 12: a write in a worker thread handed the GIL back and forth with the event loop at
    each of its system calls (under 32 agents, a third of the calls/s). On the loop while fsyncs are
    fast and the file lock is free; else in a thread, and nothing is written twice or lost."""
    service = Service(make_settings())
    store = service.store
    try:
        await store.write("t", title="First", content="opens the sidecar, in a thread")
        hops = request.getfixturevalue("thread_hops")  # from here on
        monkeypatch.setattr(files, "_fsync_seconds", [0.0] * 16)  # a fast disk, however busy this one is
        before = len(hops)  # nothing awaits on the loop's path: any hop meanwhile is the call's own
        await store.write("t", title="Second", content="on the loop")
        await store.update("t", "second.md", content="still on the loop")
        assert len(hops) == before

        # Another process holds the token's file lock: the write waits for it in a thread.
        state = await store.state("t")
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with FileLock(str(state.dir / STATE_DIR / "lock")):
                held.set()
                release.wait(20)

        holder = threading.Thread(target=hold)
        holder.start()
        assert await asyncio.to_thread(held.wait, 20)
        before = len(hops)
        task = asyncio.create_task(store.write("t", title="Third", content="waits for the lock"))
        deadline = time.monotonic() + 20
        while len(hops) == before and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert len(hops) > before and not task.done()  # in a thread, waiting for the lock
        assert not (state.dir / "third.md").exists()
        release.set()
        written = await task
        holder.join()
        memory, reused = written.memory, written.reused
        assert memory.id == "third.md" and not reused and (state.dir / "third.md").exists()

        # A slow disk: writes go to a thread.
        hops.clear()
        monkeypatch.setattr(files, "_fsync_seconds", [1.0] * 16)
        await store.update("t", "third.md", content="a slow disk")
        assert hops
        memories, _ = await store.list_hot("t")
        assert [m.id for m in memories] == ["first.md", "second.md", "third.md"]
        assert "still on the loop" in (state.dir / "second.md").read_text(encoding="utf-8")
    finally:
        await service.close()


def test_a_disk_is_fast_while_its_quickest_recent_fsyncs_are(monkeypatch, tmp_path):
    monkeypatch.setattr(files, "_fsync_seconds", [0.0] * 16)
    assert files.fsync_is_fast()
    monkeypatch.setattr(files, "_fsync_seconds", [0.5] * 15 + [0.001])  # waits for the GIL, mostly
    assert files.fsync_is_fast()
    monkeypatch.setattr(files, "_fsync_seconds", [0.05] * 16)  # a slow disk
    assert not files.fsync_is_fast()


async def test_a_repeated_write_is_reused_only_within_the_window_and_the_record_stays_bounded(
    make_settings, monkeypatch
):
    now = [datetime(2026, 3, 1, 12, 0, tzinfo=UTC)]
    service = Service(make_settings(dedupe_window_seconds=60), clock=lambda: now[0])
    store = service.store
    monkeypatch.setattr("memvault.ops.store.RECENT_WRITES_KEPT", 5)
    try:
        written = await store.write("alice", title="Tide", content="high at noon")
        first, reused = written.memory, written.reused
        assert not reused
        now[0] += timedelta(seconds=30)
        written = await store.write("alice", title="Tide", content="high at noon")
        again, reused = written.memory, written.reused
        assert reused and again.id == first.id
        for i in range(4):
            await store.write("alice", title=f"Other {i}", content="x")
        state = service.registry.states["alice"]
        assert len(state.recent_writes) == 5  # the tide write is still the oldest kept
        await store.write("alice", title="Other 4", content="x")
        assert len(state.recent_writes) == 5  # past the bound the oldest goes: the tide write
        assert next(iter(state.recent_writes.values()))[0] == "other-0.md"
        written = await store.write("alice", title="Tide", content="high at noon")
        repeat, reused = written.memory, written.reused
        assert not reused and repeat.id != first.id
        now[0] += timedelta(seconds=61)
        written = await store.write("alice", title="Other 4", content="x")
        later, reused = written.memory, written.reused
        assert not reused and later.id != "other-4.md"  # the window passed: a new memory
        assert len(state.recent_writes) == 1  # everything older than the window forgotten
    finally:
        await service.close()
