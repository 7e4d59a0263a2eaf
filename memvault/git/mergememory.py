"""A three-way merge of a memory: its frontmatter field by field, its body line by line (diff3).

The frontmatter merges as a graph entity does: a field one side changed takes that change, tags
merge as sets against the base, ``updatedAt`` and ``lastAccessedAt`` take the later time, and a
field both sides set differently takes the value of the side updated last. The body merges with a
line-based diff3 (two sides inserting at the same place keep both insertions); when both sides
changed the same lines, the side updated last stays in place with the merged frontmatter and the
other is kept whole as a sibling memory whose frontmatter names the conflict (``conflictOf``), so
both versions stay, no marker is written and the memory stays writable. A file without frontmatter
(a person's note) merges its text the same way. Nothing depends on which side is ours.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import PurePosixPath
from typing import Any, TypeVar

import yaml  # type: ignore[import-untyped]

from memvault.clock import format_time, parse_time
from memvault.disk.markdown import OWNED_KEYS, edit_frontmatter, parse_memory, seal_markers
from memvault.git.mergegraph import merge_sets

T = TypeVar("T", bound=Hashable)
CONFLICT_KEY = "conflictOf"
LATER = ("updatedAt", "lastAccessedAt")  # both sides changed it: the later time
_MISSING = object()
_OPEN = re.compile(r"\A---[ \t]*\r?\n")
_CLOSE = re.compile(r"^---[ \t]*\r?$", re.MULTILINE)
_KEY = re.compile(r"""^(["']?)([^\s"'#:][^"':]*?)\1[ \t]*:(?:[ \t]|$)""")
_COPY = re.compile(r"\.conflict-[0-9a-f]{8}\.md\Z")


@dataclass(frozen=True, slots=True)
class Merged:
    """A merge's result: the bytes for the path merged, and any file to write beside it (a path in
    the same form as the merged one, and its bytes). ``clean`` is False when both sides changed the
    same text: a file memvault owns then keeps both versions (no marker); any other file holds
    git's markers."""

    data: bytes
    clean: bool = True
    extra: tuple[tuple[str, bytes], ...] = ()


# ---------------------------------------------------------------------------- diff3


def _matches(base: Sequence[T], side: Sequence[T]) -> dict[int, int]:
    """Base line -> side line, for the lines difflib matches (in order on both sides)."""
    matcher = difflib.SequenceMatcher(None, base, side, autojunk=False)
    found: dict[int, int] = {}
    for a, b, n in matcher.get_matching_blocks():
        for k in range(n):
            found[a + k] = b + k
    return found


@dataclass(frozen=True, slots=True)
class Chunk:
    """A stretch between two lines both sides kept from the base: the base's lines and each side's."""

    base: tuple[Any, ...]
    first: tuple[Any, ...]
    second: tuple[Any, ...]


def diff3(base: Sequence[T], first: Sequence[T], second: Sequence[T]) -> list[Chunk | T]:
    """The base as stable lines (each side kept it) and chunks where a side changed something."""
    in_first, in_second = _matches(base, first), _matches(base, second)
    out: list[Chunk | T] = []
    i = j = k = 0
    for line in [*(n for n in range(len(base)) if n in in_first and n in in_second), len(base)]:
        to_j, to_k = (in_first[line], in_second[line]) if line < len(base) else (len(first), len(second))
        if i < line or j < to_j or k < to_k:
            out.append(Chunk(tuple(base[i:line]), tuple(first[j:to_j]), tuple(second[k:to_k])))
        if line < len(base):
            out.append(base[line])
        i, j, k = line + 1, to_j + 1, to_k + 1
    return out


def merge_sequences(
    base: Sequence[T], first: Sequence[T], second: Sequence[T], *, insertions: bool = True
) -> tuple[list[T], list[Chunk]]:
    """The merged lines, and the chunks both sides changed differently (left out of the lines).
    With ``insertions``, two sides inserting different lines at one place keep both (in an order
    that does not depend on which side is first), which is no conflict."""
    merged: list[T] = []
    conflicts: list[Chunk] = []
    for part in diff3(base, first, second):
        if not isinstance(part, Chunk):
            merged.append(part)
        elif part.first == part.second or part.second == part.base:
            merged += part.first
        elif part.first == part.base:
            merged += part.second
        elif insertions and not part.base:
            a, b = sorted((part.first, part.second), key=repr)
            merged += [*a, *b]
        else:
            conflicts.append(part)
    return merged, conflicts


