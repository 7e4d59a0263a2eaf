"""recall and memory_stats: ranking sanity, filters, context, stats figures, tool groups."""

from __future__ import annotations

import asyncio
import gc
import logging
import re
import sys
import threading
import time
import tracemalloc
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from conftest import wait_for

from memvault.config import Settings
from memvault.disk.markdown import Memory
from memvault.errors import InvalidArgument, TooLarge
from memvault.ops import recall
from memvault.ops.recall import Recaller
from memvault.ops.service import Service
from memvault.ops.store import Store
from memvault.search.embedders import EmbedderUnavailable, FloatMatrix, Traits
from memvault.search.embedders.hash import HashEmbedder
from memvault.search.embeddings import Embeddings
from memvault.search.ranking import DEFAULT_WEIGHTS, FLOOR
from memvault.search.rerankers import RerankerUnavailable, Reranking
from memvault.search.snippets import SNIPPET_CHARS, snippet

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.filterwarnings("ignore:Callback with id .* already exists for watch:RuntimeWarning"),
]

LINE = re.compile(r"^(?P<name>\S+) \| (?P<title>[^|]+) \| (?P<score>\d\.\d\d) \| (?P<snippet>.*)$")


class Synonyms:
    """A stand-in for a real model: words of one meaning share one direction, so paraphrases meet."""

    name = "synonyms-v1"
    dim = 8
    groups = (
        {"automobile", "car", "vehicle"},
        {"colour", "color", "paint", "red"},
        {"feline", "cat", "kitten"},
        {"meal", "food", "salmon", "eat", "eats"},
    )

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"\w+", text.lower()):
                for i, group in enumerate(self.groups):
                    if word in group:
                        out[row, i] += 1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


async def make(
    settings: Settings, embedder: object | None = None, clock: Clock | None = None
) -> tuple[Service, Store, Recaller]:
    embeddings = Embeddings(loader=lambda: embedder) if embedder is not None else None  # type: ignore[arg-type, return-value]
    service = Service(settings, clock=clock or Clock(), embeddings=embeddings)
    return service, service.store, recaller_of(service)


def recaller_of(service: Service, reranking: Reranking | None = None) -> Recaller:
    return Recaller(service.store, service.registry, service.embeddings, reranking=reranking)


async def settle(service: Service) -> None:
    assert await asyncio.to_thread(service.embeddings.wait_idle, 20)


def names(found: recall.Recall) -> list[str]:
    return [("archive/" if r.memory.archived else "") + r.memory.id for r in found.results]


# ---------------------------------------------------------------------------- ranking sanity


async def test_a_paraphrase_is_found_by_vectors(make_settings: Callable[..., Settings]):
    service, store, recaller = await make(make_settings(), Synonyms())
    try:
        await store.write("t", title="Garage", content="The car is painted red.")
        await store.write("t", title="Pets", content="The kitten eats salmon.")
        await settle(service)
        lexical = await store.find("t", query="automobile colour")
        assert lexical.memories == []  # no word in common
        found = await recaller.recall("t", "automobile colour")
        assert names(found)[0] == "garage.md"
        assert found.vectors == "synonyms-v1"
        assert names(await recaller.recall("t", "feline meal"))[0] == "pets.md"
    finally:
        await service.close()


class Crowded(Synonyms):
    """A stand-in for a model such as E5, whose cosines crowd together: every vector shares one
    large direction, so two unrelated texts meet at about 0.95 and two of one meaning at 1."""

    name = "crowded-v1"
    traits = Traits(crowds=True)  # as the sentence-transformers and openai embedders say of themselves

    def embed(self, texts: Sequence[str]) -> FloatMatrix:
        out = super().embed(texts)
        out[:, -1] = 3.0  # the direction every text shares
        return out / np.linalg.norm(out, axis=1, keepdims=True)


async def test_meaning_still_ranks_with_a_model_whose_cosines_crowd_together(
    make_settings: Callable[..., Settings],
):
    clock = Clock()
    service, store, recaller = await make(make_settings(), Crowded(), clock)
    try:
        for title, content in (
            ("Build status", "Repair status of the build server: green again."),
            ("Garage", "The car needs new brakes; the repair is booked."),
            ("Lunch", "Soup on Tuesdays."),
            ("Reading", "Two chapters before bed."),
            ("Plants", "Water the fern weekly."),
            ("Music", "Practise scales daily."),
        ):
            await store.write("t", title=title, content=content)
            clock.now += timedelta(hours=2)  # apart: no memory reads another as its context
        await settle(service)
        found = await recaller.recall("t", "automobile repair status")
        # The build note holds two of the words, the garage note one, and the meaning: dividing
        # crowded cosines by the best added about the same to every note, so words alone ranked.
        assert names(found)[:2] == ["garage.md", "build-status.md"]
    finally:
        await service.close()


async def test_an_exact_rare_term_is_found_lexically(make_settings: Callable[..., Settings]):
    service, store, recaller = await make(make_settings())
    try:
        for i in range(30):
            await store.write("t", title=f"Deploy note {i}", content=f"Deploy step {i}: restart the service.")
        await store.write("t", title="Token rotation", content="Rotate the key ZX81-QR7 every quarter.")
        await settle(service)
        found = await recaller.recall("t", "ZX81-QR7")
        assert names(found)[0] == "token-rotation.md"
        assert "ZX81-QR7" in found.results[0].snippet
        assert found.results[0].score == 1.0
    finally:
        await service.close()


async def test_a_word_the_vault_holds_matches_itself_and_a_misspelt_one_its_near_words(
    make_settings: Callable[..., Settings],
):
    # Search lets a typed word match its prefixes and typos; recall asks in whole words, where
    # "role" finding "roll" and "rule" (rare words, high idf) pushes the answer down.
    clock = Clock()
    service, store, recaller = await make(make_settings(), Synonyms(), clock)
    try:
        for title, content in (
            ("Exact", "the matric was lost"),
            ("Prefix", "the matrices were inverted"),
            ("Typo", "the metric went up"),
        ):
            await store.write("t", title=title, content=content)
            clock.now += timedelta(hours=2)  # no neighbours' words lent
        await settle(service)
        assert names(await recaller.recall("t", "matric")) == ["exact.md"]
        assert names(await recaller.recall("t", "metrik")) == ["typo.md"]  # not in the vault: near words
    finally:
        await service.close()


