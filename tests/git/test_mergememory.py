"""A memory's merge: field by field and line by line, the same either way round, and when two bodies
truly conflict the other version kept whole beside it as a conflict copy, never a marker."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from strategies import MEM_MCP, PROPS

from memvault.clock import format_time, parse_time
from memvault.disk.markdown import has_conflict_markers, parse_memory
from memvault.git.mergememory import conflict_copy_of, merge_memory


def stamp(minutes: int) -> str:
    return format_time(datetime(2026, 3, 1, 9, 0, tzinfo=UTC) + timedelta(minutes=minutes))


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

    merged = merge_memory(base, ours, theirs, path="team/notes/deploy.md", memory_id="notes/deploy.md")
    assert merged == merge_memory(
        base, theirs, ours, path="team/notes/deploy.md", memory_id="notes/deploy.md"
    )
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
    merged = merge_memory(base, ours, theirs, path="mem.md", memory_id="mem.md")
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
    merged = merge_memory(base, ours, theirs, path="team/mem.md", memory_id="mem.md")
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
    merged = merge_memory(
        base,
        b"# Shopping\n\n- oat milk\n",
        b"# Shopping\n\n- soy milk\n",
        path="list.md",
        memory_id="list.md",
    )
    assert not merged.clean and not has_conflict_markers(merged.data.decode())
    ((_, sibling),) = merged.extra
    assert {merged.data, sibling.split(b"---\n", 2)[2]} == {
        b"# Shopping\n\n- oat milk\n",
        b"# Shopping\n\n- soy milk\n",
    }
    appended = merge_memory(base, base + b"- eggs\n", base + b"- tea\n", path="list.md", memory_id="list.md")
    assert appended.clean and appended.data == b"# Shopping\n\n- milk\n- eggs\n- tea\n"


def test_frontmatter_keys_memvault_does_not_own_merge_line_by_line() -> None:
    base = (
        b"---\npriority: P1\nowner: ada\nteam:\n  - x\n  - y\nupdatedAt: 2026-02-01T08:00:00.000Z\n---\n"
        b"# T\n\nbody\n"
    )
    ours = base.replace(b"owner: ada", b"owner: grace")
    theirs = base.replace(b"  - y\n", b"  - y\n  - z\n").replace(b"P1", b"P0")
    merged = merge_memory(base, ours, theirs, path="a.md", memory_id="a.md").data
    assert merged == base.replace(b"owner: ada", b"owner: grace").replace(b"P1", b"P0").replace(
        b"team:\n  - x\n  - y\n", b"team: [x, y, z]\n"
    )
    gone = merge_memory(
        base,
        ours.replace(b"body", b"body 2"),
        base.replace(b"owner: ada\n", b""),
        path="a.md",
        memory_id="a.md",
    ).data
    assert b"owner: grace\n" in gone and b"body 2" in gone  # a change beats a deletion


def test_two_new_memories_of_one_name_are_both_kept_never_glued_together() -> None:
    one = b"---\nupdatedAt: 2026-01-01T00:00:00.000Z\n---\n# A\n\none\n"
    two = b"---\nupdatedAt: 2026-01-02T00:00:00.000Z\n---\n# B\n\ntwo\n"
    merged = merge_memory(b"", one, two, path="notes/a.md", memory_id="a.md")
    assert merged.data == two
    ((where, sibling),) = merged.extra
    assert where.startswith("notes/a.conflict-") and sibling.endswith(b"# A\n\none\n")


def test_a_memory_with_crlf_lines_merges_and_keeps_them() -> None:
    base = MEM_MCP.replace("\n", "\r\n").encode()
    ours = base.replace(b"# Memory Title\r\n", b"# Memory Title\r\n\r\nIntro.\r\n")
    theirs = base.replace(b"tags: [deploy, postgres]", b"tags: [deploy, postgres, infra]").replace(
        b"Memory content here.", b"Memory content here, and more."
    )
    merged = merge_memory(base, ours, theirs, path="mem.md", memory_id="mem.md")
    assert merged.clean
    assert merged.data == theirs.replace(b"# Memory Title\r\n", b"# Memory Title\r\n\r\nIntro.\r\n")
