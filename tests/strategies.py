"""Hypothesis strategies for memory files, shared by the tests of the file format and its codecs."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import settings
from hypothesis import strategies as st

PROPS = settings(max_examples=150, deadline=None)

# A memory file as mem-mcp writes it.
MEM_MCP = (
    "---\n"
    "priority: P1\n"
    "createdAt: 2026-01-15T12:00:00.000Z\n"
    "updatedAt: 2026-02-01T08:00:00.000Z\n"
    "lastAccessedAt: 2026-02-10T10:30:00.000Z\n"
    "tags: [deploy, postgres]\n"
    "importance: 0.8\n"
    "---\n"
    "# Memory Title\n"
    "\n"
    "Memory content here.\n"
    "\n"
    "---\n"
    "*Created: 2026-01-15T12:00:00.000Z*\n"
)


fm_ish = st.lists(
    st.one_of(
        st.sampled_from(
            ["---", "--- ", "priority: P1", "tags:", "  - a", "- b", "createdAt: 2026-02-30", "# T", ""]
        ),
        st.text(max_size=30),
    ),
    max_size=12,
).map("\n".join)

line_text = st.text(
    st.characters(blacklist_categories=("Cc", "Cs", "Zl", "Zp")),  # one line, no control characters
    min_size=1,
    max_size=60,
)
titles = line_text.map(str.strip).filter(bool)
contents = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\r"), max_size=300)
tags_st = st.lists(line_text.map(str.strip).filter(bool), max_size=5, unique=True)
times = st.datetimes(
    min_value=datetime(1971, 1, 1), max_value=datetime(2200, 1, 1), timezones=st.just(UTC)
).map(lambda d: d.replace(microsecond=d.microsecond // 1000 * 1000))
