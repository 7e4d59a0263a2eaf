"""Claude Code transcripts read as requests and answers: the client's own notes are no request."""

from __future__ import annotations

from pathlib import Path

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
