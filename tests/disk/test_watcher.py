"""Live index: changes made outside the server reach search, through a real watchdog observer.

Every test edits real files under a running server's vault and waits (with a deadline) for the
index to follow. Where the tool adds nothing, the checks look at the token's index directly:
read_memory re-reads the files of its hits, which would hide a watcher that never ran.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import threading
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from conftest import Running, wait_for

import memvault.disk.watcher

pytestmark = pytest.mark.anyio

TOKEN = "alice"
DEADLINE = 5.0

# Query words in these tests are made up and far apart, so typo tolerance never links two of them.
NOW = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")  # fresh: no eviction sweep moves the files
FRONTMATTER = f"---\npriority: P1\ncreatedAt: {NOW}\nupdatedAt: {NOW}\nlastAccessedAt: {NOW}\n---\n"


def note(title: str, body: str, *, frontmatter: bool = True) -> str:
    return (FRONTMATTER if frontmatter else "") + f"# {title}\n\n{body}\n"


def put(path: Path, text: str) -> Path:
    """A plain write by hand (what `echo > file` or a simple editor does)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def put_atomic(path: Path, text: str) -> Path:
    """An editor-style save: a hidden temp file renamed over the target."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def tokens_of(srv: Running) -> Any:
    return srv.app.state.service.registry


def state_of(srv: Running) -> Any:
    return tokens_of(srv).states[TOKEN]


def hot_hits(srv: Running, query: str) -> set[str]:
    """Ids the hot index returns for a query, without re-reading any file."""
    state = state_of(srv)
    with state.mem_lock:
        hits, _ = state.hot.index.search(query, limit=None)
    return {h.id for h in hits}


def archive_hits(srv: Running, query: str) -> set[str]:
    state = state_of(srv)
    with state.mem_lock:
        hits, _ = state.archive.index.search(query, limit=None)
    return {h.id for h in hits}


def hot_ids(srv: Running) -> set[str]:
    state = state_of(srv)
    with state.mem_lock:
        return set(state.hot.memories)


def archive_ids(srv: Running) -> set[str]:
    state = state_of(srv)
    with state.mem_lock:
        return set(state.archive.memories)


async def listed(srv: Running, session: Any) -> set[str]:
    err, text = await srv.call(session, "list_memory_titles")
    assert not err, text
    if text.startswith("No memories yet"):
        return set()
    return {line.split("|", 1)[0] for line in text.splitlines() if "|" in line}


async def healthz(srv: Running) -> dict[str, Any]:
    def get() -> dict[str, Any]:
        try:
            with urllib.request.urlopen(srv.url + "/healthz", timeout=5) as response:
                assert response.status == 200
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:  # 503 while degraded, with the same JSON body
            assert exc.code == 503
            body = json.loads(exc.read())
            assert body["status"] == "degraded"
            return body

    return await anyio.to_thread.run_sync(get)


@contextlib.asynccontextmanager
async def live(
    server_factory: Any, *, seed: bool = True, **changes: Any
) -> AsyncIterator[tuple[Running, Any, Path]]:
    """A running server with the token loaded (so the watcher applies changes to it)."""
    changes.setdefault("capacity", 100_000)  # no background eviction moving files around
    async with server_factory(**changes) as srv, srv.session(TOKEN) as session:
        folder = srv.settings.token_dir(TOKEN)
        if seed:
            put(folder / "seed.md", note("Seed", "seed memory so the folder exists"))
        err, text = await srv.call(session, "list_memory_titles")  # loads the token
        assert not err, text
        assert TOKEN in tokens_of(srv).states and state_of(srv).loaded
        yield srv, session, folder


# ---------------------------------------------------------------------------- new files


async def test_new_files_by_hand_become_searchable(server_factory):
    async with live(server_factory) as (srv, s, folder):
        words = {
            "plain.md": "quokkafern",  # with frontmatter
            "legacy.md": "brontosaurmint",  # without frontmatter
            "projects/deep/alpha.md": "zeppelinquartz",  # in a new subfolder
            "My Notes About Things.md": "harpsichordlemon",  # spaces and capitals in the name
        }
        put(folder / "plain.md", note("Plain note", "the quokkafern grows here"))
        put(folder / "legacy.md", "Just some text about brontosaurmint, no frontmatter at all.\n")
        put(folder / "projects/deep/alpha.md", note("Alpha", "deep inside lies zeppelinquartz"))
        put(folder / "My Notes About Things.md", note("Mixed Case", "capitals and spaces: harpsichordlemon"))
        for name, word in words.items():
            await wait_for(lambda name=name, word=word: hot_hits(srv, word) == {name}, DEADLINE)
        # Through the tools too: listed, and found by a body word.
        assert set(words) <= await listed(srv, s)
        for name, word in words.items():
            err, text = await srv.call(s, "read_memory", query=word)
            assert not err and name in text and word in text, text


async def test_new_token_folder_made_by_hand_after_load(server_factory):
    """The token was loaded while its folder did not exist; a person then creates it."""
    async with live(server_factory, seed=False) as (srv, s, folder):
        assert not folder.exists()
        put(folder / "first.md", note("First", "made by hand: ocelotbanjo"))
        await wait_for(lambda: hot_hits(srv, "ocelotbanjo") == {"first.md"}, DEADLINE)
        assert "first.md" in await listed(srv, s)


# ---------------------------------------------------------------------------- edits


@pytest.mark.slow
async def test_edit_in_place_changes_search(server_factory):
    async with live(server_factory) as (srv, s, folder):
        path = put(folder / "edit.md", note("Edit me", "the answer is wombatcrayon"))
        await wait_for(lambda: hot_hits(srv, "wombatcrayon") == {"edit.md"}, DEADLINE)

        # Truncate and rewrite in place (same inode), as `>` or a simple editor does.
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(note("Edit me", "the answer is now flamingotuba"))
        await wait_for(
            lambda: hot_hits(srv, "flamingotuba") == {"edit.md"} and not hot_hits(srv, "wombatcrayon"),
            DEADLINE,
        )
        # A same-size edit (only bytes differ, mtime moves) is seen too.
        text = path.read_text(encoding="utf-8")
        same = text.replace("flamingotuba", "pangolinharp")
        assert len(same) == len(text)
        path.write_text(same, encoding="utf-8")
        await wait_for(
            lambda: hot_hits(srv, "pangolinharp") == {"edit.md"} and not hot_hits(srv, "flamingotuba"),
            DEADLINE,
        )
        err, reply = await srv.call(s, "read_memory", query="pangolinharp")
        assert not err and "edit.md" in reply and "flamingotuba" not in reply, reply


@pytest.mark.slow
async def test_editor_temp_file_and_rename_over_is_picked_up(server_factory):
    async with live(server_factory) as (srv, s, folder):
        path = put(folder / "note.md", note("Note", "before the save: gazellepiano"))
        await wait_for(lambda: hot_hits(srv, "gazellepiano") == {"note.md"}, DEADLINE)

        # vim-like: a swap file appears while editing, the save writes a temp file and renames it over.
        swap = folder / ".note.md.swp"
        swap.write_bytes(b"b0VIM 9.0 swap junk tapirsaxophone")
        put_atomic(path, note("Note", "after the save: tapirsaxophone"))
        swap.unlink()
        await wait_for(
            lambda: hot_hits(srv, "tapirsaxophone") == {"note.md"} and not hot_hits(srv, "gazellepiano"),
            DEADLINE,
        )

        # The other common pattern: the original renamed to a backup, a new file written, the backup removed.
        backup = folder / "note.md~"
        os.rename(path, backup)
        put(path, note("Note", "third version: iguanacello"))
        backup.unlink()
        await wait_for(
            lambda: hot_hits(srv, "iguanacello") == {"note.md"} and not hot_hits(srv, "tapirsaxophone"),
            DEADLINE,
        )
        await wait_for(lambda: srv.app.state.watcher.idle, DEADLINE)
        assert hot_ids(srv) == {"seed.md", "note.md"}
        assert await listed(srv, s) == {"seed.md", "note.md"}


# ---------------------------------------------------------------------------- deletes, renames, moves


@pytest.mark.slow
async def test_delete_disappears_from_search_and_list(server_factory):
    async with live(server_factory) as (srv, s, folder):
        path = put(folder / "doomed.md", note("Doomed", "soon gone: lemurtrombone"))
        await wait_for(lambda: hot_hits(srv, "lemurtrombone") == {"doomed.md"}, DEADLINE)
        assert "doomed.md" in await listed(srv, s)

        path.unlink()
        await wait_for(
            lambda: "doomed.md" not in hot_ids(srv) and not hot_hits(srv, "lemurtrombone"), DEADLINE
        )
        assert "doomed.md" not in await listed(srv, s)
        err, text = await srv.call(s, "read_memory", query="lemurtrombone")
        assert not err and "doomed.md" not in text, text


@pytest.mark.slow
async def test_rename_is_picked_up_under_the_new_name(server_factory):
    async with live(server_factory) as (srv, s, folder):
        put(folder / "old name.md", note("Renamed", "a rename keeps narwhalkazoo"))
        await wait_for(lambda: hot_hits(srv, "narwhalkazoo") == {"old name.md"}, DEADLINE)

        os.rename(folder / "old name.md", folder / "New-Name.md")
        await wait_for(lambda: hot_hits(srv, "narwhalkazoo") == {"New-Name.md"}, DEADLINE)
        assert "old name.md" not in hot_ids(srv)

        # Moved into a subfolder.
        (folder / "topics").mkdir()
        os.rename(folder / "New-Name.md", folder / "topics" / "New-Name.md")
        await wait_for(lambda: hot_hits(srv, "narwhalkazoo") == {"topics/New-Name.md"}, DEADLINE)
        assert "New-Name.md" not in hot_ids(srv)
        names = await listed(srv, s)
        assert "topics/New-Name.md" in names and "New-Name.md" not in names and "old name.md" not in names


@pytest.mark.slow
async def test_move_into_and_out_of_archive(server_factory):
    async with live(server_factory) as (srv, s, folder):
        put(folder / "stale.md", note("Stale", "archived by hand: axolotlbagpipe"))
        await wait_for(lambda: hot_hits(srv, "axolotlbagpipe") == {"stale.md"}, DEADLINE)

        (folder / "archive").mkdir()
        os.rename(folder / "stale.md", folder / "archive" / "stale.md")
        await wait_for(
            lambda: (
                archive_hits(srv, "axolotlbagpipe") == {"stale.md"} and not hot_hits(srv, "axolotlbagpipe")
            ),
            DEADLINE,
        )
        err, text = await srv.call(s, "search_archive", query="axolotlbagpipe")
        assert not err and "stale.md" in text, text
        err, text = await srv.call(s, "read_memory", query="axolotlbagpipe")
        assert not err and "stale.md" not in text, text
        assert "stale.md" not in await listed(srv, s)

        os.rename(folder / "archive" / "stale.md", folder / "stale.md")
        await wait_for(
            lambda: (
                hot_hits(srv, "axolotlbagpipe") == {"stale.md"} and not archive_hits(srv, "axolotlbagpipe")
            ),
            DEADLINE,
        )
        assert "stale.md" not in archive_ids(srv)
        err, text = await srv.call(s, "read_memory", query="axolotlbagpipe")
        assert not err and "stale.md" in text, text
        err, text = await srv.call(s, "search_archive", query="axolotlbagpipe")
        assert not err and "stale.md" not in text, text


@pytest.mark.slow
async def test_whole_folder_added_moved_and_removed(server_factory, tmp_path):
    incoming = tmp_path / "incoming" / "team"
    for i in range(20):
        put(
            incoming / f"member-{i:02d}.md",
            note(f"Member {i}", f"team roster entry, shared word koalafiddle n{i}"),
        )
    names = {f"team/member-{i:02d}.md" for i in range(20)}

    async with live(server_factory) as (srv, s, folder):
        shutil.copytree(incoming, folder / "team")
        await wait_for(lambda: hot_hits(srv, "koalafiddle") == names, DEADLINE)
        assert names <= await listed(srv, s)

        # A folder renamed: its children send no events of their own.
        os.rename(folder / "team", folder / "crew")
        moved = {n.replace("team/", "crew/", 1) for n in names}
        await wait_for(lambda: hot_hits(srv, "koalafiddle") == moved, DEADLINE)
        assert not names & hot_ids(srv)

        shutil.rmtree(folder / "crew")
        await wait_for(lambda: not hot_hits(srv, "koalafiddle") and hot_ids(srv) == {"seed.md"}, DEADLINE)
        assert await listed(srv, s) == {"seed.md"}


# ---------------------------------------------------------------------------- bursts


@pytest.mark.slow
async def test_thousand_file_burst_is_indexed_fast_in_few_batches(server_factory):
    async with live(server_factory) as (srv, s, folder):
        watcher = srv.app.state.watcher
        await wait_for(lambda: watcher.idle, DEADLINE)
        batches = watcher.batches
        names = {f"pull/{i // 100:02d}/file-{i:04d}.md" for i in range(1000)}
        # As fast as possible, like a git pull or checkout.
        for name in sorted(names):
            put(
                folder / name, note(f"Pulled {name}", f"pulled from a remote, shared word meerkatoboe {name}")
            )
        # Fully indexed within 2 s of the last write.
        await wait_for(lambda: names <= hot_ids(srv), timeout=2.0)
        await wait_for(lambda: watcher.idle, DEADLINE)  # the batch counter moves when a batch ends
        state = state_of(srv)
        with state.mem_lock:
            _, total = state.hot.index.search("meerkatoboe", limit=5)
        assert total == 1000
        grown = watcher.batches - batches
        assert 1 <= grown < 50, f"{grown} batches for a 1,000-file burst"
        err, text = await srv.call(s, "read_memory", query="meerkatoboe", limit=1)
        assert not err and "1000 hot memories" in text, text[:200]

        # And the reverse: the checkout removes them all again.
        batches = watcher.batches
        shutil.rmtree(folder / "pull")
        await wait_for(lambda: not names & hot_ids(srv), timeout=2.0)
        await wait_for(lambda: watcher.idle, DEADLINE)
        assert not hot_hits(srv, "meerkatoboe")
        assert watcher.batches - batches < 50


@pytest.mark.slow
async def test_another_vaults_edit_is_applied_while_a_big_pull_is(server_factory, vault_root, monkeypatch):
    """Issue 46, 7: a 10,000-file pull was applied in one step: another vault's hand edit waited
    for all of it. It now waits for a chunk or two of it."""
    total = 1500
    async with live(server_factory) as (srv, _s, folder), srv.session("bob") as bob:
        put(vault_root / "bob" / "bob.md", note("Bob", "bob's first memory"))
        err, text = await srv.call(bob, "list_memory_titles")  # loads bob
        assert not err, text
        watcher, states = srv.app.state.watcher, tokens_of(srv).states
        bob_edit = vault_root / "bob" / "projects" / "edit.md"
        bob_edit.parent.mkdir()
        (folder / "pull").mkdir()  # a new folder makes a rescan: made before, so the pull is files
        put(folder / "pull" / "first.md", note("First", "the pull's first file"))
        put(bob_edit.parent / "other.md", note("Other", "bob's other memory"))
        await wait_for(lambda: "pull/first.md" in hot_ids(srv), DEADLINE)  # the folders' events are in
        await wait_for(lambda: "projects/other.md" in states["bob"].hot.memories, DEADLINE)
        await wait_for(lambda: watcher.idle, DEADLINE)
        apply = watcher.apply
        hold = threading.Event()
        applied = {"alice": 0}
        seen: dict[str, int] = {}

        def watched(token: str, paths: set[Path], rescan: bool) -> int:
            if token == TOKEN:
                seen.setdefault("held", len(paths))
                hold.wait(DEADLINE)  # until the whole pull is waiting to be applied
                done = apply(token, paths, rescan)
                before, applied["alice"] = applied["alice"], applied["alice"] + len(paths)
                if before <= 1 < applied["alice"]:  # the pull is being applied: bob edits a memory
                    put(bob_edit, note("Edit", "bob's hand edit: quokkaharp"))
                    deadline = time.monotonic() + DEADLINE
                    while "bob" not in watcher.pending and time.monotonic() < deadline:
                        time.sleep(0.005)  # until the watcher has the event (a worker thread)
                return done
            done = apply(token, paths, rescan)
            if bob_edit in paths:
                with states[TOKEN].mem_lock:
                    seen["alice memories"] = len(states[TOKEN].hot.memories)
            return done

        monkeypatch.setattr(watcher, "apply", watched)
        put(folder / "pull" / "second.md", note("Second", "the pull's second file"))
        await wait_for(lambda: "held" in seen, DEADLINE)
        await anyio.to_thread.run_sync(
            lambda: [
                put(folder / "pull" / f"file-{i:04d}.md", note(f"Pulled {i}", "pulled: numbatlyre"))
                for i in range(total - 1)
            ]
        )
        await wait_for(lambda: len(watcher.pending.get(TOKEN, ())) + seen["held"] == total, DEADLINE)
        hold.set()  # the whole pull is one batch now
        await wait_for(lambda: len(hot_ids(srv)) == total + 2, timeout=60)
        await wait_for(lambda: "alice memories" in seen, DEADLINE)
        # Bob's edit was in bob's index before alice's pull was: at most a few chunks of it were.
        assert seen["alice memories"] < total + 2, seen
        err, text = await srv.call(bob, "read_memory", query="quokkaharp")
        assert not err and "projects/edit.md" in text, text


@pytest.mark.slow
async def test_another_vaults_edit_is_applied_while_a_pulled_folder_is(
    server_factory, vault_root, tmp_path, monkeypatch
):
    """A new folder of 1,500 files (a checkout) makes a rescan: it too is applied in chunks, and
    another vault's edit made meanwhile waits for a chunk or two, not for all of it."""
    total = 1500
    async with live(server_factory) as (srv, _s, folder), srv.session("bob") as bob:
        put(vault_root / "bob" / "projects" / "other.md", note("Other", "bob's memory"))
        err, text = await srv.call(bob, "list_memory_titles")  # loads bob
        assert not err, text
        watcher, states = srv.app.state.watcher, tokens_of(srv).states
        await wait_for(lambda: "projects/other.md" in states["bob"].hot.memories, DEADLINE)
        await wait_for(lambda: watcher.idle, DEADLINE)
        staged = tmp_path / "staged"
        for i in range(total):
            put(staged / f"file-{i:04d}.md", note(f"Pulled {i}", "pulled: tapirgong"))
        apply = watcher.apply
        applied = {"alice": 0}
        seen: dict[str, int] = {}
        bob_edit = vault_root / "bob" / "projects" / "edit.md"

        def watched(token: str, paths: set[Path], rescan: bool) -> int:
            done = apply(token, paths, rescan)
            if token == TOKEN:
                before, applied["alice"] = applied["alice"], applied["alice"] + len(paths)
                if before == 0 < applied["alice"]:  # the folder is being applied: bob edits a memory
                    put(bob_edit, note("Edit", "bob's hand edit: quokkaoboe"))
                    deadline = time.monotonic() + DEADLINE
                    while "bob" not in watcher.pending and time.monotonic() < deadline:
                        time.sleep(0.005)  # until the watcher has the event (a worker thread)
            elif bob_edit in paths:
                with states[TOKEN].mem_lock:
                    seen["alice memories"] = len(states[TOKEN].hot.memories)
            return done

        monkeypatch.setattr(watcher, "apply", watched)
        os.rename(staged, folder / "pulled")  # one event: the folder came
        await wait_for(lambda: len(hot_ids(srv)) == total + 1, timeout=60)
        await wait_for(lambda: "alice memories" in seen, DEADLINE)
        assert seen["alice memories"] < total + 1, seen
        err, text = await srv.call(bob, "read_memory", query="quokkaoboe")
        assert not err and "projects/edit.md" in text, text


