"""Unit and property tests of memvault.disk.vault: parsing, rendering, names, path safety and file moves."""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from memvault.clock import format_time
from memvault.disk import markdown as vault_module
from memvault.disk.files import atomic_write
from memvault.disk.markdown import OWNED_KEYS, PRIORITIES, Memory, parse_memory, render_new, rewrite
from memvault.disk.names import SLUG_MAX, check_id, slugify, valid_token
from memvault.disk.vault import Vault
from memvault.errors import Conflict, InvalidArgument, InvalidName, NotFound
from memvault.load.snapshot import (
    StoredRows,
    areas_from,
    encode_areas,
    from_cache,
    memories_from_columns,
    memories_to_columns,
    to_cache,
)
from memvault.search.index import Index

PROPS = settings(max_examples=150, deadline=None)
PROPS_FS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

MEM_MCP = (
    "---\n"
    "priority: P1\n"
    "createdAt: 2026-01-15T12:00:00.000Z\n"
    "updatedAt: 2026-02-01T08:00:00.000Z\n"
    "lastAccessedAt: 2026-02-10T10:30:00.000Z\n"
    "tags: [deploy, postgres]\n"
    "importance: 0.8\n"
    "---\n"
    "# Memory Title\n"
    "\n"
    "Memory content here.\n"
    "\n"
    "---\n"
    "*Created: 2026-01-15T12:00:00.000Z*\n"
)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def parse(text: str, id: str = "note.md", **kwargs: object) -> object:
    return parse_memory(text.encode("utf-8"), id, **kwargs)  # type: ignore[arg-type]


def fm_block(text: str) -> str:
    """The frontmatter lines of a rendered file (between the first two '---' lines)."""
    lines = text.split("\n")
    assert lines[0] == "---"
    end = lines.index("---", 1)
    return "\n".join(lines[1:end])


def body_after_fm(text: str) -> str:
    lines = text.split("\n")
    end = lines.index("---", 1)
    return "\n".join(lines[end + 1 :])


# ============================================================================ parse_memory


def test_parse_reads_every_field_of_a_mem_mcp_file() -> None:
    m = parse_memory(MEM_MCP.encode(), "note.md")
    assert m.title == "Memory Title"
    assert m.content == "Memory content here."
    assert m.priority == "P1"
    assert m.created_at == at("2026-01-15T12:00:00.000Z")
    assert m.updated_at == at("2026-02-01T08:00:00.000Z")
    assert m.last_accessed_at == at("2026-02-10T10:30:00.000Z")
    assert m.tags == ("deploy", "postgres")
    assert m.importance == 0.8
    assert m.problem is None
    assert not m.conflicted
    assert m.has_frontmatter
    assert m.writable


def test_title_comes_from_frontmatter_title_before_the_heading() -> None:
    m = parse("---\ntitle: From Meta\npriority: P0\n---\n# From Heading\n\nBody text.\n")
    assert m.title == "From Meta"
    assert m.priority == "P0"
    assert "Body text." in m.content


def test_title_comes_from_first_heading_when_no_frontmatter_title() -> None:
    m = parse("---\npriority: P0\n---\n# The Heading\n\nBody.\n\n# Second heading\n")
    assert m.title == "The Heading"
    assert m.content == "Body.\n\n# Second heading"


def test_title_falls_back_to_the_file_stem() -> None:
    m = parse("Just some words, no heading.\n", id="projects/My Note.md")
    assert m.title == "My Note"
    assert m.content == "Just some words, no heading."


def test_a_second_level_heading_is_not_a_title() -> None:
    m = parse("## Sub heading\n\nText\n", id="stem-name.md")
    assert m.title == "stem-name"
    assert m.content.startswith("## Sub heading")


def test_crlf_line_endings_read_like_lf() -> None:
    lf = parse_memory(MEM_MCP.encode(), "note.md")
    crlf = parse_memory(MEM_MCP.replace("\n", "\r\n").encode(), "note.md")
    assert (crlf.title, crlf.content, crlf.priority, crlf.tags, crlf.created_at, crlf.importance) == (
        lf.title,
        lf.content,
        lf.priority,
        lf.tags,
        lf.created_at,
        lf.importance,
    )
    assert crlf.problem is None
    assert "\r" not in crlf.content


def test_utf8_bom_is_ignored_when_reading() -> None:
    m = parse_memory(b"\xef\xbb\xbf" + MEM_MCP.encode(), "note.md")
    assert m.problem is None
    assert m.priority == "P1"
    assert m.title == "Memory Title"
    assert m.has_frontmatter


def test_bom_and_crlf_together_read_fine() -> None:
    m = parse_memory(b"\xef\xbb\xbf" + MEM_MCP.replace("\n", "\r\n").encode(), "note.md")
    assert (m.problem, m.priority, m.title, m.content) == (None, "P1", "Memory Title", "Memory content here.")


def test_missing_keys_default_to_p2_and_created_from_footer() -> None:
    text = "---\ntags: [a]\n---\n# T\n\nBody\n\n---\n*Created: 2025-05-06T07:08:09.123Z*\n"
    m = parse(text, mtime_ns=1_000_000_000_000_000_000)
    assert m.priority == "P2"
    assert m.created_at == at("2025-05-06T07:08:09.123Z")
    assert m.updated_at == m.created_at
    assert m.last_accessed_at is None
    assert m.importance is None
    assert m.content == "Body"


def test_missing_times_without_footer_fall_back_to_mtime() -> None:
    mtime = datetime(2024, 3, 4, 5, 6, 7, tzinfo=UTC)
    m = parse("# T\n\nBody\n", mtime_ns=int(mtime.timestamp()) * 1_000_000_000)
    assert m.created_at == mtime
    assert m.updated_at == mtime
    assert m.priority == "P2"
    assert not m.has_frontmatter
    assert m.problem is None


def test_frontmatter_createdat_wins_over_footer() -> None:
    text = (
        "---\ncreatedAt: 2020-01-01T00:00:00.000Z\n---\n# T\n\nB\n\n"
        "---\n*Created: 2025-01-01T00:00:00.000Z*\n"
    )
    assert parse(text).created_at == at("2020-01-01T00:00:00.000Z")


def test_invalid_yaml_is_reported_and_the_whole_text_kept_as_content() -> None:
    text = "---\npriority: [P1\ntags: {oops\n---\n# Title\n\nImportant words.\n"
    m = parse(text)
    assert m.problem is not None and "YAML" in m.problem
    assert m.content == text.strip()
    assert "Important words." in m.content
    assert m.priority == "P2"
    assert not m.writable


def test_unclosed_frontmatter_is_reported_and_counts_as_having_one() -> None:
    text = "---\npriority: P1\n# Title\n\nNo closing fence anywhere.\n"
    m = parse(text)
    assert m.problem is not None
    assert "No closing fence anywhere." in m.content
    # A broken block is still a block: the server must never add a second one.
    assert m.has_frontmatter
    assert not m.writable


@pytest.mark.parametrize("yaml_text", ["- a\n- b", "just a sentence", "42", "[1, 2]"])
def test_frontmatter_that_is_not_a_mapping_is_reported(yaml_text: str) -> None:
    text = f"---\n{yaml_text}\n---\n# T\n\nBody\n"
    m = parse(text)
    assert m.problem is not None
    assert m.meta == {}
    assert "Body" in m.content


def test_empty_frontmatter_block_is_fine() -> None:
    m = parse("---\n---\n# T\n\nBody\n")
    assert m.problem is None
    assert (m.title, m.content, m.priority) == ("T", "Body", "P2")
    assert m.has_frontmatter


@pytest.mark.parametrize(
    "value",
    [
        "2026-02-30",  # looks like a timestamp, is not a date
        "2026-13-01T00:00:00Z",
        "!!int abc",
        "!!float x",
        "!!timestamp nope",
        "!!binary 'not base64 at all: ***'",
        "!!python/object:os.system x",
    ],
)
def test_frontmatter_values_that_fail_to_construct_are_a_problem_not_a_crash(value: str) -> None:
    m = parse(f"---\ncreatedAt: {value}\n---\n# T\n\nBody kept\n")
    assert m.problem is not None
    assert "Body kept" in m.content
    assert not m.writable


