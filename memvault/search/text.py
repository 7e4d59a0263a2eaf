"""Text basics shared by search and recall: terms, a light stemmer, CJK bigrams, stop words."""

from __future__ import annotations

import re
import unicodedata

# Scripts written without spaces between words; they are indexed as overlapping character bigrams.
# U+30FB (katakana middle dot) is punctuation and stays out.
_CJK = (
    "\u1100-\u11ff\u3005-\u3007\u3040-\u30fa\u30fc-\u30ff\u3130-\u318f\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\U00020000-\U0002fa1f"
)
# Longer words are indexed (and searched) by their first MAX_TERM_CHARS characters: a 99,000-letter
# "word" cost the index, the fuzzy matcher and the hash embedder memory and time by its length.
MAX_TERM_CHARS = 64
_TERM_RE = re.compile(rf"([{_CJK}]+)|([^\W_{_CJK}]+)")
_ASCII_WORD_RE = re.compile(rf"([a-z0-9]{{1,{MAX_TERM_CHARS}}})[a-z0-9]*")
_WORD_RE = re.compile(r"[^\W_]+")
_CJK_CHAR_RE = re.compile(rf"[{_CJK}]")
# A character outside ASCII that is CJK or a letter or digit: the engine scans for the first test
# alone (a pattern opening with an alternation or a lookahead tried every character: slow).
_NON_ASCII_TERM_CHAR = re.compile(rf"[^\x00-\x7f](?<=[{_CJK}]|[^\W_])")

# German umlauts are also written ae, oe, ue (Mueller, Koeln): both spellings make the same term.
# (ß casefolds to ss already.)
_UMLAUTS = str.maketrans({"ä": "ae", "ö": "oe", "ü": "ue"})

_VOWELS = frozenset("aeiouy")
_STEM_CACHE: dict[str, str] = {}
_STEM_CACHE_MAX = 200_000


def _stem_uncached(word: str) -> str:
    # A deliberately tiny suffix stripper, applied alike to documents and queries, so that
    # "deploys"/"deployed"/"deploying" meet "deploy"; prefix and typo matching cover the rest.
    if len(word) <= 4 or not word.isalpha():
        return word
    if word.endswith("ies"):
        return word[:-3] + "y"
    if word.endswith("sses"):
        return word[:-2]
    if word.endswith(("xes", "ches", "shes", "zzes")):
        return word[:-2]
    if word.endswith("s"):
        return word if word.endswith(("ss", "us", "is")) else word[:-1]
    for suffix in ("ing", "ed"):
        if word.endswith(suffix):
            stem = word[: -len(suffix)]
            if len(stem) < 4 or not _VOWELS.intersection(stem):
                return word
            if stem[-1] == stem[-2] and stem[-1] not in "lsz":  # "stopped" -> "stop"
                stem = stem[:-1]
            return stem
    return word


def _stem(word: str) -> str:
    stem = _STEM_CACHE.get(word)
    if stem is None:
        if len(_STEM_CACHE) >= _STEM_CACHE_MAX:
            _STEM_CACHE.clear()
        stem = _STEM_CACHE[word] = _stem_uncached(word)
    return stem


def _bigrams(run: str) -> list[str]:
    if len(run) == 1:
        return [run]
    return [run[i : i + 2] for i in range(len(run) - 1)]


def _fold(text: str) -> str:
    """NFKC, casefold, and ä, ö, ü as ae, oe, ue."""
    text = unicodedata.normalize("NFKC", text).casefold()
    # translate() with a table costs a dictionary lookup per character: only where it changes some.
    return text.translate(_UMLAUTS) if "ä" in text or "ö" in text or "ü" in text else text


def _ascii_terms(text: str) -> list[str]:
    """The terms of a lowercase text whose words are all ASCII."""
    # Only words of 5+ letters ending in s/d/g can change (_stem_uncached): skip the cache for the rest.
    cached = _STEM_CACHE.get
    return [
        w if len(w) < 5 or w[-1] not in "sdg" else cached(w) or _stem(w) for w in _ASCII_WORD_RE.findall(text)
    ]


def terms_of(text: str) -> list[str]:
    """The index terms of ``text`` in reading order, duplicates kept.

    NFKC + casefold (and ä, ö, ü as ae, oe, ue); words are runs of letters/digits (underscore
    splits), at most MAX_TERM_CHARS long, lightly stemmed;
    CJK runs become overlapping character bigrams (a lone character stays as it is).
    """
    if text.isascii():
        return _ascii_terms(text.lower())
    text = _fold(text)
    if not _NON_ASCII_TERM_CHAR.search(text):
        # Only ASCII words once folded (curly quotes, dashes and emoji stand between them): the
        # terms the loop below would find, found as in an ASCII text, several times faster.
        return _ascii_terms(text)
    cached = _STEM_CACHE.get
    out: list[str] = []
    for cjk, word in _TERM_RE.findall(text):
        if cjk:
            out.extend(_bigrams(cjk))
        else:
            word = word[:MAX_TERM_CHARS]
            out.append(word if len(word) < 5 or word[-1] not in "sdg" else cached(word) or _stem(word))
    return out


def ascii_words(text: str) -> str | None:
    """``text`` folded as :func:`terms_of` folds it, if all the terms it would find there are
    ASCII words (curly quotes, dashes and ligatures leave them so); None if some are not."""
    if text.isascii():
        return text
    folded = unicodedata.normalize("NFKC", text).casefold()
    return None if _NON_ASCII_TERM_CHAR.search(folded) else folded


def ascii_term(word: str) -> str:
    """The term :func:`terms_of` makes of a lowercase ASCII word (which it does inline)."""
    word = word[:MAX_TERM_CHARS]
    return word if len(word) < 5 or word[-1] not in "sdg" else _stem(word)


def name_text(id: str) -> str:
    """The searchable text of a memory's file name: its id without ``.md``."""
    return id[:-3] if id.lower().endswith(".md") else id


def normalize_title(text: str) -> str:
    """Words of ``text`` (unstemmed) joined by single spaces, for whole-title similarity."""
    return " ".join(_WORD_RE.findall(_fold(text)))


def is_cjk_char(ch: str) -> bool:
    return _CJK_CHAR_RE.match(ch) is not None


# Left out of a query's BM25 terms, of the hash embedder's features and of MaxSim's tokens.
_FUNCTION_WORDS = (
    "a an and are as at be been but by can could do does did for from had has have he her his how i "
    "if in into is it its me my of on or our she so than that the their them then there these they "
    "this those to us was we were what when where which who whom why will with would you your"
)
# As index terms (terms_of stems them), so they compare with terms_of's output directly. Every one
# is its own term (short, or not ending as a stemmed suffix does), so a lowercase word compares too.
STOP_WORDS = frozenset(terms_of(_FUNCTION_WORDS))
