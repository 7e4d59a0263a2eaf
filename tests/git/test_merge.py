"""The merge driver's merges: the same result whichever side is ours, no addition lost, no marker."""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st
from strategies import MEM_MCP, PROPS

from memvault.clock import format_time, parse_time
from memvault.disk.markdown import has_conflict_markers, parse_memory
from memvault.git.merge import kind_of, merge_file, resolve_modify_delete
from memvault.git.mergememory import conflict_copy_of
from memvault.records.graphfile import compact, parse
from memvault.records.summaryfiles import (
    SessionOnDisk,
    Stored,
    Version,
    history_line,
    paths,
    read,
    render_markdown,
    stored_as,
)

# ---------------------------------------------------------------------------- the graph

NAMES = ["ada", "grace", "linus", "Ünïcode name"]
WORDS = ["x", "y", "z", "w", "a long observation, with punctuation"]
Graph = dict[str, Any]  # {"entities": {name: [type, [obs]]}, "relations": [(from, to)]}

graph_ops = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.sampled_from(NAMES), st.lists(st.sampled_from(WORDS), max_size=3)),
        st.tuples(st.just("delete"), st.sampled_from(NAMES)),
        st.tuples(st.just("observe"), st.sampled_from(NAMES), st.sampled_from(WORDS)),
        st.tuples(st.just("forget"), st.sampled_from(NAMES), st.sampled_from(WORDS)),
        st.tuples(st.just("retype"), st.sampled_from(NAMES), st.sampled_from(["person", "team"])),
        st.tuples(st.just("relate"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
        st.tuples(st.just("unrelate"), st.sampled_from(NAMES), st.sampled_from(NAMES)),
    ),
    max_size=8,
)


def apply_graph(graph: Graph, ops: list[tuple[Any, ...]]) -> Graph:
    """The official server's operations on a graph: a deleted entity takes its relations along."""
    entities = {name: [kind, list(obs)] for name, (kind, obs) in graph["entities"].items()}
    relations = list(graph["relations"])
    for op, *args in ops:
        if op == "add" and args[0] not in entities:
            entities[args[0]] = ["person", list(dict.fromkeys(args[1]))]
        elif op == "delete" and args[0] in entities:
            del entities[args[0]]
            relations = [r for r in relations if args[0] not in r]
        elif op == "observe" and args[0] in entities and args[1] not in entities[args[0]][1]:
            entities[args[0]][1].append(args[1])
        elif op == "forget" and args[0] in entities and args[1] in entities[args[0]][1]:
            entities[args[0]][1].remove(args[1])
        elif op == "retype" and args[0] in entities:
            entities[args[0]][0] = args[1]
        elif op == "relate" and tuple(args) not in relations:
            relations.append(tuple(args))
        elif op == "unrelate" and tuple(args) in relations:
            relations.remove(tuple(args))
    return {"entities": entities, "relations": relations}


def graph_bytes(graph: Graph) -> bytes:
    lines = [
        compact({"type": "entity", "name": name, "entityType": kind, "observations": obs})
        for name, (kind, obs) in graph["entities"].items()
    ]
    lines += [
        compact({"type": "relation", "from": a, "to": b, "relationType": "knows"})
        for a, b in graph["relations"]
    ]
    return "".join(line + "\n" for line in lines).encode()


def read_graph(data: bytes) -> tuple[dict[str, tuple[str, ...]], set[tuple[str, str]]]:
    text = parse(data.decode())
    assert not text.kept and not text.conflicted
    return (
        {e.name: e.observations for e, _ in text.entities},
        {(r.source, r.target) for r, _ in text.relations},
    )