async def test_importance_breaks_a_tie(make_settings: Callable[..., Settings]):
    service, store, recaller = await make(make_settings())
    try:
        await store.write("t", title="Alpha", content="The build uses gradle caches.", importance=0.2)
        await store.write("t", title="Beta", content="The build uses gradle caches.", importance=0.9)
        await settle(service)
        found = await recaller.recall("t", "gradle caches")
        assert names(found)[:2] == ["beta.md", "alpha.md"]
        assert found.results[1].score < 1.0
    finally:
        await service.close()


async def test_recent_access_breaks_a_tie(make_settings: Callable[..., Settings]):
    clock = Clock()
    service, store, recaller = await make(make_settings(ttl_p2_days=1000), clock=clock)
    try:
        # Written 60 days apart (so they are not neighbours), identical otherwise.
        await store.write("t", title="Alpha", content="The build uses gradle caches.")
        clock.now += timedelta(days=60)
        await store.write("t", title="Beta", content="The build uses gradle caches.")
        clock.now += timedelta(days=60)
        alpha = (await store.find("t", filenames=["alpha.md"])).memories
        await store.touch("t", alpha)  # alpha was just used; beta not for 60 days
        await settle(service)
        assert names(await recaller.recall("t", "gradle caches"))[:2] == ["alpha.md", "beta.md"]
    finally:
        await service.close()


async def test_a_terse_memory_is_found_through_its_neighbours(make_settings: Callable[..., Settings]):
    clock = Clock()
    service, store, recaller = await make(make_settings(), clock=clock)
    try:
        # A conversation saved turn by turn: the answer alone never names what it is about.
        await store.write(
            "chat", title="Q1", content="Which flavour of ice cream did you make for the party?"
        )
        clock.now += timedelta(seconds=5)
        await store.write("chat", title="A1", content="Chocolate and vanilla swirl, my favourite.")
        clock.now += timedelta(days=3)
        for i in range(12):
            await store.write(
                "chat", title=f"Other {i}", content=f"Unrelated chatter number {i} about the weather."
            )
            clock.now += timedelta(seconds=5)
        await settle(service)
        found = names(await recaller.recall("chat", "party ice cream"))
        assert found[0] == "q1.md"
        assert "a1.md" in found[:3]
    finally:
        await service.close()


async def test_a_long_memory_stands_on_its_own_beside_a_hit(make_settings: Callable[..., Settings]):
    clock = Clock()
    service, store, recaller = await make(make_settings(), Synonyms(), clock=clock)
    filler = " ".join(f"word{i}" for i in range(200))
    try:
        # Two exchanges days apart, the same question each time: after one a terse answer, after
        # the other (written later, so it is the more recent) a long reply about something else.
        for question, after in (
            ("Which flavour of ice cream did you make?", ("Answer", "Chocolate and vanilla swirl.")),
            ("Which flavour of ice cream did you bake?", ("Reply", f"Here is a long list: {filler}.")),
        ):
            await store.write("chat", title="Question", content=question)
            clock.now += timedelta(seconds=5)
            await store.write("chat", title=after[0], content=after[1])
            clock.now += timedelta(days=3)
        await settle(service)
        found = names(await recaller.recall("chat", "flavour ice cream"))
        assert found.index("answer.md") < found.index("reply.md")
    finally:
        await service.close()


def test_snippet_shows_the_part_that_matches():
    text = "Intro words " * 30 + "the deploy script needs the --force flag on Fridays. " + "Outro words " * 30
    cut = snippet(text, {"deploy", "force"})
    assert "deploy script" in cut and "--force" in cut
    assert cut.startswith("…") and cut.endswith("…")
    assert len(cut) <= SNIPPET_CHARS + 2
    assert snippet("short\n\ntext", {"x"}) == "short text"


# ---------------------------------------------------------------------------- filters and archive


async def test_tags_priority_and_archive_filters(make_settings: Callable[..., Settings]):
    service, store, recaller = await make(make_settings())
    try:
        await store.write(
            "t", title="Pg deploy", content="Postgres deploy steps.", tags=["deploy", "pg"], priority="P1"
        )
        await store.write(
            "t", title="App deploy", content="App deploy steps.", tags=["deploy"], priority="P2"
        )
        await store.write("t", title="Old deploy", content="Old postgres deploy steps.", priority="P2")
        await store.evict("t")  # nothing stale yet
        state = await store.state("t")
        await asyncio.to_thread(state.vault.move, "old-deploy.md", to_archive=True)
        await asyncio.to_thread(service.apply_changes, "t", [], True)
        await settle(service)

        assert set(names(await recaller.recall("t", "deploy"))) == {"pg-deploy.md", "app-deploy.md"}
        assert names(await recaller.recall("t", "deploy", tags=["PG", "deploy"])) == ["pg-deploy.md"]
        assert names(await recaller.recall("t", "deploy", priority="P2")) == ["app-deploy.md"]
        assert names(await recaller.recall("t", "deploy", priority="p0,P1")) == ["pg-deploy.md"]
        assert "archive/old-deploy.md" in names(
            await recaller.recall("t", "postgres deploy", include_archive=True)
        )
        with pytest.raises(InvalidArgument, match="priority"):
            await recaller.recall("t", "deploy", priority="P7")
        with pytest.raises(InvalidArgument, match="empty"):
            await recaller.recall("t", "  ")
        assert (await recaller.recall("t", "deploy", tags=["nope"])).results == []
    finally:
        await service.close()


async def test_recall_of_an_unknown_token_creates_nothing(make_settings: Callable[..., Settings]):
    settings = make_settings()
    service, _store, recaller = await make(settings)
    try:
        assert (await recaller.recall("nobody", "anything")).results == []
        assert not (settings.root / "nobody").exists()
    finally:
        await service.close()


async def test_a_pasted_document_is_no_query_for_any_caller(make_settings: Callable[..., Settings]):
    settings = make_settings()
    service, store, recaller = await make(settings)
    try:
        await store.write("t", title="Deploy", content="Blue/green deploys on Fridays.")
        with pytest.raises(TooLarge, match="query is 3,000 characters"):
            await recaller.recall("t", ("deploy " * 500)[:3000])
        assert names(await recaller.recall("t", "deploy")) == ["deploy.md"]
    finally:
        await service.close()


# ---------------------------------------------------------------------------- through the tools