@pytest.mark.slow
async def test_burst_of_edits_to_existing_files(server_factory):
    """A checkout that rewrites 300 existing files (new inode each, like git does) ends consistent."""
    async with live(server_factory) as (srv, _, folder):
        names = [f"doc-{i:03d}.md" for i in range(300)]
        for name in names:
            put(folder / name, note(name, "version one: puffinmandolin"))
        await wait_for(lambda: len(hot_hits(srv, "puffinmandolin")) == 300, DEADLINE)
        watcher = srv.app.state.watcher
        batches = watcher.batches
        for name in names:
            put_atomic(folder / name, note(name, "version two: walrusocarina"))
        await wait_for(
            lambda: len(hot_hits(srv, "walrusocarina")) == 300 and not hot_hits(srv, "puffinmandolin"),
            timeout=2.0,
        )
        await wait_for(lambda: watcher.idle, DEADLINE)
        assert watcher.batches - batches < 50


# ---------------------------------------------------------------------------- own writes, ignored files


class Clock:
    def __init__(self) -> None:
        self.now = datetime.now(UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.mark.slow
async def test_own_writes_are_not_reparsed(server_factory):
    clock = Clock()
    async with live(server_factory, clock=clock) as (srv, s, folder):
        store = srv.app.state.service.store
        watcher = srv.app.state.watcher
        # A legacy file by hand, indexed (one parse) before counting starts.
        put(folder / "legacy.md", "# Legacy\n\nno frontmatter yet: koudouorgan\n")
        await wait_for(lambda: hot_hits(srv, "koudouorgan") == {"legacy.md"}, DEADLINE)
        await wait_for(lambda: watcher.idle, DEADLINE)
        parses = tokens_of(srv).parses

        err, text = await srv.call(
            s, "write_memory", title="Own write", content="written by the server: yakbassoon"
        )
        assert not err, text
        err, text = await srv.call(
            s, "update_memory", filename="own-write.md", content="updated by the server: yakbassoon okapiharp"
        )
        assert not err, text
        err, text = await srv.call(s, "write_memory", title="Short lived", content="deleted soon")
        assert not err, text
        err, text = await srv.call(s, "delete_memory", filename="short-lived.md")
        assert not err, text
        # The server writes for `memvault migrate` (frontmatter for a hand-made file) and for reads
        # (the access time on a new day).
        before = (folder / "legacy.md").read_bytes()
        assert await store.migrate("alice") == ["legacy.md"]
        err, text = await srv.call(s, "read_memory", query="koudouorgan")
        assert not err and "legacy.md" in text, text
        assert (folder / "legacy.md").read_bytes() != before
        clock.now += timedelta(days=1)
        before = (folder / "own-write.md").read_bytes()
        err, text = await srv.call(s, "read_memory", query="okapiharp")
        assert not err and "own-write.md" in text, text
        await srv.app.state.service.idle()  # the access write-back runs after the reply
        assert (folder / "own-write.md").read_bytes() != before
        await srv.app.state.service.idle()
        assert tokens_of(srv).parses == parses

        # The events of those writes arrive before the sentinel's; once the sentinel is indexed and
        # the watcher is idle, all of them have been handled.
        put_atomic(folder / "sentinel.md", note("Sentinel", "hand written: dingoukulele"))
        await wait_for(lambda: hot_hits(srv, "dingoukulele") == {"sentinel.md"}, DEADLINE)
        await wait_for(lambda: watcher.idle, DEADLINE)
        assert tokens_of(srv).parses == parses + 1, (
            "the server's own writes were parsed again when their events arrived"
        )
        assert hot_hits(srv, "okapiharp") == {"own-write.md"}
        assert "short-lived.md" not in hot_ids(srv)


@pytest.mark.slow
async def test_dot_folders_and_other_files_are_never_indexed(server_factory):
    async with live(server_factory) as (srv, s, folder):
        put(folder / ".git" / "COMMIT_EDITMSG", "commit message with hyenaflute\n")
        put(folder / ".git" / "notes.md", note("Git internal", "hyenaflute in a git folder"))
        put(folder / ".obsidian" / "workspace.md", note("Obsidian", "hyenaflute in obsidian settings"))
        put(folder / "projects" / ".hidden" / "deep.md", note("Hidden", "hyenaflute in a hidden subfolder"))
        put(folder / ".hidden-note.md", note("Hidden note", "hyenaflute in a dot-file"))
        put(folder / "todo.txt", "hyenaflute in a text file\n")
        put(folder / "draft.md.bak", note("Backup", "hyenaflute in a backup"))
        put(folder / "image.png", "hyenaflute png\n")
        # A new folder makes the watcher rescan the token; the sentinel inside says it is done.
        put_atomic(folder / "fresh" / "sentinel.md", note("Sentinel", "all seen: jackalzither"))
        await wait_for(lambda: hot_hits(srv, "jackalzither") == {"fresh/sentinel.md"}, DEADLINE)
        await wait_for(lambda: srv.app.state.watcher.idle, DEADLINE)

        assert not hot_hits(srv, "hyenaflute")
        assert not archive_hits(srv, "hyenaflute")
        assert hot_ids(srv) == {"seed.md", "fresh/sentinel.md"}
        err, text = await srv.call(s, "read_memory", query="hyenaflute")
        assert not err and "No hot memory matches" in text, text
        assert await listed(srv, s) == {"seed.md", "fresh/sentinel.md"}


# ---------------------------------------------------------------------------- polling fallback


@pytest.mark.slow
async def test_forced_polling_reports_and_still_sees_changes(server_factory):
    async with live(server_factory, force_polling=True, poll_interval_seconds=0.2) as (srv, s, folder):
        body = await healthz(srv)
        assert body["watcher"] == "polling", body
        put(folder / "polled.md", note("Polled", "seen by polling: bisonpiccolo"))
        await wait_for(lambda: hot_hits(srv, "bisonpiccolo") == {"polled.md"}, DEADLINE)
        err, text = await srv.call(s, "read_memory", query="bisonpiccolo")
        assert not err and "polled.md" in text, text
        (folder / "polled.md").unlink()
        await wait_for(lambda: "polled.md" not in hot_ids(srv), DEADLINE)


@pytest.mark.slow
async def test_polling_forgets_a_file_deleted_between_two_polls(server_factory):
    """A file the index learnt of between two polls (here: read by name) and deleted before the next.

    The poller's two snapshots both lack it, so it reports no change for that file; the deletion
    still changes the folder, and that must be enough to drop it (no ghost in list_memory_titles).
    """
    async with live(server_factory, force_polling=True, poll_interval_seconds=0.3) as (srv, s, folder):
        watcher = srv.app.state.watcher
        put(folder / "first.md", note("First", "the poller is running: gnuvibraphone"))
        await wait_for(lambda: hot_hits(srv, "gnuvibraphone") == {"first.md"}, DEADLINE)
        await wait_for(lambda: watcher.idle, DEADLINE)

        ghost = put(folder / "ghost.md", note("Ghost", "here for a moment: wraithbanjo"))
        err, text = await srv.call(s, "read_memory", filenames=["ghost.md"])
        assert not err and "wraithbanjo" in text, text
        assert "ghost.md" in hot_ids(srv)
        ghost.unlink()

        # A later change proves a poll ran after the delete and its batch was applied.
        put(folder / "later.md", note("Later", "after the ghost: tortoisedulcimer"))
        await wait_for(lambda: hot_hits(srv, "tortoisedulcimer") == {"later.md"}, DEADLINE)
        await wait_for(lambda: watcher.idle, DEADLINE)
        assert "ghost.md" not in hot_ids(srv)
        assert "ghost.md" not in await listed(srv, s)


@pytest.mark.slow
@pytest.mark.parametrize("what_dies", ["emitter", "observer"])
async def test_native_watcher_dying_while_running_falls_back_to_polling(server_factory, what_dies, caplog):
    """The inotify reader thread (or the whole observer) stops: say so, poll, and lose nothing."""
    with caplog.at_level(logging.WARNING, logger="memvault"):
        async with live(server_factory, poll_interval_seconds=0.2) as (srv, _, folder):
            watcher = srv.app.state.watcher
            assert (await healthz(srv))["watcher"] == "inotify"
            observer = watcher.observer
            if what_dies == "emitter":
                for emitter in list(observer.emitters):
                    emitter.stop()
                    emitter.join(5)
            else:
                observer.stop()
                observer.join(5)
            # Changed while nothing is watching: must not be lost.
            put(folder / "meanwhile.md", note("Meanwhile", "written while blind: manateeoboe"))
            (folder / "seed.md").unlink()

            async def polling() -> bool:
                return (await healthz(srv))["watcher"] == "polling"

            await wait_for(polling, DEADLINE, interval=0.1)
            assert any("polling" in r.getMessage() for r in caplog.records), [
                r.getMessage() for r in caplog.records
            ]
            await wait_for(lambda: hot_hits(srv, "manateeoboe") == {"meanwhile.md"}, DEADLINE)
            await wait_for(lambda: "seed.md" not in hot_ids(srv), DEADLINE)
            put(folder / "after.md", note("After", "written after the fallback: beluganocarina"))
            await wait_for(lambda: hot_hits(srv, "beluganocarina") == {"after.md"}, DEADLINE)
            assert (await healthz(srv))["status"] == "ok"


class _NoInotify:
    """Stands in for watchdog's native observer on a machine out of inotify watches."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def schedule(self, *args: Any, **kwargs: Any) -> None:
        pass

    def start(self) -> None:
        raise OSError(28, "inotify watch limit reached")

    def is_alive(self) -> bool:
        return False

    def stop(self) -> None:
        pass

    def join(self, timeout: float | None = None) -> None:
        pass


@pytest.mark.slow
async def test_native_watcher_failing_to_start_falls_back_to_polling(server_factory, monkeypatch, caplog):
    monkeypatch.setattr(memvault.disk.watcher, "Observer", _NoInotify)
    with caplog.at_level(logging.WARNING, logger="memvault"):
        async with live(server_factory, poll_interval_seconds=0.2) as (srv, s, folder):
            body = await healthz(srv)
            assert body["watcher"] == "polling", body
            assert body["status"] == "ok", body
            assert any("polling" in r.getMessage() for r in caplog.records), [
                r.getMessage() for r in caplog.records
            ]

            put(folder / "later.md", note("Later", "arrives anyway: camelbanjo"))
            await wait_for(lambda: hot_hits(srv, "camelbanjo") == {"later.md"}, DEADLINE)
            os.rename(folder / "later.md", folder / "renamed.md")
            await wait_for(lambda: hot_hits(srv, "camelbanjo") == {"renamed.md"}, DEADLINE)
            err, text = await srv.call(s, "read_memory", query="camelbanjo")
            assert not err and "renamed.md" in text, text


@pytest.mark.slow
async def test_links_made_while_serving_never_expose_files_outside_the_token(
    server_factory, vault_root, tmp_path
):
    outside = tmp_path / "outside.md"
    outside.write_text("# Outside\n\ncapybara secret from outside\n", encoding="utf-8")
    async with server_factory() as srv:
        async with srv.session("bob") as bob:
            await srv.call(bob, "write_memory", title="Secret", content="okapi secret of bob")
        async with srv.session("alice") as alice:
            await srv.call(alice, "write_memory", title="Mine", content="plain note")
            folder = vault_root / "alice"
            os.symlink(outside, folder / "link.md")
            os.symlink(vault_root / "bob" / "secret.md", folder / "peek.md")
            (folder / "sentinel.md").write_text("# Sentinel\n\nsentinelword\n", encoding="utf-8")
            states = srv.app.state.service.registry.states
            await wait_for(lambda: "sentinel.md" in states["alice"].hot.memories)
            for word in ("capybara", "okapi"):
                err, text = await srv.call(alice, "read_memory", query=word)
                assert not err and "secret" not in text
            err, text = await srv.call(alice, "list_memory_titles")
            assert "link.md" not in text and "peek.md" not in text


# ---------------------------------------------------------------------------- lost events


def _kernel_overflow() -> None:
    """What the kernel sends when its inotify queue overflows, through watchdog's own handling."""
    from watchdog.observers.inotify_c import InotifyConstants, InotifyEvent, InotifyFD, WatchDescriptor

    event = InotifyEvent(WatchDescriptor(-1), InotifyConstants.IN_Q_OVERFLOW, 0, b"")
    InotifyFD.get_instance().handle_event(event)


@pytest.mark.slow
async def test_a_queue_overflow_rescans_and_shows_in_healthz(server_factory, monkeypatch):
    """Issue 9, 2: after an overflow files stayed missing (and deleted ones listed) until a restart."""
    async with live(server_factory) as (srv, s, folder):
        watcher = srv.app.state.watcher
        assert watcher.mode == "inotify"
        put(folder / "doomed.md", note("Doomed", "deleted while events are lost: vicunaoboe"))
        await wait_for(lambda: hot_hits(srv, "vicunaoboe") == {"doomed.md"}, DEADLINE)
        await wait_for(lambda: watcher.idle, DEADLINE)

        # Events of these changes are lost, as in an overflowing burst.
        monkeypatch.setattr(watcher, "push", lambda event: None)
        for i in range(30):
            put(folder / f"burst-{i}.md", note(f"Burst {i}", f"lost event number {i}: marmotlute"))
        (folder / "doomed.md").unlink()
        monkeypatch.undo()
        assert hot_hits(srv, "vicunaoboe") == {"doomed.md"} and not hot_hits(srv, "marmotlute")

        # The rescan is visible in /healthz while it runs: hold it until we have looked.
        release = threading.Event()
        apply = watcher.apply

        stale = watcher.stale

        def slow_apply(token: str, paths: set[Path], rescan: bool) -> int:
            if rescan:
                release.wait(DEADLINE)
            return apply(token, paths, rescan)

        def slow_stale(token: str) -> set[Path] | None:  # a rescan's look at the folder
            release.wait(DEADLINE)
            return stale(token)

        monkeypatch.setattr(watcher, "apply", slow_apply)
        monkeypatch.setattr(watcher, "stale", slow_stale)
        _kernel_overflow()
        await wait_for(lambda: watcher.rescanning > 0, DEADLINE)
        body = await healthz(srv)
        assert body["status"] == "ok" and body["rescanning"] >= 1 and body["event_overflows"] >= 1, body
        release.set()
        await wait_for(lambda: len(hot_hits(srv, "marmotlute")) == 30, DEADLINE)
        await wait_for(lambda: not hot_hits(srv, "vicunaoboe"), DEADLINE)
        await wait_for(lambda: watcher.idle, DEADLINE)
        assert (await healthz(srv))["rescanning"] == 0
        assert len([n for n in await listed(srv, s) if n.startswith("burst-")]) == 30


@pytest.mark.slow
async def test_a_rename_over_keeping_size_and_mtime_reaches_search(server_factory):
    """Issue 9, 3: `rsync -a` replaces a file with one of the same size and mtime."""
    async with live(server_factory) as (srv, _s, folder):
        path = put(folder / "synced.md", note("Synced", "before the sync: lemurcello"))
        await wait_for(lambda: hot_hits(srv, "lemurcello") == {"synced.md"}, DEADLINE)
        await wait_for(lambda: srv.app.state.watcher.idle, DEADLINE)
        st = path.stat()
        tmp = folder / ".synced.md.rsync"
        tmp.write_text(note("Synced", "before the sync: hyenaflute"), encoding="utf-8")
        os.utime(tmp, ns=(st.st_atime_ns, st.st_mtime_ns))
        os.replace(tmp, path)
        assert (path.stat().st_size, path.stat().st_mtime_ns) == (st.st_size, st.st_mtime_ns)
        await wait_for(
            lambda: hot_hits(srv, "hyenaflute") == {"synced.md"} and not hot_hits(srv, "lemurcello"), DEADLINE
        )


# ---------------------------------------------------------------------------- what is watched


def inotify_watched_inodes() -> set[int]:
    """The inodes of every inotify watch this process holds, as the kernel lists them."""
    inodes: set[int] = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            info = Path(f"/proc/self/fdinfo/{fd}").read_text(encoding="ascii")
        except OSError:
            continue  # closed meanwhile
        for line in info.splitlines():
            if line.startswith("inotify wd:"):
                fields = dict(item.split(":", 1) for item in line.split()[1:] if ":" in item)
                inodes.add(int(fields["ino"], 16))
    return inodes


def git_like(folder: Path, count: int) -> None:
    """Folders as git makes them: objects/00..ff, refs, logs (hundreds per clone)."""
    for i in range(count):
        os.makedirs(folder / "objects" / f"{i:02x}", exist_ok=True)
    os.makedirs(folder / "refs" / "heads" / "feature", exist_ok=True)
    os.makedirs(folder / "logs" / "refs" / "heads", exist_ok=True)


def dirs_under_dot_folders(root: Path) -> dict[int, str]:
    """Inode -> path (relative to root) of every dot-folder in the vault and every folder in one."""
    found: dict[int, str] = {}
    for top, dirnames, _ in os.walk(root):
        rel = Path(top).relative_to(root)
        hidden = any(part.startswith(".") for part in rel.parts)
        for name in dirnames:
            if hidden or name.startswith("."):
                path = Path(top) / name
                found[path.stat().st_ino] = str(path.relative_to(root))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="reads inotify watches from /proc")
