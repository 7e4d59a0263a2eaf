"""text: the terms of a text, against a plain reading of it."""

from __future__ import annotations

import itertools
import re
import unicodedata

from hypothesis import given
from hypothesis import strategies as st

from memvault.search.text import MAX_TERM_CHARS, is_cjk_char, terms_of
from tests.strategies import PROPS


def plain_terms(text: str) -> list[str]:
    """What terms_of says a text's terms are, read word by word: folded (NFKC, casefold, umlauts as
    ae, oe, ue), runs of letters and digits, CJK runs as bigrams, other words cut and stemmed (as
    terms_of stems one lowercase word)."""
    folded = (
        unicodedata.normalize("NFKC", text)
        .casefold()
        .translate(str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue"}))
    )
    out: list[str] = []
    for run in re.findall(r"[^\W_]+", folded):
        for cjk, chars in itertools.groupby(run, is_cjk_char):
            part = "".join(chars)
            if cjk:
                out += [part] if len(part) == 1 else [part[i : i + 2] for i in range(len(part) - 1)]
            else:
                (term,) = terms_of(part[:MAX_TERM_CHARS])
                out.append(term)
    return out


PIECES = [
    "deploys",
    "Stopped",
    "FLIES",
    "x" * 70 + "ing",
    "2023",
    "_",
    "-",
    " ",
    "\n",
    "\u2019",  # right single quotation mark
    "\u2014",  # em dash
    "\U0001f642",
    "\ufb01les",  # the "fi" ligature: "files" once folded
    "\uff21\uff22",  # fullwidth AB
    "Müller",
    "Straße",
    "İzmir",
    "café",
    "東京",
    "々",
    "α",
]
texts = st.lists(
    st.one_of(st.sampled_from(PIECES), st.text(alphabet="abcXYZ019 .,'", max_size=6)), max_size=30
).map("".join)


@PROPS
@given(texts)
def test_terms_are_the_folded_words_stemmed(text: str):
    assert terms_of(text) == plain_terms(text)


def test_curly_quotes_and_dashes_leave_ascii_words_as_they_are():
    assert terms_of("the user\u2019s deploys \u2014 stopped") == ["the", "user", "s", "deploy", "stop"]
    assert terms_of("\ufb01les Müller") == ["file", "mueller"]
