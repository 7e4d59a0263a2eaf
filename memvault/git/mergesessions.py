"""A three-way merge of a session summary's files: every version of both sides, in time order.

``sessions/<id>.history.jsonl`` (see :mod:`memvault.records.summaryfiles`) is append-only: what
the base held stays, and each side's new versions (a version line with the title and tag changes
that follow it) are interleaved by their time, then numbered on from the base's last version, so
the numbers are unique again and each side's appends build on whatever came before them. A version
both sides hold (the same line but for its number) is kept once, and what a side added after it
stays after it: an append never comes before the version it appends to.

``sessions/<id>.md`` shows the newest version. When each side added one version, its text is the
base's with the older side's change, then the newer side's, as the merged history builds it; when a
side added several, the newer side's file stands, one version behind the history, which the server
takes for a stale rendering and writes again. Nothing depends on which side is ours.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from difflib import SequenceMatcher
from typing import Any

import yaml  # type: ignore[import-untyped]

from memvault.clock import format_time, parse_time
from memvault.git.mergememory import Merged, merge_memory, split_frontmatter
from memvault.records.summaryfiles import APPEND_SEPARATOR, Version, json_line, render_markdown

_EARLIEST = datetime.min


# ---------------------------------------------------------------------------- the history


@dataclass(slots=True)
class _Unit:
    """A version's line and the lines that follow it up to the next version (title and tag
    changes, damaged lines), as one side added them."""

    when: datetime
    lines: list[str]
    rows: list[dict[str, Any] | None]

    @property
    def identity(self) -> str:
        """The unit as text, version numbers left out: the same on both sides for the same versions."""
        return "\n".join(
            json.dumps({k: v for k, v in row.items() if k != "version"}, sort_keys=True) if row else line
            for line, row in zip(self.lines, self.rows, strict=True)
        )


def _row(line: str) -> dict[str, Any] | None:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return row if isinstance(row, dict) else None


def _number(row: Mapping[str, Any] | None) -> int | None:
    value = row.get("version") if row is not None else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _time(row: Mapping[str, Any] | None) -> datetime | None:
    try:
        parsed = parse_time(row.get("ts")) if row is not None else None
    except (TypeError, ValueError):
        return None
    return parsed.replace(tzinfo=None) if parsed is not None else None


def _history_lines(data: bytes) -> list[str]:
    return [line for line in data.decode("utf-8", "surrogateescape").split("\n") if line.strip()]


def _new_units(base: list[str], side: list[str]) -> list[_Unit]:
    """What a side added to the base, as units in its order."""
    left = Counter(base)
    units: list[_Unit] = []
    when = _EARLIEST
    for line in side:
        if left[line] > 0:
            left[line] -= 1
            continue
        row = _row(line)
        starts = row is not None and not row.get("meta") and "ts" in row
        if starts or not units:
            when = _time(row) or when
            units.append(_Unit(when, [], []))
        units[-1].lines.append(line)
        units[-1].rows.append(row)
    return units


def _version_of(unit: _Unit) -> int | None:
    """The number of the version a unit adds (None when it adds none: damaged lines only)."""
    for row in unit.rows:
        if row is not None and not row.get("meta") and "ts" in row:
            return _number(row)
    return None


def _align(first: list[_Unit], second: list[_Unit]) -> tuple[dict[int, int], list[int]]:
    """The second side's units that the first also holds (the same text at the same time, numbers
    aside), matched in order, so each such version is kept as often as the side holding it more often
    holds it: ``shared`` maps each to the first
    side's copy; ``after[j]`` is the first side's unit that the second side's unit ``j`` must follow
    (-1: none), the copy of the last shared unit before it."""
    matcher = SequenceMatcher(None, [u.identity for u in first], [u.identity for u in second], autojunk=False)
    shared: dict[int, int] = {}
    for block in matcher.get_matching_blocks():
        for n in range(block.size):
            shared[block.b + n] = block.a + n
    after: list[int] = []
    last = -1
    for j in range(len(second)):
        last = shared.get(j, last)
        after.append(last)
    return shared, after


def merge_history(base: bytes, ours: bytes, theirs: bytes) -> bytes:
    """The merged history: the base's lines, then both sides' new versions by time, renumbered."""
    if ours == theirs or theirs == base:
        return ours
    if ours == base:
        return theirs
    first_raw, second_raw = sorted((ours, theirs))
    b, f, s = (_history_lines(raw) for raw in (base, first_raw, second_raw))
    out = list(b)  # a base line a side lost stays: the history is append-only
    units_f, units_s = _new_units(b, f), _new_units(b, s)
    shared, after = _align(units_f, units_s)
    kept = [j for j in range(len(units_s)) if j not in shared]
    ordered: list[tuple[int, int]] = []
    i = k = 0
    while i < len(units_f) or k < len(kept):
        j = kept[k] if k < len(kept) else -1
        take_f = k >= len(kept) or (
            i < len(units_f)
            and (
                i <= after[j]  # a unit follows what it followed on its side: an append, its text
                or (units_f[i].when, units_f[i].identity) <= (units_s[j].when, units_s[j].identity)
            )
        )
        ordered.append((0, i) if take_f else (1, j))
        i, k = (i + 1, k) if take_f else (i, k + 1)
    last = max((n for n in (_number(_row(line)) for line in b) if n is not None), default=0)
    renumbered: list[dict[int, int]] = [{}, {}]
    copies = {a: _version_of(units_s[j]) for j, a in shared.items()}
    for side, index in ordered:
        unit = (units_f, units_s)[side][index]
        for line, row in zip(unit.lines, unit.rows, strict=True):
            number = _number(row)
            if row is None or number is None:
                out.append(line)
                continue
            if not row.get("meta"):
                last += 1
                renumbered[side][number] = last
                copy = copies.get(index) if side == 0 else None
                if copy is not None:  # the other side's copy of this version: its later lines follow
                    renumbered[1][copy] = last
            new = renumbered[side].get(number, number)
            out.append(line if new == number else json_line({**row, "version": new}))
    return "".join(line + "\n" for line in out).encode("utf-8", "surrogateescape")


# ---------------------------------------------------------------------------- the markdown file


@dataclass(frozen=True, slots=True)
class _Shown:
    raw: bytes
    meta: dict[str, Any]
    body: str
    version: int
    when: datetime


def _shown(raw: bytes) -> _Shown | None:
    """A session's markdown file as memvault renders it, or None when it is not one."""
    split = split_frontmatter(raw.decode("utf-8", "replace"))
    if split is None:
        return None
    fm, body = split
    try:
        meta = yaml.safe_load(fm) if fm.strip() else {}
    except yaml.YAMLError:
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("sessionId"), str):
        return None
    version = meta.get("version")
    if not isinstance(version, int) or isinstance(version, bool):
        return None
    when = _time({"ts": _text(meta.get("updatedAt"))}) or _EARLIEST
    return _Shown(raw, meta, body.strip(), version, when)


