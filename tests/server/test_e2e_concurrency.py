"""End-to-end: many clients at once over both transports lose nothing and tear nothing."""

from __future__ import annotations

import asyncio
import re

import pytest

from memvault.disk.markdown import parse_memory

pytestmark = [
    pytest.mark.anyio,
    # watchdog warns from its inotify thread when a new folder (token/.memvault) is added to the
    # recursive watch twice; pytest's filterwarnings=error would turn that into a dead watcher thread.
    pytest.mark.filterwarnings("ignore:Callback with id .* already exists for watch:RuntimeWarning"),
]

CLIENTS = 20
PER_CLIENT = 5
SAVED = re.compile(r"Saved as (\S+\.md) ")


def title_for(client: int, item: int) -> str:
    if item == 0:
        return "Shared title"  # every client
    if item == 1:
        return f"Team {client % 4} standup"  # five clients each
    return f"Client {client} note {item}"


@pytest.mark.slow
async def test_concurrent_writers_lose_nothing(server_factory):
    async with server_factory(capacity=1000) as srv:
        folder = srv.settings.root / "alice"
        expected: dict[str, str] = {}  # content -> title

        async def client(n: int) -> list[tuple[str, str]]:
            transport = "http" if n % 2 == 0 else "sse"
            saved = []
            async with srv.session("alice", transport) as s:
                for item in range(PER_CLIENT):
                    title, content = title_for(n, item), f"written by client {n} item {item} over {transport}"
                    expected[content] = title
                    err, text = await srv.call(s, "write_memory", title=title, content=content)
                    assert not err, text
                    match = SAVED.search(text)
                    assert match, text
                    saved.append((match.group(1), content))
            return saved

        results = await asyncio.wait_for(asyncio.gather(*(client(n) for n in range(CLIENTS))), 60)
        replies = [item for batch in results for item in batch]
        assert len(replies) == CLIENTS * PER_CLIENT
        assert len({name for name, _ in replies}) == CLIENTS * PER_CLIENT, "two writes got the same filename"

        files = sorted(p for p in folder.rglob("*.md") if ".memvault" not in p.parts)
        assert len(files) == CLIENTS * PER_CLIENT, [p.name for p in files]
        on_disk: dict[str, str] = {}
        for path in files:
            memory = parse_memory(path.read_bytes(), path.name)
            assert memory.problem is None and memory.has_frontmatter, path.name
            assert path.read_text(encoding="utf-8").count("\n---\n") == 2, (
                path.name
            )  # frontmatter end + footer
            on_disk[path.name] = memory.content
            assert expected[memory.content] == memory.title, path.name
        assert sorted(on_disk.values()) == sorted(expected), "a memory was lost or overwritten"
        for name, content in replies:
            assert on_disk[name] == content, name
        shared = sorted(name for name, content in replies if expected[content] == "Shared title")
        assert len(shared) == CLIENTS
        assert "shared-title.md" in shared and all(
            re.fullmatch(r"shared-title(-\d+)?\.md", n) for n in shared
        )
        assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")], "temp files left behind"

        # The server's view agrees with the disk.
        async with srv.session("alice", "http") as s:
            err, text = await srv.call(s, "list_memory_titles")
            assert not err
            assert sorted(line.split("|", 1)[0] for line in text.splitlines()) == sorted(on_disk)


@pytest.mark.slow
async def test_concurrent_updates_leave_one_whole_version(server_factory):
    async with server_factory() as srv:
        folder = srv.settings.root / "alice"
        async with srv.session("alice", "http") as s:
            err, text = await srv.call(
                s, "write_memory", title="Hot spot", content="original", priority="P1", tags=["shared"]
            )
            assert not err and "hot-spot.md" in text
        path = folder / "hot-spot.md"
        writes = {f"version {n} " + f"line {n}\n" * (n + 1) for n in range(10)}
        writes_by_client = sorted(writes)

        async def client(n: int) -> None:
            async with srv.session("alice", "http" if n % 2 else "sse") as s:
                for _ in range(3):
                    err, text = await srv.call(
                        s, "update_memory", filename="hot-spot.md", content=writes_by_client[n]
                    )
                    assert not err, text

        await asyncio.wait_for(asyncio.gather(*(client(n) for n in range(10))), 60)

        raw = path.read_bytes()
        memory = parse_memory(raw, "hot-spot.md")
        assert memory.problem is None and not memory.conflicted
        assert memory.title == "Hot spot" and memory.priority == "P1" and memory.tags == ("shared",)
        assert memory.content in {w.strip() for w in writes}, memory.content
        text = raw.decode("utf-8")
        assert text.startswith("---\n") and text.count("\n---\n") == 2 and text.count("# Hot spot") == 1
        assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".memvault")) == [
            "hot-spot.md"
        ]

        async with srv.session("alice", "sse") as s:
            err, text = await srv.call(s, "read_memory", filenames=["hot-spot.md"])
            assert not err and memory.content in text