@pytest.mark.slow
async def test_recall_tool_replies_with_compact_lines_and_counts_hits(server_factory):
    async with server_factory() as srv:
        async with srv.session("tok") as session:
            await srv.call(
                session, "write_memory", title="Deploy notes", content="Blue/green deploys on Fridays. " * 40
            )
            await srv.call(session, "write_memory", title="Cat", content="The cat eats salmon.")
            service: Service = srv.app.state.service
            store = service.store
            await settle(service)
            is_error, reply = await srv.call(session, "recall", query="friday deploys", limit=5)
            assert not is_error, reply
            lines = reply.splitlines()
            assert "best first" in lines[0]
            first = LINE.match(lines[1])
            assert first is not None, lines[1]
            assert first["name"] == "deploy-notes.md" and first["score"] == "1.00"
            assert len(first["snippet"]) <= SNIPPET_CHARS + 2  # not the whole file
            assert "read_memory(filenames=" in lines[-1]

            state = await store.state("tok")
            await service.idle()  # accesses are recorded after the reply
            counts = state.sidecar.access_counts()
            assert counts["deploy-notes.md"][1] == 1  # a recall hit
            await srv.call(session, "read_memory", filenames=["deploy-notes.md"])
            await service.idle()
            assert state.sidecar.access_counts()["deploy-notes.md"] == (counts["deploy-notes.md"][0] + 1, 1)

            is_error, reply = await srv.call(session, "recall", query="zzqx")
            assert not is_error and reply.startswith("Nothing matches")
            is_error, reply = await srv.call(session, "recall", query="deploy", priority="P9")
            assert is_error and "priority" in reply


@pytest.mark.slow
async def test_memory_stats_figures_on_a_small_vault(server_factory, vault_root):
    clock = Clock()
    async with server_factory(clock=clock, capacity=3, embedder="hash", evict_grace_hours=0) as srv:
        async with srv.session("tok") as session:
            await srv.call(
                session, "write_memory", title="Project", content="Alpha ships in May.", priority="P1"
            )
            clock.now += timedelta(hours=2)  # not written together, so recalling one never brings the other
            await srv.call(session, "write_memory", title="Rule", content="Never force-push.", priority="P0")
            clock.now += timedelta(days=40)
            for name in ("One", "Two", "Three"):
                await srv.call(session, "write_memory", title=name, content=f"Scratch note {name}.")
                clock.now += timedelta(minutes=1)
            archived = vault_root / "tok" / "archive"
            archived.mkdir()
            (archived / "ancient.md").write_text("# Ancient\n\nLong gone.\n", encoding="utf-8")
            service: Service = srv.app.state.service
            store = service.store
            await asyncio.to_thread(service.apply_changes, "tok", [], True)
            await settle(service)
            # No automatic sweep during the test: the stats report what the next one would do.
            (await store.state("tok")).sidecar.set_state("last_eviction", clock.now.isoformat())
            await srv.call(session, "recall", query="force push")
            await srv.call(session, "recall", query="qqqzzz")
            is_error, reply = await srv.call(session, "memory_stats")
            assert not is_error, reply
    assert "Memories: 5 hot (P0 1, P1 1, P2 3), 1 archived." in reply
    assert "Vectors: 6/6 memories embedded with hash-512." in reply
    assert "Searches: 2, 1 found nothing (50.0% miss rate)." in reply
    assert "Not accessed in 30 days: 1 hot memory (project.md)." in reply  # P0 rule.md was just recalled
    assert "Oldest: project.md (2026-03-01T12:00:00.000Z); newest: three.md" in reply
    assert "Next eviction would archive 2: " in reply and "one.md" in reply and "two.md" in reply


@pytest.mark.slow
@pytest.mark.parametrize("groups", ["memories", "memories,recall"])
async def test_tool_groups_select_recall(server_factory, groups):
    async with server_factory(tools=tuple(groups.split(","))) as srv:
        async with srv.session("tok") as session:
            tools = {tool.name for tool in (await session.list_tools()).tools}
    assert "read_memory" in tools
    assert ("recall" in tools) == ("recall" in groups)
    assert ("memory_stats" in tools) == ("recall" in groups)


def test_wordllama_is_the_default_and_hash_the_fallback(caplog: pytest.LogCaptureFixture):
    assert Settings().embedder == "wordllama"
    assert Embeddings("wordllama").load().name.startswith("wordllama")
    assert HashEmbedder().name == Embeddings().load().name  # Embeddings' own default stays hash

    def unavailable() -> HashEmbedder:
        raise EmbedderUnavailable("the wordllama package is not installed")

    embeddings = Embeddings("wordllama", loader=unavailable)
    with caplog.at_level("WARNING"):
        assert embeddings.load().name == HashEmbedder().name
    assert [r.levelname for r in caplog.records] == ["WARNING"]
    assert embeddings.status().fallback == "wordllama could not load: the wordllama package is not installed"


# ---------------------------------------------------------------------------- lifecycle: supersedes


def frontmatter_of(path) -> dict:
    import yaml

    text = path.read_text(encoding="utf-8")
    return yaml.safe_load(text[4 : text.index("\n---\n", 4)])


@pytest.mark.slow
async def test_supersede_chains_archive_the_old_and_link_both_ways(server_factory, vault_root):
    async with server_factory() as srv:
        async with srv.session("tok") as session:
            await srv.call(session, "write_memory", title="Deploy v1", content="Deploy with Capistrano.")
            is_error, reply = await srv.call(
                session,
                "write_memory",
                title="Deploy v2",
                content="Deploy with Kamal.",
                supersedes=["deploy-v1"],
            )
            assert not is_error and "Superseded and archived: deploy-v1.md." in reply, reply
            is_error, reply = await srv.call(
                session,
                "write_memory",
                title="Deploy v3",
                content="Deploy with k8s.",
                supersedes=["deploy-v2.md"],
            )
            assert not is_error, reply
            _, titles = await srv.call(session, "list_memory_titles")
            is_error, archived = await srv.call(session, "recall", query="deploy", includeArchive=True)
    folder = vault_root / "tok"
    assert [line.split("|")[0] for line in titles.splitlines()] == ["deploy-v3.md"]
    assert "archive/deploy-v1.md" in archived and "archive/deploy-v2.md" in archived
    v1 = frontmatter_of(folder / "archive" / "deploy-v1.md")
    v2 = frontmatter_of(folder / "archive" / "deploy-v2.md")
    v3 = frontmatter_of(folder / "deploy-v3.md")
    assert v1["supersededBy"] == "deploy-v2.md" and "supersedes" not in v1
    assert v2["supersedes"] == ["deploy-v1.md"] and v2["supersededBy"] == "deploy-v3.md"
    assert v3["supersedes"] == ["deploy-v2.md"] and "supersededBy" not in v3
    assert "Deploy with Capistrano." in (folder / "archive" / "deploy-v1.md").read_text(encoding="utf-8")


