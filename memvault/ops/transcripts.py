"""Claude Code session transcripts (``*.jsonl``): the user's requests and the assistant's final answers.

A transcript is read as hostile input: a bounded tail of the file, lines that are not JSON objects
passed over (or, for an import, refused with their line number), and every field checked for its
type before use. Nothing here calls a model: a turn is the user's text and the last text the
assistant wrote before the next request.

A capture appended to a session summary ends with a marker naming the last transcript entry it
covers (its time and uuid), so the next capture appends only what came after it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

MAX_LINE_BYTES = 4 * 1024 * 1024  # one entry larger than this (a huge tool result) is passed over
REQUEST_CHARS = 600
ANSWER_CHARS = 1200
_MARKER = re.compile(r"<!-- memvault: captured through (\S{1,40}) (\S{1,80}) -->")
_SAFE_UUID = re.compile(r"[A-Za-z0-9_.:-]{1,80}")
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,9})?(?:Z|[+-]\d\d:\d\d)")
# Claude Code wraps what it injects itself in tags; they are not the user's words (a local command's
# output, a shell command typed with "!" and its output).
_INJECTED = re.compile(
    r"<(system-reminder|local-command-stdout|local-command-stderr|command-message|command-args"
    r"|bash-input|bash-stdout|bash-stderr)>.*?</\1>",
    re.S,
)
_COMMAND = re.compile(r"<command-name>(.{1,200}?)</command-name>", re.S)
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.S)
# What the client writes when the user stops the assistant ("... for tool use" mid tool call).
_INTERRUPTED = re.compile(r"\[Request interrupted by user[^\]\n]{0,80}\]")


class BadTranscript(Exception):
    """A transcript an import refuses; the message names the line and says why."""


@dataclass(frozen=True, slots=True)
class Turn:
    """One exchange: what the user asked, the assistant's final answer, when, and the last entry's id."""

    request: str
    answer: str
    at: str
    through: tuple[str, str]  # (time, uuid) of the last entry the turn covers


@dataclass(frozen=True, slots=True)
class Transcript:
    session_id: str | None
    cwd: str | None
    entries: list[dict[str, Any]]
    whole: bool  # False when only the file's tail was read


def read(path: Path, *, limit_bytes: int, strict: bool = False) -> Transcript:
    """The entries of a transcript file: at most its last ``limit_bytes`` (the first, partial line of
    a tail dropped). ``strict`` (imports): a line that is not a JSON object raises BadTranscript;
    otherwise it is passed over (a live transcript may end in a line still being written). A line
    longer than MAX_LINE_BYTES (a huge tool result) is passed over in both, read in bounded pieces,
    never held whole."""
    entries: list[dict[str, Any]] = []
    with open(path, "rb") as handle:
        size = os.fstat(handle.fileno()).st_size
        start = max(0, size - limit_bytes)
        handle.seek(start)
        left = size - start
        number = 0
        if start > 0:
            left -= _skip_line(handle, left)  # began mid-line
        while left > 0:
            raw = handle.readline(min(MAX_LINE_BYTES + 2, left))
            if not raw:
                break
            left -= len(raw)
            number += 1
            if not raw.endswith(b"\n") and len(raw) > MAX_LINE_BYTES:
                left -= _skip_line(handle, left)
                continue
            line = raw.rstrip(b"\n")
            if len(line) > MAX_LINE_BYTES or not line.strip():
                continue
            entry = _entry(line)
            if entry is None:
                if strict and start == 0:
                    raise BadTranscript(f"line {number} is not a JSON object of a Claude Code transcript")
                continue
            entries.append(entry)
    if strict and start == 0 and not entries:
        raise BadTranscript("it holds no transcript entries")
    session_id = next((e["sessionId"] for e in entries if isinstance(e.get("sessionId"), str)), None)
    cwd = next((e["cwd"] for e in reversed(entries) if isinstance(e.get("cwd"), str)), None)
    return Transcript(session_id, cwd, entries, start == 0)


def _skip_line(handle: BinaryIO, left: int) -> int:
    """Read past the rest of a line, a MiB at a time, at most ``left`` bytes; how many were read."""
    skipped = 0
    while skipped < left:
        piece = handle.readline(min(1 << 20, left - skipped))
        skipped += len(piece)
        if not piece or piece.endswith(b"\n"):
            break
    return skipped


def _entry(raw: bytes) -> dict[str, Any] | None:
    if len(raw) > MAX_LINE_BYTES:
        return None
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _text(content: Any) -> str:
    """The text of a message's content: a string, or the text blocks of a list (tool results and
    tool calls left out)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = [
        block["text"]
        for block in content
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
    ]
    return "\n".join(parts)