def test_deeply_nested_frontmatter_does_not_crash_the_parser() -> None:
    m = parse("---\nextra: " + "[" * 5000 + "]" * 5000 + "\npriority: P1\n---\n# T\n\nBody kept\n")
    assert "Body kept" in m.content
    assert m.title == "T"


def test_timestamps_read_as_yaml_datetime_or_as_quoted_string() -> None:
    unquoted = parse("---\ncreatedAt: 2026-01-15T12:00:00.000Z\n---\nx\n")
    quoted = parse("---\ncreatedAt: '2026-01-15T12:00:00.000Z'\n---\nx\n")
    assert isinstance(yaml.safe_load("a: 2026-01-15T12:00:00.000Z")["a"], datetime)
    assert unquoted.created_at == quoted.created_at == at("2026-01-15T12:00:00.000Z")


def test_timestamps_with_offsets_and_without_zone_become_utc() -> None:
    m = parse("---\ncreatedAt: 2026-01-15T14:00:00+02:00\nupdatedAt: '2026-01-15 12:00:00'\n---\nx\n")
    assert m.created_at == datetime(2026, 1, 15, 12, tzinfo=UTC)
    assert m.updated_at == datetime(2026, 1, 15, 12, tzinfo=UTC)
    assert m.created_at is not None and m.created_at.utcoffset() == timedelta(0)


def test_a_plain_yaml_date_is_read_as_midnight_utc() -> None:
    m = parse("---\ncreatedAt: 2026-01-15\n---\nx\n")
    assert m.created_at == datetime(2026, 1, 15, tzinfo=UTC)


def test_unparseable_timestamp_string_falls_back() -> None:
    m = parse("---\ncreatedAt: 'last tuesday'\n---\nx\n\n---\n*Created: 2021-01-01T00:00:00.000Z*\n")
    assert m.problem is None
    assert m.created_at == at("2021-01-01T00:00:00.000Z")


@pytest.mark.parametrize(
    ("raw", "expected"), [("p1", "P1"), (" P0 ", "P0"), ("P9", "P2"), ("high", "P2"), ("1", "P2")]
)
def test_priority_is_normalised_and_unknown_values_default(raw: str, expected: str) -> None:
    assert parse(f"---\npriority: '{raw}'\n---\nx\n").priority == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [("0.5", 0.5), ("2", 1.0), ("-1", 0.0), ("'0.25'", 0.25), ("lots", None), ("[1]", None)],
)
def test_importance_is_clamped_to_0_1_and_junk_ignored(raw: str, expected: float | None) -> None:
    m = parse(f"---\nimportance: {raw}\n---\nx\n")
    assert m.importance == expected
    assert m.problem is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("[a, b, a]", ("a", "b")),
        ("'a, b c'", ("a", "b", "c")),
        ("\n  - x\n  - ' y '", ("x", "y")),
        ("[1, 2]", ("1", "2")),
        ("{a: 1}", ()),
        ("", ()),
    ],
)
def test_tags_read_from_lists_and_strings(raw: str, expected: tuple[str, ...]) -> None:
    assert parse(f"---\ntags: {raw}\n---\nx\n").tags == expected


def test_unknown_frontmatter_keys_are_kept_in_meta() -> None:
    m = parse("---\npriority: P1\naliases: [x, y]\nsource: https://example.com\n---\nx\n")
    assert m.meta["aliases"] == ["x", "y"]
    assert m.meta["source"] == "https://example.com"


def test_git_conflict_markers_mark_the_file_conflicted() -> None:
    text = "---\npriority: P1\n---\n# T\n\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> origin/main\n"
    m = parse(text)
    assert m.conflicted
    assert not m.writable
    assert "ours" in m.content and "theirs" in m.content


def test_conflict_markers_inside_the_frontmatter_are_still_a_conflict() -> None:
    text = "---\n<<<<<<< HEAD\npriority: P1\n=======\npriority: P0\n>>>>>>> theirs\n---\n# T\n\nBody\n"
    m = parse(text)
    assert m.conflicted
    assert not m.writable


def test_a_setext_underline_alone_is_not_a_conflict() -> None:
    m = parse("Heading\n=======\n\nSome text.\n")
    assert not m.conflicted
    assert m.writable


def test_conflict_markers_not_at_line_start_are_not_a_conflict() -> None:
    m = parse("text <<<<<<< here\nand >>>>>>> there\n")
    assert not m.conflicted


def test_invalid_utf8_is_read_but_never_written_over() -> None:
    raw = "---\npriority: P1\n---\n# Caf\u00e9\n\nna\u00efve\n".encode("latin-1")
    m = parse_memory(raw, "latin.md")
    assert m.problem is not None
    assert not m.writable
    assert m.priority == "P1"
    assert "na" in m.content


def test_hash_and_size_describe_the_raw_bytes() -> None:
    a = parse_memory(b"# A\n\nx\n", "a.md")
    b = parse_memory(b"# A\n\nx\r\n", "a.md")
    assert a.size == 7
    assert a.hash != b.hash
    assert a.hash == parse_memory(b"# A\n\nx\n", "other.md").hash


@PROPS
@given(st.binary(max_size=400))
def test_parse_never_raises_on_arbitrary_bytes(raw: bytes) -> None:
    m = parse_memory(raw, "any.md")
    assert m.title
    assert m.priority in PRIORITIES


fm_ish = st.lists(
    st.one_of(
        st.sampled_from(
            ["---", "--- ", "priority: P1", "tags:", "  - a", "- b", "createdAt: 2026-02-30", "# T", ""]
        ),
        st.text(max_size=30),
    ),
    max_size=12,
).map("\n".join)


@PROPS
@given(fm_ish)
def test_parse_never_raises_on_frontmatter_like_text(text: str) -> None:
    m = parse_memory(("---\n" + text).encode("utf-8"), "any.md")
    assert m.title
    assert m.priority in PRIORITIES


def test_plain_frontmatter_is_read_without_the_yaml_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    """The files memvault and mem-mcp write take the fast path; only unusual ones pay for PyYAML."""

    def no_yaml(text: str) -> object:
        raise AssertionError(f"YAML loader used for {text!r}")

    monkeypatch.setattr(vault_module._YAML, "load", no_yaml)
    m = parse_memory(MEM_MCP.encode(), "note.md")
    assert (m.priority, m.tags, m.importance, m.problem) == ("P1", ("deploy", "postgres"), 0.8, None)
    assert m.last_accessed_at == at("2026-02-10T10:30:00.000Z")
    assert parse_memory(MEM_MCP.replace("\n", "\r\n").encode(), "note.md").priority == "P1"