@PROPS
@given(graph_ops, graph_ops, graph_ops)
def test_graph_merges_the_same_either_way_round_and_keeps_every_addition(
    made: list[tuple[Any, ...]], mine: list[tuple[Any, ...]], yours: list[tuple[Any, ...]]
) -> None:
    base = apply_graph({"entities": {}, "relations": []}, made)
    ours, theirs = apply_graph(base, mine), apply_graph(base, yours)
    b, o, t = graph_bytes(base), graph_bytes(ours), graph_bytes(theirs)

    merged = merge_file(b, o, t, "team/graph.jsonl")
    assert merged == merge_file(b, t, o, "team/graph.jsonl")
    assert merged.clean and not merged.extra
    assert not has_conflict_markers(merged.data.decode())
    entities, relations = read_graph(merged.data)
    for side in (ours, theirs):
        for name, (kind, obs) in side["entities"].items():
            if base["entities"].get(name) == [kind, obs]:
                continue  # unchanged on this side: the other side's deletion may hold
            base_obs = base["entities"].get(name, [None, []])[1]
            assert name in entities  # added or changed: a change beats a deletion
            assert set(obs) - set(base_obs) <= set(entities[name])  # each observation added stays
        assert set(side["relations"]) - set(base["relations"]) <= relations
    for name in set(base["entities"]) - set(entities):  # gone: a side deleted it, none changed it
        assert any(name not in side["entities"] for side in (ours, theirs))
        assert all(
            side["entities"].get(name, base["entities"][name]) == base["entities"][name]
            for side in (ours, theirs)
        )


@PROPS
@given(graph_ops, graph_ops)
def test_graph_merge_with_one_side_unchanged_is_the_other_side(
    made: list[tuple[Any, ...]], mine: list[tuple[Any, ...]]
) -> None:
    base = graph_bytes(apply_graph({"entities": {}, "relations": []}, made))
    ours = graph_bytes(apply_graph(apply_graph({"entities": {}, "relations": []}, made), mine))
    assert merge_file(base, ours, base, "graph.jsonl").data == ours
    assert merge_file(base, base, ours, "graph.jsonl").data == ours


def test_graph_merge_keeps_unknown_fields_and_unreadable_lines_byte_for_byte() -> None:
    ada = '{"type":"entity","name":"ada","entityType":"person","observations":["x"],"since": 1815}'
    odd = "{not json at all"
    base = f"{ada}\n{odd}\n".encode()
    ours = (
        f'{ada}\n{odd}\n{{"type":"entity","name":"grace","entityType":"person","observations":[]}}\n'.encode()
    )
    more = ada.replace('["x"]', '["x","y"]')
    theirs = f"{more}\n{odd}\n".encode()
    merged = merge_file(base, ours, theirs, "graph.jsonl").data.decode()
    lines = merged.splitlines()
    assert odd in lines
    assert json.loads(lines[0]) == {
        "type": "entity",
        "name": "ada",
        "entityType": "person",
        "observations": ["x", "y"],
        "since": 1815,
    }
    assert '{"type":"entity","name":"grace","entityType":"person","observations":[]}' in lines


def test_a_change_beats_a_deletion_in_the_graph() -> None:
    ada = compact({"type": "entity", "name": "ada", "entityType": "person", "observations": ["x"]})
    changed = compact({"type": "entity", "name": "ada", "entityType": "person", "observations": ["x", "y"]})
    merged = merge_file(f"{ada}\n".encode(), b"", f"{changed}\n".encode(), "graph.jsonl")
    assert merged.data == f"{changed}\n".encode()


# ---------------------------------------------------------------------------- other files


def test_each_file_takes_its_merge_by_path() -> None:
    assert kind_of("vault/team/graph.jsonl") == "graph"
    assert kind_of("team/sessions/standup.history.jsonl") == "history"
    assert kind_of("sessions/standup.md") == "session"
    assert kind_of("team/notes/deploy.md") == "memory"
    assert kind_of("team/archive/OLD.MD") == "memory"
    assert kind_of("README.txt") is None


