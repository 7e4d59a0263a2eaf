"""Snippets: the excerpt around a query's words, against a plain reading of the text."""

from __future__ import annotations

import re

from hypothesis import given
from hypothesis import strategies as st

from memvault.search.snippets import SNIPPET_CHARS, snippet
from memvault.search.text import terms_of
from tests.strategies import PROPS


def plain_snippet(text: str, terms: set[str], width: int = SNIPPET_CHARS) -> str:
    """What a snippet is, read the slow way: every word of the text, case-blind, compared with the
    terms; the first window of ``width`` characters holding the most distinct terms."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    start = 0
    if terms:
        hits: list[tuple[int, str]] = []
        heads = sorted({t[:3] for t in terms}, key=len, reverse=True)
        pattern = re.compile(rf"(?<![^\W_])(?:{'|'.join(map(re.escape, heads))})[^\W_]*", re.IGNORECASE)
        for match in pattern.finditer(flat):
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
        back = max(0, start - width // 5)
        space = flat.rfind(" ", 0, back + 1)
        start = 0 if back == 0 else (space + 1 if space >= 0 else back)
    piece = flat[start : start + width]
    if start + width < len(flat):
        cut = piece.rfind(" ")
        piece = (piece[:cut] if cut > width // 2 else piece) + "…"
    return ("…" if start > 0 else "") + piece


# Words that make case-blind matching hard: capitals, the dotted and dotless i, the long s, the
# Kelvin sign, underscores, digits, accents, CJK, and words that only begin like a query word.
WORDS = [
    "deploy",
    "Deploys",
    "DEPLOYED",
    "redeploy",
    "deploy_script",
    "_deploy",
    "İstanbul",
    "istanbul",
    "ıstanbul",
    "ſtar",
    "star",
    "Stars",
    "\u212aelvin",
    "kelvin",
    "café",
    "CAFÉ",
    "Straße",
    "東京の",
    "2023",
    "v2023x",
    "🙂",
    "--force",
    "forces",
    "a",
    "the",
]
texts = st.lists(st.one_of(st.sampled_from(WORDS), st.text(max_size=8)), max_size=80).map(
    lambda words: " ".join(words)
)
queries = st.lists(st.one_of(st.sampled_from(WORDS), st.text(min_size=1, max_size=6)), max_size=6).map(
    lambda words: set(terms_of(" ".join(words)))
)


@PROPS
@given(texts, queries, st.sampled_from([10, 20, 40, SNIPPET_CHARS]))
def test_snippet_is_the_densest_window_of_the_words(text: str, terms: set[str], width: int):
    assert snippet(text, terms, width) == plain_snippet(text, terms, width)


def test_snippet_window_holds_the_words_that_begin_inside_it():
    # "deploy" begins 19 characters after "force": inside a window of 20, outside one of 19.
    text = "x " * 50 + "force 123456789012 deploy" + " force" * 3 + " y" * 50
    for width in (19, 20):
        assert snippet(text, {"deploy", "force"}, width) == plain_snippet(text, {"deploy", "force"}, width)


def test_snippet_places_stay_right_past_a_letter_whose_lowercase_is_longer():
    # "İ" lowercases to two characters: a snippet read off a lowercased copy would start late.
    text = "İ " * 200 + "the deploy script needs the force flag" + " filler" * 100
    cut = snippet(text, {"deploy", "force"})
    assert cut == plain_snippet(text, {"deploy", "force"})
    assert "deploy script" in cut and "force flag" in cut


def test_snippet_finds_words_in_any_case_beside_underscores():
    text = "x " * 100 + "DEPLOYED to_deploy _Deploy redeploy Deploys" + " y" * 100
    assert snippet(text, {"deploy"}, 40) == plain_snippet(text, {"deploy"}, 40)
    assert "DEPLOYED" in snippet(text, {"deploy"}, 40)


def test_snippet_passes_over_a_word_that_only_ends_like_a_query_word():
    # "redeploy" holds "deploy" but does not begin with it: the snippet is centred on the word itself.
    text = "x " * 60 + "redeploy" + " y" * 60 + " deploy" + " z" * 60
    cut = snippet(text, {"deploy"}, 20)
    assert cut == plain_snippet(text, {"deploy"}, 20)
    assert "redeploy" not in cut and "deploy" in cut