def normalised(value: object) -> object:
    """Type-exact form for comparing two loaders (1 == 1.0 == True in plain Python)."""
    if isinstance(value, dict):
        return ("dict", [(normalised(k), normalised(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [normalised(v) for v in value])
    if isinstance(value, datetime):
        return ("datetime", value.astimezone(UTC) if value.tzinfo else value.replace(tzinfo=UTC))
    return (type(value).__name__, value)


fast_keys = st.sampled_from(["priority", "tags", "createdAt", "a_b", "x-y", "on", "Null", "yes", "k"])
fast_values = st.one_of(
    st.sampled_from(
        [
            "P1",
            "p0",
            "yes",
            "No",
            "ON",
            "null",
            "NULL",
            "nan",
            "y",
            "inf",
            "True",
            "0",
            "-0",
            "01",
            "1.5",
            "-2.25",
            "10",
            "1e5",
            "0.1",
            ".5",
            "2026-01-15T12:00:00.000Z",
            "2026-01-15T12:00:00Z",
            "2026-02-30T00:00:00Z",
            "2026-13-01T00:00:00.5Z",
            "2026-01-15T12:00:00.1234567Z",
            "[]",
            "[a]",
            "[deploy, postgres]",
            "[a, yes]",
            "[a,b]",
            "[1, 2]",
            "[a, a]",
            "P1  # comment",
            "'quoted'",
            "a b",
            "",
        ]
    ),
    st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r\n"), max_size=12),
)


@PROPS
@given(st.lists(st.tuples(fast_keys, fast_values), min_size=1, max_size=5), st.booleans())
@example([("on", "1")], True)
@example([("createdAt", "2026-02-30T00:00:00Z")], True)
def test_fast_frontmatter_path_agrees_with_yaml(pairs: list[tuple[str, str]], blank_line: bool) -> None:
    lines = [f"{k}: {v}" for k, v in pairs]
    if blank_line:
        lines.insert(1, "")
    fm = "\n".join(lines) + "\n"
    try:
        expected: object = normalised(vault_module._YAML.load(fm))  # the loader vault uses (C or pure)
    except Exception as exc:
        expected = type(exc)
    try:
        got: object = normalised(vault_module._load_frontmatter(fm))
    except Exception as exc:
        got = type(exc)
    if isinstance(expected, type):
        assert isinstance(got, type), f"fast path read {fm!r} that YAML refuses"
    else:
        assert got == expected


def _split_by_search(text: str) -> tuple[str | None, str, str | None]:
    """The frontmatter split as a multiline search (before str.find sped it up), for comparison."""
    start = vault_module._FM_OPEN.match(text)
    if start is None:
        return None, text, None
    close = vault_module._FM_CLOSE.search(text, start.end() - 1)
    while close is not None and close.start() < start.end():
        close = vault_module._FM_CLOSE.search(text, close.end())
    if close is None:
        return None, text, "frontmatter has no closing '---' line"
    body = text[close.end() :]
    return text[start.end() : close.start()], body[1:] if body.startswith("\n") else body, None


FENCY = st.lists(
    st.sampled_from(
        ["---", "----", "--- ", "---\t", "---x", "\n", "\n\n", "\r", "a: b", "# T", " ", "x", "-",
         "*Created: 2026-01-15T12:00:00.000Z*", "*Created: *", "*", "<<<<<<< ours", "=======", ">>>>>>>"]
    ),
    max_size=14,
).map("".join)  # fmt: skip


@PROPS
@given(FENCY)
@example("---\n---\n")
@example("x\n---\ny\n\n---\n*Created: *\n")  # the footer is the last `---` line
@example("<<<<<<< ours\nx\n=======\ny\n>>>>>>> theirs\n")
@example("---\na: b\n--- \nbody\n\n---\n*Created: 2026-01-15T12:00:00.000Z*\n")
def test_split_and_footer_agree_with_the_patterns_they_stand_for(text: str) -> None:
    split = vault_module._split(text)
    assert (split.fm_text, split.body, split.broken) == _split_by_search(text)
    by_sub = vault_module._FOOTER.sub("", split.body.rstrip() + "\n").strip("\n")
    heading = vault_module._HEADING.match(by_sub)
    title, content = vault_module._title_and_content(split.body, {}, "stem")
    assert content == (by_sub[heading.end() :].lstrip("\n") if heading else by_sub).rstrip()
    assert title == (heading.group(1).strip() if heading else "stem")
    assert vault_module.has_conflict_markers(text) == bool(
        re.search(r"^<<<<<<<(?: |$)[\s\S]*?^=======[ \t]*$[\s\S]*?^>>>>>>>(?: |$)", text, re.M)
    )


# ============================================================================ render_new / rewrite

line_text = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")),  # one line, no control characters
    min_size=1,
    max_size=60,
)
titles = line_text.map(str.strip).filter(bool)
contents = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=300)
tags_st = st.lists(line_text.map(str.strip).filter(bool), max_size=5, unique=True)
times = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))


@pytest.mark.slow
@PROPS
@given(
    title=titles,
    content=contents,
    tags=tags_st,
    priority=st.sampled_from(PRIORITIES),
    importance=st.none() | st.floats(0, 1),
    created=times,
    accessed=times,
)
@example(
    title="工作安排",
    content="  周一开会\n\n周二写代码  ",
    tags=["工作"],
    priority="P0",
    importance=None,
    created=datetime(2026, 1, 1, tzinfo=UTC),
    accessed=datetime(2026, 1, 2, tzinfo=UTC),
)
@example(
    title="yes",
    content="# not the title\n---\n",
    tags=["no", "1", "null", "a, b"],
    priority="P1",
    importance=1.0,
    created=datetime(2026, 1, 1, tzinfo=UTC),
    accessed=datetime(2026, 1, 2, tzinfo=UTC),
)
def test_render_new_then_parse_round_trips(
    title: str,
    content: str,
    tags: list[str],
    priority: str,
    importance: float | None,
    created: datetime,
    accessed: datetime,
) -> None:
    fields = {
        "priority": priority,
        "createdAt": created,
        "updatedAt": created,
        "lastAccessedAt": accessed,
        "tags": tags,
        "importance": importance,
    }
    text = render_new(title, content, fields)
    m = parse_memory(text.encode("utf-8"), "x.md")
    assert m.problem is None
    assert m.title == title
    assert m.content == content.strip()
    assert m.tags == tuple(tags)
    assert m.priority == priority
    assert m.importance == importance
    assert m.created_at == created
    assert m.updated_at == created
    assert m.last_accessed_at == accessed
    assert not m.conflicted


def test_rendered_values_are_the_same_from_the_cache() -> None:
    """Scalars are dumped once and kept: a value equal to another of a different type (True and 1,
    1 and 1.0) still renders as itself, and a kept tag list is not shared with its caller."""
    for _ in range(2):  # the second round is served from the cache
        assert [vault_module._yaml_scalar(v) for v in (True, 1, 1.0, False, 0)] == [
            "true",
            "1",
            "1.0",
            "false",
            "0",
        ]
        assert vault_module._yaml_scalar(["yes", "a: b"]) == "['yes', 'a: b']"
        assert vault_module._yaml_scalar("no") == "'no'"
    tags = ["x"]
    vault_module._yaml_scalar(tags)
    tags.append("y")
    assert vault_module._yaml_scalar(["x"]) == "[x]"


def test_render_new_writes_mem_mcp_layout() -> None:
    t = datetime(2026, 1, 15, 12, tzinfo=UTC)
    text = render_new(
        "Memory Title",
        "Memory content here.",
        {
            "priority": "P1",
            "createdAt": t,
            "updatedAt": t,
            "lastAccessedAt": t,
            "tags": ["deploy"],
            "importance": 0.8,
        },
    )
    assert text == (
        "---\n"
        "priority: P1\n"
        "createdAt: 2026-01-15T12:00:00.000Z\n"
        "updatedAt: 2026-01-15T12:00:00.000Z\n"
        "lastAccessedAt: 2026-01-15T12:00:00.000Z\n"
        "tags: [deploy]\n"
        "importance: 0.8\n"
        "---\n"
        "# Memory Title\n\n"
        "Memory content here.\n\n"
        "---\n"
        "*Created: 2026-01-15T12:00:00.000Z*\n"
    )


def test_format_time_is_utc_with_milliseconds_and_z() -> None:
    local = datetime(2026, 1, 15, 14, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2)))
    assert format_time(local) == "2026-01-15T12:00:00.123Z"
    # Kept texts (a listing formats the same times call after call) answer the same, in any zone.
    assert format_time(local) == format_time(local.astimezone(UTC)) == "2026-01-15T12:00:00.123Z"
    with pytest.raises(ValueError):
        format_time(local.replace(tzinfo=None))  # a naive time is refused, kept texts or not


# ---- rewrite preserves everything it does not own

