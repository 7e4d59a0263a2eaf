"""The index's snapshot arrays for many memories at once, for cold loads (memvault.load.loader).

``arrays_of`` gives what upserting each memory into an empty :class:`~memvault.search.index.Index`
and taking ``snapshot().arrays()`` would, with the per-word work in C and numpy: the ASCII
texts of a few thousand memories are joined by NULs, lowercased and split by one regex; each
distinct word is stemmed once; (document, term, field) keys are sorted and their runs counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from memvault.search.columns import pack_strings
from memvault.search.indexarrays import DOC_LIMIT, F_NAME, F_TAG, F_TITLE, TERM_LIMIT, TF_MAX
from memvault.search.text import ascii_term, ascii_words, name_text, normalize_title, terms_of

__all__ = ["arrays_of", "terms_of_many"]

DOCS_AT_ONCE = 4096  # arrays_of's batch

# Bytes as ``str.lower`` and then ``[a-z0-9]+|\x00`` see them: ASCII letters and digits lowercased,
# NUL kept, everything else (and "?", which every other character encodes to) a space. Casefolded
# text lowercases to no new ASCII character (checked over every code point), so the words of the
# bytes are those of the text.
_FOLD_ASCII = bytes(
    c + 32 if 65 <= c <= 90 else c if c == 0 or 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256)
)
_TITLE_ASCII = _FOLD_ASCII.replace(b"\x00", b" ")  # a title's words, as normalize_title finds them


def arrays_of(docs: Sequence[tuple[str, str, str, Sequence[str]]]) -> dict[str, npt.NDArray[Any]]:
    """What ``snapshot().arrays()`` gives after upserting ``docs`` (id, title, body, tags) into an
    empty index, in bulk: a cold load's helpers index 50,000 memories each, and numpy counts
    the terms instead of a dict per document. The documents keep their order; term ids and the
    order of a document's entries may differ from upsert's, and nothing depends on them."""
    n = len(docs)
    if len({id for id, _, _, _ in docs}) != n:
        raise ValueError("a document id is repeated")
    if n > DOC_LIMIT:
        raise OverflowError(f"the index holds at most {DOC_LIMIT} memories")
    coder = _Coder()
    # A few thousand documents at a time, their terms coded in one vocabulary: the words of
    # 50,000 memories at once, as str objects and numpy temporaries, doubled a helper's memory.
    batches = [_batch(docs[start : start + DOCS_AT_ONCE], coder) for start in range(0, n, DOCS_AT_ONCE)]
    terms = list(coder.code_of)
    if len(terms) >= TERM_LIMIT:
        raise OverflowError(f"the index holds at most {TERM_LIMIT} distinct terms")
    out: dict[str, npt.NDArray[Any]] = {
        name: np.concatenate([b[k] for b in batches]).astype(dtype) if batches else np.zeros(0, dtype)
        for k, (name, dtype) in enumerate(
            (("dl", np.float32), ("doc_term_counts", np.int64), ("doc_terms", np.uint32))
        )
    }
    for name, values in (
        ("ids", [id for id, _, _, _ in docs]),
        ("titles", [_normal_title(title) for _, title, _, _ in docs]),
        ("terms", terms),
    ):
        out[f"{name}.blob"], out[f"{name}.len"] = pack_strings(values)
    return out


def _normal_title(title: str) -> str:
    """``normalize_title``, a quarter of its time for an ASCII title (NFKC leaves it alone, and
    casefold is lower)."""
    if not title.isascii():
        return normalize_title(title)
    return b" ".join(title.encode("ascii").translate(_TITLE_ASCII).split()).decode("ascii")


def _batch(
    docs: Sequence[tuple[str, str, str, Sequence[str]]], coder: _Coder
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Body lengths, term counts and term entries (code << 8 | low byte) of these documents."""
    n = len(docs)
    fields = [  # body, title, name, tags: field 0-3, as in the keys below
        [body for _, _, body, _ in docs],
        [title for _, title, _, _ in docs],
        [name_text(id) for id, _, _, _ in docs],
        [tag for _, _, _, doc_tags in docs for tag in doc_tags],
    ]
    owner, code = coder.code([text for texts in fields for text in texts])
    per_doc = np.arange(n, dtype=np.int64)
    doc_of_text = np.concatenate([per_doc] * 3 + [np.repeat(per_doc, [len(d[3]) for d in docs])])
    field = np.repeat(np.arange(4, dtype=np.int64), [len(texts) for texts in fields])[owner]
    doc = doc_of_text[owner]
    # One sorted key per term occurrence: (document, term) pair, then its field in the low 2 bits.
    # A pair's run holds its body count and which other fields have the term.
    width = max(1, len(coder.code_of))
    keys = np.sort((doc * width + code) << 2 | field)
    pairs = keys >> 2
    starts = np.flatnonzero(np.diff(pairs, prepend=-1))
    fields_at = keys & 3
    if len(keys):
        tf = np.add.reduceat(fields_at == 0, starts, dtype=np.int64)
        flags = np.bitwise_or.reduceat(np.array([0, F_TITLE, F_NAME, F_TAG])[fields_at], starts)
    else:
        tf = flags = np.zeros(0, dtype=np.int64)
    pairs = pairs[starts]
    entries = (pairs % width) << 8 | np.minimum(tf, TF_MAX) << 3 | flags
    return np.bincount(doc[field == 0], minlength=n), np.bincount(pairs // width, minlength=n), entries


def terms_of_many(texts: Sequence[str]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], list[str]]:
    """``terms_of`` of every text at once, coded: ``(owner, code)`` per term, where
    ``terms[code]`` is the term and ``owner`` the number of its text. Each text's terms keep
    their reading order; the texts need not be in order."""
    coder = _Coder()
    owner, code = coder.code(texts)
    return owner, code, list(coder.code_of)