def test_a_file_memvault_does_not_own_merges_as_git_merge_file_does() -> None:
    base, ours, theirs = b"a\nb\nc\n", b"A\nb\nc\n", b"a\nb\nC\n"
    assert merge_file(base, ours, theirs, "notes.txt").data == b"A\nb\nC\n"
    clash = merge_file(base, b"1\nb\nc\n", b"2\nb\nc\n", "notes.txt")
    assert not clash.clean
    assert clash.data == b"<<<<<<< ours\n1\n=======\n2\n>>>>>>> theirs\nb\nc\n"


def test_a_deletion_against_an_edit_keeps_the_edit() -> None:
    assert resolve_modify_delete(b"old", None, b"new") == b"new"
    assert resolve_modify_delete(b"old", b"new", None) == b"new"
    assert resolve_modify_delete(b"old", b"old", None) is None
    assert resolve_modify_delete(b"old", None, None) is None


# ---------------------------------------------------------------------------- session summaries

SESSION = "standup"
# A version: (minutes after the start, appended or whole, its text)
version_st = st.tuples(
    st.integers(0, 50), st.booleans(), st.sampled_from(["done a", "doing b", "blocked c", "ok"])
)


def stamp(minutes: int) -> str:
    return format_time(datetime(2026, 3, 1, 9, 0, tzinfo=UTC) + timedelta(minutes=minutes))


def history_of(rows: list[tuple[int, bool, str]], start: int = 1) -> list[str]:
    """History lines as memvault writes them: each an append to the one before, or a whole text."""
    lines = []
    for number, (minutes, appended, text) in enumerate(rows, start=start):
        delta = appended and number > 1
        lines.append(history_line(Stored(SESSION, number, stamp(minutes), None, (), text, delta, len(text))))
    return lines


def read_session(history: bytes, md: bytes = b"") -> SessionOnDisk:
    with tempfile.TemporaryDirectory() as folder:
        md_path, history_path = paths(Path(folder), SESSION)
        md_path.parent.mkdir()
        history_path.write_bytes(history)
        if md:
            md_path.write_bytes(md)
        return read(md_path, history_path, mtime_ts=stamp(0), stem=SESSION)


def as_bytes(lines: list[str]) -> bytes:
    return "".join(line + "\n" for line in lines).encode()


@PROPS
@given(
    st.lists(version_st, max_size=4),
    st.lists(version_st, max_size=4),
    st.lists(version_st, max_size=4),
)
# Found by CI: a side's append came first in the merge, before the version it appends to.
@example(made=[], mine=[(0, False, "done a")], yours=[(0, False, "done a"), (0, True, "done a")])
# A side holding the other's versions and one more append alike: the last append is kept.
@example(
    made=[],
    mine=[(0, False, "ok"), (0, True, "ok")],
    yours=[(0, False, "ok"), (0, True, "ok"), (0, True, "ok")],
)
def test_history_keeps_both_sides_versions_in_time_order_numbered_again(
    made: list[tuple[int, bool, str]], mine: list[tuple[int, bool, str]], yours: list[tuple[int, bool, str]]
) -> None:
    made = sorted(made)
    mine = sorted((m + 60, a, t) for m, a, t in mine)  # each side writes after the base, in its order
    yours = sorted((m + 60, a, t) for m, a, t in yours)
    base_lines = history_of(made)
    base = as_bytes(base_lines)
    ours = as_bytes(base_lines + history_of(mine, len(made) + 1))
    theirs = as_bytes(base_lines + history_of(yours, len(made) + 1))

    merged = merge_file(base, ours, theirs, "team/sessions/standup.history.jsonl")
    assert merged == merge_file(base, theirs, ours, "team/sessions/standup.history.jsonl")
    assert merged.data.startswith(base)
    files = read_session(merged.data)
    assert not files.conflicted
    numbers = [v.version for v in files.versions]
    assert numbers == list(range(1, len(numbers) + 1))
    times = [v.ts for v in files.versions[len(made) :]]
    assert times == sorted(times)
    # Every version either side added is there, as often as the side that holds it more often
    # holds it (one both added alike, once).
    merged_keys = Counter(history_line_key((v.ts, v.delta, v.text)) for v in files.versions)
    for side in (mine, yours):
        for key, count in Counter(history_line_key(x) for x in side).items():
            assert merged_keys[key] >= count


