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


@functools.lru_cache(maxsize=256)
def _lower_words_from(heads: frozenset[str]) -> re.Pattern[str]:
    """The words of :func:`_words_from` in a lowercased text. The head comes first and the check
    that it begins a word after it, so the engine looks only where a head's first letter stands
    (a pattern opening with that check tried it at every character: most of a long memory's
    snippet time)."""
    by_length: dict[int, list[str]] = {}
    for head in heads:
        by_length.setdefault(len(head), []).append(head)
    branches = [
        "(?:{})(?<![^\\W_]{})".format("|".join(re.escape(h) for h in sorted(same)), "." * length)
        for length, same in sorted(by_length.items(), reverse=True)
    ]
    return re.compile(rf"(?:{'|'.join(branches)})[^\W_]*", re.DOTALL)


def _words(flat: str, heads: frozenset[str]) -> Iterator[tuple[int, str]]:
    """Where each word of ``flat`` that begins with one of ``heads`` (in any case) starts, and the word."""
    if all(head.isascii() for head in heads) and (flat.isascii() or not any(c in flat for c in _CASE_APART)):
        # The lowercased text is as long as ``flat`` (only U+0130 lowercases to two characters),
        # an ASCII head matches there wherever a case-blind one matches in ``flat``, and a
        # character is a letter or digit exactly when its lowercase is.
        for match in _lower_words_from(heads).finditer(flat.lower()):
            yield match.start(), flat[match.start() : match.end()]
        return
    for match in _words_from(heads).finditer(flat):
        yield match.start(), match.group()


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
        for at, found in _words(flat, heads):
            word = found.lower()
            if word in terms:
                hits.append((at, word))
            elif word[:3] in heads:
                hits += [(at, t) for t in terms_of(word) if t in terms]
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
