"""memvault export / import: sorted JSON lines, a faithful round trip, and imports that are idempotent."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from memvault.cli.main import main
from memvault.records.graph import Entity, KnowledgeGraph, Relation
from memvault.records.sidecar import Sidecar
from memvault.records.summaries import SessionSummaries

pytestmark = pytest.mark.filterwarnings("ignore:Callback with id .* already exists for watch:RuntimeWarning")


def fill(root: Path, token: str, *, extra: str = "") -> None:
    """Session summaries with several versions and a small graph, written in an unsorted order."""
    now = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

    def clock() -> datetime:
        nonlocal now
        now += timedelta(seconds=1)
        return now

    with Sidecar.open(root / token) as sidecar:
        sessions = SessionSummaries(sidecar, max_chars=10_000, clock=clock)
        sessions.upsert("zeta", "first", title="Zeta", tags=["b", "a"])
        sessions.append("zeta", 'second, with ünïcode and "quotes"\nand a newline')
        sessions.upsert("alpha" + extra, "only version")
        sessions.update_metadata("zeta", title="Zeta renamed")
        graph = KnowledgeGraph(sidecar, max_chars=10_000, clock=clock)
        graph.create_entities(
            [
                Entity("Zed", "person", ("second fact", "first fact")),
                Entity("Amy", "person"),
                Entity("Box", "thing"),
            ]
        )
        graph.create_relations([Relation("Zed", "Amy", "knows"), Relation("Amy", "Box", "owns")])


def export(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> str:
    capsys.readouterr()
    assert main(["export", "--root", str(root), *args]) == 0
    return capsys.readouterr().out


def test_export_writes_sorted_stable_json_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "vault"
    fill(root, "bob")
    fill(root, "alice")
    out = export(root, capsys)
    assert out == export(root, capsys)  # stable
    rows = [json.loads(line) for line in out.splitlines()]
    assert [r["token"] for r in rows] == sorted(r["token"] for r in rows)
    alice = [r for r in rows if r["token"] == "alice"]
    kinds = [r["kind"] for r in alice]
    assert kinds == sorted(kinds, key=["entity", "relation", "session"].index)
    # Entities in creation order, as graph.jsonl holds them (an import then keeps that order).
    assert [r["name"] for r in alice if r["kind"] == "entity"] == ["Zed", "Amy", "Box"]
    assert [(r["sessionId"], r["version"]) for r in alice if r["kind"] == "session"] == [
        ("alpha", 1),
        ("zeta", 1),
        ("zeta", 2),
    ]
    zed = next(r for r in alice if r.get("name") == "Zed")
    assert zed["observations"] == ["second fact", "first fact"]  # an entity's own order is kept
    assert zed["updated"].endswith("Z")


def test_export_then_import_round_trips_and_a_second_import_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = tmp_path / "source", tmp_path / "target"
    fill(source, "alice")
    dump = tmp_path / "dump.jsonl"
    assert main(["export", "--root", str(source), "--out", str(dump)]) == 0
    original = dump.read_text(encoding="utf-8")

    assert main(["import", "--root", str(target), str(dump)]) == 0
    first = capsys.readouterr().out
    assert "added 3 entities" in first and "3 session versions" in first
    assert export(target, capsys) == original
    # The graph file comes back line for line: entities created in one call keep their order.
    graph = "alice/graph.jsonl"
    assert (target / graph).read_text(encoding="utf-8") == (source / graph).read_text(encoding="utf-8")

    assert main(["import", "--root", str(target), str(dump)]) == 0
    second = capsys.readouterr().out
    assert "added 0 entities, 0 observations, 0 relations, 0 session versions (3 already there)" in second
    assert export(target, capsys) == original


def test_import_into_another_token_and_into_an_existing_graph_merges(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "vault"
    fill(root, "alice")
    dump = tmp_path / "dump.jsonl"
    assert main(["export", "--root", str(root), "--token", "alice", "--out", str(dump)]) == 0
    with Sidecar.open(root / "carol") as sidecar:
        KnowledgeGraph(sidecar, max_chars=100).create_entities([Entity("Amy", "robot", ("local fact",))])
    assert main(["import", "--root", str(root), "--token", "carol", str(dump)]) == 0
    with Sidecar.open(root / "carol") as sidecar:
        amy = KnowledgeGraph(sidecar, max_chars=100).open_nodes(["Amy"]).entities[0]
        assert amy == Entity("Amy", "robot", ("local fact",))  # existing entity kept as it is
        assert len(KnowledgeGraph(sidecar, max_chars=100).read_graph().entities) == 3
        assert SessionSummaries(sidecar, max_chars=100).latest("zeta")[0].title == "Zeta renamed"


def test_export_of_an_empty_vault_creates_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "vault"
    (root / "alice").mkdir(parents=True)
    assert export(root, capsys) == ""
    assert main(["export", "--root", str(root), "--token", "nobody"]) == 2  # says there is no such folder
    assert "no folder for token" in capsys.readouterr().err
    assert main(["export", "--root", str(tmp_path / "elsewhere")]) == 2  # run from the wrong place
    assert "no vault at" in capsys.readouterr().err
    assert not (root / "alice" / ".memvault").exists()
    assert not (root / "nobody").exists()
    assert not (tmp_path / "elsewhere").exists()


def test_import_refuses_a_broken_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"kind": "entity", "token": "alice", "name": "A", "entityType": "x"}\nnot json\n')
    assert main(["import", "--root", str(tmp_path / "vault"), str(bad)]) == 1
    assert "line 2" in capsys.readouterr().err
    no_token = tmp_path / "no-token.jsonl"
    no_token.write_text('{"kind": "entity", "name": "A", "entityType": "x", "observations": []}\n')
    assert main(["import", "--root", str(tmp_path / "vault"), str(no_token)]) == 1
    assert "--token" in capsys.readouterr().err
    assert not (tmp_path / "vault").exists()


@pytest.mark.slow
@pytest.mark.anyio
async def test_imported_data_is_served_by_the_tools(
    tmp_path: Path, vault_root: Path, server_factory, capsys: pytest.CaptureFixture[str]
) -> None:
    fill(tmp_path / "elsewhere", "alice")
    dump = tmp_path / "dump.jsonl"
    assert main(["export", "--root", str(tmp_path / "elsewhere"), "--out", str(dump)]) == 0
    assert main(["import", "--root", str(vault_root), str(dump)]) == 0
    async with server_factory() as srv, srv.session("alice") as s:
        error, text = await srv.call(s, "get_summary", sessionId="zeta")
        assert not error and "# Zeta renamed" in text and "version 2 of 2" in text
        result = await s.call_tool("search_nodes", {"query": "zed box"})
        assert [e["name"] for e in result.structured_content["entities"]] == ["Zed", "Box", "Amy"]


# ---------------------------------------------------------------- backups that restore (issue 9, 5)

SEPARATORS = "line\u2028sep para\u2029sep next\x85line vt\x0bff\x0cfs\x1c emoji 🦉 東京"


def _import(root: Path, file: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["import", "--root", str(root), *args, str(file)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_line_separators_in_the_data_survive_export_and_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "vault"
    with Sidecar.open(root / "alice") as sidecar:
        SessionSummaries(sidecar, max_chars=10_000).upsert("s1", f"summary {SEPARATORS}", title="T\u2028itle")
        KnowledgeGraph(sidecar, max_chars=10_000).create_entities(
            [Entity(f"Owl {SEPARATORS}", "bird", (f"fact {SEPARATORS}",))]
        )
    out = export(root, capsys)
    assert len(out.splitlines()) == len(out.split("\n")) - 1 == 2  # no splitter sees extra lines
    backup = tmp_path / "backup.jsonl"
    backup.write_text(out, encoding="utf-8")
    restored = tmp_path / "restored"
    code, text = _import(restored, backup, capsys)
    assert code == 0, text
    assert export(restored, capsys) == out


def _write_lines(path: Path, *rows: object) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )
    return path


GOOD_ENTITY = {
    "token": "alice",
    "kind": "entity",
    "name": "Amy",
    "entityType": "person",
    "observations": ["x"],
}
GOOD_SESSION = {
    **{"token": "bob", "kind": "session", "sessionId": "s", "version": 1},
    **{"ts": "2026-01-01T00:00:00.000Z", "title": None, "tags": [], "summary": "ok"},
}


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ({**GOOD_SESSION, "token": "carol", "version": 1, "summary": "x" * 100_001}, "limit is 100,000"),
        ({**GOOD_ENTITY, "token": "carol", "observations": "hello"}, "list of text"),
        ({**GOOD_SESSION, "token": "carol", "ts": "99999-01-01T00:00:00Z"}, "session version"),
        ({**GOOD_SESSION, "token": "carol", "ts": "9999-12-31T23:59:59-05:00"}, "session version"),
        ({**GOOD_SESSION, "token": "carol", "version": True}, "whole number"),
        ('{"token": "carol", "kind": "session", "version": ' + "9" * 5000 + "}", "not valid JSON"),
        (
            '{"token": "carol", "kind": "entity", "name": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "nested too deeply",
        ),
        ({**GOOD_ENTITY, "token": "carol", "name": 5}, "graph row"),
        ("not json at all", "not valid JSON"),
    ],
)
def test_a_bad_line_anywhere_imports_nothing_and_says_which_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], bad: object, message: str
) -> None:
    root = tmp_path / "vault"
    file = _write_lines(tmp_path / "in.jsonl", GOOD_ENTITY, GOOD_SESSION, bad)
    code, text = _import(root, file, capsys)
    assert code == 1 and "line 3" in text and message in text and "Nothing was imported" in text, text
    assert "Traceback" not in text
    assert not root.exists() or not any(root.iterdir())  # not even the good tokens' folders


def test_an_over_long_line_is_refused_without_reading_it_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMVAULT_MAX_IMPORT_LINE_BYTES", "1000")
    file = _write_lines(tmp_path / "in.jsonl", GOOD_ENTITY, {**GOOD_SESSION, "summary": "y" * 5000})
    code, text = _import(tmp_path / "vault", file, capsys)
    assert code == 1 and "line 2 is longer than 1,000 bytes" in text, text
    assert not (tmp_path / "vault").exists()


def test_invalid_utf8_is_refused_with_its_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "in.jsonl"
    file.write_bytes(json.dumps(GOOD_ENTITY).encode() + b"\n" + b'{"kind": "entity", "name": "\xff"}\n')
    code, text = _import(tmp_path / "vault", file, capsys)
    assert code == 1 and "line 2 is not valid UTF-8" in text, text