@pytest.mark.slow
async def test_p0_memories_are_not_superseded_and_the_reply_says_so(server_factory, vault_root):
    async with server_factory() as srv:
        async with srv.session("tok") as session:
            await srv.call(session, "write_memory", title="Rule", content="Never force-push.", priority="P0")
            await srv.call(session, "write_memory", title="Old tip", content="Use rebase.")
            is_error, reply = await srv.call(
                session,
                "write_memory",
                title="New rule",
                content="Force-push only to your own branches.",
                supersedes=["rule.md", "old-tip.md"],
            )
    assert not is_error, reply
    assert "Superseded and archived: old-tip.md." in reply
    assert "NOT superseded: rule.md, because it is P0 (permanent)" in reply
    folder = vault_root / "tok"
    assert (folder / "rule.md").is_file() and "supersededBy" not in frontmatter_of(folder / "rule.md")
    assert frontmatter_of(folder / "new-rule.md")["supersedes"] == ["old-tip.md"]


@pytest.mark.slow
async def test_superseding_a_missing_memory_writes_nothing(server_factory, vault_root):
    async with server_factory() as srv:
        async with srv.session("tok") as session:
            await srv.call(session, "write_memory", title="Keep", content="Stays hot.")
            is_error, reply = await srv.call(
                session, "write_memory", title="New", content="Text.", supersedes=["keep.md", "nope.md"]
            )
            assert is_error and "nope.md" in reply
            is_error, reply = await srv.call(
                session, "write_memory", title="New", content="Text.", supersedes=["../escape.md"]
            )
            assert is_error
    assert sorted(p.name for p in (vault_root / "tok").glob("*.md")) == ["keep.md"]


async def test_important_memories_are_never_evicted(make_settings: Callable[..., Settings]):
    service, store, _ = await make(make_settings(capacity=0, evict_grace_hours=0))
    try:
        await store.write(
            "t", title="Vital", content="The root password lives in the vault.", importance=0.95
        )
        await store.write("t", title="Trivia", content="Lunch was pasta.", importance=0.5)
        assert [e.id for e in await store.evict("t")] == ["trivia.md"]
    finally:
        await service.close()


# ---------------------------------------------------------------------------- floor, order, accesses, dates

EDITOR_VAULT = (
    ("Editor preference", "The user likes Neovim with the gruvbox theme; never suggest VS Code."),
    ("Deploy notes", "Blue/green deploys on Fridays; run the migrations first."),
    ("Cat", "The cat eats salmon twice a day."),
    ("Standup", "Standup is at 9:30 in the small meeting room."),
    ("Travel", "Flights to Lisbon are booked for the 12th of May."),
)


@pytest.mark.slow
async def test_one_relevant_memory_of_five_comes_first_and_alone_counts_as_used(server_factory):
    async with server_factory() as srv:
        async with srv.session("tok") as session:
            for title, content in EDITOR_VAULT:
                await srv.call(session, "write_memory", title=title, content=content)
            service: Service = srv.app.state.service
            store = service.store
            await settle(service)
            is_error, reply = await srv.call(session, "recall", query="what editor does the user like?")
            assert not is_error, reply
            lines = [line for line in reply.splitlines() if LINE.match(line)]
            assert LINE.match(lines[0])["name"] == "editor-preference.md"  # type: ignore[index]
            state = await store.state("tok")
            await service.idle()
            hits = {name for name, (_, recalled) in state.sidecar.access_counts().items() if recalled}
            assert hits == {"editor-preference.md"}


@pytest.mark.slow
async def test_beside_a_clear_match_the_unrelated_memories_are_not_listed(server_factory):
    # Issue 50: the editor note holds every word of the question; the deploy notes, written just
    # after it, were listed on the score they borrowed from it, the others on faint cosines.
    async with server_factory() as srv:
        async with srv.session("tok") as session:
            for title, content in EDITOR_VAULT:
                await srv.call(session, "write_memory", title=title, content=content)
            await settle(srv.app.state.service)
            for query in ("which editor does the user like", "what editor does the user like?"):
                is_error, reply = await srv.call(session, "recall", query=query)
                assert not is_error, reply
                lines = [LINE.match(line) for line in reply.splitlines() if LINE.match(line)]
                assert [m["name"] for m in lines] == ["editor-preference.md"], reply  # type: ignore[index]
                assert reply.startswith("1 memory for")


async def test_memories_that_all_match_are_all_listed_beside_a_clear_match(
    make_settings: Callable[..., Settings],
):
    service, store, recaller = await make(make_settings())
    try:
        editors = (
            ("Editor preference", "The user likes Neovim with the gruvbox theme; never suggest VS Code."),
            ("Editor font", "In any editor the user likes JetBrains Mono at 13 points."),
            ("Editor at work", "At work the user likes the editor the team shares: IntelliJ."),
        )
        for title, content in (*editors, *EDITOR_VAULT[1:]):
            await store.write("t", title=title, content=content)
        await settle(service)
        found = await recaller.recall("t", "which editor does the user like")
        assert sorted(names(found)) == ["editor-at-work.md", "editor-font.md", "editor-preference.md"]
        # What is asked for only in part is no clear match: the floor alone applies, as before.
        found = await recaller.recall("t", "which editor does the user like for python")
        assert len(found.results) > 3
    finally:
        await service.close()


@pytest.mark.slow
async def test_the_floor_is_a_setting_and_zero_shows_every_match(server_factory):
    async with server_factory(recall_floor=0.0) as srv:
        async with srv.session("tok") as session:
            for title, content in EDITOR_VAULT:
                await srv.call(session, "write_memory", title=title, content=content)
            await settle(srv.app.state.service)
            _, reply = await srv.call(session, "recall", query="what editor does the user like?")
            assert len([line for line in reply.splitlines() if LINE.match(line)]) == len(EDITOR_VAULT)


