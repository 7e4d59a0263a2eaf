"""Session summaries' merges: both sides' versions kept in time order and numbered again, a title
change following its version, the markdown showing both sides' appends."""

from __future__ import annotations

import tempfile
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import example, given
from hypothesis import strategies as st
from strategies import PROPS

from memvault.clock import format_time
from memvault.git.mergesessions import merge_history, merge_session_markdown
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

SESSION = "standup"
MD = {"path": "sessions/standup.md", "memory_id": "standup.md"}  # where the summary's markdown is
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

    merged = merge_history(base, ours, theirs)
    assert merged == merge_history(base, theirs, ours)
    assert merged.startswith(base)
    files = read_session(merged)
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

    merged = merge_history(b"", ours, theirs)
    assert merged == merge_history(b"", theirs, ours)
    files = read_session(merged)
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

    history_merged = merge_history(base_h, ours_h, theirs_h)
    md = merge_session_markdown(base_md, ours_md, theirs_md, **MD)
    assert md == merge_session_markdown(base_md, theirs_md, ours_md, **MD)
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
    merged_h = merge_history(as_bytes(history), ours_h, theirs_h)
    md = merge_session_markdown(
        render_markdown(first, first.ts),
        render_markdown(three, first.ts),
        render_markdown(other, first.ts),
        **MD,
    )
    files = read_session(merged_h, md.data)
    assert files.stale and not files.unrecorded  # the server renders the merged history's latest again
    assert files.latest is not None and files.latest.summary == "one\n\ntwo\n\nthree\n\nother"


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
    merged = merge_history(base, ours, theirs)
    assert merged == merge_history(base, theirs, ours)
    files = read_session(merged)
    assert not files.conflicted
    titled: dict[tuple[str, str], set[str | None]] = {}
    for version in files.versions:
        titled.setdefault((version.ts, version.text), set()).add(version.title)
    for rows in (mine, yours):
        for (minutes, _, text), title in rows:
            if title is not None:
                assert title in titled[(stamp(minutes + 60), text)]