NOT_OWNED = set(OWNED_KEYS) | {"title"}
yaml_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False),
    st.text(max_size=40),
)
yaml_values = st.recursive(
    yaml_leaf,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
extra_keys = st.one_of(
    st.text(min_size=1, max_size=20),
    # Near misses of owned keys: 'tags:x', 'priority ', 'lastAccessedAtX' are other keys entirely.
    st.builds(
        lambda k, s: k + s,
        st.sampled_from(sorted(NOT_OWNED)),
        st.sampled_from([":x", ":", " x", "_", "-1", "s"]) | st.text(min_size=1, max_size=4),
    ),
).filter(lambda k: k not in NOT_OWNED)


def dump_entry(key: str, value: object, flow: bool) -> str:
    # default_flow_style=None: innermost collections in flow style ([a, b]); the top-level mapping
    # must stay a block line, so a mapping that came out as one `{k: v}` is dumped as block instead.
    text = yaml.safe_dump({key: value}, sort_keys=False, allow_unicode=True, default_flow_style=None)
    if not flow or text.startswith("{"):
        text = yaml.safe_dump({key: value}, sort_keys=False, allow_unicode=True, default_flow_style=False)
    return text.rstrip("\n")


@st.composite
def frontmatter_files(draw: st.DrawFn) -> tuple[str, int]:
    """A file with owned keys, unknown keys and comments; returns (text, index of the lastAccessedAt line)."""
    extras = draw(st.dictionaries(extra_keys, yaml_values, max_size=6))
    entries = [dump_entry(k, v, draw(st.booleans())) for k, v in extras.items()]
    entries += draw(st.lists(st.sampled_from(["# a comment", "#", "# tags: [x]"]), max_size=2))
    owned = [
        "priority: P1  # keep me",
        "createdAt: 2026-01-15T12:00:00.000Z",
        "lastAccessedAt: 2026-02-10T10:30:00.000Z",
        "tags:\n  - deploy\n  - postgres",
    ]
    order = draw(st.permutations(entries + owned))
    fm_lines = "\n".join(order).split("\n")
    body = draw(
        st.sampled_from(
            [
                "# Title\n\nBody text.\n\n---\n*Created: 2026-01-15T12:00:00.000Z*\n",
                "No heading, just text\n  with   spaces   \n\n\n",
                "# T\n\n---\nnot: frontmatter\n---\n",
                "",
            ]
        )
    )
    text = "---\n" + "\n".join(fm_lines) + "\n---\n" + body
    return text, fm_lines.index("lastAccessedAt: 2026-02-10T10:30:00.000Z") + 1


@pytest.mark.slow
@PROPS
@given(frontmatter_files(), times)
def test_rewrite_of_one_owned_field_changes_only_that_line(file: tuple[str, int], new: datetime) -> None:
    text, line_no = file
    before = parse_memory(text.encode("utf-8"), "x.md")
    assume(before.problem is None)  # the drawn keys may not form valid YAML; that case is tested elsewhere
    out = rewrite(text, {"lastAccessedAt": new}, title=None, content=None)
    old_lines, new_lines = text.split("\n"), out.split("\n")
    assert len(new_lines) == len(old_lines)
    changed = [i for i, (a, b) in enumerate(zip(old_lines, new_lines, strict=True)) if a != b]
    assert changed == ([line_no] if format_time(new) != "2026-02-10T10:30:00.000Z" else [])
    assert new_lines[line_no] == f"lastAccessedAt: {format_time(new)}"
    after = parse_memory(out.encode("utf-8"), "x.md")
    assert after.problem is None
    assert after.last_accessed_at == new
    assert dict(after.meta, lastAccessedAt=None) == dict(before.meta, lastAccessedAt=None)
    assert list(after.meta) == list(before.meta)


@pytest.mark.slow
@PROPS
@given(frontmatter_files(), st.sampled_from(PRIORITIES), tags_st)
def test_rewrite_keeps_unknown_keys_comments_and_body(
    file: tuple[str, int], priority: str, tags: list[str]
) -> None:
    text, _ = file
    before = parse_memory(text.encode("utf-8"), "x.md")
    assume(before.problem is None)
    out = rewrite(text, {"priority": priority, "tags": tags}, title=None, content=None)
    assert body_after_fm(out) == body_after_fm(text)
    comments = [line for line in fm_block(text).split("\n") if line.startswith("#")]
    assert [line for line in fm_block(out).split("\n") if line.startswith("#")] == comments
    after = parse_memory(out.encode("utf-8"), "x.md")
    assert after.problem is None
    assert after.priority == priority
    assert after.tags == tuple(tags)
    unknown_before = {k: v for k, v in before.meta.items() if k not in NOT_OWNED}
    unknown_after = {k: v for k, v in after.meta.items() if k not in NOT_OWNED}
    assert unknown_after == unknown_before
    assert list(unknown_after) == list(unknown_before)


def test_rewrite_keeps_key_order_and_inline_comments() -> None:
    text = (
        "---\n"
        "zeta: 1\n"
        "priority: P1  # pinned by hand\n"
        "# a comment line\n"
        "aliases: [a, b]\n"
        "lastAccessedAt: 2026-02-10T10:30:00.000Z\n"
        "alpha: two\n"
        "---\n"
        "# Title\n\nBody\n"
    )
    out = rewrite(text, {"lastAccessedAt": datetime(2026, 3, 1, tzinfo=UTC)}, title=None, content=None)
    assert out == text.replace("2026-02-10T10:30:00.000Z", "2026-03-01T00:00:00.000Z")


def test_rewrite_adds_a_missing_owned_key_inside_the_block() -> None:
    text = "---\nsource: web\n---\n# T\n\nBody\n"
    out = rewrite(text, {"lastAccessedAt": datetime(2026, 3, 1, tzinfo=UTC)}, title=None, content=None)
    assert out == "---\nsource: web\nlastAccessedAt: 2026-03-01T00:00:00.000Z\n---\n# T\n\nBody\n"


def test_rewrite_with_none_removes_the_key() -> None:
    text = "---\npriority: P1\nimportance: 0.8\nnote: x\n---\nBody\n"
    out = rewrite(text, {"importance": None}, title=None, content=None)
    assert out == "---\npriority: P1\nnote: x\n---\nBody\n"


def test_rewrite_of_a_legacy_file_adds_exactly_one_block_and_keeps_all_text() -> None:
    original = "# Old Note\n\nWritten by hand.\n\n---\n\nA horizontal rule above.\n"
    fields = {"priority": "P2", "createdAt": datetime(2026, 1, 1, tzinfo=UTC)}
    out = rewrite(original, fields, title=None, content=None)
    assert out == "---\npriority: P2\ncreatedAt: 2026-01-01T00:00:00.000Z\n---\n" + original
    m = parse_memory(out.encode(), "old.md")
    assert m.problem is None
    assert m.title == "Old Note"
    assert m.has_frontmatter
    # Rewriting again edits that block; it never stacks a second one.
    again = rewrite(out, {"lastAccessedAt": datetime(2026, 2, 1, tzinfo=UTC)}, title=None, content=None)
    assert again.count("\n---\n# Old Note") == 1
    assert again.endswith("---\n" + original)
    assert again.startswith("---\npriority: P2\n")


def test_rewrite_of_an_empty_legacy_file() -> None:
    out = rewrite("", {"priority": "P2"}, title=None, content=None)
    assert out == "---\npriority: P2\n---\n"
    assert parse_memory(out.encode(), "e.md").problem is None


def test_rewrite_keeps_crlf_line_endings() -> None:
    text = MEM_MCP.replace("\n", "\r\n")
    out = rewrite(text, {"lastAccessedAt": datetime(2026, 3, 1, tzinfo=UTC)}, title=None, content=None)
    assert "\n" not in out.replace("\r\n", "")
    assert out == text.replace("2026-02-10T10:30:00.000Z", "2026-03-01T00:00:00.000Z")


def test_rewrite_keeps_crlf_when_adding_a_block_to_a_legacy_file() -> None:
    text = "# T\r\n\r\nBody\r\n"
    out = rewrite(text, {"priority": "P1"}, title=None, content=None)
    assert out == "---\r\npriority: P1\r\n---\r\n# T\r\n\r\nBody\r\n"


def test_rewrite_keeps_the_bom() -> None:
    text = "\ufeff" + MEM_MCP
    out = rewrite(text, {"priority": "P0"}, title=None, content=None)
    assert out.startswith("\ufeff---\n")
    assert out.count("\ufeff") == 1
    assert out == text.replace("priority: P1", "priority: P0")
    assert parse_memory(out.encode(), "x.md").priority == "P0"


@pytest.mark.parametrize("indent", ["  ", ""])
def test_rewrite_replaces_block_list_tags_cleanly(indent: str) -> None:
    text = f"---\npriority: P1\ntags:\n{indent}- old\n{indent}- older\n-\nsource: web\n---\nBody\n"
    out = rewrite(text, {"tags": ["new", "tags"]}, title=None, content=None)
    assert out == "---\npriority: P1\ntags: [new, tags]\nsource: web\n---\nBody\n"
    m = parse_memory(out.encode(), "x.md")
    assert m.tags == ("new", "tags")
    assert m.meta["source"] == "web"


def test_rewrite_with_empty_tags_removes_the_block_list() -> None:
    text = "---\ntags:\n  - a\n  - b\nnote: kept\n---\nBody\n"
    out = rewrite(text, {"tags": []}, title=None, content=None)
    assert out == "---\nnote: kept\n---\nBody\n"


@pytest.mark.parametrize("key", ["tags:x", "tags_extra", "priorityish", "'tags '", "tags x"])
def test_rewrite_does_not_mistake_a_similar_key_for_an_owned_one(key: str) -> None:
    text = f"---\n{key}: keep\npriority: P1\n---\nBody\n"
    out = rewrite(text, {"tags": ["t"], "priority": "P2"}, title=None, content=None)
    assert f"{key}: keep\n" in out
    assert parse_memory(out.encode(), "x.md").tags == ("t",)


@pytest.mark.parametrize("key", ['"priority"', "'priority'", "priority "])
def test_rewrite_replaces_a_quoted_or_spaced_owned_key_instead_of_duplicating_it(key: str) -> None:
    text = f"---\n{key}: P1\nnote: x\n---\nBody\n"
    out = rewrite(text, {"priority": "P0"}, title=None, content=None)
    assert out == "---\npriority: P0\nnote: x\n---\nBody\n"


def test_rewrite_of_content_keeps_heading_and_footer() -> None:
    out = rewrite(MEM_MCP, {}, title=None, content="New content.")
    assert out == MEM_MCP.replace("Memory content here.", "New content.")


def test_rewrite_of_title_keeps_content_and_footer() -> None:
    out = rewrite(MEM_MCP, {}, title="New Title", content=None)
    assert out == MEM_MCP.replace("# Memory Title", "# New Title")


# ============================================================================ slugify


@pytest.mark.parametrize(
    ("title", "slug"),
    [
        ("Hello World", "hello-world"),
        ("工作安排", "工作安排"),
        ("  Deploy: Postgres 16!!  ", "deploy-postgres-16"),
        ("a - _ - b", "a-b"),
        ("a-_-b", "a-b"),
        ("snake_case_name", "snake-case-name"),
        ("Ｆｕｌｌｗｉｄｔｈ１２", "fullwidth12"),  # NFKC
        ("Crème Brûlée", "crème-brûlée"),
        ("../../etc/passwd", "etc-passwd"),
        (".hidden", "hidden"),
        ("", "memory"),
        ("!!!", "memory"),
        ("🎉🎉", "memory"),
        ("---", "memory"),
    ],
)
def test_slugify_examples(title: str, slug: str) -> None:
    assert slugify(title) == slug


def test_slugify_caps_length_at_80_without_trailing_dash() -> None:
    slug = slugify("word " * 40)
    assert len(slug) <= SLUG_MAX
    assert not slug.endswith("-")
    assert slugify("x" * 200) == "x" * 80


def test_slugify_of_long_four_byte_letters_still_makes_a_valid_file_name() -> None:
    slug = slugify("\U00020000" * 100)  # CJK extension B: letters, 4 bytes each in UTF-8
    assert slug
    assert check_id(slug) == slug + ".md"
    assert len((slug + "-99.md").encode()) <= 255


@PROPS
@given(st.text(max_size=200))
@example("a" + "\U00020000" * 79)
@example("İstanbul")
@example("_" * 10)
def test_slug_is_always_a_safe_non_empty_name(title: str) -> None:
    slug = slugify(title)
    assert slug
    assert len(slug) <= SLUG_MAX
    assert re.fullmatch(r"[^\W_]+(?:-[^\W_]+)*", slug), slug  # letters/digits, single dashes between
    for bad in ("/", "\\", ".", "\x00"):
        assert bad not in slug
    assert check_id(slug) == slug + ".md"
    assert slugify(slug) == slug  # idempotent


# ============================================================================ check_id / path_of


@pytest.mark.parametrize(
    "name",
    [
        "..",
        "../x",
        "a/../b",
        "a/..",
        "./a",
        "a/./b",
        "/x",
        "/etc/passwd",
        "C:\\x",
        "C:x",
        "a\\b",
        "a\x00b",
        ".hidden",
        ".hidden.md",
        "a/.git/config",
        "a/.memvault/x",
        "",
        "   ",
        "~",
        "~/x",
        "a//b",
        "a/",
        "x" * 2000,
        "a/" + "y" * 300,
        "tab\there",
        "unit\x1fseparator",
        "a/\x01b",
    ],
)
def test_check_id_refuses_unsafe_names(name: str) -> None:
    with pytest.raises(InvalidName) as info:
        check_id(name)
    assert info.value.why
    assert "\x00" not in str(info.value)


@pytest.mark.parametrize(
    ("name", "id"),
    [
        ("note", "note.md"),
        ("note.md", "note.md"),
        ("My Note With Spaces", "My Note With Spaces.md"),
        ("Projects/Alpha Plan.md", "Projects/Alpha Plan.md"),
        ("a/b/c", "a/b/c.md"),
        ("工作安排", "工作安排.md"),
        ("v1.2 notes", "v1.2 notes.md"),
        ("NOTE.MD", "NOTE.MD"),
    ],
)
def test_check_id_accepts_hand_made_names_and_adds_md(name: str, id: str) -> None:
    assert check_id(name) == id


def test_path_of_refuses_the_archive_for_hot_names(tmp_path: Path) -> None:
    vault = Vault(tmp_path)
    for name in ("archive/old.md", "archive/sub/old"):
        with pytest.raises(InvalidName):
            vault.path_of(name)
    assert vault.path_of("old.md", archived=True) == tmp_path / "archive" / "old.md"
    assert vault.path_of("archived-things.md") == tmp_path / "archived-things.md"


def test_path_of_refuses_a_symlink_out_of_the_token_folder(tmp_path: Path) -> None:
    token = tmp_path / "tok"
    token.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret")
    (token / "escape").symlink_to(outside, target_is_directory=True)
    (token / "file-link.md").symlink_to(outside / "secret.md")
    vault = Vault(token)
    with pytest.raises(InvalidName):
        vault.path_of("escape/secret.md")
    with pytest.raises(InvalidName):
        vault.path_of("file-link.md")
    with pytest.raises(InvalidName):
        vault.read("escape/secret")


def test_path_of_refuses_a_symlink_from_hot_into_the_archive(tmp_path: Path) -> None:
    (tmp_path / "archive").mkdir()
    (tmp_path / "sneaky").symlink_to(tmp_path / "archive", target_is_directory=True)
    with pytest.raises(InvalidName):
        Vault(tmp_path).path_of("sneaky/old.md")


def test_path_of_allows_a_file_link_that_stays_inside_but_no_folder_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "x.md").write_text("# X\n", encoding="utf-8")
    (tmp_path / "same.md").symlink_to(tmp_path / "real" / "x.md")
    assert Vault(tmp_path).path_of("same") == tmp_path / "same.md"
    # Folder links are never followed (issue 9, 4), even to a folder of the same vault.
    (tmp_path / "alias").symlink_to(tmp_path / "real", target_is_directory=True)
    with pytest.raises(InvalidName, match="symbolic link"):
        Vault(tmp_path).path_of("alias/x")


