"""Hypothesis strategies for memory files, shared by the tests of the file format and its codecs."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import strategies as st

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
