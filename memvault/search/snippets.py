"""Snippets: a short excerpt of a memory around the query's words, for recall's lines."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator

from memvault.search.text import terms_of

SNIPPET_CHARS = 160
# The characters that a case-blind pattern matches with an ASCII letter although their lowercase
# is not that letter (U+0131, U+017F), or whose lowercase is two characters (U+0130).
_CASE_APART = ("\u0130", "\u0131", "\u017f")


@functools.lru_cache(maxsize=256)
def _words_from(heads: frozenset[str]) -> re.Pattern[str]:
    """Whole words (runs of letters and digits) that begin with one of ``heads``, in any case."""
    alternatives = "|".join(re.escape(head) for head in sorted(heads, key=len, reverse=True))
    return re.compile(rf"(?<![^\W_])(?:{alternatives})[^\W_]*", re.IGNORECASE)


_WORD_REST = re.compile(r"[^\W_]*")


def _lower_words(lower: str, heads: frozenset[str]) -> Iterator[tuple[int, int]]:
    """Where each word of ``lower`` (a lowercased text) that begins with one of ``heads`` (each a
    run of letters and digits) starts and ends, in order. ``str.find`` looks for each head, so no
    pattern is built for a query (compiling one took about a tenth of a recall)."""
    starts: set[int] = set()
    for head in heads:
        at = lower.find(head)
        while at >= 0:
            if at == 0 or not lower[at - 1].isalnum():
                starts.add(at)
            at = lower.find(head, at + 1)
    for at in sorted(starts):
        yield at, _WORD_REST.match(lower, at).end()


def _words(flat: str, heads: frozenset[str]) -> Iterator[tuple[int, str]]:
    """Where each word of ``flat`` that begins with one of ``heads`` (in any case) starts, and the
    word lowercased."""
    if all(head.isascii() and head.isalnum() for head in heads) and (
        flat.isascii() or not any(c in flat for c in _CASE_APART)
    ):
        # The lowercased text is as long as ``flat`` (only U+0130 lowercases to two characters),
        # an ASCII head matches there wherever a case-blind one matches in ``flat``, and a
        # character is a letter or digit exactly when its lowercase is (the pattern's ``[^\W_]``
        # is exactly ``str.isalnum``).
        lower = flat.lower()
        for start, end in _lower_words(lower, heads):
            yield start, lower[start:end]
        return
    for match in _words_from(heads).finditer(flat):
        yield match.start(), match.group().lower()


def snippet(text: str, terms: set[str], width: int = SNIPPET_CHARS) -> str:
    """A short, one-line excerpt of ``text`` around the densest run of query terms."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    start = 0
    if terms:
        # Only words sharing their first three letters with a query term are stemmed and compared;
        # _words finds just those words (a superset: the test below decides).
        heads = frozenset(t[:3] for t in terms)
        hits: list[tuple[int, str]] = []
        stems: dict[str, list[str]] = {}  # a long text says the same words again and again
        for at, word in _words(flat, heads):
            if word in terms:
                hits.append((at, word))
            elif word[:3] in heads:
                found = stems.get(word)
                if found is None:
                    found = stems[word] = [t for t in terms_of(word) if t in terms]
                hits += [(at, t) for t in found]
        # The window of ``width`` characters from each hit on; the first holding the most terms.
        best = 0
        end = 0
        for i, (at, _) in enumerate(hits):
            end = max(end, i)
            while end < len(hits) and hits[end][0] < at + width:
                end += 1
            distinct = len({t for _, t in hits[i:end]})
            if distinct > best:
                best, start = distinct, at
        # Begin a little before the first match, at a word boundary.
        back = max(0, start - width // 5)
        space = flat.rfind(" ", 0, back + 1)
        start = 0 if back == 0 else (space + 1 if space >= 0 else back)
    piece = flat[start : start + width]
    if start + width < len(flat):
        cut = piece.rfind(" ")
        piece = (piece[:cut] if cut > width // 2 else piece) + "…"
    return ("…" if start > 0 else "") + piece
