"""What recall reads in text: snippets around the query's words, and words that place things in time."""

from __future__ import annotations

import functools
import re

from memvault.search.text import terms_of

SNIPPET_CHARS = 160

_ASKS_WHEN = re.compile(
    r"^\W*(when|what (day|date|month|year|time)|how long ago|in which (month|year))\b", re.I
)
_DAYS = "monday|tuesday|wednesday|thursday|friday|saturday|sunday"
_SAYS_WHEN = re.compile(
    r"\b(yesterday|today|tonight|tomorrow|ago|recently|lately|"
    rf"(last|next|this|past) (week|weekend|month|year|night|summer|winter|spring|fall|autumn|{_DAYS})|"
    rf"{_DAYS}|weekend)\b",
    re.I,
)

_NOT_PLURAL = r"(?!(?:is|was|does|has|this|us|yes|always)\b)"
_ASKS_SEVERAL = re.compile(
    r"\b(how many|both|in common|(types|kinds|ways|sorts) of|in what ways)\b"
    r"|^\W*(what|who)\s+(are|were)\b|^\W*what\s+(does|do)\s+\w+\s+do\s+to\b"
    rf"|^\W*(what|which|where|who)\s+(?:[\w+-]+\s+){{0,2}}{_NOT_PLURAL}[a-z+-]+s\s+"
    r"(has|have|does|do|did|is|are|was|were)\b"
    r"|^\W*(what|which|where|who|how)\s+(has|have)\s+(?!\w+\s+been\b)",
    re.I,
)


def asks_when_question(query: str) -> bool:
    """A question about when something happened ("When did ...", "What year ...")."""
    return _ASKS_WHEN.search(query) is not None


def asks_for_several(query: str) -> bool:
    """A question whose answer gathers several things said at different times ("What books has she
    read?", "How many times ...", "What do they both like?")."""
    return _ASKS_SEVERAL.search(query) is not None


def says_when(text: str) -> bool:
    """Text that places something in time relative to when it was said ("last week", "yesterday")."""
    return _SAYS_WHEN.search(text) is not None


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