def test_an_append_both_sides_hold_follows_the_version_it_appends_to() -> None:
    first = history_of([(60, False, "done a")])
    ours = as_bytes(first)
    theirs = as_bytes(first + history_of([(60, True, "done a")], 2))

    merged = merge_file(b"", ours, theirs, "sessions/standup.history.jsonl")
    assert merged == merge_file(b"", theirs, ours, "sessions/standup.history.jsonl")
    files = read_session(merged.data)
    assert not files.conflicted
    assert [(v.version, v.delta) for v in files.versions] == [(1, False), (2, True)]
    assert files.latest is not None and files.latest.summary == "done a\n\ndone a"


def history_line_key(row: tuple[Any, bool, str]) -> tuple[str, str]:
    when = row[0] if isinstance(row[0], str) else stamp(row[0])
    return when, row[2]


def test_a_summary_appended_on_both_sides_shows_both_appends_in_its_markdown_file() -> None:
    first = Version(SESSION, 1, stamp(0), "Standup", ("team",), "Monday: planned the week.")
    ours_v = Version(SESSION, 2, stamp(5), "Standup", ("team",), first.summary + "\n\nAda: fixed the build.")
    theirs_v = Version(SESSION, 2, stamp(9), "Standup", ("team",), first.summary + "\n\nGrace: wrote docs.")
    history = [history_line(stored_as(first, None))]
    base_h = as_bytes(history)
    ours_h = as_bytes([*history, history_line(stored_as(ours_v, first.summary))])
    theirs_h = as_bytes([*history, history_line(stored_as(theirs_v, first.summary))])
    base_md = render_markdown(first, first.ts)
    ours_md, theirs_md = render_markdown(ours_v, first.ts), render_markdown(theirs_v, first.ts)

    history_merged = merge_file(base_h, ours_h, theirs_h, "sessions/standup.history.jsonl").data
    md = merge_file(base_md, ours_md, theirs_md, "sessions/standup.md")
    assert md == merge_file(base_md, theirs_md, ours_md, "sessions/standup.md")
    files = read_session(history_merged, md.data)
    assert not files.conflicted and not files.unrecorded and not files.stale
    assert files.latest is not None and files.latest.version == 3
    assert files.latest.summary == "Monday: planned the week.\n\nAda: fixed the build.\n\nGrace: wrote docs."
    assert b"Grace: wrote docs." in md.data and b"Ada: fixed the build." in md.data


def test_a_summary_with_several_versions_on_a_side_leaves_its_markdown_for_the_server_to_write() -> None:
    first = Version(SESSION, 1, stamp(0), None, (), "one")
    two = Version(SESSION, 2, stamp(3), None, (), "one\n\ntwo")
    three = Version(SESSION, 3, stamp(4), None, (), "one\n\ntwo\n\nthree")
    other = Version(SESSION, 2, stamp(5), None, (), "one\n\nother")
    history = [history_line(stored_as(first, None))]
    ours_h = as_bytes(
        [*history, history_line(stored_as(two, "one")), history_line(stored_as(three, two.summary))]
    )
    theirs_h = as_bytes([*history, history_line(stored_as(other, "one"))])
    merged_h = merge_file(as_bytes(history), ours_h, theirs_h, "sessions/standup.history.jsonl").data
    md = merge_file(
        render_markdown(first, first.ts),
        render_markdown(three, first.ts),
        render_markdown(other, first.ts),
        "sessions/standup.md",
    )
    files = read_session(merged_h, md.data)
    assert files.stale and not files.unrecorded  # the server renders the merged history's latest again
    assert files.latest is not None and files.latest.summary == "one\n\ntwo\n\nthree\n\nother"