PATH_PIECES = st.sampled_from(["..", ".", "a", "B c", "/", "\\", "~", "archive", "x.md", "\x00", "C:"])


@PROPS_FS
@given(
    st.one_of(
        st.text(max_size=60),
        st.lists(PATH_PIECES, max_size=8).map("".join),
        st.lists(st.sampled_from(["..", ".", "a", "archive", "", ".git", "~"]), max_size=6).map("/".join),
    )
)
def test_any_text_is_refused_or_stays_inside_the_token_folder(tmp_path: Path, name: str) -> None:
    root = tmp_path.resolve()
    vault = Vault(root)
    try:
        id = check_id(name)
    except InvalidName:
        return
    assert id.endswith((".md", ".MD", ".Md", ".mD"))
    assert "\x00" not in id and "\\" not in id
    assert not id.startswith(("/", "."))
    assert all(part not in ("", ".", "..") and not part.startswith(".") for part in id.split("/"))
    assert check_id(id) == id  # idempotent
    for archived in (False, True):
        try:
            path = vault.path_of(id, archived=archived)
        except InvalidName:
            assert not archived and id.split("/")[0] == "archive"
            continue
        assert path.resolve().is_relative_to(root)
        if not archived:
            assert not path.resolve().is_relative_to(root / "archive")