def test_the_floor_setting_is_checked():
    with pytest.raises(InvalidArgument, match="MEMVAULT_RECALL_FLOOR"):
        Settings.from_env({"MEMVAULT_RECALL_FLOOR": "1.5"})
    with pytest.raises(InvalidArgument, match="MEMVAULT_RECALL_FLOOR"):
        Settings.from_env({"MEMVAULT_RECALL_FLOOR": "-0.1"})
    assert Settings.from_env({"MEMVAULT_RECALL_FLOOR": "0.3"}).recall_floor == 0.3
    assert Settings().recall_floor == FLOOR  # the tool's default is the ranking's


async def test_scores_are_shown_in_the_order_they_ranked(make_settings: Callable[..., Settings]):
    clock = Clock()
    service, store, recaller = await make(make_settings(), clock=clock)
    try:
        # Two copies of one note in one conversation and a different note days later: diversity ranks
        # the copy, a close neighbour of the first pick, below the other note, so the copy's score
        # must show what ranked it, not its relevance before the penalty.
        await store.write("t", title="Gradle one", content="The gradle build cache lives on the shared disk.")
        clock.now += timedelta(seconds=5)
        await store.write("t", title="Gradle two", content="The gradle build cache lives on the shared disk!")
        clock.now += timedelta(days=10)
        other = "Our gradle build cache gets wiped every night by cron."
        await store.write("t", title="Gradle three", content=other)
        await settle(service)
        penalised = recaller.weights.replace(floor=0, context=(0.0, 0.0), neighbour=0.5, neighbour_after=0.0)
        found = await recaller.recall("t", "gradle build cache", weights=penalised)
        scores = [r.score for r in found.results]
        assert len(scores) == 3
        assert names(found)[1] == "gradle-three.md", (names(found), scores)
        assert scores == sorted(scores, reverse=True), scores
    finally:
        await service.close()


def test_only_the_first_few_and_the_strong_results_count_as_used():
    memory = Memory(id="x.md", title="x", content="")
    hits = [recall.Recalled(memory, score, "") for score in (1.0, 0.4, 0.3, 0.2, 0.6, 0.1)]
    used = recall.accessed(hits)
    assert [h.score for h in used] == [1.0, 0.4, 0.3, 0.6]


def test_a_score_lent_by_neighbours_does_not_make_a_result_used():
    memory = Memory(id="x.md", title="x", content="")
    # Second and third by score, but mostly from the words of the memories written beside them.
    hits = [recall.Recalled(memory, 1.0, ""), recall.Recalled(memory, 0.4, "", own=0.1)]
    hits += [recall.Recalled(memory, 0.6, "", own=0.3), recall.Recalled(memory, 0.7, "", own=0.45)]
    assert [(h.score, h.own) for h in recall.accessed(hits)] == [(1.0, None), (0.6, 0.3)]


async def test_after_and_before_keep_memories_created_in_that_span(make_settings: Callable[..., Settings]):
    clock = Clock()  # 2026-03-01
    service, store, recaller = await make(make_settings(ttl_p2_days=1000), clock=clock)
    try:
        await store.write("t", title="March deploy", content="Deploy the billing service.")
        clock.now += timedelta(days=31)
        await store.write("t", title="April deploy", content="Deploy the billing service again.")
        clock.now += timedelta(days=30)
        await store.write("t", title="May deploy", content="Deploy the billing service once more.")
        await settle(service)
        every = dict(weights=recaller.weights.replace(floor=0))
        assert set(names(await recaller.recall("t", "deploy billing", **every))) == {
            "march-deploy.md",
            "april-deploy.md",
            "may-deploy.md",
        }
        assert set(names(await recaller.recall("t", "deploy billing", after="2026-04-01", **every))) == {
            "april-deploy.md",
            "may-deploy.md",
        }
        assert names(
            await recaller.recall("t", "deploy billing", before="2026-04-01T00:00:00Z", **every)
        ) == ["march-deploy.md"]
        assert names(
            await recaller.recall("t", "deploy billing", after="2026-04-01", before="2026-05-01", **every)
        ) == ["april-deploy.md"]
        with pytest.raises(InvalidArgument, match="after must be an ISO date"):
            await recaller.recall("t", "deploy", after="last tuesday")
        with pytest.raises(InvalidArgument, match="earlier than before"):
            await recaller.recall("t", "deploy", after="2026-05-01", before="2026-04-01")
    finally:
        await service.close()


@pytest.mark.slow
async def test_recall_tool_takes_after_and_before(server_factory):
    async with server_factory() as srv:
        async with srv.session("tok") as session:
            await srv.call(session, "write_memory", title="Deploy", content="Deploy the billing service.")
            await settle(srv.app.state.service)
            is_error, reply = await srv.call(session, "recall", query="deploy", after="2000-01-01")
            assert not is_error and "deploy.md" in reply
            is_error, reply = await srv.call(session, "recall", query="deploy", before="2000-01-01")
            assert not is_error and reply.startswith("Nothing matches")
            is_error, reply = await srv.call(session, "recall", query="deploy", before="yesterday")
            assert is_error and "before must be an ISO date" in reply


# ---------------------------------------------------------------------------- reranking


class Prefers:
    """A stand-in cross-encoder: scores a text by whether it holds one word."""

    name = "prefers-v1"

    def __init__(self, word: str) -> None:
        self.word = word
        self.calls = 0

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        self.calls += 1
        return np.array([5.0 if self.word in text else -5.0 for text in texts])


async def test_a_reranker_reorders_the_best_candidates(make_settings: Callable[..., Settings]):
    clock = Clock()
    service, store, _ = await make(make_settings(), clock=clock)
    try:
        for i, city in enumerate(("Lisbon", "Porto", "Madrid")):
            await store.write("t", title=f"Trip {i}", content=f"The team trip goes to {city} in spring.")
            clock.now += timedelta(days=5)
        await settle(service)
        cities = {"trip-0.md": "Lisbon", "trip-1.md": "Porto", "trip-2.md": "Madrid"}
        plain = names(await recaller_of(service).recall("t", "team trip spring"))
        assert len(plain) == 3
        prefers = Prefers(cities[plain[-1]])  # the reranker prefers the one ranked last without it
        recaller = recaller_of(service, reranking=Reranking(loader=lambda: prefers))
        found = await recaller.recall("t", "team trip spring")
        assert names(found)[0] == plain[-1] and prefers.calls == 1
    finally:
        await service.close()