# ---------------------------------------------------------------------------- memories

memory_ops = st.lists(
    st.one_of(
        st.tuples(st.just("priority"), st.sampled_from(["P0", "P1", "P2"])),
        st.tuples(st.just("tag"), st.sampled_from(["a", "b", "c", "d"])),
        st.tuples(st.just("untag"), st.sampled_from(["a", "b", "c", "d"])),
        st.tuples(st.just("owner"), st.sampled_from(["ada", "grace"])),
        st.tuples(st.just("insert"), st.integers(0, 8)),
        st.tuples(st.just("delete"), st.integers(0, 8)),
        st.tuples(st.just("edit"), st.integers(0, 8)),
    ),
    max_size=6,
)
Note = dict[str, Any]


def edit_note(note: Note, ops: list[tuple[Any, ...]], who: str, minutes: int) -> Note:
    note = {**note, "tags": list(note["tags"]), "body": list(note["body"]), "updated": minutes}
    for n, (op, arg) in enumerate(ops):
        body = note["body"]
        if op == "priority":
            note["priority"] = arg
        elif op == "tag" and arg not in note["tags"]:
            note["tags"].append(arg)
        elif op == "untag" and arg in note["tags"]:
            note["tags"].remove(arg)
        elif op == "owner":
            note["owner"] = arg
        elif op == "insert":
            body.insert(min(arg, len(body)), f"{who} wrote line {n}")
        elif op == "delete" and body:
            del body[arg % len(body)]
        elif op == "edit" and body:
            body[arg % len(body)] += f" (edited by {who} {n})"
    return note


def note_bytes(note: Note) -> bytes:
    head = [
        f"priority: {note['priority']}",
        "createdAt: 2026-01-15T12:00:00.000Z",
        f"updatedAt: {stamp(note['updated'])}",
    ]
    if note["tags"]:
        head.append(f"tags: [{', '.join(note['tags'])}]")
    if note.get("owner"):
        head.append(f"owner: {note['owner']}")
    body = "".join(line + "\n\n" for line in note["body"])
    front = "\n".join(head)
    return f"---\n{front}\n---\n# Deploy notes\n\n{body}---\n*Created: 2026-01-15T12:00:00.000Z*\n".encode()


BASE_NOTE: Note = {
    "priority": "P1",
    "tags": ["a", "b"],
    "body": [f"line {i}" for i in range(5)],
    "updated": 0,
}


@PROPS
@given(memory_ops, memory_ops, st.integers(1, 3), st.integers(1, 3))
def test_memory_merges_the_same_either_way_round_and_keeps_every_addition(
    mine: list[tuple[Any, ...]], yours: list[tuple[Any, ...]], my_time: int, your_time: int
) -> None:
    ours_note, theirs_note = (
        edit_note(BASE_NOTE, mine, "ours", my_time),
        edit_note(BASE_NOTE, yours, "theirs", your_time),
    )
    base, ours, theirs = note_bytes(BASE_NOTE), note_bytes(ours_note), note_bytes(theirs_note)

    merged = merge_file(base, ours, theirs, "team/notes/deploy.md", memory_id="notes/deploy.md")
    assert merged == merge_file(base, theirs, ours, "team/notes/deploy.md", memory_id="notes/deploy.md")
    memory = parse_memory(merged.data, "notes/deploy.md", keep_meta=True)
    assert memory.writable, memory.problem
    assert memory.updated_at == parse_time(stamp(max(my_time, your_time)))
    added_tags = {*ours_note["tags"], *theirs_note["tags"]} - set(BASE_NOTE["tags"])
    assert added_tags <= set(memory.tags)
    texts = [merged.data.decode()]
    if not merged.clean:
        ((where, sibling),) = merged.extra
        assert where.startswith("team/notes/deploy.conflict-") and where.endswith(".md")
        kept = parse_memory(sibling, where, keep_meta=True)
        assert kept.writable and kept.meta["conflictOf"] == "notes/deploy.md"
        texts.append(sibling.decode())
    else:
        assert not merged.extra
    for text in texts:
        assert not has_conflict_markers(text)
    for side in (ours_note, theirs_note):
        for line in set(side["body"]) - set(BASE_NOTE["body"]):
            assert any(line + "\n" in text for text in texts)  # on a conflict, in one of the two


