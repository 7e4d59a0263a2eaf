"""list_memory_titles' one-pass rendering gives, character for character, the reply the one before
it gave (kept below as the reference: Reply.add a line at a time)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from hypothesis import example, given, settings
from hypothesis import strategies as st
from strategies import line_text, times

from memvault.disk.markdown import Memory
from memvault.git.mergememory import conflict_copy_of
from memvault.tools.common import Reply, show_time
from memvault.tools.memories import render_titles

CHECKS = settings(max_examples=400, deadline=None)


def reference(rows: Sequence[Memory], last_access: Callable[[Memory], datetime | None], budget: int) -> str:
    """render_titles as it was before the one-pass rendering (main at ec3c357)."""
    reply = Reply(budget)
    shown = 0
    for memory in rows:
        last = show_time(last_access(memory))
        line = f"{memory.id}|{memory.title.replace('|', '/')}|{memory.priority}|{last}"
        if memory.conflicted:
            line += "|CONFLICT: git conflict markers, read-only until a person resolves them"
        elif memory.problem:
            line += f"|NEEDS FIXING: {memory.problem}"
        elif ".conflict-" in memory.id and (copy_of := conflict_copy_of(memory.id)) is not None:
            line += (
                f"|CONFLICT COPY of {copy_of}, kept by a git merge: move what to keep "
                "into that memory with update_memory, then delete_memory this one"
            )
        if not reply.add(line):
            break
        shown += 1
    if shown < len(rows):

        def note(n: int) -> str:
            return f"[{n} more left out to keep this reply short; use read_memory(query=...) to search.]"

        while reply.parts and len(reply.text()) + 1 + len(note(len(rows) - shown)) > budget:
            reply.parts.pop()
            shown -= 1
        reply.parts.append(note(len(rows) - shown))
    return reply.text()


def left_out(n: int) -> str:
    return f"[{n} more left out to keep this reply short; use read_memory(query=...) to search.]"


ids = st.one_of(
    st.from_regex(r"[a-z0-9][a-z0-9-]{0,30}\.md", fullmatch=True),
    st.from_regex(r"[a-z]{1,8}\.conflict-[0-9a-f]{8}\.md", fullmatch=True),  # a git merge's copy
    st.from_regex(r"[a-z]{1,8}\.conflict-[a-z]{1,8}\.md", fullmatch=True),  # named like one, not one
    st.from_regex(r"[a-z]{1,8}/[a-z]{1,8}\.md", fullmatch=True),
)
memories = st.builds(
    Memory,
    id=ids,
    title=st.one_of(line_text, st.just("a | b"), st.text("|x", max_size=5), st.just("x" * 400)),
    content=st.just(""),
    priority=st.sampled_from(["P0", "P1", "P2"]),
    updated_at=st.none() | times,
    created_at=st.none() | times,
    last_accessed_at=st.none() | times,
    problem=st.none() | st.sampled_from(["the frontmatter is not YAML", "", "x" * 300]),
    conflicted=st.booleans(),
)


@CHECKS
@given(
    rows=st.lists(memories, max_size=40),
    recorded=st.lists(st.none() | times, max_size=40),
    budget=st.one_of(st.integers(0, 400), st.integers(400, 5000), st.just(20_000)),
    edge=st.none() | st.tuples(st.integers(0, 40), st.integers(-2, 2), st.booleans()),
)
@example(rows=[Memory(id="x.md", title="y" * 900, content="")] * 3, recorded=[], budget=500, edge=None)
@example(rows=[Memory(id="x.md", title="y" * 100, content="")] * 30, recorded=[], budget=150, edge=None)
def test_the_listing_is_the_one_the_reference_gives(
    rows: list[Memory],
    recorded: list[datetime | None],
    budget: int,
    edge: tuple[int, int, bool] | None,
) -> None:
    times_of = {id(m): recorded[i] if i < len(recorded) else m.last_accessed_at for i, m in enumerate(rows)}

    def last_access(memory: Memory) -> datetime | None:
        return times_of[id(memory)]

    if edge is not None:  # a budget on the edge of k lines (and of the note after them)
        k, slack, with_note = edge
        lines = reference(rows, last_access, 10**9).splitlines()[:k]
        budget = max(0, len("\n".join(lines)) + slack)
        if with_note and k < len(rows):
            budget += len(left_out(len(rows) - k)) + 1
    assert render_titles(rows, last_access, budget) == reference(rows, last_access, budget)