# ============================================================================ files


def hidden_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".*"))


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "note.md"
    atomic_write(target, b"one")
    atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert hidden_files(tmp_path) == []
    assert not list(tmp_path.rglob("*.tmp"))


def test_atomic_write_without_overwrite_refuses_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "note.md"
    target.write_bytes(b"precious")
    with pytest.raises(FileExistsError):
        atomic_write(target, b"clobber", overwrite=False)
    assert target.read_bytes() == b"precious"
    assert hidden_files(tmp_path) == []


def test_atomic_write_without_overwrite_creates_a_new_file(tmp_path: Path) -> None:
    target = tmp_path / "new.md"
    atomic_write(target, b"fresh", overwrite=False)
    assert target.read_bytes() == b"fresh"
    assert os.listdir(tmp_path) == ["new.md"]


def test_create_never_overwrites_an_existing_memory(tmp_path: Path) -> None:
    vault = Vault(tmp_path / "tok")
    first = vault.create("Hello World", "first", {"priority": "P1"})
    second = vault.create("Hello World", "second", {"priority": "P1"})
    third = vault.create("hello world!", "third", {})
    assert (first.id, second.id, third.id) == ("hello-world.md", "hello-world-2.md", "hello-world-3.md")
    assert vault.read("hello-world").content == "first"
    assert vault.read("hello-world-2").content == "second"
    assert vault.read("hello-world-3").content == "third"
    assert hidden_files(vault.dir) == []


def test_create_leaves_a_hand_made_file_with_the_same_name_untouched(tmp_path: Path) -> None:
    token = tmp_path / "tok"
    token.mkdir()
    precious = b"---\nbroken: [yaml\n---\nhand written \xff bytes\n"
    (token / "notes.md").write_bytes(precious)
    made = Vault(token).create("Notes", "server text", {})
    assert made.id == "notes-2.md"
    assert (token / "notes.md").read_bytes() == precious


def test_create_in_a_subfolder_and_the_result_parses(tmp_path: Path) -> None:
    vault = Vault(tmp_path / "tok")
    t = datetime(2026, 1, 1, tzinfo=UTC)
    fields = {"priority": "P0", "createdAt": t, "tags": ["x"]}
    m = vault.create("Alpha Plan", "Do things.", fields, folder="projects")
    assert m.id == "projects/alpha-plan.md"
    assert (m.title, m.content, m.priority, m.tags) == ("Alpha Plan", "Do things.", "P0", ("x",))
    assert m.created_at == t
    assert vault.read("projects/alpha-plan").hash == m.hash


def test_read_of_a_missing_memory_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        Vault(tmp_path).read("nope")
    with pytest.raises(NotFound):
        Vault(tmp_path).read("nope", archived=True)


def test_update_refuses_a_conflicted_file_and_leaves_it_alone(tmp_path: Path) -> None:
    raw = b"# T\n\n<<<<<<< HEAD\na\n=======\nb\n>>>>>>> x\n"
    (tmp_path / "c.md").write_bytes(raw)
    with pytest.raises(Conflict):
        Vault(tmp_path).update("c.md", {"priority": "P0"})
    assert (tmp_path / "c.md").read_bytes() == raw


@pytest.mark.parametrize(
    "raw",
    [
        b"---\npriority: P1\n# no closing fence\n\nBody\n",
        b"---\npriority: [P1\n---\nBody\n",
        b"---\n- a list\n---\nBody\n",
        "---\npriority: P1\n---\nna\u00efve latin-1\n".encode("latin-1"),
    ],
)
def test_update_never_writes_over_a_broken_file(tmp_path: Path, raw: bytes) -> None:
    (tmp_path / "b.md").write_bytes(raw)
    with pytest.raises(InvalidArgument):
        Vault(tmp_path).update("b.md", {"lastAccessedAt": datetime(2026, 1, 1, tzinfo=UTC)})
    assert (tmp_path / "b.md").read_bytes() == raw


def test_update_migrates_a_legacy_file_once(tmp_path: Path) -> None:
    original = b"# Legacy\n\nKept exactly.\n"
    (tmp_path / "l.md").write_bytes(original)
    vault = Vault(tmp_path)
    m = vault.update("l.md", {"priority": "P2"})
    assert m.has_frontmatter
    assert (tmp_path / "l.md").read_bytes() == b"---\npriority: P2\n---\n" + original
    vault.update("l.md", {"priority": "P1"})
    assert (tmp_path / "l.md").read_bytes() == b"---\npriority: P1\n---\n" + original


def test_update_with_a_stale_hash_is_refused(tmp_path: Path) -> None:
    vault = Vault(tmp_path)
    m = vault.create("T", "x", {"priority": "P1"})
    (tmp_path / m.id).write_bytes(b"# T\n\nchanged by hand\n")
    with pytest.raises(InvalidArgument):
        vault.update(m.id, {"priority": "P0"}, expect_hash=m.hash)
    assert (tmp_path / m.id).read_bytes() == b"# T\n\nchanged by hand\n"


def test_move_to_archive_with_a_name_collision_keeps_both(tmp_path: Path) -> None:
    vault = Vault(tmp_path)
    (tmp_path / "archive").mkdir()
    (tmp_path / "archive" / "note.md").write_bytes(b"old archived")
    (tmp_path / "note.md").write_bytes(b"hot one")
    new_id = vault.move("note.md", to_archive=True)
    assert new_id == "note-2.md"
    assert (tmp_path / "archive" / "note.md").read_bytes() == b"old archived"
    assert (tmp_path / "archive" / "note-2.md").read_bytes() == b"hot one"
    assert not (tmp_path / "note.md").exists()
    assert hidden_files(tmp_path) == []


def test_move_back_from_the_archive(tmp_path: Path) -> None:
    vault = Vault(tmp_path)
    (tmp_path / "projects").mkdir()
    (tmp_path / "projects" / "alpha.md").write_bytes(b"alpha")
    archived = vault.move("projects/alpha", to_archive=True)
    assert archived == "projects/alpha.md"
    assert (tmp_path / "archive" / "projects" / "alpha.md").read_bytes() == b"alpha"
    assert not (tmp_path / "projects").exists()  # emptied hot subfolder pruned
    (tmp_path / "projects").mkdir()
    (tmp_path / "projects" / "alpha.md").write_bytes(b"a new hot alpha")
    restored = vault.move("projects/alpha.md", to_archive=False)
    assert restored == "projects/alpha-2.md"
    assert (tmp_path / "projects" / "alpha.md").read_bytes() == b"a new hot alpha"
    assert (tmp_path / "projects" / "alpha-2.md").read_bytes() == b"alpha"
    assert not (tmp_path / "archive" / "projects").exists()
    assert (tmp_path / "archive").is_dir()  # the archive root stays


def test_move_of_a_missing_memory_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        Vault(tmp_path).move("ghost.md", to_archive=True)
    with pytest.raises(NotFound):
        Vault(tmp_path).move("ghost.md", to_archive=False)