def test_a_memory_edited_in_two_sections_merges_both_edits() -> None:
    base = MEM_MCP.encode()
    ours = base.replace(b"Memory content here.", b"Memory content here.\n\n## Ours\nours").replace(
        b"updatedAt: 2026-02-01T08:00:00.000Z", b"updatedAt: 2026-02-03T08:00:00.000Z"
    )
    theirs = base.replace(b"# Memory Title", b"# Memory Title\n\nIntro by theirs.").replace(
        b"tags: [deploy, postgres]", b"tags: [deploy, postgres, infra]"
    )
    merged = merge_file(base, ours, theirs, "mem.md")
    assert merged.clean and not merged.extra
    text = merged.data.decode()
    assert "## Ours\nours" in text and "Intro by theirs." in text
    assert "updatedAt: 2026-02-03T08:00:00.000Z" in text and "tags: [deploy, postgres, infra]" in text


def test_a_true_body_conflict_keeps_both_versions_whole_without_markers() -> None:
    base = MEM_MCP.encode()
    ours = base.replace(b"Memory content here.", b"Ours says this.")
    theirs = base.replace(b"Memory content here.", b"Theirs says that.").replace(
        b"updatedAt: 2026-02-01T08:00:00.000Z", b"updatedAt: 2026-02-05T08:00:00.000Z"
    )
    merged = merge_file(base, ours, theirs, "team/mem.md", memory_id="mem.md")
    assert not merged.clean
    assert merged.data == theirs  # updated last: stays in place
    ((where, sibling),) = merged.extra
    assert where.startswith("team/mem.conflict-")
    assert sibling == ours.replace(b"importance: 0.8\n", b'importance: 0.8\nconflictOf: "mem.md"\n')
    assert conflict_copy_of(where.removeprefix("team/")) == "mem.md"  # the name says whose copy it is


def test_only_a_conflict_copys_name_names_the_memory_it_was_kept_beside() -> None:
    assert conflict_copy_of("notes/deploy.conflict-0a1b2c3d.md") == "notes/deploy.md"
    assert conflict_copy_of("deploy.conflict-0a1b2c3d.conflict-99aa88bb.md") == "deploy.conflict-0a1b2c3d.md"
    for name in (
        "deploy.md",
        "deploy.conflict-notes.md",
        "deploy.conflict-0a1b2c3d.md.bak",
        ".conflict-0a1b2c3d.md",
    ):
        assert conflict_copy_of(name) is None


def test_a_file_without_frontmatter_keeps_both_versions_on_a_conflict() -> None:
    base = b"# Shopping\n\n- milk\n"
    merged = merge_file(base, b"# Shopping\n\n- oat milk\n", b"# Shopping\n\n- soy milk\n", "list.md")
    assert not merged.clean and not has_conflict_markers(merged.data.decode())
    ((_, sibling),) = merged.extra
    assert {merged.data, sibling.split(b"---\n", 2)[2]} == {
        b"# Shopping\n\n- oat milk\n",
        b"# Shopping\n\n- soy milk\n",
    }
    appended = merge_file(base, base + b"- eggs\n", base + b"- tea\n", "list.md")
    assert appended.clean and appended.data == b"# Shopping\n\n- milk\n- eggs\n- tea\n"


