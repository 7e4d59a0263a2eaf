"""The session file format: what a session's two files hold after writes, appends stored as deltas,
a person's edit of the markdown taken as a new version, git's markers and foreign copies refused,
links never read through."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memvault.records.summaryfiles import (
    Version,
    append_lines,
    file_stem,
    history_line,
    last_history_version,
    paths,
    read,
    stem_of,
    stored_as,
    write_markdown,
)

TS = "2026-03-01T10:00:00.000Z"


def save(folder: Path, versions: list[Version]) -> tuple[Path, Path]:
    """Write versions as the store does: one history line each, the markdown showing the newest."""
    md, history = paths(folder, versions[0].session_id)
    previous: str | None = None
    for v in versions:
        append_lines(history, [history_line(stored_as(v, previous))])
        previous = v.summary
    write_markdown(md, versions[-1], versions[0].ts)
    return md, history


def v(n: int, text: str, sid: str = "standup", title: str | None = "Standup") -> Version:
    return Version(sid, n, f"2026-03-01T10:0{n}:00.000Z", title, ("team",), text)


def test_plain_ids_are_their_own_file_names_others_are_slugged_and_hashed() -> None:
    assert file_stem("standup") == "standup"
    odd = file_stem("Stand Up/../x")
    assert "/" not in odd and odd != file_stem("stand up/../x")  # case kept apart by the hash
    assert stem_of("standup.history.jsonl") == "standup" and stem_of("standup.md") == "standup"
    assert stem_of(".hidden.md") is None and stem_of("notes.txt") is None


def test_versions_round_trip_and_an_append_is_stored_as_what_it_added(tmp_path: Path) -> None:
    first = v(1, "Did A.")
    second = v(2, "Did A.\n\nThen B.")
    md, history = save(tmp_path, [first, second])
    assert '"append": "Then B."' in history.read_text()  # the history grows with the text written
    files = read(md, history, mtime_ts=TS, stem="standup")
    assert files.session_id == "standup" and not files.conflicted
    assert [s.version for s in files.versions] == [1, 2]
    assert files.latest is not None and files.latest.summary == "Did A.\n\nThen B."
    assert last_history_version(history) == 2


def test_a_persons_edit_of_the_markdown_is_a_new_version(tmp_path: Path) -> None:
    md, history = save(tmp_path, [v(1, "Did A.")])
    md.write_text(md.read_text().replace("Did A.", "Did A, and fixed the build."))
    files = read(md, history, mtime_ts=TS, stem="standup")
    assert files.latest is not None and "fixed the build" in files.latest.summary
    assert len(files.unrecorded) == 1 and files.unrecorded[0].version == 2


def test_git_markers_mark_the_session_conflicted_and_it_still_reads(tmp_path: Path) -> None:
    md, history = save(tmp_path, [v(1, "Did A.")])
    with history.open("a") as handle:
        handle.write("<<<<<<< HEAD\n=======\n>>>>>>> theirs\n")
    files = read(md, history, mtime_ts=TS, stem="standup")
    assert files.conflicted
    assert files.latest is not None and files.latest.summary == "Did A."


def test_a_copy_of_another_sessions_file_is_no_part_of_this_one(tmp_path: Path) -> None:
    md, history = save(tmp_path, [v(1, "Secret plans.", sid="other")])
    mine_md, mine_history = paths(tmp_path, "standup")
    os.replace(history, mine_history)
    os.replace(md, mine_md)
    files = read(mine_md, mine_history, mtime_ts=TS, stem="standup")
    assert files.versions == [] and files.foreign == "other"


def test_a_history_that_is_a_link_is_not_read_through(tmp_path: Path) -> None:
    outside = tmp_path / "outside.jsonl"
    outside.write_text(history_line(stored_as(v(1, "from outside"), None)) + "\n")
    vault = tmp_path / "vault"
    md, history = paths(vault, "standup")
    history.parent.mkdir(parents=True)
    history.symlink_to(outside)
    files = read(md, history, mtime_ts=TS, stem="standup")
    assert files.versions == [] and files.latest is None
    assert last_history_version(history) == 0


def test_an_append_to_a_hand_edited_history_starts_on_a_new_line(tmp_path: Path) -> None:
    md, history = save(tmp_path, [v(1, "Did A.")])
    history.write_bytes(history.read_bytes().rstrip(b"\n"))  # an editor dropped the final newline
    append_lines(history, [history_line(stored_as(v(2, "Did A.\n\nB."), "Did A."))])
    files = read(md, history, mtime_ts=TS, stem="standup")
    assert not files.conflicted and [s.version for s in files.versions] == [1, 2]


@pytest.mark.parametrize("line", ['{"session": "standup", "version": true}', "[1, 2]", '{"version": 3}'])
def test_a_damaged_line_marks_the_session_conflicted(tmp_path: Path, line: str) -> None:
    md, history = save(tmp_path, [v(1, "Did A.")])
    with history.open("a") as handle:
        handle.write(line + "\n")
    assert read(md, history, mtime_ts=TS, stem="standup").conflicted
