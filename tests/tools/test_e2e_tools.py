"""End-to-end: every memory tool's happy path and errors, through the real server and official client."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import anyio.to_thread
import pytest
import yaml

from memvault.cli.main import main

pytestmark = [
    pytest.mark.anyio,
    # watchdog warns from its inotify thread when a new folder (token/.memvault) is added to the
    # recursive watch twice; pytest's filterwarnings=error would turn that into a dead watcher thread.
    pytest.mark.filterwarnings("ignore:Callback with id .* already exists for watch:RuntimeWarning"),
]

TRANSPORTS = ["http", "sse"]
LINE_START = re.compile(r"^[^|\n]+\.md\|", re.MULTILINE)
LINE = re.compile(
    r"^(?P<id>[^|]+)\|(?P<title>[^|]+)\|(?P<prio>P[012])\|(?P<at>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)$"
)


def iso(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.") + f"{at.microsecond // 1000:03d}Z"


def hand_file(folder: Path, name: str, text: str | bytes) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def frontmatter_of(path: Path) -> dict:
    text = path.read_text(encoding="utf-8")
    assert text.startswith("---\n"), text[:80]
    block = text[4 : text.index("\n---\n", 4)]
    return yaml.safe_load(block)


def fence_count(text: str) -> int:
    text = text.lstrip("\ufeff").replace("\r\n", "\n")
    return sum(1 for line in text.split("\n") if line.strip() == "---")


def assert_clean_error(text: str, root: Path) -> None:
    """An error an agent can read: no traceback, no absolute path of the vault."""
    assert "Traceback" not in text
    assert str(root) not in text
    assert str(root.parent) not in text
    assert "internal error" not in text, text


def headers(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("## ")]


# ---------------------------------------------------------------------------- list_memory_titles


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_list_memory_titles_format_and_empty_vault(server_factory, transport):
    async with server_factory() as srv, srv.session("alice", transport) as s:
        err, text = await srv.call(s, "list_memory_titles")
        assert not err
        assert "No memories yet" in text

        assert not (
            await srv.call(
                s, "write_memory", title="Deploy notes", content="postgres on fridays", priority="P1"
            )
        )[0]
        assert not (await srv.call(s, "write_memory", title="Grocery list", content="oat milk"))[0]
        err, text = await srv.call(s, "list_memory_titles")
        assert not err
        lines = text.strip().splitlines()
        assert len(lines) == 2, text
        parsed = {m["id"]: m for m in (LINE.match(line) for line in lines) if m}
        assert set(parsed) == {"deploy-notes.md", "grocery-list.md"}, text
        assert parsed["deploy-notes.md"]["title"] == "Deploy notes"
        assert parsed["deploy-notes.md"]["prio"] == "P1"
        assert parsed["grocery-list.md"]["prio"] == "P2"
        # lastAccessedAt is a real recent UTC time.
        at = datetime.strptime(parsed["grocery-list.md"]["at"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
        assert abs(datetime.now(UTC) - at) < timedelta(minutes=5)

        # Another token on the same server still has an empty vault.
        async with srv.session("nobody", transport) as other:
            err, text = await srv.call(other, "list_memory_titles")
            assert not err and "No memories yet" in text


# ---------------------------------------------------------------------------- read_memory


async def _seed_three(srv, s):
    for title, content in [
        ("Kubernetes upgrade plan", "Drain the nodes before upgrading the cluster on Tuesday."),
        ("Grocery list", "Buy oat milk and bananas at the corner shop."),
        ("Postgres tuning", "Increase shared buffers and vacuum analyze nightly."),
    ]:
        err, text = await srv.call(s, "write_memory", title=title, content=content)
        assert not err, text


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_read_memory_query_modes(server_factory, transport):
    async with server_factory() as srv, srv.session("alice", transport) as s:
        await _seed_three(srv, s)

        cases = {
            "bananas": "Grocery list",  # body word
            "Kubernetes": "Kubernetes upgrade plan",  # title word
            "kubernetis": "Kubernetes upgrade plan",  # typo
            "vacum": "Postgres tuning",  # typo in a body word
            "oat corner": "Grocery list",  # two words, both in the body
            "drain tuesday": "Kubernetes upgrade plan",  # two words
        }
        for query, title in cases.items():
            err, text = await srv.call(s, "read_memory", query=query)
            assert not err, (query, text)
            found = headers(text)
            assert found and found[0] == f"## {title}", (query, text)
            assert len(found) == 1, (query, text)

        # All terms must match: a word from one memory and a word from another match none fully,
        # and the any-term fallback still returns both, saying so.
        err, text = await srv.call(s, "read_memory", query="bananas vacuum")
        assert not err
        assert {"## Grocery list", "## Postgres tuning"} <= set(headers(text)), text
        assert "none match all" in text

        err, text = await srv.call(s, "read_memory", query="xylophone")
        assert not err and headers(text) == [], text


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_read_memory_by_filenames_all_and_limit(server_factory, transport):
    async with server_factory() as srv, srv.session("alice", transport) as s:
        await _seed_three(srv, s)

        err, text = await srv.call(s, "read_memory", filenames=["grocery-list.md"])
        assert not err and headers(text) == ["## Grocery list"], text
        assert "oat milk and bananas" in text

        err, text = await srv.call(s, "read_memory", filenames=["grocery-list", "postgres-tuning.md"])
        assert not err and sorted(headers(text)) == ["## Grocery list", "## Postgres tuning"], text

        err, text = await srv.call(s, "read_memory")
        assert not err
        assert sorted(headers(text)) == [
            "## Grocery list",
            "## Kubernetes upgrade plan",
            "## Postgres tuning",
        ]

        err, text = await srv.call(s, "read_memory", limit=1)
        assert not err and len(headers(text)) == 1, text
        # Two more exist: the limit left them out, not the reply's size, and the note says so.
        assert "keep this reply short" not in text and "2 more not read: past the limit of 1" in text
        assert "larger limit" in text
        err, text = await srv.call(s, "read_memory", query="the", limit=1)
        assert not err and len(headers(text)) <= 1, text
        err, text = await srv.call(s, "read_memory", query="nodes oat shared", limit=2)
        assert not err and len(headers(text)) == 2, text

        err, text = await srv.call(s, "read_memory", limit=0)
        assert err and "limit" in text

        err, text = await srv.call(s, "read_memory", filenames=["no-such-memory.md"])
        assert err
        assert "no-such-memory.md" in text and "list_memory_titles" in text
        assert_clean_error(text, srv.settings.root)

        # One existing and one missing: the existing one is returned, the missing one named.
        err, text = await srv.call(s, "read_memory", filenames=["grocery-list.md", "ghost.md"])
        assert not err and headers(text) == ["## Grocery list"], text
        assert "ghost.md" in text


@pytest.mark.slow
async def test_read_memory_reply_is_bounded(server_factory):
    limit = 2000
    async with server_factory(max_reply_chars=limit, capacity=1000) as srv, srv.session("alice") as s:
        for i in range(40):
            err, text = await srv.call(
                s,
                "write_memory",
                title=f"Harbour log entry {i:02d}",
                content=f"harbour tide report {i} " + "x" * 250,
            )
            assert not err, text

        too_long: list[tuple[object, int]] = []
        for args in ({}, {"query": "harbour", "limit": 40}, {"query": "tide report", "limit": 40}):
            err, text = await srv.call(s, "read_memory", **args)
            assert not err
            if len(text) > limit:
                too_long.append((args, len(text)))
            shown = len(headers(text))
            assert 0 < shown < 40, (args, shown)
            note = re.search(r"(\d+) more left out", text)
            assert note, (args, text[-400:])
            assert int(note.group(1)) == 40 - shown, (args, text[-400:])

        # Many missing names asked for alongside one that exists.
        ghosts = [f"ghost-{i:03d}-" + "g" * 60 + ".md" for i in range(60)]
        err, text = await srv.call(s, "read_memory", filenames=["harbour-log-entry-00.md", *ghosts])
        assert not err and "## Harbour log entry 00" in text
        if len(text) > limit:
            too_long.append(("missing names", len(text)))

        # A single memory larger than the budget is cut, and says how to read on.
        err, _ = await srv.call(s, "write_memory", title="Huge", content="word " * 1000)
        assert not err
        err, text = await srv.call(s, "read_memory", filenames=["huge.md"])
        assert not err
        assert re.search(r'more characters: read_memory\(filenames=\["huge.md"\], offset=\d+\)', text)
        if len(text) > limit:
            too_long.append(("one huge memory", len(text)))

        # list_memory_titles: many short lines.
        for i in range(80):
            assert not (await srv.call(s, "write_memory", title=f"T{i}", content="c"))[0]
        err, text = await srv.call(s, "list_memory_titles")
        assert not err and "left out" in text
        note = re.search(r"(\d+) more left out", text)
        assert note and int(note.group(1)) == 121 - len(LINE_START.findall(text)), text[-300:]
        if len(text) > limit:
            too_long.append(("list_memory_titles", len(text)))

        assert too_long == [], f"replies over MEMVAULT_MAX_REPLY_CHARS={limit}: {too_long}"


# ---------------------------------------------------------------------------- write_memory


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_write_memory_names_and_never_overwrites(server_factory, transport):
    async with server_factory() as srv, srv.session("alice", transport) as s:
        folder = srv.settings.root / "alice"

        err, text = await srv.call(
            s, "write_memory", title="Deploy Notes: Postgres 16!", content="first body"
        )
        assert not err and "deploy-notes-postgres-16.md" in text, text
        first = folder / "deploy-notes-postgres-16.md"
        before = first.read_bytes()
        assert b"# Deploy Notes: Postgres 16!" in before and b"first body" in before

        err, text = await srv.call(s, "write_memory", title="工作安排", content="周一开会")
        assert not err and "工作安排.md" in text, text
        assert (folder / "工作安排.md").is_file()
        err, text = await srv.call(s, "read_memory", query="开会")
        assert not err and "## 工作安排" in text, text

        # Same title, other content: a new file with -2, the first one untouched.
        err, text = await srv.call(
            s, "write_memory", title="Deploy Notes: Postgres 16!", content="second body"
        )
        assert not err and "deploy-notes-postgres-16-2.md" in text, text
        assert first.read_bytes() == before
        assert b"second body" in (folder / "deploy-notes-postgres-16-2.md").read_bytes()

        # Same title and content again within the window: the existing file, no duplicate.
        err, text = await srv.call(
            s, "write_memory", title="Deploy Notes: Postgres 16!", content="second body"
        )
        assert not err and "deploy-notes-postgres-16-2.md" in text, text
        assert "Already saved" in text
        assert not (folder / "deploy-notes-postgres-16-3.md").exists()
        assert sorted(p.name for p in folder.glob("*.md")) == [
            "deploy-notes-postgres-16-2.md",
            "deploy-notes-postgres-16.md",
            "工作安排.md",
        ]

        # A title that slugs to nothing still gets a usable name.
        err, text = await srv.call(s, "write_memory", title="!!!", content="punctuation only")
        assert not err and "memory.md" in text, text

        # priority, tags and importance land in the frontmatter.
        err, text = await srv.call(
            s,
            "write_memory",
            title="Tagged",
            content="with tags",
            priority="p0",
            tags=["ops", "db"],
            importance=0.5,
        )
        assert not err, text
        meta = frontmatter_of(folder / "tagged.md")
        assert meta["priority"] == "P0" and meta["tags"] == ["ops", "db"] and meta["importance"] == 0.5
        raw = (folder / "tagged.md").read_text(encoding="utf-8")
        for key in ("createdAt", "updatedAt", "lastAccessedAt"):
            assert re.search(rf"^{key}: \d{{4}}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{{3}}Z$", raw, re.MULTILINE), raw


async def test_write_memory_refuses_bad_arguments(server_factory):
    async with server_factory(max_content_chars=1000) as srv, srv.session("alice") as s:
        root = srv.settings.root
        bad = [
            ({"title": "", "content": "x"}, "title"),
            ({"title": "   ", "content": "x"}, "title"),
            ({"title": "Ok", "content": ""}, "content"),
            ({"title": "Ok", "content": "  \n "}, "content"),
            ({"title": "Ok", "content": "x", "priority": "P9"}, "priority"),
            ({"title": "Ok", "content": "x", "importance": 1.5}, "importance"),
            ({"title": "Ok", "content": "x", "importance": -0.1}, "importance"),
            ({"title": "Ok", "content": "y" * 1001}, "1,000"),
            ({"title": "two\nlines", "content": "x"}, "title"),
        ]
        for args, word in bad:
            err, text = await srv.call(s, "write_memory", **args)
            assert err, (args, text)
            assert word in text, (args, text)
            assert_clean_error(text, root)
        assert not (root / "alice").exists() or not list((root / "alice").glob("*.md"))

        # Exactly at the cap is fine.
        err, text = await srv.call(s, "write_memory", title="Ok", content="y" * 1000)
        assert not err, text


# ---------------------------------------------------------------------------- update_memory


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_update_memory_keeps_what_is_not_given(server_factory, transport):
    async with server_factory() as srv, srv.session("alice", transport) as s:
        folder = srv.settings.root / "alice"
        err, text = await srv.call(
            s,
            "write_memory",
            title="Release train",
            content="ships on monday",
            priority="P1",
            tags=["ops", "release"],
        )
        assert not err, text
        path = folder / "release-train.md"
        created = frontmatter_of(path)["createdAt"]

        err, text = await srv.call(
            s, "update_memory", filename="release-train.md", content="ships on wednesday"
        )
        assert not err and "release-train.md" in text, text
        meta = frontmatter_of(path)
        assert (
            meta["priority"] == "P1" and meta["tags"] == ["ops", "release"] and meta["createdAt"] == created
        )
        body = path.read_text(encoding="utf-8")
        assert "# Release train" in body and "ships on wednesday" in body and "monday" not in body

        err, text = await srv.call(
            s, "update_memory", filename="release-train", priority="P0", tags=["weekly"]
        )
        assert not err, text
        meta = frontmatter_of(path)
        assert meta["priority"] == "P0" and meta["tags"] == ["weekly"]
        assert "ships on wednesday" in path.read_text(encoding="utf-8")

        err, text = await srv.call(s, "update_memory", filename="release-train.md", title="Release cadence")
        assert not err, text
        err, text = await srv.call(s, "read_memory", filenames=["release-train.md"])
        assert not err and headers(text) == ["## Release cadence"] and "ships on wednesday" in text, text
        assert fence_count(path.read_text(encoding="utf-8")) == 3  # frontmatter (2) + footer rule (1)

        err, text = await srv.call(s, "update_memory", filename="release-train.md", priority="urgent")
        assert err and "priority" in text
        err, text = await srv.call(s, "update_memory", filename="missing.md", content="x")
        assert err and "missing.md" in text and "list_memory_titles" in text
        assert_clean_error(text, srv.settings.root)


async def test_update_memory_keeps_unknown_keys_and_refuses_conflicts(server_factory, vault_root):
    folder = vault_root / "alice"
    hand = hand_file(
        folder,
        "standup.md",
        "---\npriority: P1\nsource: slack\ncreatedAt: 2026-01-15T12:00:00.000Z\nchannel: '#ops'\n---\n"
        "# Standup\n\nDaily at nine.\n",
    )
    conflicted_text = (
        "---\npriority: P2\n---\n# Merge me\n\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> origin/main\n"
    )
    conflicted = hand_file(folder, "merge-me.md", conflicted_text)
    async with server_factory() as srv, srv.session("alice") as s:
        err, text = await srv.call(s, "update_memory", filename="standup.md", content="Daily at ten.")
        assert not err, text
        raw = hand.read_text(encoding="utf-8")
        meta = frontmatter_of(hand)
        assert meta["source"] == "slack" and meta["channel"] == "#ops" and meta["priority"] == "P1"
        assert "source: slack\n" in raw
        assert "Daily at ten." in raw and "nine" not in raw
        assert fence_count(raw) == 2

        # Conflict markers: listed and readable, never written.
        err, text = await srv.call(s, "list_memory_titles")
        assert not err and "merge-me.md" in text and "CONFLICT" in text, text
        err, text = await srv.call(s, "read_memory", query="theirs")
        assert not err and "## Merge me" in text, text
        for args in ({"content": "resolved by agent"}, {"priority": "P0"}):
            err, text = await srv.call(s, "update_memory", filename="merge-me.md", **args)
            assert err, text
            assert "conflict" in text.lower() and "resolve" in text.lower(), text
            assert_clean_error(text, vault_root)
        assert conflicted.read_text(encoding="utf-8") == conflicted_text


# ---------------------------------------------------------------------------- delete_memory


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_delete_memory(server_factory, transport):
    async with server_factory() as srv, srv.session("alice", transport) as s:
        folder = srv.settings.root / "alice"
        assert not (await srv.call(s, "write_memory", title="Temporary", content="delete me soon"))[0]
        assert not (await srv.call(s, "write_memory", title="Keeper", content="stay"))[0]
        err, text = await srv.call(s, "delete_memory", filename="temporary")
        assert not err and "temporary.md" in text, text
        assert not (folder / "temporary.md").exists()
        assert (folder / "keeper.md").is_file()
        err, text = await srv.call(s, "read_memory", query="delete soon")
        assert not err and "## Temporary" not in text
        err, text = await srv.call(s, "list_memory_titles")
        assert "temporary.md" not in text and "keeper.md" in text

        err, text = await srv.call(s, "delete_memory", filename="temporary.md")
        assert err and "temporary.md" in text and "list_memory_titles" in text
        assert_clean_error(text, srv.settings.root)


# ---------------------------------------------------------------------------- eviction, archive, restore

NOW = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)


def aged(priority: str, days: float, title: str, body: str) -> str:
    at = iso(NOW - timedelta(days=days))
    created = iso(NOW - timedelta(days=days + 1))
    return (
        f"---\npriority: {priority}\ncreatedAt: {created}\nupdatedAt: {created}\nlastAccessedAt: {at}\n---\n"
        f"# {title}\n\n{body}\n"
    )


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_evict_search_archive_and_restore(server_factory, vault_root, transport):
    folder = vault_root / "alice"
    files = {
        "p2-old.md": aged("P2", 31, "Old scratch", "the walrus sings at dawn"),
        "p2-fresh.md": aged("P2", 29, "Fresh scratch", "recent notes"),
        "p1-mid.md": aged("P1", 60, "Project mid", "still within ninety days"),
        "p1-old.md": aged("P1", 91, "Project old", "ancient project heron"),
        "p0-ancient.md": aged("P0", 1000, "Forever", "never archive this"),
    }
    for name, text in files.items():
        hand_file(folder, name, text)
    # An archived memory already holds the name p2-old.md: eviction must not overwrite it.
    squatter = hand_file(folder, "archive/p2-old.md", aged("P2", 400, "Older scratch", "earlier walrus text"))
    squatter_bytes = squatter.read_bytes()

    async with server_factory(clock=lambda: NOW) as srv, srv.session("alice", transport) as s:
        before = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*.md")}

        err, text = await srv.call(s, "evict_memories", dryRun=True)
        assert not err, text
        assert "Would archive 2" in text, text
        lines = {
            line.split(":", 1)[0].lstrip("- "): line for line in text.splitlines() if line.startswith("- ")
        }
        assert set(lines) == {"p2-old.md", "p1-old.md"}, text
        assert (
            "P2" in lines["p2-old.md"] and "31 days" in lines["p2-old.md"] and "TTL 30" in lines["p2-old.md"]
        )
        assert (
            "P1" in lines["p1-old.md"] and "91 days" in lines["p1-old.md"] and "TTL 90" in lines["p1-old.md"]
        )
        after = {p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*.md")}
        assert after == before, "a dry run moved or changed files"

        err, text = await srv.call(s, "evict_memories")
        assert not err and "Archived 2" in text, text
        assert "archive/p2-old-2.md" in text, text
        assert sorted(p.name for p in folder.glob("*.md")) == ["p0-ancient.md", "p1-mid.md", "p2-fresh.md"]
        assert squatter.read_bytes() == squatter_bytes
        assert (folder / "archive/p2-old-2.md").read_bytes() == before["p2-old.md"]
        assert (folder / "archive/p1-old.md").read_bytes() == before["p1-old.md"]

        err, text = await srv.call(s, "list_memory_titles")
        assert not err and "p2-old" not in text and "p1-old" not in text and "p0-ancient.md" in text
        err, text = await srv.call(s, "read_memory", query="heron")
        assert not err and "## Project old" not in text

        # search_archive: finds by body word, changes no bytes.
        archive_before = {p.name: p.read_bytes() for p in (folder / "archive").glob("*.md")}
        err, text = await srv.call(s, "search_archive", query="walrus")
        assert not err, text
        assert {"## Old scratch", "## Older scratch"} <= set(headers(text)), text
        err, text = await srv.call(s, "search_archive", query="heron")
        assert not err and headers(text) == ["## Project old"], text
        err, text = await srv.call(s, "search_archive", query="zebra")
        assert not err and headers(text) == [], text
        assert {p.name: p.read_bytes() for p in (folder / "archive").glob("*.md")} == archive_before

        # A second sweep at the same time finds nothing new.
        err, text = await srv.call(s, "evict_memories")
        assert not err and "Nothing to archive" in text, text

        # restore_memory: back to the hot set, readable, gone from the archive.
        err, text = await srv.call(s, "restore_memory", filename="p1-old.md")
        assert not err and "p1-old.md" in text, text
        assert (folder / "p1-old.md").read_bytes() == before["p1-old.md"]
        assert not (folder / "archive/p1-old.md").exists()
        err, text = await srv.call(s, "read_memory", query="heron")
        assert not err and headers(text) == ["## Project old"], text
        # Restoring counts as access: the next sweep does not archive it again.
        err, text = await srv.call(s, "evict_memories", dryRun=True)
        assert not err and "p1-old.md" not in text, text

        err, text = await srv.call(s, "restore_memory", filename="p1-old.md")
        assert err and "p1-old.md" in text and "search_archive" in text, text
        assert_clean_error(text, vault_root)
        err, text = await srv.call(s, "restore_memory", filename="never-existed")
        assert err and "never-existed.md" in text
        assert_clean_error(text, vault_root)


async def test_eviction_by_capacity_archives_least_recent_p2_first(server_factory, vault_root):
    folder = vault_root / "alice"
    hand_file(folder, "p2-a.md", aged("P2", 5, "P2 a", "a"))
    hand_file(folder, "p2-b.md", aged("P2", 3, "P2 b", "b"))
    hand_file(folder, "p1-c.md", aged("P1", 20, "P1 c", "c"))
    hand_file(folder, "p0-d.md", aged("P0", 50, "P0 d", "d"))
    async with (
        server_factory(clock=lambda: NOW, capacity=2, evict_grace_hours=0) as srv,
        srv.session("alice") as s,
    ):
        err, text = await srv.call(s, "evict_memories")
        assert not err and "Archived 2" in text, text
        assert "capacity" in text
        assert sorted(p.name for p in folder.glob("*.md")) == ["p0-d.md", "p1-c.md"]
        assert sorted(p.name for p in (folder / "archive").glob("*.md")) == ["p2-a.md", "p2-b.md"]


# ---------------------------------------------------------------------------- legacy and odd files


async def test_reads_never_rewrite_a_hand_made_file_and_migrate_gives_it_frontmatter_once(
    server_factory, vault_root
):
    folder = vault_root / "alice"
    original = "Remember: the staging kubeconfig lives in vault.\nRotate it monthly.\n"
    legacy = hand_file(folder, "legacy-note.md", original)
    headed_original = "# Wifi password\n\nIt is on the fridge, ask about the gazebo.\n"
    headed = hand_file(folder, "wifi.md", headed_original)

    async with server_factory() as srv, srv.session("alice") as s:
        err, text = await srv.call(s, "list_memory_titles")
        assert not err
        assert any(line.startswith("legacy-note.md|legacy-note|P2|") for line in text.splitlines()), text
        assert any(line.startswith("wifi.md|Wifi password|P2|") for line in text.splitlines()), text

        err, text = await srv.call(s, "read_memory", query="kubeconfig")
        assert not err and "Rotate it monthly." in text, text
        err, text = await srv.call(s, "read_memory", filenames=["wifi"])
        assert not err and "## Wifi password" in text and "gazebo" in text, text
        # The person's files stay theirs: no frontmatter appears from reading them.
        assert legacy.read_text(encoding="utf-8") == original
        assert headed.read_text(encoding="utf-8") == headed_original

        # `memvault migrate` (run beside the server) does what mem-mcp did on a first read, once.
        code = await anyio.to_thread.run_sync(lambda: main(["migrate", "--root", str(vault_root)]))
        assert code == 0
        migrated = legacy.read_text(encoding="utf-8")
        assert migrated.startswith("---\n")
        assert fence_count(migrated) == 2
        assert migrated.endswith("\n---\n" + original), migrated
        meta = frontmatter_of(legacy)
        assert meta["priority"] == "P2" and "createdAt" in meta
        assert headed.read_text(encoding="utf-8").endswith("\n---\n" + headed_original)
        assert await anyio.to_thread.run_sync(lambda: main(["migrate", "--root", str(vault_root)])) == 0

        # Further reads (query, name, all) never add a second block.
        for args in ({"query": "kubeconfig"}, {"filenames": ["legacy-note.md", "wifi.md"]}, {}):
            err, text = await srv.call(s, "read_memory", **args)
            assert not err and "staging kubeconfig" in text
        for path, body in ((legacy, original), (headed, headed_original)):
            final = path.read_text(encoding="utf-8")
            assert fence_count(final) == 2 and final.count("createdAt") == 1 and final.endswith(body)


async def test_odd_files_are_listed_searchable_and_never_double_fronted(server_factory, vault_root):
    folder = vault_root / "alice"
    crlf = hand_file(
        folder, "crlf.md", b"---\r\npriority: P1\r\n---\r\n# Windows note\r\n\r\nthe zebra crossing\r\n"
    )
    bom = hand_file(folder, "bom.md", "\ufeff---\npriority: P0\n---\n# Bom note\n\nthe okapi grazes\n")
    partial_bytes = b"---\ntitle: Partial\nthe quokka smiles\nno closing fence here\n"
    partial = hand_file(folder, "partial.md", partial_bytes)
    broken_bytes = b"---\npriority: [P1\ntags: {oops\n---\n# Broken yaml\n\nthe platypus swims\n"
    broken = hand_file(folder, "broken.md", broken_bytes)
    legacy_bom_bytes = "\ufeffplain text with a BOM about the narwhal\r\nsecond line\r\n".encode()
    legacy_bom = hand_file(folder, "legacy-bom.md", legacy_bom_bytes)

    async with server_factory() as srv, srv.session("alice") as s:
        err, text = await srv.call(s, "list_memory_titles")
        assert not err, text
        rows = {line.split("|", 1)[0]: line for line in text.splitlines()}
        assert set(rows) == {"crlf.md", "bom.md", "partial.md", "broken.md", "legacy-bom.md"}, text
        assert rows["crlf.md"].startswith("crlf.md|Windows note|P1|"), rows
        assert rows["bom.md"].startswith("bom.md|Bom note|P0|"), rows
        assert "NEEDS FIXING" in rows["partial.md"] and "NEEDS FIXING" in rows["broken.md"]

        for _ in range(2):
            for word, title in [
                ("zebra", "Windows note"),
                ("okapi", "Bom note"),
                ("quokka", None),
                ("platypus", None),
                ("narwhal", None),
            ]:
                err, text = await srv.call(s, "read_memory", query=word)
                assert not err, (word, text)
                assert word in text, (word, text)
                if title:
                    assert f"## {title}" in text
            err, text = await srv.call(s, "read_memory")
            assert not err and len(headers(text)) == 5, text

        # Broken frontmatter: never written.
        assert partial.read_bytes() == partial_bytes
        assert broken.read_bytes() == broken_bytes
        err, text = await srv.call(s, "update_memory", filename="broken.md", content="fixed")
        assert err and "frontmatter" in text, text
        assert_clean_error(text, vault_root)
        assert broken.read_bytes() == broken_bytes

        # CRLF and BOM files with valid frontmatter: access time written into the one existing block.
        crlf_raw = crlf.read_bytes()
        assert crlf_raw.startswith(b"---\r\n") and b"\n" not in crlf_raw.replace(b"\r\n", b"")
        assert fence_count(crlf_raw.decode()) == 2 and b"priority: P1" in crlf_raw
        assert crlf_raw.endswith(b"# Windows note\r\n\r\nthe zebra crossing\r\n")
        bom_text = bom.read_bytes().decode("utf-8")
        assert (
            bom_text.startswith("\ufeff---\n") and fence_count(bom_text) == 2 and "priority: P0" in bom_text
        )
        assert bom_text.count("\ufeff") == 1

        # A hand-made file with BOM and CRLF: reads leave it alone; migrate gives it exactly one
        # block, the original text kept as its body.
        assert legacy_bom.read_bytes() == legacy_bom_bytes
        assert await srv.app.state.service.store.migrate("alice") == ["legacy-bom.md"]
        legacy_text = legacy_bom.read_bytes().decode("utf-8")
        assert legacy_text.count("\ufeff") <= 1 and legacy_text.lstrip("\ufeff").startswith("---")
        assert fence_count(legacy_text) == 2
        assert legacy_text.endswith("plain text with a BOM about the narwhal\r\nsecond line\r\n")


@pytest.mark.slow
async def test_access_time_written_back_at_most_once_a_day(server_factory, vault_root):
    folder = vault_root / "alice"
    yesterday = NOW - timedelta(days=1)
    path = hand_file(
        folder,
        "daily.md",
        f"---\npriority: P1\ncreatedAt: {iso(yesterday)}\nlastAccessedAt: {iso(yesterday)}\n---\n"
        "# Daily\n\nthe ibis\n",
    )
    original = path.read_bytes()
    clock_now = [NOW]
    async with server_factory(clock=lambda: clock_now[0]) as srv, srv.session("alice") as s:
        err, text = await srv.call(s, "read_memory", query="ibis")
        assert not err and "## Daily" in text
        await srv.app.state.service.idle()  # the write-back runs after the reply, off the read's path
        first = path.read_bytes()
        first_mtime = path.stat().st_mtime_ns
        assert first != original
        assert f"lastAccessedAt: {iso(NOW)}".encode() in first

        clock_now[0] = NOW + timedelta(hours=6)
        for args in ({"query": "ibis"}, {"filenames": ["daily.md"]}, {}):
            err, text = await srv.call(s, "read_memory", **args)
            assert not err and "## Daily" in text
        await srv.app.state.service.idle()
        assert path.read_bytes() == first
        assert path.stat().st_mtime_ns == first_mtime

        # The next UTC day, one more write-back.
        clock_now[0] = NOW + timedelta(days=1)
        err, text = await srv.call(s, "read_memory", query="ibis")
        assert not err
        await srv.app.state.service.idle()
        assert f"lastAccessedAt: {iso(NOW + timedelta(days=1))}".encode() in path.read_bytes()
        assert fence_count(path.read_text(encoding="utf-8")) == 2


async def test_access_writeback_never_leaves_files_alone(server_factory, vault_root):
    folder = vault_root / "alice"
    path = hand_file(
        folder,
        "quiet.md",
        f"---\npriority: P1\nlastAccessedAt: {iso(NOW - timedelta(days=3))}\n---\n# Quiet\n\nthe owl\n",
    )
    original = path.read_bytes()
    async with server_factory(clock=lambda: NOW, access_writeback="never") as srv, srv.session("alice") as s:
        for _ in range(2):
            err, text = await srv.call(s, "read_memory", query="owl")
            assert not err and "## Quiet" in text
        assert path.read_bytes() == original
        # The access is still recorded (in the sidecar), so the listing shows it.
        err, text = await srv.call(s, "list_memory_titles")
        assert f"quiet.md|Quiet|P1|{iso(NOW)}" in text, text


async def test_bad_argument_shapes_get_a_short_plain_message(server_factory):
    async with server_factory() as srv, srv.session("alice") as s:
        err, text = await srv.call(s, "write_memory", title="only a title")
        assert err
        assert "Invalid arguments for write_memory: 'content' is required" in text
        assert "pydantic" not in text and "validation error" not in text
        err, text = await srv.call(s, "read_memory", limit="many")
        assert err and "'limit'" in text and "input schema" in text


@pytest.mark.slow
async def test_replies_stay_bounded_whatever_the_arguments_echo(server_factory):
    """Issue 9, 10: with nothing matching, read_memory, search_archive and recall echoed the whole
    query (an 840,079-character reply against the 20,000 limit)."""
    huge = "zqxj " * 100_000  # 500,000 characters, no match anywhere
    async with server_factory() as srv, srv.session("alice") as s:
        await srv.call(s, "write_memory", title="Something", content="a memory so the vault exists")
        limit = srv.settings.max_reply_chars
        for tool, args in [
            ("read_memory", {"query": huge}),
            ("search_archive", {"query": huge}),
            ("recall", {"query": huge}),
            ("read_memory", {"filenames": [huge.replace(" ", "")[:200_000]]}),
            ("write_memory", {"title": "T", "content": "c", "priority": huge}),
            ("recall", {"query": "memory", "priority": huge}),
            ("list_summaries", {"tag": huge}),
            ("list_summaries", {"sortBy": huge}),
            ("get_summary", {"sessionId": huge[:150]}),
        ]:
            _err, text = await srv.call(s, tool, **args)
            assert len(text) <= limit, (tool, len(text), text[:200])
            assert len(text) < 2_000, (tool, len(text), text[:200])  # an echo is cut, not the budget filled


async def test_a_full_disk_never_fails_a_read_nor_misreports_a_write(server_factory, vault_root, monkeypatch):
    """Issue 9, 8: reads failed because recording the access failed; a delete or write that took
    effect was reported as failed ("Nothing was lost; try again")."""
    import errno
    import sqlite3

    from memvault.records.sidecar import Sidecar

    async with server_factory() as srv, srv.session("alice") as s:
        err, _ = await srv.call(s, "write_memory", title="Before", content="written before the disk filled")
        assert not err

        def full(*args, **kwargs):
            raise sqlite3.OperationalError("database or disk is full")

        for name in ("record_access", "rename_access", "rename_accesses", "forget", "put_file_stats",
                     "delete_file_stats", "record_search", "set_state", "get_state"):  # fmt: skip
            monkeypatch.setattr(Sidecar, name, full)
        for tool, args in [
            ("read_memory", {"query": "disk"}),
            ("read_memory", {"filenames": ["before.md"]}),
            ("list_memory_titles", {}),
            ("recall", {"query": "disk filled"}),
        ]:
            err, text = await srv.call(s, tool, **args)
            assert not err and "before.md" in text, (tool, text)
        err, text = await srv.call(s, "write_memory", title="During", content="the file itself fits")
        assert not err and "during.md" in text, text
        assert (vault_root / "alice" / "during.md").is_file()
        err, text = await srv.call(s, "delete_memory", filename="during.md")
        assert not err, text
        assert not (vault_root / "alice" / "during.md").exists()

        # When the file itself cannot be written, the reply says so, and nothing is left behind.
        def no_space(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr("memvault.disk.files.os.fsync", no_space)
        before = sorted(p.name for p in (vault_root / "alice").iterdir())
        err, text = await srv.call(s, "write_memory", title="After", content="cannot be written")
        assert err and "disk is full" in text and "nothing was written" in text, text
        assert sorted(p.name for p in (vault_root / "alice").iterdir()) == before


@pytest.mark.slow
async def test_small_replies_are_worded_right(server_factory, vault_root):
    async with server_factory() as srv, srv.session("alice") as s:
        assert not (await srv.call(s, "write_memory", title="Kettle", content="Descale monthly."))[0]
        err, text = await srv.call(s, "read_memory", query="kettle")
        assert not err and text.startswith("1 hot memory matches 'kettle'")
        err, text = await srv.call(s, "search_archive", query="kettle")
        assert not err and text.startswith("No archived memory matches 'kettle'.")
        err, text = await srv.call(s, "write_memory", title="t" * 300, content="x")
        assert err and "the limit is 200" in text and "Shorten it" in text and "split" not in text.lower()
    (vault_root / "alice" / "broken.md").write_text("---\npriority: [P1\n---\n# Broken\n\nbody\n")
    async with server_factory() as srv, srv.session("alice") as s:
        err, text = await srv.call(s, "list_memory_titles")
        assert not err and "broken.md|Broken|" in text