async def test_no_inotify_watch_is_held_under_git_or_other_dot_folders(server_factory, vault_root):
    """Issue 13: every folder of a clone's .git/ took an inotify watch (hundreds per clone, against
    the kernel's limit), though nothing under a dot-folder is ever a memory."""
    git_like(vault_root / ".git", 40)  # a vault kept in git: there before the server starts
    git_like(vault_root / TOKEN / ".git", 40)
    async with live(server_factory) as (srv, _s, folder):
        assert srv.app.state.watcher.mode == "inotify"
        git_like(folder / ".git", 200)  # `git init`, fetches: made while the server runs
        git_like(folder / "projects" / "nested" / ".git", 20)  # a new folder holding a repository
        os.makedirs(folder / ".obsidian" / "plugins" / "one")
        # A new folder after the others: once its memory is indexed, every event before it was seen.
        put(folder / "fresh" / "deep" / "sentinel.md", note("Sentinel", "after the clones: ibexmarimba"))
        await wait_for(lambda: hot_hits(srv, "ibexmarimba") == {"fresh/deep/sentinel.md"}, DEADLINE)
        await wait_for(lambda: srv.app.state.watcher.idle, DEADLINE)

        watched = inotify_watched_inodes()
        hidden = dirs_under_dot_folders(vault_root)
        assert len(hidden) > 250
        assert not sorted(hidden[ino] for ino in watched & set(hidden))[:10]
        # Memory folders are still watched, new ones included.
        for kept in (vault_root, folder, folder / "projects" / "nested", folder / "fresh" / "deep"):
            assert kept.stat().st_ino in watched, kept
        put(folder / "projects" / "nested" / "inside.md", note("Inside", "next to a repo: okapicornet"))
        await wait_for(lambda: hot_hits(srv, "okapicornet") == {"projects/nested/inside.md"}, DEADLINE)

        # A watched folder hidden by a rename loses its watches; the memory in it leaves the index.
        os.makedirs(folder / "projects" / "nested" / "sub")
        os.rename(folder / "projects" / "nested", folder / "projects" / ".nested")
        await wait_for(lambda: not hot_hits(srv, "okapicornet"), DEADLINE)
        hidden = dirs_under_dot_folders(vault_root)
        assert not inotify_watched_inodes() & set(hidden)

        # A queue overflow makes watchdog rebuild every watch of the vault: still none under .git/.
        from watchdog.observers.inotify_c import InotifyConstants, InotifyEvent, WatchDescriptor

        overflow = InotifyEvent(WatchDescriptor(-1), InotifyConstants.IN_Q_OVERFLOW, 0, b"")
        srv.app.state.watcher.observer._inotify_fd.handle_event(overflow)
        watched = inotify_watched_inodes()
        assert not watched & set(hidden)
        assert folder.stat().st_ino in watched and (folder / "fresh" / "deep").stat().st_ino in watched