def test_delete_prunes_emptied_subfolders_but_not_the_roots(tmp_path: Path) -> None:
    token = tmp_path / "tok"
    vault = Vault(token)
    vault.create("Deep", "x", {}, folder="a/b/c")
    vault.create("Keep", "x", {}, folder="a")
    vault.delete("a/b/c/deep.md")
    assert not (token / "a" / "b").exists()
    assert (token / "a" / "keep.md").exists()
    vault.delete("a/keep")
    assert not (token / "a").exists()
    assert token.is_dir()
    vault.create("Last", "x", {})
    vault.delete("last.md")
    assert token.is_dir()
    (token / "archive" / "x").mkdir(parents=True)
    (token / "archive" / "x" / "old.md").write_bytes(b"old")
    vault.delete("x/old.md", archived=True)
    assert not (token / "archive" / "x").exists()
    assert (token / "archive").is_dir()


def test_delete_keeps_a_folder_that_still_has_other_files(tmp_path: Path) -> None:
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "a.md").write_bytes(b"a")
    (tmp_path / "p" / "image.png").write_bytes(b"png")
    Vault(tmp_path).delete("p/a.md")
    assert (tmp_path / "p" / "image.png").exists()


def test_delete_of_a_missing_memory_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(NotFound):
        Vault(tmp_path).delete("ghost")


def test_scan_lists_memories_and_skips_hidden_and_non_markdown(tmp_path: Path) -> None:
    files = {
        "a.md": True,
        "sub/b.md": True,
        "sub/deeper/c.md": True,
        "archive/old.md": True,
        "archive/p/older.md": True,
        ".hidden.md": False,
        ".git/HEAD.md": False,
        ".memvault/x.md": False,
        "sub/.obsidian/workspace.md": False,
        "notes.txt": False,
        "image.png": False,
        "README": False,
    }
    for rel in files:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"# x\n")
    found = {(id, archived) for id, archived, _ in Vault(tmp_path).scan()}
    assert found == {
        ("a.md", False),
        ("sub/b.md", False),
        ("sub/deeper/c.md", False),
        ("old.md", True),
        ("p/older.md", True),
    }


def test_scan_of_a_missing_token_folder_is_empty_and_creates_nothing(tmp_path: Path) -> None:
    assert list(Vault(tmp_path / "nobody").scan()) == []
    assert not (tmp_path / "nobody").exists()


def test_scan_skips_links_that_leave_the_vault(tmp_path: Path) -> None:
    token = tmp_path / "tok"
    token.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("s")
    (token / "out").symlink_to(outside, target_is_directory=True)
    (token / "secret.md").symlink_to(outside / "secret.md")
    (token / "mine.md").write_text("m")
    assert [id for id, _, _ in Vault(token).scan()] == ["mine.md"]


def test_list_files_lists_what_scan_does_without_a_stat(tmp_path: Path, monkeypatch) -> None:
    token = tmp_path / "tok"
    for rel in ("a.md", "sub/b.md", "archive/old.md", ".memvault/x.md", "sessions/s.md", "n.txt"):
        (token / rel).parent.mkdir(parents=True, exist_ok=True)
        (token / rel).write_text("# x\n")
    (token / ".memvault-abcd1234.tmp").write_text("partial")  # a temp file of ours: a leftover
    os.mkfifo(token / "pipe.md")
    (tmp_path / "outside.md").write_text("s")
    (token / "out.md").symlink_to(tmp_path / "outside.md")
    (token / "in.md").symlink_to(token / "sub" / "b.md")
    (token / "to-archive.md").symlink_to(token / "archive" / "old.md")
    vault = Vault(token)
    scanned = [(id, archived) for id, archived, _ in vault.scan()]
    leftovers = vault.leftovers
    assert [p.name for p in leftovers] == [".memvault-abcd1234.tmp"]
    assert ("in.md", False) in scanned and ("old.md", True) in scanned and ("a.md", False) in scanned
    monkeypatch.setattr(
        os.DirEntry, "stat", lambda self: pytest.fail("list_files took a stat"), raising=False
    )
    assert list(vault.list_files()) == scanned
    assert vault.leftovers == leftovers


# ============================================================================ parse cache


def without_meta(m: Memory) -> dict[str, object]:
    return {f: getattr(m, f) for f in Memory.__slots__ if f != "meta"}  # type: ignore[attr-defined]


@PROPS
@given(
    st.one_of(
        st.builds(
            lambda title, content, tags, p: render_new(
                title, content, {"priority": p, "createdAt": datetime(2026, 1, 1, tzinfo=UTC), "tags": tags}
            ),
            titles,
            contents,
            tags_st,
            st.sampled_from(PRIORITIES),
        ),
        fm_ish.map(lambda t: "---\n" + t),
        st.text(max_size=200),
    ),
    st.integers(0, 2**62),
)
@example(MEM_MCP, 0)
@example("---\ncreatedAt: 2026-01-15T12:00:00.123456Z\n---\nx", 0)
@example("# T\n\n<<<<<<< a\n=======\n>>>>>>> b\n", 1_700_000_000_123_456_789)
def test_the_parse_cache_gives_back_what_parsing_gave(text: str, mtime_ns: int) -> None:
    raw = text.encode("utf-8")
    parsed = parse_memory(raw, "dir/x.md", archived=True, mtime_ns=mtime_ns)
    cached = from_cache(
        to_cache(parsed), "dir/x.md", archived=True, mtime_ns=mtime_ns, size=len(raw), hash=parsed.hash
    )
    assert cached is not None
    assert without_meta(cached) == without_meta(parsed)
    # The index snapshot's columns give back the same, next to a memory with every optional field set.
    other = parse_memory(
        b"---\nimportance: 0.7\ntags: [a, b]\nlastAccessedAt: 2026-03-01\n---\n# O\n\nx", "o.md"
    )
    columns = memories_to_columns([parsed, other])
    back = memories_from_columns(columns, archived=True)
    assert [without_meta(m) for m in back] == [
        without_meta(parsed),
        without_meta(dataclasses.replace(other, archived=True)),
    ]


def test_snapshot_columns_share_repeated_tag_sets_and_priorities() -> None:
    texts = [b"---\ntags: [a, b]\n---\n# One\n", b"---\ntags: [a, b]\n---\n# Two\n", b"# Three\n"]
    memories = [parse_memory(text, f"{i}.md") for i, text in enumerate(texts)]
    back = memories_from_columns(memories_to_columns(memories), archived=False)
    assert [without_meta(m) for m in back] == [without_meta(m) for m in memories]
    assert back[0].tags == ("a", "b") and back[0].tags is back[1].tags and back[2].tags == ()
    assert back[0].priority is back[1].priority is back[2].priority  # one "P2" for all


def test_a_snapshot_keeps_memories_in_index_order_and_restores_one_id_string_for_both() -> None:
    memories = [parse_memory(f"# Note {i}\n\nbody {i}".encode(), f"n{i}.md") for i in range(6)]
    index = Index()
    for m in reversed(memories):  # the index's order is not the memories' order
        index.upsert(m.id, title=m.title, body=m.content)
    index.remove("n4.md")
    index.upsert("n4.md", title=memories[4].title, body=memories[4].content)  # a freed number again
    empty = Index().snapshot()
    data = encode_areas([("hot", index.snapshot(), memories), ("archive", empty, [])])
    want = {m.id: without_meta(m) for m in memories}
    hot, archive = areas_from(data)
    assert {id: without_meta(m) for id, m in hot.memories.items()} == want
    assert all(a is b for a, b in zip(sorted(hot.memories), sorted(hot.index.ids()), strict=True))
    assert archive.memories == {}
    # Memories in another order than the index (as an older server wrote them) load as well.
    data.update({f"hot.memories.{key}": value for key, value in memories_to_columns(memories).items()})
    hot, _ = areas_from(data)
    assert {id: without_meta(m) for id, m in hot.memories.items()} == want
    assert sorted(hot.index.ids()) == sorted(hot.memories)