def _lines(data: bytes) -> list[bytes]:
    parts = data.split(b"\n")
    return [p + b"\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def merge_lines(base: bytes, ours: bytes, theirs: bytes) -> tuple[bytes, bool]:
    """Any text file, as ``git merge-file`` merges it: a clean merge, or git's markers around each
    stretch both sides changed (and False)."""
    if ours == theirs or theirs == base:
        return ours, True
    if ours == base:
        return theirs, True
    out: list[bytes] = []
    clean = True
    for part in diff3(_lines(base), _lines(ours), _lines(theirs)):
        if not isinstance(part, Chunk):
            out.append(part)
        elif part.first == part.second or part.second == part.base:
            out += part.first
        elif part.first == part.base:
            out += part.second
        else:
            clean = False
            out.append(b"<<<<<<< ours\n")
            out += _closed(part.first)
            out.append(b"=======\n")
            out += _closed(part.second)
            out.append(b">>>>>>> theirs\n")
    return b"".join(out), clean


def _closed(lines: Sequence[bytes]) -> list[bytes]:
    out = list(lines)
    if out and not out[-1].endswith(b"\n"):
        out[-1] += b"\n"
    return out


# ---------------------------------------------------------------------------- a memory


def split_frontmatter(text: str) -> tuple[str, str] | None:
    """(frontmatter, body) as :mod:`memvault.disk.markdown` splits a memory file, or None without
    a frontmatter block: the block runs from a first line ``---`` to the next ``---`` line."""
    parts = _fences(text)
    return None if parts is None else (text[parts[0] : parts[1]], text[parts[2] :])


def _fences(text: str) -> tuple[int, int, int] | None:
    """Where the frontmatter's text starts and ends, and where the body starts."""
    start = _OPEN.match(text)
    if start is None:
        return None
    close = _CLOSE.search(text, start.end())
    if close is None:
        return None
    body = close.end() + 1 if text.startswith("\n", close.end()) else close.end()
    return start.end(), close.start(), body


@dataclass(frozen=True, slots=True)
class _Side:
    raw: bytes
    crlf: bool  # its lines end in CRLF (merged as LF, written back as they were)
    text: str
    fences: tuple[int, int, int] | None
    meta: Mapping[str, Any] | None  # None: no frontmatter memvault can read
    when: datetime | None

    @property
    def body(self) -> str:
        return self.text[self.fences[2] :] if self.fences is not None else self.text

    @property
    def order(self) -> tuple[datetime, bytes]:
        return (self.when or datetime.min.replace(tzinfo=None), self.raw)


def _side(raw: bytes, name: str) -> _Side:
    crlf = b"\r\n" in raw
    text = raw.decode("utf-8", "surrogateescape").replace("\r\n", "\n")
    fences = _fences(text)
    meta: Mapping[str, Any] | None = None
    if fences is not None:
        parsed = parse_memory(raw, name)  # (which reads CRLF as LF too)
        meta = parsed.meta if parsed.problem is None or "UTF-8" in parsed.problem else None
    when = _when(meta.get("updatedAt")) if meta is not None else None
    return _Side(raw, crlf, text, fences, meta, when)


def _when(value: Any) -> datetime | None:
    try:
        parsed = parse_time(value)
    except (TypeError, ValueError):
        return None
    return parsed.replace(tzinfo=None) if parsed is not None else None


def _body_lines(text: str) -> list[str]:
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def merge_memory(base: bytes, ours: bytes, theirs: bytes, *, path: str, memory_id: str) -> Merged:
    """A memory (or a person's markdown file) merged: frontmatter field by field, body by lines;
    on a true body conflict the side updated last stays in place and the other becomes a sibling."""
    if ours == theirs or theirs == base:
        return Merged(ours)
    if ours == base:
        return Merged(theirs)
    name = PurePosixPath(memory_id).name
    b = _side(base, name)
    older, newer = sorted((_side(ours, name), _side(theirs, name)), key=lambda s: s.order)
    if older.meta is None or newer.meta is None:
        return _merge_whole(b, older, newer, path, memory_id)
    base_lines = _body_lines(b.body)
    body, conflicts = merge_sequences(
        base_lines, _body_lines(newer.body), _body_lines(older.body), insertions=bool(base_lines)
    )
    meta = merge_fields(b.meta or {}, older.meta, newer.meta)
    kept_body = "".join(body) if not conflicts else newer.body
    text = _with_frontmatter(newer, meta, kept_body)
    if not conflicts:
        return Merged(_encode(seal_markers(text), newer.crlf))
    return Merged(
        _encode(seal_markers(text), newer.crlf), clean=False, extra=(_sibling(older, path, memory_id),)
    )


def _merge_whole(b: _Side, first: _Side, second: _Side, path: str, memory_id: str) -> Merged:
    """A file without frontmatter memvault can read: its whole text by lines."""
    first, second = sorted((first, second), key=lambda s: s.raw)
    base_lines = _body_lines(b.text)
    lines, conflicts = merge_sequences(
        base_lines, _body_lines(second.text), _body_lines(first.text), insertions=bool(base_lines)
    )
    if not conflicts:
        return Merged(_encode("".join(lines), second.crlf))
    return Merged(second.raw, clean=False, extra=(_sibling(first, path, memory_id),))


def merge_fields(
    base: Mapping[str, Any], older: Mapping[str, Any], newer: Mapping[str, Any]
) -> dict[str, Any]:
    """Frontmatter merged key by key: one side's change holds; both changed, a change beats a
    deletion, the later time for ``updatedAt`` and ``lastAccessedAt``, tags as sets, any other key
    the newer side's value."""
    merged: dict[str, Any] = {}
    for key in [*newer, *(k for k in older if k not in newer)]:
        b, o, n = (side.get(key, _MISSING) for side in (base, older, newer))
        if o == n or o == b:
            value = n
        elif n == b:
            value = o
        elif o is _MISSING or n is _MISSING:  # a change beats a deletion
            value = n if o is _MISSING else o
        elif key in LATER:
            value = max((v for v in (o, n) if v is not _MISSING), key=lambda v: _when(v) or datetime.min)
        elif key == "tags" and all(isinstance(v, list) or v is _MISSING for v in (b, o, n)):
            value = merge_sets(*[v if isinstance(v, list) else [] for v in (b, n, o)])
        else:
            value = n
        if value is not _MISSING:
            merged[key] = value
    return merged


def _with_frontmatter(template: _Side, meta: Mapping[str, Any], body: str) -> str:
    """``template``'s file with ``meta`` as its frontmatter (only the lines of changed keys
    rewritten) and ``body`` after it."""
    assert template.fences is not None and template.meta is not None
    start, end, body_at = template.fences
    old = template.meta
    changed = {
        k: meta.get(k, _MISSING) for k in [*meta, *old] if meta.get(k, _MISSING) != old.get(k, _MISSING)
    }
    fm = template.text[start:end]
    owned = {k: None if v is _MISSING else v for k, v in changed.items() if k in OWNED_KEYS}
    if owned:
        fm = edit_frontmatter(fm, owned)
        fm = fm + "\n" if fm and not fm.endswith("\n") else fm
    for key, value in changed.items():
        if key not in OWNED_KEYS:
            fm = _edit_key(fm, key, value)
    return template.text[:start] + fm + template.text[end:body_at] + body


def _edit_key(fm: str, key: str, value: Any) -> str:
    """One key of a frontmatter block set to ``value`` (gone when _MISSING), every other line kept:
    its line and any continuation lines (a block list, an indented mapping) replaced."""
    if value is _MISSING:
        new: list[str] = []
    else:
        plain = format_time(value) if isinstance(value, datetime) else value
        dumped = yaml.safe_dump({key: plain}, default_flow_style=True, allow_unicode=True, width=10_000)
        new = [dumped.strip().removeprefix("{").removesuffix("}").strip()]
    lines = fm.split("\n")
    for i, line in enumerate(lines):
        match = _KEY.match(line)
        if match is None or match.group(2) != key:
            continue
        j = i + 1
        while j < len(lines) and (
            lines[j][:1] in (" ", "\t") or lines[j].startswith("- ") or lines[j].rstrip() == "-"
        ):
            j += 1
        return "\n".join([*lines[:i], *new, *lines[j:]])
    tail = len(lines)
    while tail and not lines[tail - 1].strip():
        tail -= 1
    return "\n".join([*lines[:tail], *new, *lines[tail:]])


def _sibling(side: _Side, path: str, memory_id: str) -> tuple[str, bytes]:
    """The other version kept whole beside the memory, its frontmatter naming the conflict."""
    line = f"{CONFLICT_KEY}: {json.dumps(memory_id, ensure_ascii=False)}\n"
    if side.fences is not None:
        end = side.fences[1]
        text = side.text[:end] + line + side.text[end:]
    else:
        text = f"---\n{line}---\n{side.text}"
    data = _encode(seal_markers(text), side.crlf)
    digest = hashlib.blake2b(side.raw, digest_size=4).hexdigest()
    where = PurePosixPath(path)
    return str(where.with_name(f"{where.stem}.conflict-{digest}.md")), data


def conflict_copy_of(memory_id: str) -> str | None:
    """The memory a conflict copy was kept beside, by the name a merge gives the copy
    (``<name>.conflict-<hash>.md`` beside ``<name>.md``); None for any other name."""
    match = _COPY.search(memory_id)
    return memory_id[: match.start()] + ".md" if match and match.start() else None


def _encode(text: str, crlf: bool) -> bytes:
    return (text.replace("\n", "\r\n") if crlf else text).encode("utf-8", "surrogateescape")
