"""Bulk indexing for cold loads: the same index as upserting each memory, term for term."""

from __future__ import annotations

from unittest import mock

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memvault.search import bulkindex
from memvault.search.bulkindex import arrays_of, terms_of_many
from memvault.search.columns import unpack_strings
from memvault.search.index import Index
from memvault.search.text import terms_of


def _results(ix: Index, queries: list[str]) -> list[list[tuple[str, float, bool]]]:
    return [[(h.id, round(h.score, 6), h.matched_all) for h in ix.search(q)[0]] for q in queries]


# Words that stem, fold, normalise or split, NULs, and whatever hypothesis makes of the rest.
PIECES = st.sampled_from(
    ["deploys", "Deployed", "running", "stopped", "cities", "bus", "café", "東京会議", "ﬁle", "\x00",
     "a_b", "X1", "e\u0301", "ΣΑΣ", "straße", "ﾃｽﾄ", " ", ", ", "\n", "don’t", "—", "…", "²", "🙂",
     "\u00a0", "Ⅻ", "①"]
)  # fmt: skip
TEXTS = st.lists(st.one_of(PIECES, st.text(max_size=6)), max_size=12).map("".join)


@pytest.mark.slow
@settings(deadline=None, max_examples=200)
@given(st.lists(TEXTS, max_size=8))
@example(["don’t — stop…", "\ufada", "ﬁle straße Ⅻ²", "ｄｅｐｌｏｙｓ"])  # folded to ASCII words, or not
def test_tokenize_many_gives_each_texts_tokenize_in_order(texts: list[str]) -> None:
    owner, code, terms = terms_of_many(texts)
    assert len(set(terms)) == len(terms)
    for i, text in enumerate(texts):
        assert [terms[c] for c in code[owner == i].tolist()] == terms_of(text)


def _by_document(arrays: dict[str, np.ndarray]) -> dict[str, tuple[list[tuple[str, int]], float, str]]:
    """Each document's (term, low byte) entries, length and normalised title, by id."""
    ids = unpack_strings(arrays["ids.blob"], arrays["ids.len"])
    titles = unpack_strings(arrays["titles.blob"], arrays["titles.len"])
    terms = unpack_strings(arrays["terms.blob"], arrays["terms.len"])
    at = np.concatenate([[0], np.cumsum(arrays["doc_term_counts"])]).tolist()
    entries = arrays["doc_terms"].tolist()
    return {
        id: (sorted((terms[e >> 8], e & 0xFF) for e in entries[at[i] : at[i + 1]]), float(length), titles[i])
        for i, (id, length) in enumerate(zip(ids, arrays["dl"].tolist(), strict=True))
    }


DOCS = st.dictionaries(
    st.one_of(TEXTS.map(lambda t: f"{t}.md"), st.sampled_from(["Notes/Deploys.MD", "a/b_c.md", "x"])),
    st.tuples(TEXTS, TEXTS, st.lists(TEXTS, max_size=3)),
    max_size=8,
)


@pytest.mark.slow
@settings(deadline=None, max_examples=200)
@given(DOCS)
def test_bulk_arrays_hold_what_upserting_each_document_gives(
    docs: dict[str, tuple[str, str, list[str]]],
) -> None:
    built = Index()
    for id, (title, body, tags) in docs.items():
        built.upsert(id, title=title, body=body, tags=tags)
    listed = [(id, title, body, tags) for id, (title, body, tags) in docs.items()]
    bulk = arrays_of(listed)
    assert unpack_strings(bulk["ids.blob"], bulk["ids.len"]) == list(docs)  # in the order given
    assert _by_document(bulk) == _by_document(built.snapshot().arrays())
    with mock.patch.object(bulkindex, "DOCS_AT_ONCE", 2):  # batches share one vocabulary
        assert _by_document(arrays_of(listed)) == _by_document(bulk)
    restored = Index.from_snapshot(bulk)
    queries = [word for title, body, _ in docs.values() for word in (title + " " + body).split()[:3]]
    assert _results(restored, queries) == _results(built, queries)


def test_bulk_arrays_cap_term_counts_and_refuse_a_repeated_id() -> None:
    body = "echo " * 40 + "once"
    bulk = _by_document(arrays_of([("n.md", "Echo", body, ["echo", "tag"])]))
    entries, length, title = bulk["n.md"]
    assert dict(entries) == {"echo": 31 << 3 | 1 | 4, "once": 1 << 3, "n": 2, "tag": 4}
    assert (length, title) == (41.0, "echo")
    empty = arrays_of([])
    assert len(empty["dl"]) == len(empty["doc_terms"]) == len(empty["terms.len"]) == 0
    with pytest.raises(ValueError, match="repeated"):
        arrays_of([("a.md", "", "x", ()), ("a.md", "", "y", ())])


def test_titles_are_normalised_as_one_at_a_time():
    from memvault.search.text import normalize_title

    titles = [
        "Deploy_Plan\x00v2\tFINAL-1.5",
        "  ",
        "",
        "Ünïcode Ｔｉｔｌｅ",
        "a__b",
        "x" * 80,
        "Ǆemal 東京",
        "\x7fDEL",
    ]
    arrays = arrays_of([(f"{i}.md", title, "", ()) for i, title in enumerate(titles)])
    assert unpack_strings(arrays["titles.blob"], arrays["titles.len"]) == [normalize_title(t) for t in titles]