def test_snapshot_columns_from_another_parser_version_are_refused() -> None:
    columns = memories_to_columns([parse_memory(b"# T\n\nbody", "t.md")])
    columns["version"] = columns["version"] + 1
    with pytest.raises(ValueError, match="parser version"):
        memories_from_columns(columns, archived=False)
    columns = memories_to_columns([parse_memory(b"# T\n\nbody", "t.md")])
    columns["size"] = columns["size"][:0]
    with pytest.raises(ValueError, match="length"):
        memories_from_columns(columns, archived=False)
    columns = memories_to_columns([parse_memory(b"# T\n\nbody", "t.md")])
    columns["priority"] = columns["priority"] + len(PRIORITIES)
    with pytest.raises(ValueError, match="unknown priority"):
        memories_from_columns(columns, archived=False)
    # Memories are built from their rows when first asked for (memvault.search.area.Memories), so what
    # would fail a build is refused when the columns are decoded, while a restart can still fall
    # back to the files.
    for bad in (1e300, -1e300, np.inf):
        columns = memories_to_columns([parse_memory(b"# T\n\nbody", "t.md")] * 2)
        columns["updated"] = np.array([columns["updated"][0], bad])
        with pytest.raises(ValueError, match="time out of range"):
            StoredRows(columns, archived=False)


def test_the_store_does_not_keep_the_frontmatter_mapping() -> None:
    raw = b"---\nsource: web\n---\n# T\n\nbody"
    assert parse_memory(raw, "t.md").meta == {"source": "web"}
    assert parse_memory(raw, "t.md", keep_meta=False).meta == {}


@pytest.mark.parametrize("junk", ["", "[]", "not json", "[1, 2, 3]", '{"a": 1}', "null"])
def test_an_unusable_cache_entry_means_parse_again(junk: str) -> None:
    assert from_cache(junk, "x.md", archived=False, mtime_ns=0, size=0, hash="") is None


# ============================================================================ tokens


@pytest.mark.parametrize("token", ["alice", "a.b-c_d", "A1", "0", "a" * 128, "x..y", "a."])
def test_valid_token_accepts(token: str) -> None:
    assert valid_token(token)


@pytest.mark.parametrize(
    "token",
    [
        "",
        ".",
        "..",
        "...",
        ".hidden",
        ".memvault",
        "a/b",
        "a\\b",
        "a b",
        "a" * 129,
        "%2e%2e",
        "ünïcode",
        "工作",
        "alice\n",
        "-dash",
        "_under",
        "a\x00",
    ],
)
def test_valid_token_rejects(token: str) -> None:
    assert not valid_token(token)


@PROPS
@given(st.text(max_size=140))
def test_a_valid_token_is_always_a_plain_folder_name(token: str) -> None:
    if valid_token(token):
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", token)
        assert token.strip(".")
        assert "/" not in token and not token.startswith(".")


def test_rewrites_keep_the_file_mode_and_new_files_follow_the_umask(tmp_path: Path) -> None:
    path = tmp_path / "note.md"
    path.write_text("---\npriority: P1\n---\n# Note\n\ntext\n", encoding="utf-8")
    path.chmod(0o640)
    atomic_write(path, b"new text")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640
    fresh = tmp_path / "fresh.md"
    atomic_write(fresh, b"x", overwrite=False)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o666 & ~umask


# ============================================================================ try_lock


def test_try_lock_is_the_same_lock_as_filelock(tmp_path: Path) -> None:
    """try_lock and filelock's FileLock exclude each other, in this process and across threads;
    closing the descriptor releases the lock."""
    import threading

    from filelock import FileLock, Timeout

    from memvault.disk.files import try_lock

    path = str(tmp_path / "lock")
    fd = try_lock(path)
    assert fd is not None
    assert try_lock(path) is None  # a second holder, even in the same thread, is refused
    failed: list[BaseException] = []

    def other() -> None:
        try:
            FileLock(path, timeout=0).acquire()
        except Timeout as exc:
            failed.append(exc)

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(10)
    assert failed, "FileLock took a lock try_lock holds"
    os.close(fd)
    with FileLock(path, timeout=0):
        assert try_lock(path) is None
    again = try_lock(path)
    assert again is not None
    os.close(again)


@pytest.mark.parametrize("size", [0, 1, 99, 100, 101, 5000])
def test_read_regular_gives_the_whole_file_or_its_first_limit_bytes(tmp_path: Path, size: int) -> None:
    from memvault.disk.files import read_regular

    path = tmp_path / "m.md"
    data = bytes(range(256)) * (size // 256 + 1)
    path.write_bytes(data[:size])
    raw, st = read_regular(path, 100)
    assert raw == data[: min(size, 100)] and st.st_size == size
    assert read_regular(path)[0] == data[:size]


def test_read_regular_reads_what_a_file_grew_by_after_its_stat(tmp_path: Path, monkeypatch) -> None:
    from memvault.disk import files

    path = tmp_path / "m.md"
    path.write_bytes(b"a" * 10)
    real_fstat = os.fstat

    def fstat_then_grow(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        with open(path, "ab") as more:  # appended in place between the stat and the read
            more.write(b"b" * 50)
        return st

    monkeypatch.setattr(files.os, "fstat", fstat_then_grow)
    raw, st = files.read_regular(path, 40)
    assert st.st_size == 10 and raw == b"a" * 10 + b"b" * 30
    path.write_bytes(b"a" * 10)
    assert files.read_regular(path, 1000)[0] == b"a" * 10 + b"b" * 50


def test_read_regular_reads_on_after_short_reads_and_stops_at_a_shrunk_end(
    tmp_path: Path, monkeypatch
) -> None:
    from memvault.disk import files

    path = tmp_path / "m.md"
    data = bytes(range(256)) * 4
    path.write_bytes(data)
    real_read = os.read

    def dribble(fd: int, n: int) -> bytes:  # what a network file system may do
        return real_read(fd, min(n, 7))

    monkeypatch.setattr(files.os, "read", dribble)
    assert files.read_regular(path)[0] == data
    assert files.read_regular(path, 100)[0] == data[:100]
    monkeypatch.setattr(files.os, "read", real_read)
    real_fstat = os.fstat

    def fstat_then_shrink(fd: int) -> os.stat_result:
        st = real_fstat(fd)
        os.truncate(path, 300)
        return st

    monkeypatch.setattr(files.os, "fstat", fstat_then_shrink)
    raw, st = files.read_regular(path, 10_000)
    assert st.st_size == len(data) and raw == data[:300]


def test_a_stored_memory_sets_every_field_where_the_dataclass_would() -> None:
    """snapshot._stored sets slots directly, in declaration order: a field added or moved shows here."""
    from memvault.load.snapshot import _stored

    t1, t2, t3 = (datetime(2026, 1, d, tzinfo=UTC) for d in (1, 2, 3))
    built = _stored(
        True, "a/b.md", "T", "C", "P0", t1, t2, t3, ("x",), 0.5, False, "bad", True, 11, 22, "h", 33
    )  # fmt: skip
    assert built == Memory(
        id="a/b.md", title="T", content="C", priority="P0", created_at=t1, updated_at=t2, last_accessed_at=t3,
        tags=("x",), importance=0.5, archived=True, has_frontmatter=False, problem="bad", conflicted=True,
        mtime_ns=11, size=22, change=33, hash="h",
    )  # fmt: skip
    with pytest.raises(dataclasses.FrozenInstanceError):
        built.title = "changed"  # type: ignore[misc]


def test_scan_holds_one_folder_entry_at_a_time(tmp_path: Path) -> None:
    """A scan kept a list of the folder's entries, each with its cached stat, to its end: at
    100,000 files a restart's rescan left 70 MB of free pools resident. Now its memory stays flat."""
    import tracemalloc

    token = tmp_path / "t"
    token.mkdir()
    for i in range(3000):
        (token / f"m{i}.md").write_bytes(b"x")
    tracemalloc.start()
    try:
        count = 0
        for _id, _archived, _st in Vault(token).scan():
            count += 1
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 3000
    assert peak < 300_000  # a list of 3,000 entries with their stats is some 1.5 MB
