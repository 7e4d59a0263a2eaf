"""Claude Code transcripts read as requests and answers: the client's own notes are no request."""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from memvault.ops import transcripts
from tests.transcripts import Transcript


def requests_in(log: Transcript) -> list[tuple[str, str]]:
    read = transcripts.read(log.path, limit_bytes=1 << 20)
    return [(t.request, t.answer) for t in transcripts.turns(read.entries)]


def test_slash_commands_the_client_ran_itself_are_not_requests(tmp_path: Path) -> None:
    log = Transcript(tmp_path / "t.jsonl", tmp_path)
    log.turn("Fix the login bug", "Fixed it.")
    log.slash("/model", output="Set model to opus")
    log.slash("/clear")
    log.turn("Now the logout bug", "Done too.")
    assert requests_in(log) == [("Fix the login bug", "Fixed it."), ("Now the logout bug", "Done too.")]


def test_a_slash_command_the_assistant_answered_is_a_request(tmp_path: Path) -> None:
    log = Transcript(tmp_path / "t.jsonl", tmp_path)
    log.slash("/review", args="auth")
    log.answer("Auth looks fine.")
    assert requests_in(log) == [("/review auth", "Auth looks fine.")]


def test_an_interruption_notice_is_not_a_request_and_keeps_the_request_it_cut(tmp_path: Path) -> None:
    log = Transcript(tmp_path / "t.jsonl", tmp_path)
    log.turn("Refactor the parser", "Starting on it.")
    log.interrupted()
    log.interrupted(for_tool_use=False)
    log.turn("Only the lexer, please", "Lexer refactored.")
    assert requests_in(log) == [
        ("Refactor the parser", "Starting on it."),
        ("Only the lexer, please", "Lexer refactored."),
    ]


def test_a_huge_entry_is_passed_over_without_holding_it_and_the_import_goes_on(tmp_path: Path) -> None:
    """A 20 MB tool result in a transcript: an import (strict) keeps the requests around it and
    never holds the line whole."""
    log = Transcript(tmp_path / "t.jsonl", tmp_path)
    log.turn("Read the big log", "It is large.")
    with log.path.open("a") as handle:
        handle.write('{"type": "user", "message": {"content": "' + "x" * 20_000_000 + '"}}\n')
    log.turn("Summarise it", "Mostly x.")
    tracemalloc.start()
    try:
        read = transcripts.read(log.path, limit_bytes=1 << 62, strict=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert [t.request for t in transcripts.turns(read.entries)] == ["Read the big log", "Summarise it"]
    assert peak < 12_000_000


def test_a_tail_drops_its_first_partial_line_and_a_damaged_line_is_named_on_import(tmp_path: Path) -> None:
    log = Transcript(tmp_path / "t.jsonl", tmp_path)
    log.turn("First", "One.")
    log.turn("Second", "Two.")
    size = log.path.stat().st_size
    tail = transcripts.read(log.path, limit_bytes=size - 10)
    assert (
        not tail.whole and len(tail.entries) == len(transcripts.read(log.path, limit_bytes=size).entries) - 1
    )
    with log.path.open("a") as handle:
        handle.write("not json\n")
    with pytest.raises(transcripts.BadTranscript, match="line 8 is not a JSON object"):
        transcripts.read(log.path, limit_bytes=1 << 62, strict=True)
