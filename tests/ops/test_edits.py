"""Edits that cannot clobber: versions, preconditions, partial edits, paging of long memories."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memvault.disk.markdown import parse_memory
from memvault.errors import InvalidArgument
from memvault.ops.edits import Edit, apply_edit, replace_section, version_of
from memvault.ops.service import Service

NOTES = """Intro line.

## Setup

Install with pip.
Then run it.

### Details

Deep details.

## Usage

Call it.
```
## not a heading inside a fence
```
"""


def test_section_replace_keeps_everything_else_byte_for_byte() -> None:
    out = replace_section(NOTES, "## Setup", "Use the installer.", "n.md")
    before, after = NOTES.split("## Setup\n", 1)[0], NOTES[NOTES.index("## Usage") :]
    assert out.startswith(before + "## Setup\n\nUse the installer.\n\n## Usage")
    assert out.endswith(after)
    assert "Deep details" not in out  # a subsection belongs to its section


def test_a_subsection_alone_can_be_replaced() -> None:
    out = replace_section(NOTES, "Details", "Shallow.", "n.md")
    assert "### Details\n\nShallow.\n\n## Usage" in out and "Install with pip." in out


def test_section_names_must_name_one_heading() -> None:
    with pytest.raises(
        InvalidArgument, match=r"no section called 'Missing'.*## Setup, ### Details, ## Usage"
    ):
        replace_section(NOTES, "Missing", "x", "n.md")
    with pytest.raises(InvalidArgument, match="no section"):
        replace_section(NOTES, "not a heading inside a fence", "x", "n.md")
    twice = "## A\none\n## A\ntwo\n"
    with pytest.raises(InvalidArgument, match="has 2 sections"):
        replace_section(twice, "A", "x", "n.md")


def test_passage_replace_needs_a_unique_passage() -> None:
    assert apply_edit("a b c", Edit(old_text="b", new_text="B"), "n.md") == "a B c"
    with pytest.raises(InvalidArgument, match="does not contain"):
        apply_edit("a b c", Edit(old_text="z", new_text="Z"), "n.md")
    with pytest.raises(InvalidArgument, match="appears 2 times"):
        apply_edit("b b", Edit(old_text="b", new_text="B"), "n.md")
    with pytest.raises(InvalidArgument, match="go together"):
        Edit(old_text="b")


def test_contradictory_edits_are_refused_with_a_way_forward() -> None:
    with pytest.raises(InvalidArgument, match="not content and append"):
        Edit(content="x", append="y")
    with pytest.raises(InvalidArgument, match="section needs content"):
        Edit(section="## A")
    assert apply_edit("old", Edit(append="new"), "n.md") == "old\n\nnew"


def test_reading_does_not_change_a_version_but_any_edit_does() -> None:
    base = b"---\npriority: P1\nlastAccessedAt: 2026-01-01T00:00:00Z\n---\n# T\n\nbody\n"
    read_later = base.replace(b"2026-01-01", b"2026-02-01")
    edited = base.replace(b"body", b"body!")
    assert version_of(parse_memory(base, "t.md")) == version_of(parse_memory(read_later, "t.md"))
    assert version_of(parse_memory(base, "t.md")) != version_of(parse_memory(edited, "t.md"))


@pytest.mark.slow
def test_versions_are_kept_per_file_and_the_kept_ones_stay_bounded() -> None:
    from memvault.ops import edits

    same_bytes = b"no heading, the title comes from the name\n"
    assert version_of(parse_memory(same_bytes, "a.md")) != version_of(parse_memory(same_bytes, "b.md"))
    for i in range(edits.VERSIONS_KEPT + 10):
        version_of(parse_memory(f"# T\n\nbody {i}\n".encode(), "t.md"))
    assert len(edits._VERSIONS) <= edits.VERSIONS_KEPT


@pytest.mark.anyio
async def test_a_stale_version_is_refused_and_the_file_left_as_it_is(make_settings, vault_root: Path) -> None:
    service = Service(make_settings())
    store = service.store
    try:
        memory = (await store.write("alice", title="Plan", content="Step one.")).memory
        seen = version_of(memory)
        path = vault_root / "alice" / memory.id
        path.write_text(path.read_text().replace("Step one.", "Step one, by hand."))  # a person's edit
        before = path.read_bytes()
        with pytest.raises(InvalidArgument, match="changed since you read it"):
            await store.update("alice", memory.id, edit=Edit(content="Agent's text", expected=seen))
        assert path.read_bytes() == before
        found = await store.find("alice", filenames=[memory.id])
        fresh = version_of(found.memories[0])
        updated = await store.update("alice", memory.id, edit=Edit(append="Step two.", expected=fresh))
        assert updated.content == "Step one, by hand.\n\nStep two."
    finally:
        await service.close()


@pytest.mark.anyio
async def test_an_update_of_nothing_says_so(make_settings) -> None:
    service = Service(make_settings())
    store = service.store
    try:
        memory = (await store.write("alice", title="Plan", content="Step one.")).memory
        with pytest.raises(InvalidArgument, match="Nothing to change"):
            await store.update("alice", memory.id)
    finally:
        await service.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_agents_edit_safely_and_page_through_long_memories(server_factory, vault_root: Path) -> None:
    long_text = "".join(f"line {i:05d} " + "x" * 40 + "\n" for i in range(2000))[:100_000]
    async with server_factory() as srv, srv.session("alice") as s:
        assert not (await srv.call(s, "write_memory", title="Notes", content=NOTES))[0]
        err, text = await srv.call(s, "read_memory", filenames=["notes.md"])
        version = re.search(r"version ([0-9a-f]{12})", text)
        assert not err and version
        err, text = await srv.call(
            s,
            "update_memory",
            filename="notes.md",
            section="## Usage",
            content="Call it twice.",
            expectedVersion=version.group(1),
        )
        assert not err, text
        raw = (vault_root / "alice" / "notes.md").read_text()
        assert "Call it twice." in raw and "Install with pip.\nThen run it." in raw
        err, text = await srv.call(
            s, "update_memory", filename="notes.md", append="More.", expectedVersion=version.group(1)
        )
        assert err and "changed since you read it" in text
        err, text = await srv.call(s, "update_memory", filename="notes.md")
        assert err and "Nothing to change" in text

        # A 100,000-character memory, read whole by following the replies' offsets.
        assert not (await srv.call(s, "write_memory", title="Long", content=long_text))[0]
        pages, offset = [], 0
        for _ in range(200):
            args = {"filenames": ["long.md"], **({"offset": offset} if offset else {})}
            err, text = await srv.call(s, "read_memory", **args)
            assert not err, text
            body = text.split("\n", 3)[3] if offset == 0 else text.split("\n", 4)[4]
            more = re.search(r"\n\[\.\.\. [\d,]+ more characters: read_memory\(.*offset=(\d+)\)\]\n\Z", body)
            pages.append(body[: more.start()] if more else body[:-1])
            if not more:
                break
            offset = int(more.group(1))
        assert "".join(pages) == long_text.strip()
        assert len(pages) > 2

        # Reading everything shows every memory, the long one shortened, not the rest left out.
        for i in range(3):
            assert not (await srv.call(s, "write_memory", title=f"Small {i}", content="tiny"))[0]
        err, text = await srv.call(s, "read_memory")
        assert not err and "left out" not in text
        assert all(f"## Small {i}" in text for i in range(3)) and "## Long" in text and "## Notes" in text


@pytest.mark.anyio
async def test_a_restored_memory_is_no_longer_listed_as_superseded(make_settings, vault_root: Path) -> None:
    service = Service(make_settings())
    store = service.store
    try:
        old = (await store.write("alice", title="Old plan", content="Plan A.")).memory
        new = await store.write("alice", title="New plan", content="Plan B.", supersedes=[old.id])
        assert "supersedes:" in (vault_root / "alice" / new.memory.id).read_text()
        restored = await store.restore("alice", old.id)
        await store.delete("alice", restored)
        text = (vault_root / "alice" / new.memory.id).read_text()
        assert "supersedes" not in text and "Plan B." in text
    finally:
        await service.close()


def test_a_section_edit_adds_no_blank_line_the_section_did_not_have() -> None:
    tight = "# Notes\n## Setup\nold text\n## Usage\nCall it.\n"
    assert replace_section(tight, "## Setup", "new text", "n.md") == (
        "# Notes\n## Setup\nnew text\n## Usage\nCall it.\n"
    )
    spaced = "## Setup\n\nold text\n\n## Usage\n"
    assert replace_section(spaced, "## Setup", "new text", "n.md") == "## Setup\n\nnew text\n\n## Usage\n"
    assert replace_section("## Setup\nold\n", "## Setup", "new", "n.md") == "## Setup\nnew\n"
