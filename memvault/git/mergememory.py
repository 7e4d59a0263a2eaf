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
import re
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T", bound=Hashable)
CONFLICT_KEY = "conflictOf"
LATER = ("updatedAt", "lastAccessedAt")  # both changed: the later time
_MISSING = object()
_OPEN = re.compile(r"\A---[ \t]*\r?\n")
_CLOSE = re.compile(r"^---[ \t]*\r?$", re.MULTILINE)


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
