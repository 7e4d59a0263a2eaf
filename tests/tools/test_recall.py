"""recall and memory_stats through the official client: compact ranked lines, and the vault's health."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime, timedelta

import pytest
from inmemory import call, call_refused, served
from mcp import Client

from memvault.config import Settings

pytestmark = pytest.mark.anyio

# Vectors may still be on their way when a test recalls: either way the words find the memory.
HOW = r"\((?:words and hash-\d+ vectors|words only \(vectors not ready\))\)"


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def client(make_settings: Callable[..., Settings], clock: Clock) -> AsyncIterator[Client]:
    # One sweep a year: no lazy sweep archives what the clock ages.
    settings = make_settings(embedder="hash", watch=False, evict_interval_hours=24 * 365)
    async with served(settings, clock=clock) as opened:
        yield opened


async def plans(client: Client) -> None:
    """tea.md (P1, tagged drinks) and new-plan.md hot; old-plan.md archived by new-plan.md."""
    await call(
        client, "write_memory", title="Tea", content="Green tea at four.", tags=["drinks"], priority="P1"
    )
    await call(client, "write_memory", title="Old plan", content="Plan A for the launch.")
    await call(client, "write_memory", title="New plan", content="Plan B.", supersedes=["old-plan.md"])


async def test_recall_of_an_empty_vault_says_what_to_try(client: Client) -> None:
    assert await call(client, "recall", query="tea") == (
        "Nothing matches 'tea'. Try other words, includeArchive=true, or list_memory_titles."
    )


async def test_recall_gives_one_line_per_memory_and_how_to_read_it_whole(client: Client) -> None:
    await plans(client)
    found = (await call(client, "recall", query="green tea")).splitlines()
    assert re.fullmatch(rf"1 memory for 'green tea' {HOW}, best first:", found[0])
    assert re.fullmatch(r"tea\.md \| Tea \| \d\.\d\d \| Green tea at four\.", found[1])
    assert found[2:] == ["Read one in full with read_memory(filenames=[...])."]


async def test_recall_tells_of_archived_matches_and_shows_them_when_asked(client: Client) -> None:
    await plans(client)
    assert await call(client, "recall", query="launch") == (
        "No hot memory matches 'launch'. 1 archived memory also matches: includeArchive=true shows them."
    )
    found = (await call(client, "recall", query="launch", includeArchive=True)).splitlines()
    assert found[1].startswith("archive/old-plan.md | Old plan | ")
    assert found[2] == (
        "Read one in full with read_memory(filenames=[...]). "
        "archive/... ones are archived: restore_memory brings one back."
    )


async def test_recall_filters_by_tags_and_priority(client: Client) -> None:
    await plans(client)
    assert "tea.md | Tea" in await call(client, "recall", query="tea", tags=["drinks"], priority="P0,P1")
    assert (await call(client, "recall", query="tea", priority="P2")).startswith("Nothing matches 'tea'.")


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"query": ""}, "query is empty; say what you are looking for."),
        (
            {"query": "x" * 5000},
            "query is 5,000 characters; the limit is 2,048. "
            "Search with a few words the memory would contain.",
        ),
        ({"query": "tea", "limit": 0}, "limit must be at least 1."),
        (
            {"query": "tea", "after": "nonsense"},
            "after must be an ISO date such as 2026-01-15 or 2026-01-15T09:30:00Z, not 'nonsense'.",
        ),
        (
            {"query": "tea", "priority": "P9"},
            "priority must be P0, P1 or P2 (or several, comma-separated), not 'P9'.",
        ),
    ],
)
async def test_recall_refuses_bad_arguments_with_what_to_do(
    client: Client, arguments: dict[str, object], message: str
) -> None:
    assert await call_refused(client, "recall", **arguments) == message


async def test_memory_stats_of_an_empty_vault(client: Client) -> None:
    stats = (await call(client, "memory_stats")).splitlines()
    assert stats[0] == "Memories: 0 hot (P0 0, P1 0, P2 0), 0 archived."
    assert re.fullmatch(r"Vectors: 0/0 memories embedded with \S+\.", stats[1])
    assert stats[2:] == [
        "Searches: none yet.",
        "Not accessed in 30 days: 0 hot memories.",
        "Next eviction would archive nothing.",
    ]


async def test_memory_stats_counts_memories_searches_and_what_is_going_stale(
    client: Client, clock: Clock
) -> None:
    await plans(client)
    clock.now += timedelta(days=31)
    await call(client, "recall", query="green tea")  # what recall shows counts as accessed
    await call(client, "recall", query="zeppelin airship")
    stats = (await call(client, "memory_stats")).splitlines()
    assert stats[0] == "Memories: 2 hot (P0 0, P1 1, P2 1), 1 archived."
    assert stats[2] == "Searches: 2, 1 found nothing (50.0% miss rate)."
    assert stats[3] == "Not accessed in 30 days: 1 hot memory (new-plan.md)."
    assert stats[-1].startswith("Next eviction would archive 1: new-plan.md (P2, not accessed for 31 days")