def test_frontmatter_keys_memvault_does_not_own_merge_line_by_line() -> None:
    base = (
        b"---\npriority: P1\nowner: ada\nteam:\n  - x\n  - y\nupdatedAt: 2026-02-01T08:00:00.000Z\n---\n"
        b"# T\n\nbody\n"
    )
    ours = base.replace(b"owner: ada", b"owner: grace")
    theirs = base.replace(b"  - y\n", b"  - y\n  - z\n").replace(b"P1", b"P0")
    merged = merge_file(base, ours, theirs, "a.md").data
    assert merged == base.replace(b"owner: ada", b"owner: grace").replace(b"P1", b"P0").replace(
        b"team:\n  - x\n  - y\n", b"team: [x, y, z]\n"
    )
    gone = merge_file(base, ours.replace(b"body", b"body 2"), base.replace(b"owner: ada\n", b""), "a.md").data
    assert b"owner: grace\n" in gone and b"body 2" in gone  # a change beats a deletion


def test_two_new_memories_of_one_name_are_both_kept_never_glued_together() -> None:
    one = b"---\nupdatedAt: 2026-01-01T00:00:00.000Z\n---\n# A\n\none\n"
    two = b"---\nupdatedAt: 2026-01-02T00:00:00.000Z\n---\n# B\n\ntwo\n"
    merged = merge_file(b"", one, two, "notes/a.md")
    assert merged.data == two
    ((where, sibling),) = merged.extra
    assert where.startswith("notes/a.conflict-") and sibling.endswith(b"# A\n\none\n")


def test_a_memory_with_crlf_lines_merges_and_keeps_them() -> None:
    base = MEM_MCP.replace("\n", "\r\n").encode()
    ours = base.replace(b"# Memory Title\r\n", b"# Memory Title\r\n\r\nIntro.\r\n")
    theirs = base.replace(b"tags: [deploy, postgres]", b"tags: [deploy, postgres, infra]").replace(
        b"Memory content here.", b"Memory content here, and more."
    )
    merged = merge_file(base, ours, theirs, "mem.md")
    assert merged.clean
    assert merged.data == theirs.replace(b"# Memory Title\r\n", b"# Memory Title\r\n\r\nIntro.\r\n")


@PROPS
@given(
    st.lists(version_st, min_size=1, max_size=3),
    st.lists(st.tuples(version_st, st.sampled_from([None, "Retitled", "Other"])), max_size=4),
    st.lists(st.tuples(version_st, st.sampled_from([None, "Retitled", "Other"])), max_size=4),
)
def test_history_title_changes_follow_their_versions_when_numbers_change(
    made: list[tuple[int, bool, str]],
    mine: list[tuple[tuple[int, bool, str], str | None]],
    yours: list[tuple[tuple[int, bool, str], str | None]],
) -> None:
    base_lines = history_of(sorted(made))

    def side(rows: list[tuple[tuple[int, bool, str], str | None]]) -> list[str]:
        lines = list(base_lines)
        rows = sorted(rows, key=lambda r: r[0])
        for number, ((minutes, appended, text), title) in enumerate(rows, start=len(made) + 1):
            lines += history_of([(minutes + 60, appended, text)], number)
            if title is not None:
                lines.append(history_line(Stored(SESSION, number, "", title, (), "", False, 0), meta=True))
        return lines

    base, ours, theirs = as_bytes(base_lines), as_bytes(side(mine)), as_bytes(side(yours))
    merged = merge_file(base, ours, theirs, "sessions/standup.history.jsonl")
    assert merged == merge_file(base, theirs, ours, "sessions/standup.history.jsonl")
    files = read_session(merged.data)
    assert not files.conflicted
    titled: dict[tuple[str, str], set[str | None]] = {}
    for version in files.versions:
        titled.setdefault((version.ts, version.text), set()).add(version.title)
    for rows in (mine, yours):
        for (minutes, _, text), title in rows:
            if title is not None:
                assert title in titled[(stamp(minutes + 60), text)]
