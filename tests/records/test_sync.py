"""Session summaries and the graph in the vault's files: formats, the sidecar rebuilt from them, conflicts."""

from __future__ import annotations

import gc
import json
import shutil
import tracemalloc
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memvault.cli.check import check_vault
from memvault.cli.main import main
from memvault.disk.names import check_id
from memvault.disk.vault import Vault
from memvault.errors import FileConflict, InvalidArgument, InvalidName
from memvault.records import sync
from memvault.records.graph import Entity, KnowledgeGraph, Relation
from memvault.records.sidecar import Sidecar
from memvault.records.summaries import SessionSummaries
from memvault.records.summaryfiles import file_stem, paths

T0 = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


class Ticking:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


def sessions(sidecar: Sidecar, folder: Path, clock: Ticking | None = None) -> SessionSummaries:
    sync.sync(sidecar, folder)
    return SessionSummaries(
        sidecar, max_chars=100_000, clock=clock or Ticking(), files=sync.SessionFiles(folder)
    )


def graph(sidecar: Sidecar, folder: Path) -> KnowledgeGraph:
    sync.sync(sidecar, folder)
    return KnowledgeGraph(sidecar, max_chars=100_000, clock=Ticking(), files=sync.GraphFile(folder))


def fresh_sidecar(folder: Path) -> Sidecar:
    """The sidecar of a clone or a backup without .memvault/: nothing but the files."""
    shutil.rmtree(folder / ".memvault", ignore_errors=True)
    return Sidecar.open(folder)


def write_some(folder: Path) -> None:
    with Sidecar.open(folder) as sidecar:
        s = sessions(sidecar, folder)
        s.upsert("deploy", "First summary.", title="Deploy", tags=["ops"])
        s.append("deploy", "Then the canary.")
        s.append("deploy", "Then the rollback.", tags=["ops", "incident"])
        s.update_metadata("deploy", title="Deploy of March")
        s.upsert("Weird id / with spaces", "Other text.")
        g = graph(sidecar, folder)
        g.create_entities([Entity("Alice", "person", ("likes tea",)), Entity("Acme", "company")])
        g.create_relations([Relation("Alice", "Acme", "works_at")])
        g.add_observations([("Alice", ["plays chess"])])