class _Coder:
    """Terms coded in the order first seen, for texts given in batches.

    A cold load indexes 100,000 short texts: those whose words are ASCII once folded (NFKC and
    casefold, as ``terms_of`` does) are joined with NULs between them, lowercased and split as
    one string of bytes, and each distinct word is stemmed once, so the per-word work is a dict
    lookup in C. The rest (letters outside ASCII, CJK, a NUL) go through ``terms_of``."""

    def __init__(self) -> None:
        self.code_of: dict[str, int] = {}  # term -> code; in insertion order, like the terms
        self._coded = _WordCodes(self.code_of)  # an ASCII word -> its term's code; NUL ends a text

    def code(self, texts: Sequence[str]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(owner, code)`` of each term of ``texts`` (see terms_of_many)."""
        code_of, coded = self.code_of, self._coded
        owners: list[npt.NDArray[np.int64]] = []
        codes: list[npt.NDArray[np.int64]] = []
        fast: list[int] = []  # texts whose words are ASCII: split at once, below
        plain: list[str] = []
        for i, text in enumerate(texts):
            folded = ascii_words(text)
            if folded is not None and "\x00" not in folded:
                fast.append(i)
                plain.append(folded)
        if fast:
            # Split as bytes: a translation table and ``bytes.split`` in C, four times the regex's pace.
            joined = " \x00 ".join(plain).encode("ascii", "replace") + b" \x00"
            del plain
            words = joined.translate(_FOLD_ASCII).split()
            del joined
            flat = np.fromiter(map(coded.__getitem__, words), dtype=np.int64, count=len(words))
            ends = np.flatnonzero(flat < 0)
            words_in = np.diff(ends, prepend=-1) - 1  # each text's, among `fast`
            owners.append(np.repeat(np.asarray(fast, dtype=np.int64), words_in))
            codes.append(flat[flat >= 0])
        for i in sorted(set(range(len(texts))).difference(fast)):
            found = [code_of.setdefault(term, len(code_of)) for term in terms_of(texts[i])]
            owners.append(np.full(len(found), i, dtype=np.int64))
            codes.append(np.asarray(found, dtype=np.int64))
        if not owners:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        return np.concatenate(owners), np.concatenate(codes)


class _WordCodes(dict[bytes, int]):
    """ASCII words and their terms' codes, a new word coded (stemmed once) when first looked up:
    one pass over a batch's words, each a dict lookup in C (a pass to find the new words first
    cost as much again)."""

    def __init__(self, code_of: dict[str, int]) -> None:
        super().__init__({b"\x00": -1})
        self._code_of = code_of

    def __missing__(self, word: bytes) -> int:
        code = self[word] = self._code_of.setdefault(ascii_term(word.decode("ascii")), len(self._code_of))
        return code
