"""Snippets: a short excerpt of a memory around the query's words, for recall's lines."""

from __future__ import annotations

import functools
import re

from memvault.search.text import terms_of

SNIPPET_CHARS = 160


@functools.lru_cache(maxsize=256)
def _words_from(heads: frozenset[str]) -> re.Pattern[str]:
    """Whole words (runs of letters and digits) that begin with one of ``heads``, in any case."""
    alternatives = "|".join(re.escape(head) for head in sorted(heads, key=len, reverse=True))
    return re.compile(rf"(?<![^\W_])(?:{alternatives})[^\W_]*", re.IGNORECASE)


def snippet(text: str, terms: set[str], width: int = SNIPPET_CHARS) -> str:
    """A short, one-line excerpt of ``text`` around the densest run of query terms."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    start = 0
    if terms:
        # Only words sharing their first three letters with a query term are stemmed and compared;
        # the regular expression finds just those words (a superset: the test below decides).
        heads = frozenset(t[:3] for t in terms)
        hits: list[tuple[int, str]] = []
        for match in _words_from(heads).finditer(flat):
            word = match.group().lower()
            if word in terms:
                hits.append((match.start(), word))
            elif word[:3] in heads:
                hits += [(match.start(), t) for t in terms_of(word) if t in terms]
        best = 0
        for i, (at, _) in enumerate(hits):
            found = {t for pos, t in hits[i:] if pos < at + width}
            if len(found) > best:
                best, start = len(found), at
        # Begin a little before the first match, at a word boundary.
        back = max(0, start - width // 5)
        space = flat.rfind(" ", 0, back + 1)
        start = 0 if back == 0 else (space + 1 if space >= 0 else back)
    piece = flat[start : start + width]
    if start + width < len(flat):
        cut = piece.rfind(" ")
        piece = (piece[:cut] if cut > width // 2 else piece) + "…"
    return ("…" if start > 0 else "") + piece
