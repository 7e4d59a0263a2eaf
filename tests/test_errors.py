"""errors: what each error says and carries, how user input is quoted, and what a full disk looks like."""

from __future__ import annotations

import errno
import inspect
import sqlite3

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memvault import errors
from memvault.errors import (
    Conflict,
    DiskFull,
    FileConflict,
    InvalidArgument,
    InvalidName,
    LinkedFile,
    LinkedFolder,
    MemvaultError,
    NotFound,
    SyncFailed,
    TooLarge,
    UnknownEntity,
    UnknownSession,
    is_disk_full,
    quote,
)

PASTED = "x" * 10_000  # a document pasted where a name belongs

# One of each error, made as the code makes them.
EACH = [
    NotFound("note.md"),
    NotFound("note.md", archived=True),
    NotFound("note.md", in_archive=True),
    InvalidName("../x.md", "it leaves the vault"),
    InvalidArgument("title is empty; give the memory a title."),
    TooLarge("content", 120_000, 100_000),
    Conflict("note.md"),
    FileConflict("sessions/abc.md"),
    LinkedFolder(),
    LinkedFile("notes"),
    DiskFull(),
    UnknownSession("abc"),
    UnknownEntity("Alice"),
    SyncFailed("git push was refused: the remote has work this clone lacks", "push"),
]


def error_classes() -> list[type[MemvaultError]]:
    return [
        cls
        for _, cls in inspect.getmembers(errors, inspect.isclass)
        if issubclass(cls, MemvaultError) and cls.__module__ == errors.__name__
    ]


def test_every_error_class_is_made_once_above() -> None:
    assert {type(e) for e in EACH} == set(error_classes()) - {MemvaultError}


@pytest.mark.parametrize("error", EACH, ids=lambda e: type(e).__name__)
def test_an_error_reads_as_its_message_and_is_a_memvault_error(error: MemvaultError) -> None:
    assert isinstance(error, MemvaultError)
    assert str(error) == error.message
    assert error.message.strip() and "\n" not in error.message


def test_the_module_docstring_draws_every_error_in_its_tree() -> None:
    tree = errors.__doc__ or ""
    missing = [cls.__name__ for cls in error_classes() if f" {cls.__name__}" not in tree]
    assert missing == []


def test_not_found_says_where_to_look_next() -> None:
    assert "list_memory_titles" in str(NotFound("a.md"))
    assert "search_archive" in str(NotFound("a.md", archived=True))
    moved = NotFound("a.md", in_archive=True)
    assert "restore_memory(filename='a.md')" in str(moved)
    assert (moved.id, moved.archived, moved.in_archive) == ("a.md", False, True)


def test_errors_carry_their_fields() -> None:
    name = InvalidName("../x.md", "it leaves the vault")
    assert (name.value, name.why) == ("../x.md", "it leaves the vault")
    large = TooLarge("content", 120_000, 100_000)
    assert (large.what, large.size, large.limit) == ("content", 120_000, 100_000)
    assert Conflict("a.md").id == "a.md"
    assert FileConflict("graph.jsonl").path == "graph.jsonl"
    assert LinkedFile("notes").name == "notes"
    assert UnknownSession("abc").session_id == "abc"
    assert UnknownEntity("Alice").name == "Alice"
    failed = SyncFailed("could not push", "push")
    assert (failed.why, failed.command) == ("could not push", "push")


def test_too_large_gives_both_sizes_readably_and_advice() -> None:
    message = str(TooLarge("content", 120_000, 100_000))
    assert "120,000 characters" in message and "the limit is 100,000" in message
    assert message.endswith("Split it into several smaller memories.")
    assert str(TooLarge("the request", 5, 4, "Send less.")).endswith("Send less.")


@pytest.mark.parametrize(
    "make",
    [
        lambda text: InvalidName(text, "it is too long"),
        LinkedFile,
        UnknownSession,
        UnknownEntity,
    ],
    ids=["InvalidName", "LinkedFile", "UnknownSession", "UnknownEntity"],
)
def test_a_pasted_document_is_never_echoed_whole(make: type[MemvaultError]) -> None:
    message = str(make(PASTED))
    assert len(message) < 600
    assert "10,000 characters" in message


def test_quote_keeps_short_input_as_it_is_and_cuts_long_input() -> None:
    assert quote("note.md") == "'note.md'"
    assert quote(42) == "'42'"
    assert quote("abcdefghij", limit=8) == "'abcde'... (10 characters)"
    assert quote("abcdefgh", limit=8) == "'abcdefgh'"


@given(st.text(max_size=400), st.integers(min_value=4, max_value=200))
def test_quote_shows_at_most_limit_characters_of_the_input(text: str, limit: int) -> None:
    quoted = quote(text, limit)
    if len(text) <= limit:
        assert quoted == repr(text)
    else:
        assert quoted == repr(text[: limit - 3]) + f"... ({len(text):,} characters)"


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT])
def test_a_full_disk_is_recognised_from_the_os(code: int) -> None:
    assert is_disk_full(OSError(code, "No space left on device"))


def test_a_full_disk_is_recognised_from_sqlite() -> None:
    assert is_disk_full(sqlite3.OperationalError("database or disk is full"))


def test_other_failures_are_not_a_full_disk() -> None:
    assert not is_disk_full(OSError(errno.EACCES, "Permission denied"))
    assert not is_disk_full(PermissionError(errno.EPERM, "Operation not permitted"))
    assert not is_disk_full(sqlite3.OperationalError("database is locked"))
    assert not is_disk_full(ValueError("disk is full"))