def _text(value: Any) -> Any:
    return format_time(value) if isinstance(value, datetime) else value


def _applied(text: str, base: str, side: str) -> str:
    """``text`` after a side's change to ``base``: its addition when it appended, else its text."""
    head = base.rstrip() + APPEND_SEPARATOR
    if base.strip() and side.startswith(head):
        added = side[len(head) :]
        return text.rstrip() + APPEND_SEPARATOR + added if text.strip() else added
    return side


def merge_session_markdown(base: bytes, ours: bytes, theirs: bytes, *, path: str, memory_id: str) -> Merged:
    """The merged markdown file of a session summary (a file that is not one merges as a memory)."""
    if ours == theirs or theirs == base:
        return Merged(ours)
    if ours == base:
        return Merged(theirs)
    shown = [_shown(raw) for raw in (base, ours, theirs)]
    b, o, t = shown
    if o is None or t is None or (b is None and base.strip()):
        return merge_memory(base, ours, theirs, path=path, memory_id=memory_id)
    base_version = b.version if b is not None else 0
    base_body = b.body if b is not None else ""
    older, newer = sorted((o, t), key=lambda s: (s.when, s.raw))
    added = [max(s.version - base_version, 1 if s.body != base_body else 0) for s in (older, newer)]
    if 0 in added:  # one side only retitled: the side with the new version shows it
        return Merged(max((o, t), key=lambda s: (s.version, s.when, s.raw)).raw)
    if added != [1, 1]:
        return Merged(newer.raw)  # behind the merged history: the server writes it again
    text = _applied(_applied(base_body, base_body, older.body), base_body, newer.body)
    title = newer.meta.get("title")
    tags = newer.meta.get("tags") or []
    created = _text((b.meta if b is not None else older.meta).get("createdAt")) or _text(
        newer.meta.get("updatedAt")
    )
    latest = Version(
        str(newer.meta["sessionId"]),
        base_version + sum(added),
        str(_text(newer.meta.get("updatedAt"))),
        title if isinstance(title, str) else None,
        tuple(str(tag) for tag in tags) if isinstance(tags, list) else (),
        text,
    )
    return Merged(render_markdown(latest, str(created)))
