"""The eight tools over markdown memories, through the official client: what each replies and refuses."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from inmemory import call, call_refused, served
from mcp import Client

from memvault.config import Settings

pytestmark = pytest.mark.anyio


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def open_vault(make_settings: Callable[..., Settings]) -> Callable[..., Any]:
    def open_(clock: Clock | None = None, **changes: Any) -> Any:
        settings = make_settings(embedder="hash", watch=False, **changes)
        return served(settings, clock=clock) if clock is not None else served(settings)

    return open_


@pytest.fixture
async def client(open_vault: Callable[..., Any]) -> AsyncIterator[Client]:
    async with open_vault() as opened:
        yield opened


def version_in(reply: str) -> str:
    found = re.search(r"version (\w+)", reply)
    assert found is not None, reply
    return found.group(1)


async def test_an_empty_vault_says_how_to_begin(client: Client) -> None:
    assert await call(client, "list_memory_titles") == "No memories yet. Save one with write_memory."
    assert await call(client, "read_memory") == "No hot memories yet."


async def test_a_written_memory_is_listed_one_line_each_without_breaking_the_columns(client: Client) -> None:
    assert await call(client, "write_memory", title="Tea | coffee", content="Both.") == (
        "Saved as tea-coffee.md (P2)."
    )
    [line] = (await call(client, "list_memory_titles")).splitlines()
    filename, title, priority, _last = line.split("|")
    assert (filename, title, priority) == ("tea-coffee.md", "Tea / coffee", "P2")


async def test_the_same_write_twice_in_a_moment_saves_one_memory(client: Client) -> None:
    await call(client, "write_memory", title="Deploy", content="Push to main.", priority="P1")
    again = await call(client, "write_memory", title="Deploy", content="Push to main.", priority="P1")
    assert again == "Already saved as deploy.md a moment ago; no duplicate written."
    assert len((await call(client, "list_memory_titles")).splitlines()) == 1


async def test_a_write_that_supersedes_archives_the_old_and_restore_brings_it_back(client: Client) -> None:
    await call(client, "write_memory", title="Old plan", content="Plan A.")
    reply = await call(
        client, "write_memory", title="New plan", content="Plan B.", supersedes=["old-plan.md"]
    )
    assert reply == "Saved as new-plan.md (P2). Superseded and archived: old-plan.md."
    archived = await call(client, "search_archive", query="plan")
    assert archived.startswith("1 archived memory matches 'plan':\n## Old plan")
    assert await call(client, "restore_memory", filename="old-plan.md") == "Restored as old-plan.md."
    assert await call(client, "search_archive", query="plan") == (
        "No archived memory matches 'plan'. Try other words, or read_memory for hot memories."
    )


async def test_read_memory_finds_by_words_and_names_what_it_cannot_find(client: Client) -> None:
    await call(client, "write_memory", title="Tea", content="Green tea at four.", tags=["drinks"])
    found = await call(client, "read_memory", query="green tea")
    assert found.startswith("1 hot memory matches 'green tea':\n## Tea\n[tea.md | P2 | version ")
    assert "tags: drinks" in found and "Green tea at four." in found
    named = await call(client, "read_memory", filenames=["tea.md", "gone.md"])
    assert named.endswith("[Not found: gone.md. Call list_memory_titles for names.]")
    assert await call(client, "read_memory", query="zeppelin") == (
        "No hot memory matches 'zeppelin'. Try other words, or search_archive for older memories."
    )


async def test_read_memory_reads_on_from_an_offset_in_one_memory(client: Client) -> None:
    await call(client, "write_memory", title="Long", content="a" * 50 + "TAIL")
    tail = await call(client, "read_memory", filenames=["long.md"], offset=50)
    assert "[... from character 50 of 54]\nTAIL" in tail
    assert await call_refused(client, "read_memory", offset=5) == (
        "offset reads on in one memory: pass it with exactly one filename."
    )
    assert await call_refused(client, "read_memory", filenames=["long.md"], offset=54) == (
        "offset 54 is past the end: 'long.md' has 54 characters."
    )


async def test_a_long_memory_is_cut_to_the_reply_limit_with_how_to_read_on(
    open_vault: Callable[..., Any],
) -> None:
    async with open_vault(max_reply_chars=2000) as client:
        await call(client, "write_memory", title="Huge", content="word " * 2000)
        reply = await call(client, "read_memory", filenames=["huge.md"])
    assert len(reply) <= 2000
    assert re.search(r'more characters: read_memory\(filenames=\["huge.md"\], offset=\d+\)\]', reply)


async def test_update_memory_edits_in_place_and_refuses_a_stale_version(client: Client) -> None:
    first = await call(client, "write_memory", title="Setup", content="## Steps\nInstall.\n")
    assert first == "Saved as setup.md (P2)."
    old = version_in(await call(client, "read_memory", filenames=["setup.md"]))
    updated = await call(client, "update_memory", filename="setup.md", append="Run.", expectedVersion=old)
    assert updated.startswith("Updated setup.md (version ")
    assert version_in(updated) != old
    refused = await call_refused(
        client, "update_memory", filename="setup.md", append="x", expectedVersion=old
    )
    assert refused.startswith(
        f"'setup.md' changed since you read it (version {version_in(updated)} now, not {old})"
    )
    assert "Install.\n\nRun." in await call(client, "read_memory", filenames=["setup.md"])


async def test_delete_memory_deletes_for_good_and_names_what_it_cannot_find(client: Client) -> None:
    await call(client, "write_memory", title="Scratch", content="Temporary.")
    assert await call(client, "delete_memory", filename="scratch.md") == "Deleted scratch.md."
    assert await call_refused(client, "delete_memory", filename="scratch.md") == (
        "No memory named 'scratch.md'. Call list_memory_titles to see the names."
    )


async def test_evict_memories_reports_first_then_archives_what_is_stale(
    open_vault: Callable[..., Any],
) -> None:
    clock = Clock()
    # One sweep a year: only evict_memories sweeps once the first lazy one has run.
    async with open_vault(clock, evict_interval_hours=24 * 365) as client:
        assert await call(client, "evict_memories") == (
            "Nothing to archive: every hot memory is fresh and within capacity."
        )
        await call(client, "write_memory", title="Kept", content="For good.", priority="P0")
        await call(client, "write_memory", title="Stale", content="Once useful.")
        clock.now += timedelta(days=31)
        dry = (await call(client, "evict_memories", dryRun=True)).splitlines()
        assert dry[0] == "Would archive 1 memory:"
        assert dry[1].startswith("- stale.md: P2, not accessed for 31 days since 2026-03-01 (TTL 30 days)")
        done = (await call(client, "evict_memories")).splitlines()
        assert done[0] == "Archived 1 memory:" and done[1:] == dry[1:]
        assert [line.split("|")[0] for line in (await call(client, "list_memory_titles")).splitlines()] == [
            "kept.md"
        ]


async def test_a_long_list_of_titles_ends_with_how_many_it_left_out(open_vault: Callable[..., Any]) -> None:
    async with open_vault(max_reply_chars=1000) as client:
        for i in range(40):
            await call(client, "write_memory", title=f"Memory number {i}", content=f"Body {i}.")
        listed = await call(client, "list_memory_titles")
    assert len(listed) <= 1000
    lines = listed.splitlines()
    left = 40 - (len(lines) - 1)
    assert (
        lines[-1] == f"[{left} more left out to keep this reply short; use read_memory(query=...) to search.]"
    )