def _request(entry: dict[str, Any]) -> tuple[str, bool]:
    """The user's words in an entry (empty when they are not: tool results, the client's own notes,
    an interruption notice, a local command's output) and whether they are a slash command."""
    if entry.get("isMeta") is True or entry.get("isCompactSummary") is True:
        return "", False
    message = entry.get("message")
    text = _text(message.get("content")) if isinstance(message, dict) else ""
    command = _COMMAND.search(text)
    if command is not None:
        args = _COMMAND_ARGS.search(text)
        said = f"{command.group(1).strip()} {args.group(1) if args else ''}"
        return " ".join(said.split()), True
    text = _INTERRUPTED.sub("", _INJECTED.sub("", text))
    if text.lstrip().startswith("Caveat: The messages below were generated"):
        return "", False
    return " ".join(text.split()), False


def _answer(entry: dict[str, Any]) -> str:
    message = entry.get("message")
    return _text(message.get("content")).strip() if isinstance(message, dict) else ""


def _stamp(entry: dict[str, Any]) -> tuple[str, str] | None:
    at, uuid = entry.get("timestamp"), entry.get("uuid")
    if isinstance(at, str) and _TIME.fullmatch(at) and isinstance(uuid, str) and _SAFE_UUID.fullmatch(uuid):
        return at, uuid
    return None


def after(entries: Sequence[dict[str, Any]], marker: tuple[str, str] | None) -> list[dict[str, Any]]:
    """The entries after the one a capture marker names; when that entry is not among them (only a
    tail was read), those later than the marker's time."""
    if marker is None:
        return list(entries)
    at, uuid = marker
    for index, entry in enumerate(entries):
        if entry.get("uuid") == uuid:
            return list(entries[index + 1 :])
    return [e for e in entries if isinstance(e.get("timestamp"), str) and e["timestamp"] > at]


def turns(entries: Iterable[dict[str, Any]]) -> list[Turn]:
    """Requests and final answers, in order; subagents' side chains are left out. A slash command
    counts as a request only when the assistant answered it (``/review auth``, a prompt); one the
    client ran itself (``/model``, ``/cost``) is left out, and so are interruption notices."""
    out: list[Turn] = []
    request, answer, at, through, command = "", "", "", None, False

    def close() -> None:
        if request and through is not None and (answer or not command):
            out.append(Turn(request, answer, at, through))

    for entry in entries:
        if entry.get("isSidechain") is True:
            continue
        kind = entry.get("type")
        stamp = _stamp(entry)
        if kind == "user":
            text, is_command = _request(entry)
            if text:
                close()
                request, answer, at, command = text, "", stamp[0] if stamp else "", is_command
        elif kind == "assistant" and request:
            text = _answer(entry)
            if text:
                answer = text
        if stamp is not None and request:
            through = stamp
    close()
    return out


def last_stamp(entries: Sequence[dict[str, Any]]) -> tuple[str, str] | None:
    return next((s for s in map(_stamp, reversed(entries)) if s is not None), None)


def marker_in(summary: str | None) -> tuple[str, str] | None:
    """The (time, uuid) of the last capture a summary holds, if any."""
    if not summary:
        return None
    found = _MARKER.findall(summary)
    return (found[-1][0], found[-1][1]) if found else None


def without_markers(summary: str) -> str:
    """A summary as a person or an agent reads it: the capture markers taken out."""
    return re.sub(r"\n?" + _MARKER.pattern, "", summary)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def render(new: Sequence[Turn], through: tuple[str, str], budget: int) -> str:
    """A capture: one line per request with its final answer (newest kept when over ``budget``),
    then the marker. Empty when there is no new turn."""
    if not new:
        return ""
    marker = f"<!-- memvault: captured through {through[0]} {through[1]} -->"
    lines: list[str] = []
    used = len(marker) + 200
    for turn in reversed(new):
        answer = " ".join(turn.answer.split())
        when = turn.at[:16].replace("T", " ") or "undated"
        line = f"- **User** ({when}): {_clip(turn.request, REQUEST_CHARS)}"
        if answer:
            line += f"\n  **Claude**: {_clip(answer, ANSWER_CHARS)}"
        if used + len(line) + 1 > budget and lines:
            break
        lines.append(line)
        used += len(line) + 1
    left = len(new) - len(lines)
    head = f"### Claude Code, {len(lines)} request{'s' if len(lines) != 1 else ''}"
    if left:
        head += f" ({left} earlier one{'s' if left != 1 else ''} left out to keep this short)"
    return "\n".join([head, *reversed(lines), marker])


def files_under(folder: Path, suffix: str) -> Iterator[Path]:
    """The regular files ending in ``suffix`` under a folder, in name order: links (to files or
    folders) not followed, dot-files and dot-folders passed over."""
    for top, dirs, names in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            path = Path(top, name)
            if (
                name.endswith(suffix)
                and not name.startswith(".")
                and path.is_file()
                and not path.is_symlink()
            ):
                yield path