@pytest.mark.slow
async def test_polling_never_lists_what_is_in_dot_folders(server_factory, vault_root, monkeypatch):
    """The fallback poller compared every file of .git/ at each poll (a clone's objects: thousands)."""
    seen: list[str] = []
    entries = memvault.disk.watcher._visible_entries

    def recording(path: str) -> Any:
        seen.append(path)  # list.append is atomic: the poller's thread calls this
        return entries(path)

    monkeypatch.setattr(memvault.disk.watcher, "_visible_entries", recording)
    git_like(vault_root / TOKEN / ".git", 50)
    async with live(server_factory, force_polling=True, poll_interval_seconds=0.2) as (srv, _s, folder):
        git_like(folder / "projects" / ".git", 10)
        put(folder / "projects" / "seen.md", note("Seen", "beside a repository: yakglockenspiel"))
        await wait_for(lambda: hot_hits(srv, "yakglockenspiel") == {"projects/seen.md"}, DEADLINE)
        put(folder / "later.md", note("Later", "a later poll: gazelleocarina"))
        await wait_for(lambda: hot_hits(srv, "gazelleocarina") == {"later.md"}, DEADLINE)
    folders = {Path(p) for p in seen}
    assert {vault_root, folder, folder / "projects"} <= folders
    assert not [p for p in folders if any(part.startswith(".") for part in p.relative_to(vault_root).parts)]


