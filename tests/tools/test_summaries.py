"""The six session-summary tools, through the official client: versions, pages and their notes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime

import pytest
from inmemory import call, call_refused, served
from mcp import Client

from memvault.config import Settings

pytestmark = pytest.mark.anyio

AT = "2026-03-01T12:00:00.000Z"
NO_SESSION = (
    "No session 'nope'. Call list_summaries to see the session ids, or upsert_summary to start this session."
)


def clock() -> datetime:
    return datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


@pytest.fixture
async def client(make_settings: Callable[..., Settings]) -> AsyncIterator[Client]:
    settings = make_settings(embedder="hash", watch=False, max_reply_chars=1000)
    async with served(settings, clock=clock) as opened:
        yield opened


async def two_versions(client: Client) -> None:
    """Session s1, titled Work and tagged a: "First." then 700 characters more."""
    saved = await call(client, "upsert_summary", sessionId="s1", summary="First.", title="Work", tags=["a"])
    assert saved == f"Saved session 's1': version 1 at {AT} (6 characters)."
    appended = await call(client, "append_summary", sessionId="s1", content="Second." * 100)
    assert appended == f"Appended to session 's1': version 2 at {AT} (708 characters)."


async def test_get_summary_reads_the_latest_or_an_older_version(client: Client) -> None:
    await two_versions(client)
    latest = await call(client, "get_summary", sessionId="s1")
    # Longer than the reply limit (1,000 characters): its newest end, and where the rest is.
    assert latest.startswith(f"# Work\n[session s1 | version 2 of 2 | updated {AT} | tags: a]\n\n")
    assert latest.endswith(
        ".Second.\n[characters 91 to 708 of 708; the newest; earlier text from "
        'get_summary(sessionId="s1", offset=0)]'
    )
    assert len(latest) <= 1000
    assert await call(client, "get_summary", sessionId="s1", version=1) == (
        f"# Work\n[session s1 | version 1 of 2 | updated {AT} | tags: a]\n\nFirst."
    )


async def test_a_long_summary_shows_its_newest_end_and_how_to_page_back(client: Client) -> None:
    await two_versions(client)
    page = await call(client, "get_summary", sessionId="s1", maxLength=20)
    assert page.endswith(
        "\n\necond.Second.Second.\n[characters 688 to 708 of 708; the newest; earlier text from "
        'get_summary(sessionId="s1", offset=668, maxLength=20)]'
    )
    first = await call(client, "get_summary", sessionId="s1", offset=0, maxLength=6)
    assert first.endswith(
        '\n\nFirst.\n[characters 0 to 6 of 708; the rest from get_summary(sessionId="s1", '
        "offset=6, maxLength=6)]"
    )


async def test_get_summary_refuses_what_it_cannot_read_and_says_what_there_is(client: Client) -> None:
    await two_versions(client)
    assert await call_refused(client, "get_summary", sessionId="s1", version=7) == (
        "Session 's1' has no version 7; it has versions 1 to 2. Call get_session_history to see them."
    )
    assert await call_refused(client, "get_summary", sessionId="nope") == NO_SESSION
    assert (
        await call_refused(client, "get_summary", sessionId="s1", maxLength=0)
        == "maxLength must be at least 1."
    )
    assert await call_refused(client, "get_summary", sessionId="s1", offset=-1) == "offset must be 0 or more."
    assert await call_refused(client, "get_summary", sessionId="s1", offset=708) == (
        "offset 708 is past the end: the summary has 708 characters."
    )


async def test_list_summaries_lists_pages_and_filters_by_tag(client: Client) -> None:
    assert await call(client, "list_summaries") == "No sessions yet. Start one with upsert_summary."
    await two_versions(client)
    await call(client, "upsert_summary", sessionId="s2", summary="Other.", tags=["b"])
    listed = await call(client, "list_summaries", sortBy="title", order="asc")
    assert listed == (
        "2 sessions; showing 1-2:\n"
        f"- s2 | (untitled) | updated {AT} | 1 version | 6 characters | tags: b\n"
        f"- s1 | Work | updated {AT} | 2 versions | 708 characters | tags: a"
    )
    assert (await call(client, "list_summaries", tag="a")).startswith(
        "1 session tagged 'a'; showing 1-1:\n- s1 |"
    )
    assert (
        await call(client, "list_summaries", offset=5) == "2 session(s); none at offset 5; use a smaller one."
    )
    assert await call(client, "list_summaries", tag="zzz") == (
        "No sessions tagged 'zzz' yet. Start one with upsert_summary."
    )


async def test_update_summary_metadata_changes_title_and_tags_without_a_new_version(client: Client) -> None:
    await two_versions(client)
    assert await call(client, "update_summary_metadata", sessionId="s1", title="", tags=["x", "y"]) == (
        f"Updated session 's1': title (none), tags x, y. Still version 2 of {AT}; no new version was made."
    )
    assert (await call(client, "get_summary", sessionId="s1")).startswith(
        f"# s1\n[session s1 | version 2 of 2 | updated {AT} | tags: x, y]"
    )


async def test_history_lists_every_version_newest_first_with_the_texts_that_fit(client: Client) -> None:
    await two_versions(client)
    assert await call(client, "get_session_history", sessionId="s1") == (
        "Session 's1': 2 versions, newest first.\n"
        f"## Version 2 · {AT} · Work · tags: a · 708 characters (text left out)\n"
        f"## Version 1 · {AT} · Work · tags: a\nFirst.\n\n"
        "[1 version(s) shown without text to keep this reply short; every version is kept: "
        "get_summary(sessionId=..., version=N) reads one.]"
    )
    assert await call_refused(client, "get_session_history", sessionId="nope") == NO_SESSION
