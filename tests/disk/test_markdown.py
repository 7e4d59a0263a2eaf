"""The memory file format (memvault.disk.markdown): tolerant parsing, rendering, frontmatter edits."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest
import yaml
from hypothesis import assume, example, given
from hypothesis import strategies as st
from strategies import MEM_MCP, PROPS, contents, fm_ish, tags_st, times, titles

from memvault.clock import format_time
from memvault.disk import markdown as vault_module
from memvault.disk.markdown import OWNED_KEYS, PRIORITIES, parse_memory, render_new, rewrite


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

    monkeypatch.setattr(vault_module, "load_yaml", no_yaml)
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
        expected: object = normalised(vault_module.load_yaml(fm))  # the loader vault uses (C or pure)
    except Exception as exc:
        expected = type(exc)
    try:
        plain = vault_module._plain_frontmatter(fm)  # None: YAML decides
        got: object = expected if plain is None else normalised(plain)
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
    assert split == _split_by_search(text)
    body = split[1]
    by_sub = vault_module._FOOTER.sub("", body.rstrip() + "\n").strip("\n")
    heading = vault_module._HEADING.match(by_sub)
    title, content = vault_module._title_and_content(body, {}, "stem")
    assert content == (by_sub[heading.end() :].lstrip("\n") if heading else by_sub).rstrip()
    assert title == (heading.group(1).strip() if heading else "stem")
    assert vault_module.has_conflict_markers(text) == bool(
        re.search(r"^<<<<<<<(?: |$)[\s\S]*?^=======[ \t]*$[\s\S]*?^>>>>>>>(?: |$)", text, re.M)
    )


# ============================================================================ render_new / rewrite


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


@given(
    st.lists(
        st.one_of(
            st.from_regex(r"[A-Za-z][A-Za-z0-9_-]{0,12}", fullmatch=True),
            st.sampled_from(["yes", "No", "ON", "null", "y", "n", "nan", "inf", "a: b", "-x", "x y", "é"]),
            st.text(max_size=6),
        ),
        max_size=5,
    )
)
def test_a_tag_list_renders_as_yaml_dumps_it(tags: list[str]) -> None:
    """Plain words skip the YAML dumper: the text is the dumper's own, and it reads back."""
    assert vault_module._yaml_scalar(tags) == vault_module._dump(tags)


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