def test_dot_file_events_never_wake_the_loop() -> None:
    from watchdog.events import (
        DirCreatedEvent,
        FileCreatedEvent,
        FileDeletedEvent,
        FileModifiedEvent,
        FileMovedEvent,
    )

    class Loop:
        def __init__(self) -> None:
            self.calls: list[Any] = []

        def is_closed(self) -> bool:
            return False

        def call_soon_threadsafe(self, fn: Any, *args: Any) -> None:
            self.calls.append(args)

    class Watcher:
        loop = Loop()

        def push(self, event: Any) -> None: ...

    handler = memvault.disk.watcher._Handler(Watcher())  # type: ignore[arg-type]
    token = "/vault/alice"
    dropped = [
        FileCreatedEvent(f"{token}/.memvault-abcd1234.tmp"),  # our own temp file, start to end
        FileModifiedEvent(f"{token}/.memvault-abcd1234.tmp"),
        FileDeletedEvent(f"{token}/.memvault-abcd1234.tmp"),
        FileModifiedEvent(f"{token}/notes/.draft.md.swp"),
        FileMovedEvent(f"{token}/.a.tmp", f"{token}/.b.tmp"),
        FileCreatedEvent(os.fsencode(f"{token}/.memvault-abcd1234.tmp")),
    ]
    kept = [
        FileMovedEvent(f"{token}/.memvault-abcd1234.tmp", f"{token}/tide.md"),  # a rename over a memory
        FileMovedEvent(f"{token}/tide.md", f"{token}/.tide.md"),  # a memory hidden by hand: it goes
        FileCreatedEvent(f"{token}/tide.md"),
        FileDeletedEvent(f"{token}/notes/tide.md"),
        DirCreatedEvent(f"{token}/.obsidian"),  # folders are push's to judge
        FileCreatedEvent(os.fsencode(f"{token}/tide.md")),
    ]
    for event in dropped + kept:
        handler.on_any_event(event)
    assert Watcher.loop.calls == [(event,) for event in kept]