async def test_a_reranker_reads_the_query_without_its_relative_time_phrase(
    make_settings: Callable[..., Settings],
):
    # "10 days ago" names a span of creation times; a reranker reading its "10" would favour
    # memories holding that number, as the words once did (issue 34's dates that matched numbers).
    clock = Clock()
    service, store, _ = await make(make_settings(), clock=clock)
    asked: list[str] = []

    class Records(Prefers):
        def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
            asked.append(query)
            return super().score(query, texts)

    try:
        await store.write("t", title="Lamp", content="I went to buy a desk lamp.")
        await settle(service)
        recaller = recaller_of(service, reranking=Reranking(loader=lambda: Records("lamp")))
        clock.now += timedelta(days=10)
        assert names(await recaller.recall("t", "what did I buy 10 days ago?")) == ["lamp.md"]
        assert asked and not any("10" in q or "ago" in q for q in asked)
    finally:
        await service.close()


async def test_a_missing_reranker_leaves_recall_as_it_is_with_one_log_line(
    make_settings: Callable[..., Settings], caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)  # not installed
    service, store, plain = await make(make_settings())
    try:
        await store.write("t", title="Deploy", content="Deploy the billing service.")
        await store.write("t", title="Cat", content="The cat eats salmon.")
        await settle(service)
        reranking = Reranking("cross-encoder:/nowhere/model")
        recaller = recaller_of(service, reranking=reranking)
        with caplog.at_level(logging.WARNING, logger="memvault.search.rerankers"):
            first = await recaller.recall("t", "deploy billing")
            await recaller.recall("t", "cat")
        assert names(first) == names(await plain.recall("t", "deploy billing"))
        assert len([r for r in caplog.records if "reranker" in r.getMessage()]) == 1
        assert reranking.fallback is not None and "sentence-transformers" in reranking.fallback
    finally:
        await service.close()


async def test_a_reranker_that_fails_is_dropped_and_recall_goes_on(make_settings: Callable[..., Settings]):
    class Broken:
        name = "broken"

        def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
            raise RerankerUnavailable("it broke")

    service, store, _ = await make(make_settings())
    try:
        await store.write("t", title="Deploy", content="Deploy the billing service.")
        await settle(service)
        reranking = Reranking(loader=lambda: Broken())
        found = await recaller_of(service, reranking=reranking).recall("t", "deploy")
        assert names(found) == ["deploy.md"] and reranking.fallback == "it broke"
    finally:
        await service.close()


def test_the_reranker_setting_is_checked():
    with pytest.raises(InvalidArgument, match="MEMVAULT_RERANKER"):
        Settings.from_env({"MEMVAULT_RERANKER": "bert"})
    with pytest.raises(InvalidArgument, match="needs a model"):
        Settings.from_env({"MEMVAULT_RERANKER": "cross-encoder"})
    assert (
        Settings.from_env({"MEMVAULT_RERANKER": "cross-encoder:/models/ce"}).reranker
        == "cross-encoder:/models/ce"
    )


# ---------------------------------------------------------------------------- spread over conversations


async def test_the_last_results_spread_over_the_conversations(make_settings: Callable[..., Settings]):
    clock = Clock()
    service, store, recaller = await make(make_settings(), Synonyms(), clock=clock)
    try:
        # One matching note in an old conversation, then a conversation of a dozen notes matching
        # the same words as well (and more recent): a list of ten holds a reply from the old one.
        await store.write("chat", title="Old", content="The book, part 99.")
        clock.now += timedelta(days=3)
        for i in range(12):
            await store.write("chat", title=f"Turn {i}", content=f"The book, part {i}.")
            clock.now += timedelta(seconds=5)
        await settle(service)
        alone = recaller.weights.replace(context=(0.0, 0.0))  # each note by its own words
        found = names(await recaller.recall("chat", "book", limit=10, weights=alone))
        assert "old.md" in found
        assert found[0].startswith("turn-")
        unspread = alone.replace(neighbour=0.0)
        assert "old.md" not in names(await recaller.recall("chat", "book", limit=10, weights=unspread))
    finally:
        await service.close()


@pytest.mark.slow
async def test_recall_and_listings_run_on_the_event_loop_unless_they_would_wait(
    make_settings: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
):
    """Issue 12: a worker thread's round trip cost more CPU under load than a small recall itself.
    On the loop when the token is small and nothing it needs is held; else in a thread, same answer."""
    service, store, recaller = await make(make_settings())
    try:
        for i in range(30):
            await store.write("t", title=f"Deploy note {i}", content=f"Deploy step {i}: restart the service.")
        await store.write("t", title="Token rotation", content="Rotate the key ZX81-QR7 every quarter.")
        await settle(service)
        hops = request.getfixturevalue("thread_hops")  # from here on
        await recaller.recall("t", "deploy")  # the first reads the access table, in a thread
        await store.write("t", title="Later", content="Written after: the kept access table stands.")
        await settle(service)  # the worker, done with it, holds no lock the loop would find taken
        await service.idle()
        hops.clear()
        assert names(await recaller.recall("t", "ZX81-QR7"))[0] == "token-rotation.md"
        memories, _ = await store.list_hot("t")  # a listing too
        assert len(memories) == 32
        assert hops == []  # neither went to a worker thread

        # The embedding worker holds the token's vectors: the recall waits in a thread, not the loop.
        state = await store.state("t")
        held, release = threading.Event(), threading.Event()

        def hold() -> None:
            with state.vectors._lock:
                held.set()
                release.wait(20)

        holder = threading.Thread(target=hold)
        holder.start()
        assert await asyncio.to_thread(held.wait, 20)
        task = asyncio.create_task(recaller.recall("t", "ZX81-QR7"))
        deadline = time.monotonic() + 20
        while not hops and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        assert hops and not task.done()  # it went to a thread, which waits for the lock
        release.set()
        assert names(await task)[0] == "token-rotation.md"
        holder.join()

        # A token larger than the loop's share recalls in a thread.
        hops.clear()
        monkeypatch.setattr(recall, "MAX_ROWS", 10)
        assert names(await recaller.recall("t", "ZX81-QR7"))[0] == "token-rotation.md"
        assert hops
    finally:
        await service.close()


