"""Session summaries: the storage module, then every tool through the real server and official client."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memvault.errors import InvalidArgument, TooLarge, UnknownSession
from memvault.records import sync
from memvault.records.sidecar import SIDECAR_DIR, Sidecar
from memvault.records.summaries import SessionInfo, SessionSummaries, list_sessions

TRANSPORTS = ["http", "sse"]
# watchdog warns from its inotify thread when token/.memvault is added to the recursive watch twice.
pytestmark = pytest.mark.filterwarnings("ignore:Callback with id .* already exists for watch:RuntimeWarning")


class Clock:
    """A hand-moved clock: tests step time instead of sleeping."""

    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def step(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sidecar(tmp_path: Path) -> Iterator[Sidecar]:
    with Sidecar.open(tmp_path / "alice") as opened:
        yield opened


@pytest.fixture
def sessions(sidecar: Sidecar, clock: Clock) -> SessionSummaries:
    return SessionSummaries(sidecar, max_chars=1000, clock=clock)


# ---------------------------------------------------------------------------- storage


def test_upsert_makes_a_new_version_each_time_and_latest_wins(
    sessions: SessionSummaries, clock: Clock
) -> None:
    first = sessions.upsert("s1", "We planned the deploy.", title="Deploy", tags=["ops"])
    clock.step(minutes=1)
    second = sessions.upsert("s1", "We planned and ran the deploy.")
    assert (first.version, second.version) == (1, 2)
    assert first.ts == "2026-03-01T12:00:00.000Z"
    assert second.ts == "2026-03-01T12:01:00.000Z"
    latest, count = sessions.latest("s1")
    assert latest.summary == "We planned and ran the deploy."
    assert count == 2
    # Title and tags carry over when not given.
    assert (latest.title, latest.tags) == ("Deploy", ("ops",))


def test_append_adds_a_blank_line_and_the_content_as_a_new_version(sessions: SessionSummaries) -> None:
    created = sessions.append("new", "First note.")
    assert created.version == 1 and created.summary == "First note."
    appended = sessions.append("new", "Second note.\n")
    assert appended.version == 2
    assert appended.summary == "First note.\n\nSecond note."


def test_history_lists_every_version_newest_first(sessions: SessionSummaries, clock: Clock) -> None:
    for n in range(1, 5):
        sessions.upsert("s", f"text {n}")
        clock.step(seconds=1)
    history = sessions.history("s")
    assert [v.version for v in history] == [4, 3, 2, 1]
    assert [v.summary for v in history] == ["text 4", "text 3", "text 2", "text 1"]
    assert history[0].ts > history[-1].ts


def test_update_metadata_changes_latest_version_without_a_new_version(
    sessions: SessionSummaries, clock: Clock
) -> None:
    sessions.upsert("s", "v1", title="Old")
    saved = sessions.upsert("s", "v2")
    clock.step(hours=3)
    updated = sessions.update_metadata("s", title="New", tags=["a", "b"])
    assert updated.version == saved.version == 2
    assert updated.ts == saved.ts  # timestamp unchanged
    latest, count = sessions.latest("s")
    assert count == 2
    assert (latest.title, latest.tags, latest.summary, latest.ts) == ("New", ("a", "b"), "v2", saved.ts)
    # The older version keeps its own metadata.
    assert sessions.history("s")[1].title == "Old"
    # Tags only: the title stays.
    assert sessions.update_metadata("s", tags=[]).title == "New"
    assert sessions.latest("s")[0].tags == ()


def test_update_metadata_needs_title_or_tags(sessions: SessionSummaries) -> None:
    sessions.upsert("s", "text")
    with pytest.raises(InvalidArgument, match="title, tags"):
        sessions.update_metadata("s")


def test_unknown_session_is_reported_with_what_to_do_next(sessions: SessionSummaries) -> None:
    for call in (lambda: sessions.latest("nope"), lambda: sessions.history("nope")):
        with pytest.raises(UnknownSession) as info:
            call()
        assert "list_summaries" in str(info.value)
    with pytest.raises(UnknownSession):
        sessions.update_metadata("nope", title="x")


def test_empty_and_oversize_summaries_are_refused(sessions: SessionSummaries) -> None:
    with pytest.raises(InvalidArgument, match="empty"):
        sessions.upsert("s", "   \n")
    with pytest.raises(InvalidArgument, match="limit is 1,000"):
        sessions.upsert("s", "x" * 1001)
    with pytest.raises(InvalidArgument, match="sessionId is empty"):
        sessions.upsert("", "text")
    sessions.upsert("s", "x" * 600)
    with pytest.raises(InvalidArgument, match="upsert_summary"):
        sessions.append("s", "y" * 600)  # the combined text would pass the cap
    assert sessions.latest("s")[1] == 1  # nothing was saved


def test_list_filters_by_tag_sorts_and_pages(sessions: SessionSummaries, clock: Clock) -> None:
    sessions.upsert("b", "text", title="banana", tags=["Fruit"])
    clock.step(seconds=1)
    sessions.upsert("a", "text", title="Apple", tags=["fruit", "red"])
    clock.step(seconds=1)
    sessions.upsert("c", "text", title="carrot", tags=["veg"])
    sessions.upsert("c", "more text")

    newest_first = sessions.listing()
    assert [s.session_id for s in newest_first.sessions] == ["c", "a", "b"]
    assert newest_first.sessions[0].versions == 2
    assert [s.session_id for s in sessions.listing(tag="FRUIT").sessions] == ["a", "b"]
    assert [s.session_id for s in sessions.listing(sort_by="title").sessions] == ["a", "b", "c"]
    assert [s.session_id for s in sessions.listing(sort_by="title", order="desc").sessions] == ["c", "b", "a"]
    page = sessions.listing(sort_by="title", limit=1, offset=1)
    assert ([s.session_id for s in page.sessions], page.total) == (["b"], 3)
    with pytest.raises(InvalidArgument, match="sortBy"):
        sessions.listing(sort_by="size")
    with pytest.raises(InvalidArgument, match="limit"):
        sessions.listing(limit=0)


def test_list_sessions_is_pure_and_sorts_untitled_by_id() -> None:
    infos = [
        SessionInfo("zeta", None, (), "2026-01-01T00:00:00.000Z", 1, 1),
        SessionInfo("alpha", "Mango", (), "2026-01-02T00:00:00.000Z", 1, 1),
    ]
    assert [s.session_id for s in list_sessions(infos, sort_by="title").sessions] == ["alpha", "zeta"]


def test_clock_stepping_back_keeps_history_in_time_order(sessions: SessionSummaries, clock: Clock) -> None:
    sessions.upsert("s", "one")
    clock.step(minutes=-5)
    second = sessions.upsert("s", "two")
    assert second.ts == "2026-03-01T12:00:00.000Z"


def test_appends_from_many_threads_lose_nothing(sidecar: Sidecar) -> None:
    import threading

    store = SessionSummaries(sidecar, max_chars=100_000)
    threads = [threading.Thread(target=store.append, args=("s", f"part {n}")) for n in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    latest, count = store.latest("s")
    assert count == 20
    assert all(f"part {n}" in latest.summary for n in range(20))


# ---------------------------------------------------------------------------- tools, end to end


@pytest.mark.slow
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.anyio
async def test_session_tools_end_to_end(server_factory, transport: str) -> None:
    async with server_factory() as srv, srv.session("alice", transport) as s:
        error, reply = await srv.call(
            s, "upsert_summary", sessionId="chat-1", summary="Set up CI.", title="CI"
        )
        assert not error and "version 1" in reply and reply.count("Z") >= 1
        error, reply = await srv.call(
            s, "append_summary", sessionId="chat-1", content="Fixed the flaky test."
        )
        assert not error and "version 2" in reply

        error, reply = await srv.call(s, "get_summary", sessionId="chat-1")
        assert not error
        assert "Set up CI.\n\nFixed the flaky test." in reply
        assert "# CI" in reply and "version 2 of 2" in reply

        error, reply = await srv.call(s, "get_summary", sessionId="chat-1", maxLength=5)
        assert not error and "test." in reply and "Set" not in reply  # the newest text first
        assert 'earlier text from get_summary(sessionId="chat-1", offset=' in reply
        error, reply = await srv.call(s, "get_summary", sessionId="chat-1", maxLength=5, offset=0)
        assert not error and "Set u" in reply and "Set up" not in reply
        # Following the continuation reads the next 5 characters, not a whole reply's worth.
        assert 'the rest from get_summary(sessionId="chat-1", offset=5, maxLength=5)' in reply
        error, reply = await srv.call(s, "get_summary", sessionId="chat-1", version=1)
        assert not error and "version 1 of 2" in reply and "Fixed" not in reply and "Set up CI." in reply
        error, reply = await srv.call(s, "get_summary", sessionId="chat-1", version=7)
        assert error and "versions 1 to 2" in reply

        error, reply = await srv.call(s, "update_summary_metadata", sessionId="chat-1", tags=["ci", "tests"])
        assert not error and "no new version" in reply

        error, reply = await srv.call(s, "list_summaries")
        assert not error
        assert "chat-1 | CI" in reply and "2 versions" in reply and "tags: ci, tests" in reply

        error, reply = await srv.call(s, "get_session_history", sessionId="chat-1")
        assert not error
        assert reply.index("## Version 2") < reply.index("## Version 1")
        assert "Fixed the flaky test." in reply


@pytest.mark.anyio
async def test_metadata_update_keeps_version_count_and_timestamp(server_factory) -> None:
    async with server_factory() as srv, srv.session("alice") as s:
        await srv.call(s, "upsert_summary", sessionId="x", summary="one")
        await srv.call(s, "upsert_summary", sessionId="x", summary="two")
        _, before = await srv.call(s, "get_summary", sessionId="x")
        error, _ = await srv.call(s, "update_summary_metadata", sessionId="x", title="Renamed")
        assert not error
        _, after = await srv.call(s, "get_summary", sessionId="x")
        stamp = before.split("updated ")[1].split("]")[0]
        assert f"updated {stamp}" in after and "version 2 of 2" in after and "# Renamed" in after
        error, reply = await srv.call(s, "update_summary_metadata", sessionId="x")
        assert error and "title, tags" in reply


@pytest.mark.slow
@pytest.mark.anyio
async def test_session_errors_are_clear_tool_errors(server_factory, vault_root: Path) -> None:
    async with server_factory(max_content_chars=100) as srv, srv.session("alice") as s:
        error, reply = await srv.call(s, "get_summary", sessionId="missing")
        assert error and "list_summaries" in reply
        error, reply = await srv.call(s, "get_session_history", sessionId="missing")
        assert error and "No session 'missing'" in reply
        error, reply = await srv.call(s, "upsert_summary", sessionId="x", summary="  ")
        assert error and "empty" in reply
        error, reply = await srv.call(s, "append_summary", sessionId="x", content="y" * 101)
        assert error and "limit is 100" in reply
        error, reply = await srv.call(s, "list_summaries", sortBy="size")
        assert error
        for text in (reply,):
            assert "Traceback" not in text and str(vault_root) not in text


@pytest.mark.anyio
async def test_reads_of_a_new_token_return_nothing_and_create_nothing(
    server_factory, vault_root: Path
) -> None:
    async with server_factory() as srv, srv.session("fresh") as s:
        error, reply = await srv.call(s, "list_summaries")
        assert not error and "No sessions" in reply
        error, reply = await srv.call(s, "get_summary", sessionId="a")
        assert error and "No session" in reply
        error, reply = await srv.call(s, "upsert_summary", sessionId="a", summary="")
        assert error
        assert not (vault_root / "fresh").exists()
        error, _ = await srv.call(s, "upsert_summary", sessionId="a", summary="now it exists")
        assert not error
        assert (vault_root / "fresh" / SIDECAR_DIR).is_dir()


@pytest.mark.slow
@pytest.mark.anyio
async def test_concurrent_appends_from_twenty_clients_lose_nothing(
    server_factory, vault_root, tmp_path
) -> None:
    async with server_factory() as srv:

        async def client(n: int) -> None:
            async with srv.session("alice") as s:
                error, reply = await srv.call(
                    s, "append_summary", sessionId="shared", content=f"note {n:02d}"
                )
                assert not error, reply

        await asyncio.gather(*(client(n) for n in range(20)))
        async with srv.session("alice") as s:
            _, latest = await srv.call(s, "get_summary", sessionId="shared")
            _, history = await srv.call(s, "get_session_history", sessionId="shared")
        assert all(f"note {n:02d}" in latest for n in range(20))
        assert "version 20 of 20" in latest
        assert history.count("## Version ") == 20
    # The files alone (a copy without .memvault/) hold every version too.
    copy = tmp_path / "copy"
    shutil.copytree(vault_root / "alice", copy, ignore=shutil.ignore_patterns(SIDECAR_DIR))
    with Sidecar.open(copy) as sidecar:
        sync.sync(sidecar, copy)
        versions = SessionSummaries(sidecar, max_chars=100_000).history("shared")
    assert [v.version for v in versions] == list(range(20, 0, -1))
    assert all(f"note {n:02d}" in versions[0].summary for n in range(20))


@pytest.mark.slow
@pytest.mark.anyio
async def test_sessions_survive_a_restart_and_tokens_are_isolated(server_factory) -> None:
    async with server_factory() as srv:
        async with srv.session("alice") as s:
            await srv.call(s, "upsert_summary", sessionId="x", summary="alice's text", tags=["mine"])
        async with srv.session("bob", "sse") as s:
            await srv.call(s, "upsert_summary", sessionId="y", summary="bob's text")
    async with server_factory() as srv:
        async with srv.session("alice") as s:
            error, reply = await srv.call(s, "get_summary", sessionId="x")
            assert not error and "alice's text" in reply
            _, listing = await srv.call(s, "list_summaries")
            assert "x |" in listing and "y |" not in listing
            error, _ = await srv.call(s, "get_summary", sessionId="y")
            assert error
        async with srv.session("bob") as s:
            _, listing = await srv.call(s, "list_summaries", tag="mine")
            assert "No sessions tagged 'mine'" in listing


@pytest.mark.slow
@pytest.mark.anyio
async def test_session_replies_stay_within_the_reply_limit(server_factory) -> None:
    limit = 2000
    async with server_factory(max_reply_chars=limit) as srv, srv.session("alice") as s:
        for n in range(8):
            await srv.call(s, "upsert_summary", sessionId="long", summary=f"{n} " + "word " * 100)
        for n in range(60):
            await srv.call(s, "upsert_summary", sessionId=f"s{n:02d}", summary="short")
        _, history = await srv.call(s, "get_session_history", sessionId="long")
        assert len(history) <= limit and "every version is kept" in history
        _, listing = await srv.call(s, "list_summaries", limit=200)
        assert len(listing) <= limit and "offset=" in listing
        await srv.call(s, "upsert_summary", sessionId="big", summary="z" * 5000)
        _, big = await srv.call(s, "get_summary", sessionId="big")
        assert len(big) <= limit and "earlier text from" in big


@pytest.mark.slow
@pytest.mark.anyio
async def test_tool_groups_select_session_and_graph_tools(server_factory) -> None:
    async with server_factory(tools=("sessions",)) as srv, srv.session("alice") as s:
        names = {t.name for t in (await s.list_tools()).tools}
    assert "upsert_summary" in names and "get_session_history" in names
    assert "read_graph" not in names and "write_memory" not in names
    async with server_factory(tools=("memories",)) as srv, srv.session("alice") as s:
        names = {t.name for t in (await s.list_tools()).tools}
    assert "upsert_summary" not in names and "create_entities" not in names


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_long_session_reads_whole_by_paging(server_factory) -> None:
    parts = [f"Step {i:04d}: " + " ".join(["did things"] * 8) for i in range(900)]
    async with server_factory() as srv, srv.session("alice") as s:
        for chunk in range(0, len(parts), 300):
            error, _ = await srv.call(
                s, "append_summary", sessionId="long", content="\n".join(parts[chunk : chunk + 300])
            )
            assert not error
        error, reply = await srv.call(s, "get_summary", sessionId="long")
        assert not error and parts[-1] in reply and "the newest" in reply  # cut: the newest end shown
        whole, offset = [], 0
        for _ in range(500):
            error, reply = await srv.call(s, "get_summary", sessionId="long", offset=offset)
            assert not error, reply
            body = reply.split("\n", 3)[3]
            note = re.search(r"\n\[characters [\d,]+ to [\d,]+ of [\d,]+;.*\]\Z", body)
            assert note, body[-300:]
            whole.append(body[: note.start()])
            more = re.search(r"the rest from .*offset=(\d+)\)", note.group(0))
            if not more:
                break
            offset = int(more.group(1))
        assert "".join(whole) == "\n\n".join("\n".join(parts[c : c + 300]) for c in range(0, 900, 300))


@pytest.mark.anyio
async def test_history_shows_the_text_of_short_old_versions_after_a_long_one(server_factory) -> None:
    async with server_factory(max_reply_chars=3000) as srv, srv.session("alice") as s:
        await srv.call(s, "upsert_summary", sessionId="h", summary="Short first version.")
        await srv.call(s, "upsert_summary", sessionId="h", summary="Long. " + "x" * 2900)
        await srv.call(s, "upsert_summary", sessionId="h", summary="Short third version.")
        error, reply = await srv.call(s, "get_session_history", sessionId="h")
    assert not error
    assert "Short third version." in reply and "Short first version." in reply
    assert "## Version 2" in reply and "2,906 characters (text left out)" in reply
    assert "version=N" in reply


@pytest.mark.anyio
async def test_a_history_with_gaps_counts_its_versions_truly(server_factory, vault_root: Path) -> None:
    folder = vault_root / "alice" / "sessions"
    folder.mkdir(parents=True)
    lines = [
        {
            "session": "gaps",
            "version": n,
            "ts": f"2026-03-0{n % 9 + 1}T10:00:00.000Z",
            "title": None,
            "tags": [],
            "summary": f"text {n}",
        }
        for n in (1, 2, 6)
    ]
    (folder / "gaps.history.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    async with server_factory() as srv, srv.session("alice") as s:
        error, reply = await srv.call(s, "get_summary", sessionId="gaps")
        assert not error and "text 6" in reply
        assert "version 6 of 6 (3 kept)" in reply and "of 3" not in reply
        error, reply = await srv.call(s, "get_summary", sessionId="gaps", version=4)
        assert error and "versions 1 to 2, 6" in reply


@pytest.mark.anyio
async def test_a_sessions_file_in_place_of_the_folder_is_named_not_an_internal_error(
    server_factory, vault_root: Path
) -> None:
    (vault_root / "alice").mkdir()
    (vault_root / "alice" / "sessions").write_text("not a folder")
    async with server_factory() as srv, srv.session("alice") as s:
        error, reply = await srv.call(s, "upsert_summary", sessionId="x", summary="text")
    assert error and "internal error" not in reply
    assert "'sessions' in this vault is a file" in reply and str(vault_root) not in reply


def test_one_session_costs_at_most_its_bound_and_a_refusal_loses_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    with Sidecar.open(folder) as sidecar:
        sync.sync(sidecar, folder)
        s = SessionSummaries(sidecar, max_chars=100, clock=Clock(), files=sync.SessionFiles(folder))
        with pytest.raises(TooLarge, match=r"history.*Nothing was saved.*new sessionId"):
            for n in range(10_000):
                s.upsert("big", f"{n:04d} " + "y" * 90)
        latest, count = s.latest("big")
        assert count < 100 and latest.summary == f"{count - 1:04d} " + "y" * 90
        s.upsert("big-2", "a new session starts")
    history = (folder / "sessions" / "big.history.jsonl").read_text().splitlines()
    assert len(history) == count


def test_the_sidecar_holds_each_append_once_not_the_whole_text_again(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    with Sidecar.open(folder) as sidecar:
        sync.sync(sidecar, folder)
        s = SessionSummaries(sidecar, max_chars=400_000, clock=Clock(), files=sync.SessionFiles(folder))
        for n in range(400):
            s.append("long", f"{n:03d} " + "z" * 500)
        latest, count = s.latest("long")
        assert count == 400 and latest.summary.count("z" * 500) == 400
        assert s.version("long", 3).summary.count("z" * 500) == 3  # type: ignore[union-attr]
    history = (folder / "sessions" / "long.history.jsonl").stat().st_size
    sidecar_bytes = sum(p.stat().st_size for p in (folder / SIDECAR_DIR).iterdir())
    # The whole texts of all versions would be 400 * 200 * 504 characters (40 MB).
    assert sidecar_bytes < 4 * history + 1_000_000, (sidecar_bytes, history)
    with Sidecar.open(folder) as sidecar:  # and read back from the files alone
        shutil.rmtree(folder / SIDECAR_DIR)
    with Sidecar.open(folder) as sidecar:
        sync.sync(sidecar, folder)
        assert SessionSummaries(sidecar, max_chars=400_000).latest("long")[0] == latest
    sidecar_bytes = sum(p.stat().st_size for p in (folder / SIDECAR_DIR).iterdir())
    assert sidecar_bytes < 4 * history + 1_000_000, (sidecar_bytes, history)