def watched_folders(folder: Path) -> set[str]:
    """The folders of a token (itself and those below it) that hold an inotify watch of this process."""
    watched = inotify_watched_inodes()
    found = {"."} if folder.stat().st_ino in watched else set()
    for top, dirnames, _ in os.walk(folder):
        for name in dirnames:
            path = Path(top) / name
            if path.stat().st_ino in watched:
                found.add(str(path.relative_to(folder)))
    return found


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="reads inotify watches from /proc")
@pytest.mark.filterwarnings("ignore::mcp.shared.exceptions.MCPDeprecationWarning")
async def test_only_loaded_or_listened_tokens_hold_inotify_watches(server_factory, vault_root):
    """Issue 35: every token folder ever served held inotify watches (and watchdog's objects for
    them), loaded or not, so memory grew with the tokens served, not with those loaded."""
    from mcp.client.client import Client
    from mcp.types import ResourceUpdatedNotification

    every = {".", "archive", "sessions", "projects"}
    for token in ("alice", "bob", "carol"):
        put(vault_root / token / "seed.md", note("Seed", f"seed of {token}"))
        put(vault_root / token / "archive" / "old.md", note("Old", "archived"))
        put(vault_root / token / "projects" / "plan.md", note("Plan", "a plan"))
        (vault_root / token / "sessions").mkdir()
    alice, bob, carol = (vault_root / t for t in ("alice", "bob", "carol"))

    async with server_factory(max_loaded_tokens=1, capacity=100_000) as srv:
        assert srv.app.state.watcher.mode == "inotify"
        assert vault_root.stat().st_ino in inotify_watched_inodes()  # token folders coming and going
        assert not watched_folders(alice) | watched_folders(bob) | watched_folders(carol)

        async with srv.session("alice") as s:
            err, text = await srv.call(s, "list_memory_titles")
            assert not err, text
        assert watched_folders(alice) == every and not watched_folders(bob)
        put(alice / "projects" / "hand.md", note("Hand", "edited by hand: wombatzither"))
        await wait_for(lambda: hot_hits(srv, "wombatzither") == {"projects/hand.md"}, DEADLINE)

        async with srv.session("bob") as s:  # one token loaded at most: alice goes
            err, text = await srv.call(s, "list_memory_titles")
            assert not err, text
        assert loaded(srv, "bob") and not loaded(srv, "alice")
        assert not watched_folders(alice) and watched_folders(bob) == every
        put(bob / "new" / "deep" / "made.md", note("Made", "a new folder of a loaded token: lemurtuba"))
        await wait_for(lambda: hits_of(srv, "bob", "lemurtuba") == {"new/deep/made.md"}, DEADLINE)
        assert {"new", "new/deep"} <= watched_folders(bob)

        # A listened vault keeps its watches, loaded or not, until its last listener goes.
        uri = "memvault://memories/seed.md"
        heard: list[str] = []

        async def on_message(message: Any) -> None:
            if isinstance(message, ResourceUpdatedNotification):
                heard.append(message.params.uri)

        async with Client(srv.mcp_url("carol"), mode="legacy", message_handler=on_message) as client:
            await client.subscribe_resource(uri)
            assert watched_folders(carol) == every
            # The handshake's warm load of carol, done: one still running after bob's call below
            # would leave carol loaded (and watched) when its listener goes.
            await wait_for(lambda: "carol" not in tokens_of(srv).warming, DEADLINE)
            async with srv.session("bob") as s:  # carol, if its subscription loaded it, goes
                err, text = await srv.call(s, "list_memory_titles")
                assert not err, text
            await wait_for(lambda: not loaded(srv, "carol"), DEADLINE)
            assert watched_folders(carol) == every
            put(carol / "seed.md", note("Seed", "changed by hand while unloaded"))
            await wait_for(lambda: uri in heard, DEADLINE)
        await wait_for(lambda: not watched_folders(carol), DEADLINE)
        assert watched_folders(bob) >= every and not watched_folders(alice)

        # A queue overflow makes watchdog rebuild its watches: those of wanted tokens only.
        from watchdog.observers.inotify_c import InotifyConstants, InotifyEvent, WatchDescriptor

        overflow = InotifyEvent(WatchDescriptor(-1), InotifyConstants.IN_Q_OVERFLOW, 0, b"")
        srv.app.state.watcher.observer._inotify_fd.handle_event(overflow)
        assert watched_folders(bob) >= every and not watched_folders(alice) | watched_folders(carol)