async def test_the_layout_is_kept_while_only_vectors_move(make_settings: Callable[..., Settings]):
    """Issue 12: every embedding batch made each recall work out the creation order again."""
    service, store, recaller = await make(make_settings())
    try:
        for i in range(3):
            await store.write("t", title=f"Note {i}", content=f"Note number {i}.")
        await settle(service)
        state = await store.state("t")
        first = state.vectors.snapshot()
        where = recaller._layout(state, first)
        await store.update("t", "note-1.md", content="New words: a new vector, the same row.")
        await settle(service)
        second = state.vectors.snapshot()
        assert second.version != first.version and second.rows_version == first.rows_version
        assert second.keys is first.keys and recaller._layout(state, second) is where
        await store.write("t", title="Note 3", content="A new row.")
        third = state.vectors.snapshot()
        assert third.rows_version != first.rows_version and "note-3.md" in third.keys
        assert recaller._layout(state, third) is not where and recaller._layout(state, third).n == 4
    finally:
        await service.close()


@pytest.mark.slow
async def test_recall_keeps_nothing_of_a_token_the_registry_has_forgotten(
    make_settings: Callable[..., Settings], vault_root
):
    """Memory follows the loaded tokens: the creation-order layout recall keeps per token went with
    the Recaller, not the token, so every vault ever recalled in kept one as large as its rows."""
    import gc
    import tracemalloc

    async def settled() -> None:
        # Nothing queued to embed (a queue holds its memories), and a load's freeze of what was
        # alive (memvault.heap.keep, handed back at most once a minute) undone here, so what the
        # test measures depends neither on this machine's speed nor on the tests before it.
        await service.idle()
        deadline = time.monotonic() + 30
        while service.embeddings.pending() and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        gc.unfreeze()
        gc.collect()

    names = [f"t{i}" for i in range(50)]
    for token in names:
        folder = vault_root / token
        folder.mkdir()
        for i in range(300):
            (folder / f"note-{i}.md").write_text(f"# Note {i}\n\nhello number {i}\n", encoding="utf-8")
    service = Service(make_settings(max_loaded_tokens=3, embedder="hash"))
    recaller = recaller_of(service)
    try:
        for token in names[:10]:
            await recaller.recall(token, "hello number")
        await settled()
        tracemalloc.start()
        try:
            for token in names[10:20]:
                await recaller.recall(token, "hello number")
            await settled()
            first = tracemalloc.get_traced_memory()[0]
            for token in names[20:]:
                await recaller.recall(token, "hello number")
            await settled()
            second = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert (second - first) / 30 < 4_000, second - first
    finally:
        await service.close()


# ----------------------------------------------------------------------- what recall got wrong (issue 34)
# Each test below failed on the recall of before the issue; all run with the default settings
# (and so the default embedder).

GARDEN = (
    "The vegetable garden plan for the spring: tomatoes along the south fence, beans on the trellis, "
    "lettuce in the shade of the shed, compost turned every week, the watering on a timer at dawn. "
)


async def test_long_memories_of_one_subject_are_not_cut_below_the_limit(
    make_settings: Callable[..., Settings],
):
    clock = Clock()
    service, store, recaller = await make(make_settings(), clock=clock)
    try:
        for i in range(14):  # long notes on the garden, a day apart, alike but for one line
            clock.now += timedelta(days=1)
            extra = " The tomatoes harvest was the biggest yet." if i == 0 else ""
            await store.write("t", title=f"Garden week {i}", content=(GARDEN * 8) + f"Week {i}.{extra}")
        await settle(service)
        found = await recaller.recall("t", "tomatoes harvest")
        assert len(found.results) == 10
    finally:
        await service.close()


async def test_a_neighbour_does_not_outrank_the_memories_that_hold_the_words(
    make_settings: Callable[..., Settings],
):
    clock = Clock()
    service, store, recaller = await make(make_settings(), clock=clock)
    reply = (
        "A backyard party sounds great! For the backyard, set up chairs in the shade, string lights "
        "along the fence, and keep drinks cold in a cooler by the back door. Plan the backyard games too."
    )
    try:  # a conversation, a minute between turns: each turn read in the context of the others
        for title, content in (
            ("User", "I got a smoker for the backyard."),
            ("Assistant", reply),
            ("User again", "The smoker needs wood chips."),
        ):
            await store.write("t", title=title, content=content)
            clock.now += timedelta(minutes=1)
        await settle(service)
        found = names(await recaller.recall("t", "smoker backyard"))
        assert found.index("assistant.md") > max(found.index("user.md"), found.index("user-again.md"))
    finally:
        await service.close()


@pytest.mark.parametrize("span", [DEFAULT_WEIGHTS.span, 0.0])
async def test_a_number_in_the_query_does_not_match_a_date(
    make_settings: Callable[..., Settings], span: float
):
    # Whatever the span's boost weighs (0: none), "10 days ago" is not searched for as words.
    clock = Clock()
    service, store, recaller = await make(make_settings(), clock=clock)
    try:
        await store.write("t", title="Standup 2026/02/10 10:10", content="We talked about the release train.")
        await store.write("t", title="Shopping", content="To buy: apples and a new kettle.")
        clock.now += timedelta(days=10)
        await settle(service)
        weights = DEFAULT_WEIGHTS.replace(span=span)
        found = await recaller.recall("t", "what did I buy 10 days ago?", weights=weights)
        assert names(found)[0] == "shopping.md"
        # Both were written then: the phrase lends neither anything, the standup's "10"s included.
        plain = await recaller.recall("t", "what did I buy?", weights=weights)
        assert [(hit.memory.id, hit.score) for hit in found.results] == [
            (hit.memory.id, hit.score) for hit in plain.results
        ]
    finally:
        await service.close()


async def test_time_words_in_the_query_favour_memories_written_then(make_settings: Callable[..., Settings]):
    clock = Clock()
    service, store, recaller = await make(make_settings(), clock=clock)
    try:
        for week in range(6):  # one call with the bank a week, the same words each time
            await store.write(
                "t", title=f"Bank call {week}", content=f"Called the bank about the card ({week})."
            )
            clock.now += timedelta(days=7)
        await settle(service)
        # now is six weeks after the first call: three weeks ago is call 3
        assert (
            names(await recaller.recall("t", "when did I call the bank three weeks ago?"))[0]
            == "bank-call-3.md"
        )
    finally:
        await service.close()


