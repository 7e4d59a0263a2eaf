"""What a write or an update returns, and the memory it starts from, equal the parse of the file."""

from __future__ import annotations

import dataclasses
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from strategies import MEM_MCP, contents, tags_st, times, titles

from memvault.disk.files import file_stamp
from memvault.disk.markdown import NO_META, Memory, parse_memory, render_new, seal_markers
from memvault.disk.vault import Vault, is_parse_of

CHECKS = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
ODD_CONTENTS = [
    "",
    "   ",
    "plain words",
    "\n\nleading and trailing blank lines\n\n",
    "a line\n---\n*Created: 2026-01-15T12:00:00.000Z*",
    "# A heading of the content\n\nand text",
    "<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> branch",
    "---\npriority: P0\n---",
    "title: in the body",
    "tabs\tand trailing spaces   ",
    "\ufeffa byte order mark",
    "Été, 東京, emoji 🎉",
    "a\rb",
    "lines\r\nwith CRLF\r\n",
]
ODD_TAGS = [[], ["deploy"], ["deploy", "postgres"], ["yes"], ["a b"], ["x.md"], ["Été"], ["on", "null"]]


def old_parse(vault: Vault, id: str, archived: bool = False) -> Memory:
    """What a write returned before: the parse of the bytes now in the file (the reference)."""
    path = os.path.join(vault.area(archived), id)
    with open(path, "rb") as f:
        raw = f.read()
    return parse_memory(raw, id, archived=archived, **file_stamp(os.stat(path)))


def same(got: Memory, want: Memory, *, meta: bool = True) -> None:
    """Every field equal, of the same type and repr (1 against 1.0, a list against a tuple)."""
    for f in dataclasses.fields(Memory):
        if f.name == "meta" and not meta:
            continue
        a, b = getattr(got, f.name), getattr(want, f.name)
        assert type(a) is type(b), f.name
        assert repr(a) == repr(b), f.name
        if isinstance(a, dict):
            assert [(k, type(v)) for k, v in a.items()] == [(k, type(v)) for k, v in b.items()], f.name


fields_st = st.fixed_dictionaries(
    {
        "priority": st.sampled_from(["P0", "P1", "P2"]),
        "createdAt": times,
        "updatedAt": times,
        "lastAccessedAt": st.one_of(st.none(), times),
        "tags": st.one_of(tags_st, st.sampled_from(ODD_TAGS)),
        "importance": st.one_of(st.none(), st.floats(0, 1), st.sampled_from([0, 1, 0.5, 1e-7])),
    }
)
contents_st = st.one_of(contents, st.sampled_from(ODD_CONTENTS))


@CHECKS
@given(title=titles, content=contents_st, fields=fields_st)
@example(
    title="Deploy notes", content="Use blue-green.", fields={"createdAt": datetime(2026, 1, 2, tzinfo=UTC)}
)
def test_create_returns_what_parsing_its_file_gives(
    tmp_path: Path, title: str, content: str, fields: dict[str, Any]
) -> None:
    vault = Vault(tmp_path / "agent")
    memory = vault.create(title, content, fields)
    with open(os.path.join(vault.dir, memory.id), "rb") as f:
        assert f.read() == seal_markers(render_new(title, content, fields)).encode("utf-8")
    same(memory, old_parse(vault, memory.id))


update_st = st.fixed_dictionaries(
    {},
    optional={
        "priority": st.sampled_from(["P0", "P1", "P2"]),
        "tags": st.one_of(tags_st, st.sampled_from(ODD_TAGS)),
        "importance": st.sampled_from([0, 1, 0.25, 1e-7]),
        "updatedAt": times,
        "lastAccessedAt": times,
    },
)
HAND_MADE = [
    MEM_MCP,
    MEM_MCP.replace("\n", "\r\n"),
    MEM_MCP.replace("importance: 0.8\n", "importance: 0.8\nsource: chat\nx-ref: 12\n"),
    MEM_MCP.replace("tags: [deploy, postgres]\n", "tags:\n  - deploy\n  - postgres\n"),
    MEM_MCP.replace("priority: P1\n", "priority: p1\ntitle: From the frontmatter\n"),
    MEM_MCP.replace("priority: P1\n", "priority: 'P0'\n"),
    MEM_MCP.replace("createdAt: 2026-01-15T12:00:00.000Z\n", ""),
    MEM_MCP.replace("createdAt: 2026-01-15T12:00:00.000Z\n", "importedAt: 2026-03-01T00:00:00.000Z\n"),
    MEM_MCP.replace("importance: 0.8\n", "importance: 0.8\nimportedAt: 2026-03-01T00:00:00.000Z\n"),
    MEM_MCP.replace("---\n# Memory", "literalMarkers: h0000\n---\n# Memory"),
    "---\npriority: P2\ncreatedAt: 2026-01-15T12:00:00.000Z\n---\nNo heading here\n",
    "---\ncreatedAt: 2026-01-15T12:00:00.000Z\n---\n# T\n\n<<<<<<< a\nx\n=======\ny\n>>>>>>> b\n",
    "\ufeff" + MEM_MCP,
]


@CHECKS
@given(
    start=st.sampled_from(HAND_MADE), fields=update_st, again=st.booleans(), touch=st.sampled_from([0, 1, 2])
)
def test_update_of_fields_returns_what_parsing_its_file_gives(
    tmp_path: Path, start: str, fields: dict[str, Any], again: bool, touch: int
) -> None:
    vault = Vault(tmp_path / "agent")
    vault.dir.mkdir(parents=True, exist_ok=True)
    path = vault.dir / "note.md"
    path.write_bytes(start.encode("utf-8"))
    # As the server holds a memory: without its frontmatter mapping.
    held = dataclasses.replace(vault.read("note.md"), meta=NO_META)
    if not held.writable:
        return
    if touch == 1:  # the same bytes, a new time: the held memory is not the file's parse
        os.utime(path, ns=(held.mtime_ns + 10**9, held.mtime_ns + 10**9))
    elif touch == 2:  # other bytes
        path.write_bytes(start.replace("Memory content", "Other content").encode("utf-8"))
    raw, current = vault.read_both("note.md", known=held)
    same(current, old_parse(vault, "note.md"), meta=False)
    updated = vault.update("note.md", fields, read=(raw, current))
    same(updated, old_parse(vault, "note.md"))
    if again:  # the access write-back's way: read and checked by the update itself
        known = dataclasses.replace(updated, meta=NO_META)
        at = datetime(2027, 5, 6, tzinfo=UTC)
        later = vault.update("note.md", {"lastAccessedAt": at}, expect_hash=updated.hash, known=known)
        same(later, old_parse(vault, "note.md"))


def test_a_held_memory_stands_for_the_parse_only_of_its_own_bytes(tmp_path: Path) -> None:
    vault = Vault(tmp_path / "agent")
    vault.dir.mkdir(parents=True)
    path = vault.dir / "note.md"
    path.write_bytes(MEM_MCP.encode("utf-8"))
    held = vault.read("note.md")
    raw, st = path.read_bytes(), os.stat(path)
    assert is_parse_of(held, raw, st, "note.md", False)
    other = raw.replace(b"Memory content", b"Memory CONTENT")  # same size, same stat
    assert not is_parse_of(held, other, st, "note.md", False)
    assert not is_parse_of(held, raw, st, "note.md", True)
    assert not is_parse_of(held, raw, st, "other.md", False)