def loaded(srv: Running, token: str) -> bool:
    state = tokens_of(srv).states.get(token)
    return state is not None and state.loaded


def hits_of(srv: Running, token: str, query: str) -> set[str]:
    state = tokens_of(srv).states[token]
    with state.mem_lock:
        hits, _ = state.hot.index.search(query, limit=None)
    return {h.id for h in hits}


@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="reads inotify watches from /proc")
async def test_a_load_lists_its_folder_once_and_watches_every_folder_in_it(
    server_factory, vault_root, monkeypatch
):
    """Issue 49: the watcher walked a loading token's folder to find the folders to watch in it, and
    then the load listed it again (100,000 files: twice, before the first answer). The load's own
    listing now finds them, and watches each before reading it: an edit made in any of them
    after the listing passed it still reaches the index."""
    from memvault.disk.vault import Vault

    folder = vault_root / TOKEN
    put(folder / "seed.md", note("Seed", "the top folder"))
    for sub in ("archive", "archive/older", "projects", "projects/deep", "archive/sessions"):
        put(folder / sub / "seed.md", note("Seed", f"in {sub}"))
    put(folder / "sessions" / "s1.md", "a session summary, not a memory\n")
    (folder / ".memvault" / "inside").mkdir(parents=True)

    listings: list[str] = []
    real_scandir = os.scandir

    def counted_scandir(path: Any = ".") -> Any:
        if isinstance(path, str | bytes | os.PathLike) and os.fsdecode(path) == str(folder):
            listings.append(os.fsdecode(path))
        return real_scandir(path)

    real_files = Vault._files
    listed_by_load: list[int] = []

    def then_edit(self: Vault, **kwargs: Any) -> Any:
        yield from real_files(self, **kwargs)
        if self.dir == folder and not listed_by_load:  # the load's listing is done
            listed_by_load.append(len(listings))
            for i, sub in enumerate(("archive/older", "projects/deep", "archive", "projects", "")):
                put(folder / sub / f"late{i}.md", note("Late", f"made after the listing: quokkaoboe{i}"))

    monkeypatch.setattr(os, "scandir", counted_scandir)
    monkeypatch.setattr(Vault, "_files", then_edit)
    async with live(server_factory, seed=False) as (srv, _s, _folder):
        assert listed_by_load == [1]  # by the load alone
        every = {".", "archive", "archive/older", "archive/sessions", "projects", "projects/deep", "sessions"}
        assert watched_folders(folder) == every
        await wait_for(lambda: hot_hits(srv, "quokkaoboe1") == {"projects/deep/late1.md"}, DEADLINE)
        await wait_for(
            lambda: hot_ids(srv) >= {"projects/deep/late1.md", "projects/late3.md", "late4.md"}, DEADLINE
        )
        await wait_for(lambda: archive_ids(srv) >= {"older/late0.md", "late2.md"}, DEADLINE)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/fdinfo").is_dir(), reason="reads inotify watches from /proc")
