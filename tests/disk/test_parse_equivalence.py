"""parse_memory's fast paths give, field for field, the Memory the parser before them gave."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from parse_reference import parse_memory as reference
from strategies import MEM_MCP, contents, tags_st, times, titles

from memvault.disk.markdown import Memory, body_seal, parse_memory, render_new, rewrite

CHECKS = settings(max_examples=600, deadline=None)


def same(got: Memory, want: Memory) -> None:
    """Every field equal, of the same type, with the same repr (NaN in meta, 1 against 1.0 and True)."""
    for f in dataclasses.fields(Memory):
        a, b = getattr(got, f.name), getattr(want, f.name)
        assert type(a) is type(b), f.name
        assert repr(a) == repr(b), f.name
        assert a == b or repr(a) == repr(b), f.name
    assert got == want or repr(got) == repr(want)


def check(raw: bytes, id: str = "note.md", **kwargs: Any) -> None:
    try:
        want = reference(raw, id, **kwargs)
    except Exception as exc:  # pragma: no cover - the old parser raised nowhere it was tried
        pytest.fail(f"the reference parser raised {exc!r}")
    for _ in range(2):  # the second time, the fast path's remembered keys and words are warm
        same(parse_memory(raw, id, **kwargs), want)


KEYS = st.sampled_from(
    "priority createdAt updatedAt lastAccessedAt importedAt tags importance title literalMarkers supersedes "
    "on Null yes Y x-y _k k1 'q' \"q\" 1k ké TRUE a\tb".split(" ")
)
ODD_VALUES = [
    "P0", "P1", "P2", "p1", " P0 ", "P3", "yes", "No", "on", "OFF", "y", "n", "null", "Null", "~", "true",
    "nan", ".nan", "inf", "-.inf", "2026-01-15T12:00:00.000Z", "2026-01-15T12:00:00Z", "2026-02-30T00:00:00Z",
    "2026-01-15T12:00:00.1234567Z", "2026-01-15T12:00:00+02:00", "2026-01-15", "2026-01-15 12:00:00",
    "\u0662\u0660\u0662\u0666-01-15T12:00:00Z", "0", "-1", "01", "1.5", "-0.0", "1e3", "0.8", "7" * 5000,
    "[]", "[a]", "[deploy, postgres]", "[a, yes]", "[a,b]", "[1, 2]", "[a, a]", "a, b c", "deploy",
    "'quoted'", '"x"', "a b", "", " ", "P1 # c", "&a P1", "*a", "!!int abc", "{a: 1}", "|", "Été", "x:y",
]  # fmt: skip
VALUES = st.one_of(
    st.sampled_from(ODD_VALUES),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=12),
)
# The keys memvault reads, with values of every kind a time or a priority is written in.
OWNED = st.tuples(
    st.sampled_from(["createdAt", "updatedAt", "lastAccessedAt", "importedAt", "priority", "tags"]),
    st.sampled_from([v for v in ODD_VALUES if v[:1].isdigit() or v[:1] in "Pp[" or v in ("", "null")]),
)
LINES = st.one_of(
    OWNED.map(": ".join),
    st.tuples(KEYS, VALUES).map(": ".join),
    st.sampled_from(["", " ", "tags:", "  - a", "- b", "# comment", "key:value", "k:", ":", "a: b: c", "\t"]),
)
OPENINGS = st.sampled_from(["---\n", "--- \n", "---\t\n", "----\n", ""])
CLOSINGS = st.sampled_from(["---\n", "---", "--- \n", "---\t\n", "----\n", "---x\n", ""])
HEADINGS = st.sampled_from(
    ["# Title\n\n", "# Title  \t\n", "#  Spaced\n", "# \n", "#   \n", "# \t\n", "#\n", "  # Indented\n",
     "\n\n# Late\n", "## Sub\n", "# T\x0b\n", "# Only", ""]
)  # fmt: skip
FOOTERS = st.sampled_from(
    ["", "\n\n---\n*Created: 2026-01-15T12:00:00.000Z*\n", "\n---\n*Created: not a time*\n",
     "\n\n--- \n\n*Created: 2025-12-01T00:00:00Z*  \n\n", "\n---\n*Created: *\n", "\n---\n"]
)  # fmt: skip
ODD_BODIES = [
    "Body.", "Body.\n\n# Second heading\n", "<<<<<<< ours\nx\n=======\ny\n>>>>>>> theirs\n",
    "a\n---\nb\n", "text\n---", "<<<<<<<\n=======\n>>>>>>>",
]  # fmt: skip
BODIES = st.one_of(contents, st.sampled_from(ODD_BODIES))


@st.composite
def files(draw: st.DrawFn) -> bytes:
    """Files as people, git and other tools leave them: every part of the format, each in its
    usual and its odd spellings."""
    fm = draw(st.lists(LINES, max_size=7))
    body = draw(HEADINGS) + draw(BODIES) + draw(FOOTERS)
    if draw(st.booleans()):  # a seal, matching the body or not: literal conflict markers
        if draw(st.booleans()):
            body = draw(HEADINGS) + draw(st.sampled_from(ODD_BODIES[2:])) + draw(FOOTERS)
        fm.append(f"literalMarkers: {body_seal(body) if draw(st.booleans()) else 'hdeadbeef'}")
    text = draw(OPENINGS) + "".join(f"{line}\n" for line in fm) + draw(CLOSINGS) + body
    text = draw(st.sampled_from(["", "\ufeff", "\ufeff\ufeff"])) + text
    newline = draw(st.sampled_from(["\n", "\n", "\r\n", "\r"]))
    raw = text.replace("\n", newline).encode("utf-8")
    if draw(st.booleans()):
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"])) + raw[at:]
    return raw


STAMPS = st.fixed_dictionaries(
    {},
    optional={
        "archived": st.booleans(),
        "mtime_ns": st.sampled_from([0, 1, 1_760_000_000_123_456_789, -5_000_000_000]),
        "size": st.sampled_from([None, 0, 9 * 2**20]),
        "change": st.integers(0, 2**64),
        "keep_meta": st.booleans(),
    },
)


@CHECKS
@given(files(), STAMPS, st.sampled_from(["note.md", "a/b/Note.MD", "x", "dir/.md"]))
@example(MEM_MCP.encode(), {}, "note.md")
@example(b"", {}, "note.md")
@example(b"---\n---\n", {"mtime_ns": 1}, "n.md")
def test_odd_and_hostile_files_parse_as_before(raw: bytes, stamps: dict[str, Any], id: str) -> None:
    check(raw, id, **stamps)


@CHECKS
@given(st.binary(max_size=300) | st.text(max_size=300).map(str.encode), st.booleans())
def test_any_bytes_parse_as_before(raw: bytes, keep_meta: bool) -> None:
    check(raw, keep_meta=keep_meta)


@CHECKS
@given(titles, contents, tags_st, times, times, st.sampled_from(["P0", "P1", "P2"]), st.booleans())
def test_files_the_server_writes_parse_as_before(
    title: str,
    content: str,
    tags: list[str],
    created: datetime,
    accessed: datetime,
    priority: str,
    edit: bool,
) -> None:
    fields = {"priority": priority, "createdAt": created, "updatedAt": created, "lastAccessedAt": accessed}
    text = render_new(title, content, {**fields, "tags": tags, "importance": 0.5})
    if edit:  # a later write: keys changed in place and appended, as edit_frontmatter does
        text = rewrite(
            text, {"lastAccessedAt": None, "tags": [], "supersededBy": "b.md"}, title=None, content=None
        )
        text = rewrite(text, {"lastAccessedAt": accessed}, title=title + " 2", content=None)
    check(text.encode("utf-8"), "note.md", mtime_ns=1_760_000_000_000_000_000, keep_meta=False)
    check(text.encode("utf-8"), "note.md")


def alias_bomb(levels: int = 9) -> bytes:
    lines = ["x0: &a0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]"]
    for level in range(1, levels):
        lines.append(f"x{level}: &a{level} [{', '.join([f'*a{level - 1}'] * 9)}]")
    lines.append(f"tags: [{', '.join([f'*a{levels - 1}'] * 9)}]")
    return ("---\npriority: P1\n" + "\n".join(lines) + "\n---\n# Bomb\n\nkaboom body\n").encode()


@pytest.mark.parametrize(
    "raw",
    [
        alias_bomb(),
        b"---\na: &x 1\nb: *x\n---\n# T\n",
        b"---\n" + b"- " * 2000 + b"x\n---\n# Deep\n",  # nesting deep enough to trouble the loader
        b"---\n" + b"[" * 5000 + b"\n---\n",
        b"---\ncreatedAt: 2026-02-30\n---\n# Bad date\n",
        b"---\nk: " + b"9" * 5000 + b"\n---\n# Long number\n",
        b"---\npriority: P1\n",  # no closing fence
        b"\xef\xbb\xbf---\r\npriority: P0\r\ncreatedAt: 2026-01-15T12:00:00Z\r\n---\r\n# CRLF\r\n\r\nA\r\n",
        b"---\npriority: P1\n---\n# T\n\n<<<<<<< ours\na\n=======\nb\n>>>>>>> theirs\n",
        b"---\npriority: \xff\n---\n# Not UTF-8\n",
        b"---\n- a\n- b\n---\n# A list\n",
        b"---\n42\n---\n",
        b"---\non: 1\nnull: 2\n---\n",
        b"---\npriority: P1\npriority: P2\n---\n",
        b"---\ntitle: Meta\ncreatedAt: 2026-01-15T12:00:00Z\nimportedAt: 2026-03-01T00:00:00Z\n---\nBody\n",
    ],
)
def test_hostile_files_parse_as_before(raw: bytes) -> None:
    check(raw, mtime_ns=1_760_000_000_000_000_000)


READ_KEYS = "createdAt updatedAt lastAccessedAt importedAt priority tags importance".split()


@pytest.mark.parametrize("value", ODD_VALUES)
@pytest.mark.parametrize("key", READ_KEYS)
def test_each_owned_key_with_each_odd_value_parses_as_before(key: str, value: str) -> None:
    check(f"---\ntitle: T\n{key}: {value}\n---\n# H\n\nBody\n".encode())


@pytest.mark.parametrize("body", ODD_BODIES)
@pytest.mark.parametrize("closing", ["---\n", "--- \n", "---"])
def test_sealed_conflict_markers_parse_as_before(body: str, closing: str) -> None:
    for seal in (body_seal(body), body_seal("\n" + body), "hdeadbeef"):
        check(f"---\npriority: P1\nliteralMarkers: {seal}\n{closing}{body}".encode())


def test_a_memory_built_by_the_parser_equals_one_built_by_its_constructor() -> None:
    """The fields go into the right slots: Memory(**fields of a parsed one) is the same Memory."""
    parsed = parse_memory(MEM_MCP.encode(), "n.md", mtime_ns=5, size=7, change=9)
    rebuilt = Memory(**{f.name: getattr(parsed, f.name) for f in dataclasses.fields(Memory)})
    same(parsed, rebuilt)
    assert parsed.created_at == datetime(2026, 1, 15, 12, tzinfo=UTC) and parsed.tags == (
        "deploy",
        "postgres",
    )