def test_sessions_and_graph_come_back_whole_from_the_files_alone(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    write_some(folder)
    with Sidecar.open(folder) as sidecar:
        before_history = SessionSummaries(sidecar, max_chars=100_000).history("deploy")
        before_other = SessionSummaries(sidecar, max_chars=100_000).history("Weird id / with spaces")
        before_graph = KnowledgeGraph(sidecar, max_chars=100_000).read_graph()
    assert len(before_history) == 3 and before_history[0].title == "Deploy of March"

    with fresh_sidecar(folder) as sidecar:
        assert SessionSummaries(sidecar, max_chars=100_000).infos() == []  # nothing until the files are read
        sync.sync(sidecar, folder)
        assert SessionSummaries(sidecar, max_chars=100_000).history("deploy") == before_history
        assert SessionSummaries(sidecar, max_chars=100_000).history("Weird id / with spaces") == before_other
        assert KnowledgeGraph(sidecar, max_chars=100_000).read_graph() == before_graph


def test_the_graph_file_is_the_official_servers_format_in_creation_order(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    write_some(folder)
    lines = [json.loads(line) for line in (folder / "graph.jsonl").read_text().splitlines()]
    assert lines == [
        {
            "type": "entity",
            "name": "Alice",
            "entityType": "person",
            "observations": ["likes tea", "plays chess"],
        },
        {"type": "entity", "name": "Acme", "entityType": "company", "observations": []},
        {"type": "relation", "from": "Alice", "to": "Acme", "relationType": "works_at"},
    ]


def test_the_official_servers_memory_jsonl_dropped_in_loads(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    folder.mkdir()
    official = [
        {"type": "entity", "name": "Bob", "entityType": "person", "observations": ["drives a van"]},
        {"type": "entity", "name": "Zed", "entityType": "dog", "observations": []},
        {"type": "relation", "from": "Bob", "to": "Zed", "relationType": "owns"},
    ]
    (folder / "graph.jsonl").write_text("".join(json.dumps(row) + "\n" for row in official))
    with Sidecar.open(folder) as sidecar:
        g = graph(sidecar, folder)
        found = g.search_nodes("van")
        assert [e.name for e in found.entities] == ["Bob"]
        assert g.read_graph().relations == (Relation("Bob", "Zed", "owns"),)


@pytest.mark.slow
def test_history_grows_with_the_text_not_its_square(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    chunk = "x" * 1000
    with Sidecar.open(folder) as sidecar:
        s = sessions(sidecar, folder)
        for i in range(60):
            s.append("long", f"{i:03d} {chunk}")
        assert s.latest("long")[1] == 60
    size = sum(p.stat().st_size for p in (folder / "sessions").iterdir())
    assert size < 200_000, size
    with fresh_sidecar(folder) as sidecar:
        sync.sync(sidecar, folder)
        history = SessionSummaries(sidecar, max_chars=100_000).history("long")
    assert len(history) == 60
    assert history[0].summary.count(chunk) == 60 and history[-1].summary.count(chunk) == 1


def test_an_edit_of_the_markdown_file_is_a_new_version_and_the_history_catches_up(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    with Sidecar.open(folder) as sidecar:
        s = sessions(sidecar, folder)
        s.upsert("notes", "Agent text.", title="Notes")
    md, history = paths(folder, "notes")
    text = md.read_text()
    md.write_text(text.replace("Agent text.", "Agent text, corrected by hand."))
    with Sidecar.open(folder) as sidecar:
        s = sessions(sidecar, folder)
        latest, count = s.latest("notes")
        assert (latest.summary, count, latest.title) == ("Agent text, corrected by hand.", 2, "Notes")
        s.append("notes", "More from the agent.")
    with fresh_sidecar(folder) as sidecar:
        sync.sync(sidecar, folder)
        texts = [v.summary for v in SessionSummaries(sidecar, max_chars=100_000).history("notes")]
    assert texts == [
        "Agent text, corrected by hand.\n\nMore from the agent.",
        "Agent text, corrected by hand.",
        "Agent text.",
    ]
    assert len(history.read_text().splitlines()) == 3


def test_a_crash_between_file_and_sidecar_leaves_the_file_winning(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    with Sidecar.open(folder) as sidecar:
        sessions(sidecar, folder).upsert("s", "one")

    class Boom(Exception):
        pass

    class Crashing(sync.SessionFiles):
        def written(self, conn, new, latest, *, meta=False):  # type: ignore[no-untyped-def]
            super().written(conn, new, latest, meta=meta)
            raise Boom  # the files are written; the sidecar's transaction never commits

    with Sidecar.open(folder) as sidecar:
        sync.sync(sidecar, folder)
        crashing = SessionSummaries(sidecar, max_chars=1000, clock=Ticking(), files=Crashing(folder))
        with pytest.raises(Boom):
            crashing.append("s", "two")
        assert SessionSummaries(sidecar, max_chars=1000).latest("s")[1] == 1  # the copy rolled back
        sync.sync(sidecar, folder)
        latest, count = SessionSummaries(sidecar, max_chars=1000).latest("s")
    assert (latest.summary, count) == ("one\n\ntwo", 2)


def test_an_older_sidecar_only_vault_is_written_out_to_files_once(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    with Sidecar.open(folder) as sidecar:  # what an earlier memvault kept only in the sidecar
        SessionSummaries(sidecar, max_chars=1000, clock=Ticking()).upsert("old", "kept only in SQLite")
        KnowledgeGraph(sidecar, max_chars=1000).create_entities([Entity("Old", "thing")])
    assert not (folder / "graph.jsonl").exists() and not (folder / "sessions").exists()
    with Sidecar.open(folder) as sidecar:
        sync.sync(sidecar, folder)
    with fresh_sidecar(folder) as sidecar:
        sync.sync(sidecar, folder)
        assert SessionSummaries(sidecar, max_chars=1000).latest("old")[0].summary == "kept only in SQLite"
        assert [e.name for e in KnowledgeGraph(sidecar, max_chars=1000).read_graph().entities] == ["Old"]


def test_conflicted_files_are_served_reported_and_never_written(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    write_some(folder)
    graph_file = folder / "graph.jsonl"
    lines = graph_file.read_text().splitlines()
    theirs = json.dumps({"type": "entity", "name": "Carol", "entityType": "person", "observations": []})
    graph_file.write_text(
        "\n".join([lines[0], "<<<<<<< HEAD", lines[1], "=======", theirs, ">>>>>>> b", *lines[2:]]) + "\n"
    )
    _, history = paths(folder, "deploy")
    history.write_text(history.read_text() + "<<<<<<< HEAD\n=======\n>>>>>>> other\n")
    before = {p: p.read_bytes() for p in (graph_file, history)}
    with Sidecar.open(folder) as sidecar:
        g = graph(sidecar, folder)
        assert {e.name for e in g.read_graph().entities} == {"Alice", "Acme", "Carol"}
        with pytest.raises(FileConflict, match=r"graph\.jsonl"):
            g.create_entities([Entity("Dave", "person")])
        s = sessions(sidecar, folder)
        assert s.latest("deploy")[1] == 3  # what the history holds is still served
        with pytest.raises(FileConflict, match=r"deploy\.history\.jsonl"):
            s.append("deploy", "more")
        s.upsert("other", "unrelated sessions are still written")
    assert {p: p.read_bytes() for p in before} == before
    found = {f.id: f.problem for f in check_vault(Vault(folder))}
    assert "graph.jsonl" in found and "sessions/deploy.history.jsonl" in found


def test_session_file_names_are_safe_and_distinct() -> None:
    assert file_stem("2026-02-10-deploy") == "2026-02-10-deploy"
    names = {file_stem(s) for s in ("Deploy", "deploy", "DEPLOY", "../etc/passwd", "a/b", "ä b")}
    assert len(names) == 6
    assert all("/" not in n and not n.startswith(".") for n in names)
    # A plain id that looks like a hashed name cannot take another id's files.
    hashed = file_stem("Deploy")
    assert file_stem(hashed) != hashed


def test_the_sessions_folder_is_reserved(tmp_path: Path) -> None:
    with pytest.raises(InvalidName, match="session"):
        check_id("sessions/notes")
    folder = tmp_path / "alice"
    write_some(folder)
    (folder / "real.md").write_text("# Real\n\nA memory.\n")
    assert sorted(id for id, _, _ in Vault(folder).scan()) == ["real.md"]


def test_migrate_lists_then_gives_frontmatter_only_to_hand_made_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "alice"
    folder.mkdir()
    (folder / "plain.md").write_text("just my text\n")
    managed = "---\npriority: P1\n---\n# Managed\n\nalready has frontmatter\n"
    (folder / "managed.md").write_text(managed)
    assert main(["migrate", "--root", str(tmp_path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "alice: would give 1 file(s) frontmatter" in out and "  plain.md" in out
    assert (folder / "plain.md").read_text() == "just my text\n"
    assert main(["migrate", "--root", str(tmp_path)]) == 0
    migrated = (folder / "plain.md").read_text()
    assert migrated.startswith("---\npriority: P2\n") and migrated.endswith("---\njust my text\n")
    assert (folder / "managed.md").read_text() == managed


def test_links_in_place_of_session_or_graph_files_are_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    secret = outside / "secret.jsonl"
    secret.write_text(
        json.dumps({"type": "entity", "name": "Secret", "entityType": "x", "observations": []}) + "\n"
    )
    folder = tmp_path / "alice"
    folder.mkdir()
    (folder / "graph.jsonl").symlink_to(secret)
    (folder / "sessions").symlink_to(outside, target_is_directory=True)
    with Sidecar.open(folder) as sidecar:
        g = graph(sidecar, folder)
        assert g.read_graph().entities == ()  # the link's target is not read
        g.create_entities([Entity("Mine", "thing")])
        s = sessions(sidecar, folder)
        with pytest.raises(InvalidArgument, match="symbolic link"):
            s.upsert("notes", "text")
        assert s.infos() == []  # refused before anything was written
    assert not (folder / "graph.jsonl").is_symlink()  # replaced by a real file, the target untouched
    assert "Secret" in secret.read_text() and sorted(p.name for p in outside.iterdir()) == ["secret.jsonl"]


def test_a_copy_of_a_session_file_takes_over_no_session(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    with Sidecar.open(folder) as sidecar:
        s = sessions(sidecar, folder)
        for n in range(1, 5):
            s.upsert("ci-1", f"text {n}")
    md, history = paths(folder, "ci-1")
    copy = md.with_name("ci-1 copy.md")  # a file manager's "Duplicate" keeps sessionId: ci-1
    shutil.copy(md, copy)
    planted = md.with_name("pulled.history.jsonl")  # names ci-1 in its lines
    planted.write_text(
        json.dumps({"session": "ci-1", "version": 5, "ts": "2026-03-02T09:00:00.000Z", "summary": "planted"})
        + "\n"
    )
    with Sidecar.open(folder) as sidecar:
        s = sessions(sidecar, folder)
        latest, count = s.latest("ci-1")
        assert (latest.summary, count) == ("text 4", 4)
        assert [v.version for v in s.history("ci-1")] == [4, 3, 2, 1]
        s.append("ci-1", "more")
        copy.unlink()
        planted.unlink()
        assert s.latest("ci-1")[1] == 5
        assert sessions(sidecar, folder).latest("ci-1")[1] == 5
    numbers = [json.loads(line)["version"] for line in history.read_text().splitlines()]
    assert numbers == [1, 2, 3, 4, 5]


def test_check_names_a_copied_session_file(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    with Sidecar.open(folder) as sidecar:
        sessions(sidecar, folder).upsert("ci-1", "text")
    md, _ = paths(folder, "ci-1")
    shutil.copy(md, md.with_name("ci-1 copy.md"))
    found = {f.id: f.problem for f in check_vault(Vault(folder))}
    assert "ci-1" in found["sessions/ci-1 copy.md"] and "copy" in found["sessions/ci-1 copy.md"]


def test_a_markdown_file_older_than_its_history_is_stale_not_an_edit(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    with Sidecar.open(folder) as sidecar:
        s = sessions(sidecar, folder)
        s.upsert("s", "one")
    md, history = paths(folder, "s")
    before = md.read_bytes()
    with Sidecar.open(folder) as sidecar:
        sessions(sidecar, folder).append("s", "two")
    md.write_bytes(before)  # a crash after the history append, before the markdown file was written
    with fresh_sidecar(folder) as sidecar:
        s = sessions(sidecar, folder)
        latest, count = s.latest("s")
        assert (latest.summary, count) == ("one\n\ntwo", 2)
    assert "two" in md.read_text() and "version: 2" in md.read_text()  # and the file says so again
    assert len(history.read_text().splitlines()) == 2


def test_a_persons_edit_is_in_the_history_as_soon_as_the_server_serves_it(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    with Sidecar.open(folder) as sidecar:
        sessions(sidecar, folder).upsert("notes", "Agent text.", title="Notes")
    md, history = paths(folder, "notes")
    md.write_text(md.read_text().replace("Agent text.", "Corrected by hand."))
    with Sidecar.open(folder) as sidecar:
        latest, count = sessions(sidecar, folder).latest("notes")
        assert (latest.summary, count) == ("Corrected by hand.", 2)
    # No tool wrote since: a clone taken now has the same history without the markdown file.
    clone = tmp_path / "clone"
    (clone / "sessions").mkdir(parents=True)
    shutil.copy(history, clone / "sessions" / history.name)
    with Sidecar.open(clone) as sidecar:
        latest, count = sessions(sidecar, clone).latest("notes")
    assert (latest.summary, count) == ("Corrected by hand.", 2)
    md.write_text(md.read_text().replace("Corrected by hand.", "Corrected twice."))
    with Sidecar.open(folder) as sidecar:
        assert [v.summary for v in sessions(sidecar, folder).history("notes")] == [
            "Corrected twice.",
            "Corrected by hand.",
            "Agent text.",
        ]


OFFICIAL_LINES = [
    '{"type":"entity","name":"Ann","entityType":"person","observations":["same","same","other"]}',
    '{"type":"entity","name":"Bo","entityType":"person","observations":[],"createdAt":"2026-01-02"}',
    '{"type":"entity","name":"","entityType":"ghost","observations":[]}',
    '{"type":"entity","name":"Ann","entityType":"robot","observations":["beeps"]}',
    "not json at all",
    '{"type":"relation","from":"Ann","to":"Nowhere","relationType":"visits"}',
    '{"type":"relation","from":"Ann","to":"Bo","relationType":"knows","since":2020}',
]


def test_graph_lines_memvault_cannot_read_are_kept_byte_for_byte_and_reported(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    folder.mkdir()
    graph_file = folder / "graph.jsonl"
    # A BOM, and no newline at the end, as the official server writes its file.
    graph_file.write_bytes(("\ufeff" + "\n".join(OFFICIAL_LINES)).encode())
    with Sidecar.open(folder) as sidecar:
        g = graph(sidecar, folder)
        read = g.read_graph()
        assert [e.name for e in read.entities] == ["Ann", "Bo"]
        assert read.entities[0].observations == ("same", "same", "other")
        assert Relation("Ann", "Nowhere", "visits") in read.relations
        assert len(g.kept_lines()) == 3
        g.create_entities([Entity("Cy", "person")])  # not refused: nothing here is a conflict
    raw = graph_file.read_bytes().decode()
    assert raw.startswith("\ufeff") and not raw.endswith("\n")
    lines = raw.removeprefix("\ufeff").split("\n")
    new = '{"type":"entity","name":"Cy","entityType":"person","observations":[]}'
    # Every line is there as it was; the new entity after the entities, before the relations.
    assert lines == [*OFFICIAL_LINES[:5], new, *OFFICIAL_LINES[5:]]
    found = [p for path, p in sync.problems(folder) if path == "graph.jsonl"]
    assert len(found) == 3 and any("line 3" in p and "without a name" in p for p in found)
    assert not any("conflict" in p for p in found)


def test_the_first_write_of_an_official_file_changes_only_what_changed(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    folder.mkdir()
    official = [
        '{"type":"entity","name":"Ann","entityType":"person","observations":["likes tea"]}',
        '{"type":"entity","name":"Bo","entityType":"person","observations":["ü"]}',
        '{"type":"relation","from":"Ann","to":"Bo","relationType":"knows"}',
    ]
    (folder / "graph.jsonl").write_text("\n".join(official) + "\n", encoding="utf-8")
    with Sidecar.open(folder) as sidecar:
        graph(sidecar, folder).add_observations([("Bo", ["plays chess"])])
    lines = (folder / "graph.jsonl").read_text(encoding="utf-8").splitlines()
    assert lines == [
        official[0],
        '{"type":"entity","name":"Bo","entityType":"person","observations":["ü","plays chess"]}',
        official[2],
    ]


def test_new_relations_are_appended_to_an_official_file_as_it_would_write_them(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    folder.mkdir()
    official = [
        '{"type":"entity","name":"Ann","entityType":"person","observations":[]}',
        '{"type":"entity","name":"Bo","entityType":"person","observations":[]}',
        '{"type":"relation","from":"Ann","to":"Bo","relationType":"knows"}',
    ]
    graph_file = folder / "graph.jsonl"
    graph_file.write_text("\n".join(official), encoding="utf-8")  # the official server ends no line
    with Sidecar.open(folder) as sidecar:
        g = graph(sidecar, folder)
        g.create_relations([Relation("Bo", "Ann", "knows")])
        g.create_entities([Entity("Cy", "person")])
    assert graph_file.read_text(encoding="utf-8") == "\n".join(
        [
            *official[:2],
            '{"type":"entity","name":"Cy","entityType":"person","observations":[]}',
            official[2],
            '{"type":"relation","from":"Bo","to":"Ann","relationType":"knows"}',
        ]
    )
    with fresh_sidecar(folder) as sidecar:
        assert len(graph(sidecar, folder).read_graph().relations) == 2


def test_a_sidecar_of_the_schema_before_serves_its_sessions_and_graph_after_the_upgrade(
    tmp_path: Path,
) -> None:
    import sqlite3

    from memvault.records.sidecar import sidecar_path
    from tests.oldsidecar import migrate_to

    folder = tmp_path / "alice"
    (folder / ".memvault").mkdir(parents=True)
    db = sidecar_path(folder)
    with sqlite3.connect(db) as conn:  # what the previous memvault made: schema 6, whole texts
        migrate_to(conn, 6)
        day, next_day = "2026-01-01T00:00:00.000Z", "2026-01-02T00:00:00.000Z"
        conn.execute("INSERT INTO session_versions VALUES ('old', 1, ?, NULL, '[]', 'one')", (day,))
        conn.execute(
            "INSERT INTO session_versions VALUES ('old', 2, ?, NULL, '[]', ?)", (next_day, "one\n\ntwo")
        )
        conn.execute("INSERT INTO entities VALUES ('Ann', 'person', ?, ?)", (day, day))
        conn.execute("INSERT INTO observations VALUES ('Ann', 0, 'likes tea')")
    with Sidecar.open(folder) as sidecar:
        s = sessions(sidecar, folder)  # writes out what only the sidecar held, as before
        assert s.latest("old") == (s.version("old", 2), 2)
        s.append("old", "three")
        g = graph(sidecar, folder)
        assert g.read_graph().entities == (Entity("Ann", "person", ("likes tea",)),)
        g.add_observations([("Ann", ["plays chess"])])
    with fresh_sidecar(folder) as sidecar:
        s = sessions(sidecar, folder)
        assert s.latest("old")[0].summary == "one\n\ntwo\n\nthree"
        assert graph(sidecar, folder).read_graph().entities[0].observations == ("likes tea", "plays chess")


def test_a_graph_file_with_crlf_line_ends_keeps_them(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    folder.mkdir()
    lines = [
        '{"type":"entity","name":"A","entityType":"x","observations":[]}',
        '{"type":"entity","name":"B","entityType":"x","observations":[]}',
    ]
    (folder / "graph.jsonl").write_bytes("".join(line + "\r\n" for line in lines).encode())
    with Sidecar.open(folder) as sidecar:
        graph(sidecar, folder).add_observations([("B", ["o"])])
    assert (folder / "graph.jsonl").read_bytes() == (
        lines[0] + "\r\n" + lines[1].replace("[]", '["o"]') + "\r\n"
    ).encode()


def test_a_graph_line_that_is_not_utf8_is_kept_byte_for_byte(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    folder.mkdir()
    first = b'{"type":"entity","name":"A","entityType":"x","observations":[]}'
    broken = b'{"type":"entity","name":"B\xff\xfe","entityType":"x","observations":[]}'
    (folder / "graph.jsonl").write_bytes(first + b"\n" + broken + b"\n")
    with Sidecar.open(folder) as sidecar:
        g = graph(sidecar, folder)
        assert [e.name for e in g.read_graph().entities] == ["A"]
        assert g.kept_lines() == ["not UTF-8 text"]
        g.add_observations([("A", ["o"])])
    assert (folder / "graph.jsonl").read_bytes() == first.replace(b"[]", b'["o"]') + b"\n" + broken + b"\n"
    assert [p for path, p in sync.problems(folder) if "UTF-8" in p]


def serve_graph(folder: Path) -> None:
    """One token's graph written and read as the tools do, its sidecar then closed (an unload)."""
    fixed = lambda: T0  # noqa: E731  (one time: formatting it again keeps nothing new)
    with Sidecar.open(folder) as sidecar:
        sync.sync(sidecar, folder)
        KnowledgeGraph(sidecar, max_chars=100_000, clock=fixed, files=sync.GraphFile(folder)).create_entities(
            [Entity("Alice", "person", ("likes tea",))]
        )
        for _ in range(2):  # the second finds the files in line with the tables
            sync.sync(sidecar, folder)
            KnowledgeGraph(sidecar, max_chars=100_000).search_nodes("Alice")


@pytest.mark.slow
def test_a_closed_sidecar_leaves_nothing_of_its_sync_behind(tmp_path: Path) -> None:
    """Memory follows the open sidecars (the loaded tokens), not every token ever synced."""
    for i in range(10):  # caches that fill once (SQLite's, the graph search's) are warm
        serve_graph(tmp_path / f"warm{i}")
    gc.collect()
    tracemalloc.start()
    try:
        for i in range(20):
            serve_graph(tmp_path / f"a{i}")
        gc.collect()
        first = tracemalloc.get_traced_memory()[0]
        for i in range(60):
            serve_graph(tmp_path / f"b{i}")
        gc.collect()
        second = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert (second - first) / 60 < 150, second - first  # bytes kept per token served