@pytest.mark.parametrize(
    ("folders", "late"),
    [
        (("archive", "projects", "projects/deep", "sessions"), "projects/deep/late.md"),  # found by a walk
        (("archive", "archive/old", "sessions"), "late.md"),  # memvault's own: the link count tells
    ],
)
async def test_a_restart_whose_folder_a_helper_lists_watches_every_folder_first(
    server_factory, make_settings, vault_root, monkeypatch, folders, late
):
    """A restart's folder scan runs in a helper process, which this one cannot follow: every folder
    of the token is watched before the helper starts, and an edit made after its scan is seen."""
    from memvault.load import folderscan, processes, snapshot
    from memvault.ops.service import Service

    folder = vault_root / TOKEN
    for sub in ("", *folders):
        put(folder / sub / "seed.md", note("Seed", f"in {sub or 'the top'}"))
    monkeypatch.setattr(snapshot, "MIN_MEMORIES", 1)
    service = Service(make_settings(watch=False))
    await service.store.state(TOKEN)
    await service.close()  # the snapshot written
    monkeypatch.setattr(processes, "HELPER_MIN_BYTES", 0)
    monkeypatch.setattr(processes, "usable_cpus", lambda: 2)
    real_result = folderscan.Scan.result
    scanned: list[str] = []

    def then_edit(self: folderscan.Scan) -> Any:
        found = real_result(self)
        scanned.append(str(found is not None))
        put(folder / late, note("Late", "after the helper's scan: tapirsitar"))
        return found

    monkeypatch.setattr(folderscan.Scan, "result", then_edit)
    async with live(server_factory, seed=False) as (srv, _s, _folder):
        assert scanned == ["True"]  # the helper's scan was used
        assert watched_folders(folder) == {".", *folders}
        await wait_for(lambda: hot_hits(srv, "tapirsitar") == {late}, DEADLINE)
