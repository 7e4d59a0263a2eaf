"""Edits that cannot clobber: a memory's version, and partial changes of its content (pure)."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from memvault.disk.markdown import Memory
from memvault.errors import InvalidArgument

__all__ = ["Edit", "apply_edit", "check_version", "version_of"]

_HEADING_LINE = re.compile(r"^(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE = re.compile(r"^[ \t]*(```|~~~)")


def version_of(memory: Memory) -> str:
    """A short fingerprint of what a person or an agent edits: title, content, priority, tags,
    importance. Access times are left out, so reading a memory (which may write its
    lastAccessedAt back) never changes its version; any edit, by hand or by a tool, does."""
    if not memory.hash:
        return _version(memory)
    seen = (memory.id, memory.hash)  # the same file, the same name: the same fields
    found = _VERSIONS.get(seen)
    if found is None:
        if len(_VERSIONS) >= VERSIONS_KEPT:
            _VERSIONS.clear()
        found = _VERSIONS[seen] = _version(memory)
    return found


# Every read shows each memory's version: worked out once per file content. Keyed by name and file
# hash, not by the text, so old versions of a long memory are not kept alive. Sized for many agents
# reading a thousand memories each (the cache is emptied when full), a few megabytes at most.
VERSIONS_KEPT = 1 << 15
_VERSIONS: dict[tuple[str, str], str] = {}


def _version(memory: Memory) -> str:
    what = [memory.title, memory.content, memory.priority, sorted(memory.tags), memory.importance]
    return hashlib.sha256(_to_json(what).encode("utf-8")).hexdigest()[:12]


# json.dumps(what, ensure_ascii=False), without a new encoder for every call.
_to_json = json.JSONEncoder(ensure_ascii=False).encode


def check_version(current: Memory, expected: str | None) -> None:
    """Refuse a change made on an older read of the memory (update_memory's expectedVersion)."""
    if expected is not None and expected.strip() != version_of(current):
        raise InvalidArgument(
            f"'{current.id}' changed since you read it (version {version_of(current)} now, not "
            f"{expected.strip()}); nothing was written. Read it again, then make your change on the "
            "new text."
        )


@dataclass(frozen=True, slots=True)
class Edit:
    """A change of a memory's content: whole (content), appended, one section, or one passage;
    ``expected`` is the version the change was made on (refused if the memory changed since)."""

    content: str | None = None
    append: str | None = None
    section: str | None = None
    old_text: str | None = None
    new_text: str | None = None
    expected: str | None = None

    def __post_init__(self) -> None:
        if self.section is not None and self.content is None:
            raise InvalidArgument("section needs content: the new text of that section.")
        if (self.old_text is None) != (self.new_text is None):
            raise InvalidArgument(
                "oldText and newText go together: the passage to replace and its replacement "
                "(newText may be empty to delete the passage)."
            )
        kinds = [
            name
            for name, given in (
                ("content", self.content is not None and self.section is None),
                ("append", self.append is not None),
                ("section", self.section is not None),
                ("oldText/newText", self.old_text is not None),
            )
            if given
        ]
        if len(kinds) > 1:
            raise InvalidArgument(
                f"Give one way to change the content, not {' and '.join(kinds)}: content (all of it), "
                "append, section with content, or oldText with newText. Call update_memory once per change."
            )

    @property
    def given(self) -> bool:
        return self.content is not None or self.append is not None or self.old_text is not None


def apply_edit(current: str, edit: Edit, id: str) -> str | None:
    """The new content, or None when the edit leaves the content alone."""
    if edit.section is not None:
        assert edit.content is not None
        return replace_section(current, edit.section, edit.content, id)
    if edit.content is not None:
        return edit.content
    if edit.append is not None:
        if not edit.append.strip():
            raise InvalidArgument("append is empty: give the text to add at the end of the memory.")
        return current.rstrip("\n") + "\n\n" + edit.append.strip("\n")
    if edit.old_text is not None:
        assert edit.new_text is not None
        return replace_passage(current, edit.old_text, edit.new_text, id)
    return None


def replace_passage(current: str, old: str, new: str, id: str) -> str:
    if not old:
        raise InvalidArgument("oldText is empty: give the exact passage to replace, as read_memory shows it.")
    count = current.count(old)
    if count == 0:
        raise InvalidArgument(
            f"'{id}' does not contain that oldText (it may have changed). Read it again and copy "
            "the passage exactly."
        )
    if count > 1:
        raise InvalidArgument(
            f"oldText appears {count} times in '{id}'; include more of the text around it so it "
            "names one place."
        )
    return current.replace(old, new, 1)


def headings(lines: list[str]) -> list[tuple[int, int, str]]:
    """(line number, level, text) of each markdown heading outside fenced code blocks."""
    found = []
    fence: str | None = None
    for number, line in enumerate(lines):
        opened = _FENCE.match(line)
        if opened:
            fence = None if fence == opened.group(1) else fence or opened.group(1)
            continue
        if fence is None:
            match = _HEADING_LINE.match(line)
            if match:
                found.append((number, len(match.group(1)), match.group(2).strip()))
    return found


def replace_section(current: str, section: str, content: str, id: str) -> str:
    """Replace the body of one section (from its heading to the next heading of the same or a
    higher level); the heading and everything outside the section stay byte for byte."""
    wanted = section.strip()
    level = len(wanted) - len(wanted.lstrip("#"))
    name = wanted.lstrip("#").strip().casefold()
    if not name:
        raise InvalidArgument("section is empty: give a heading of the memory, e.g. '## Setup'.")
    lines = current.split("\n")
    found = headings(lines)
    matches = [(n, lv) for n, lv, text in found if text.casefold() == name and (not level or lv == level)]
    if len(matches) != 1:
        listed = ", ".join("#" * lv + " " + text for _, lv, text in found[:20]) or "none"
        problem = "has no section" if not matches else f"has {len(matches)} sections"
        raise InvalidArgument(
            f"'{id}' {problem} called {wanted!r}. Its headings: {listed}. Give one of them exactly, "
            "with its #s to tell same-named sections apart."
        )
    start, own = matches[0]
    end = next((n for n, lv, _ in found if n > start and lv <= own), len(lines))
    body = content.strip("\n")
    tail = lines[end:]
    old_body = lines[start + 1 : end]
    # The section keeps its own layout: a blank line after its heading, and before the next
    # heading, only where it had one (a person's "## A\ntext" stays without one).
    block = ([""] if old_body[:1] == [""] else []) + body.split("\n") if body else []
    if old_body and old_body[-1] == "" and (block or len(old_body) > 1):
        block.append("")
    return "\n".join([*lines[: start + 1], *block, *tail])