async def test_a_paraphrase_is_found_with_the_default_install(make_settings: Callable[..., Settings]):
    service, store, recaller = await make(make_settings())
    try:
        await store.write("t", title="New guitar", content="I bought a Fender Stratocaster and a small amp.")
        for title, content in EDITOR_VAULT:
            await store.write("t", title=title, content=content)
        await settle(service)
        assert names(await recaller.recall("t", "musical instruments"))[0] == "new-guitar.md"
    finally:
        await service.close()


@pytest.mark.slow
async def test_recall_says_when_no_memory_holds_the_words(server_factory):
    async with server_factory() as srv:
        async with srv.session("tok") as session:
            for title, content in EDITOR_VAULT:
                await srv.call(session, "write_memory", title=title, content=content)
            await settle(srv.app.state.service)
            _, reply = await srv.call(session, "recall", query="quantum chromodynamics")
            assert reply.startswith("No memory holds the words of")
            _, reply = await srv.call(session, "recall", query="salmon")
            assert not reply.startswith("No memory")


@pytest.mark.slow
async def test_recall_keeps_nothing_of_the_tokens_it_unloaded(make_settings: Callable[..., Settings]):
    """Memory follows the loaded tokens: what recall keeps of a token (where its rows stand) goes
    with it."""
    # A fixed clock: every write and access has the same time, formatted once. Each token holds
    # ``memories`` notes, so what recall would keep of one (its layout: eight arrays over its
    # rows, 3.6 KB measured) stands well above the noise: Python's free lists keep a few hundred
    # bytes a token traced, up or down, whatever is kept (270 measured).
    memories = 20
    settings = make_settings(max_loaded_tokens=3, dedupe_window_seconds=0, embedder="hash")
    service, store, recaller = await make(settings)
    by_recall = [tracemalloc.Filter(True, recall.__file__, all_frames=True)]
    anchors = ["x", "y", "z"]
    for token in anchors:
        await store.write(token, title="Trip notes", content="Kyoto in spring, by train.")

    async def serve(prefix: str, count: int) -> int:
        """Bytes still held that recall allocated, once ``count`` more tokens were recalled."""
        for i in range(count):
            token = f"{prefix}{i}"
            for n in range(memories):
                await store.write(token, title=f"Trip {n}", content=f"Kyoto in spring, by train, day {n}.")
            assert (await recaller.recall(token, "trip to Kyoto")).results
        for token in anchors:  # the same three loaded at each measure: only what was kept differs
            assert (await recaller.recall(token, "trip to Kyoto")).results
        # Nothing queued; a load's freeze of what was alive (memvault.heap.keep) undone.
        await service.idle()
        await wait_for(lambda: not service.embeddings.pending(), timeout=30)
        gc.unfreeze()
        gc.collect()
        if not tracemalloc.is_tracing():
            return 0
        held = tracemalloc.take_snapshot().filter_traces(by_recall)
        return sum(stat.size for stat in held.statistics("filename"))

    try:
        await serve("warm", 5)
        tracemalloc.start(12)
        try:
            first = await serve("a", 10)
            second = await serve("b", 30)
        finally:
            tracemalloc.stop()
        assert len(service.registry.states) < 10, len(service.registry.states)
        assert (second - first) / 30 < 1200, second - first  # bytes kept per token recalled
    finally:
        await service.close()


# ---------------------------------------------------------------------------- MaxSim (the default)

ERRANDS = (
    "Errands today: dentist at nine, then the post office, groceries, a long call with the bank "
    "about the mortgage, and laundry."
)
# No memory shares a word with "musical instruments". The whole-text vector of the long note that
# mentions a guitar is blurred by its errands: "evening entertainment" comes first without MaxSim.
PARAPHRASE_VAULT = (
    ("Saturday", ERRANDS + " In the evening I practised the guitar for an hour."),
    ("Entertainment", "The hotel had evening entertainment."),
    ("Culture", "The city has a rich culture."),
    ("Art", "The art class painted portraits."),
    ("Shop", "The electronics shop had a sale."),
)


async def write_paraphrase_vault(service: Service) -> None:
    store = service.store
    for title, content in PARAPHRASE_VAULT:
        await store.write("t", title=title, content=content)
    await store.state("t")
    await settle(service)


async def test_the_default_recall_finds_a_paraphrase_the_whole_text_vector_ranks_below_a_distractor(
    make_settings: Callable[..., Settings],
):
    settings = make_settings()
    assert settings.embedder == "wordllama" and settings.reranker == "maxsim"  # the defaults
    service = Service(settings, clock=Clock())
    try:
        await write_paraphrase_vault(service)
        default = recaller_of(service, reranking=Reranking(settings.reranker))
        off = recaller_of(service, reranking=Reranking("off"))
        assert names(await default.recall("t", "musical instruments"))[0] == "saturday.md"
        assert names(await off.recall("t", "musical instruments"))[0] == "entertainment.md"
    finally:
        await service.close()


async def test_maxsim_token_ids_survive_a_restart_without_tokenizing_again(
    make_settings: Callable[..., Settings],
):
    settings = make_settings()
    service = Service(settings, clock=Clock())
    try:
        await write_paraphrase_vault(service)
        assert service.embeddings.embedded == len(PARAPHRASE_VAULT)
    finally:
        await service.close()
    again_service = Service(settings, clock=Clock())
    again = again_service.store
    try:
        await again.state("t")
        await settle(again_service)
        recaller = recaller_of(again_service, reranking=Reranking(settings.reranker))
        assert names(await recaller.recall("t", "musical instruments"))[0] == "saturday.md"
        assert again_service.embeddings.embedded == 0  # vectors and token ids came from the sidecar
    finally:
        await again_service.close()


async def test_maxsim_is_off_with_another_embedder(make_settings: Callable[..., Settings]):
    settings = make_settings(embedder="hash")
    service = Service(settings, clock=Clock())
    try:
        await write_paraphrase_vault(service)
        maxsim = recaller_of(service, reranking=Reranking("maxsim"))
        off = recaller_of(service, reranking=Reranking("off"))
        for query in ("musical instruments", "evening guitar", "art class"):
            assert names(await maxsim.recall("t", query)) == names(await off.recall("t", query))
    finally:
        await service.close()
