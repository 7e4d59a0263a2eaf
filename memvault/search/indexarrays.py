"""An index's documents as flat arrays: its snapshot, the restored term lists, and their postings."""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias, cast

import numpy as np
import numpy.typing as npt

from memvault.search.columns import StringColumn, pack_strings

__all__ = [
    "DOC_LIMIT",
    "F_NAME",
    "F_TAG",
    "F_TITLE",
    "NO_TERMS",
    "RESTORED",
    "TERM_LIMIT",
    "TF_MAX",
    "DocTerms",
    "IndexSnapshot",
    "Restored",
    "add_postings",
    "entries_of",
    "postings_of",
    "uint32s",
]

# Low byte of a posting: tf (capped at 31) << 3 | field flags (here: bulkindex needs no index).
F_TITLE = 1
F_NAME = 2
F_TAG = 4
TF_MAX = 31
DOC_LIMIT = 1 << 24  # doc numbers share a uint32 with the low byte
TERM_LIMIT = 1 << 24  # term ids share a uint32 with a low byte in a document's term list


def uint32s(data: memoryview) -> array[int]:
    """An array('I') of the given bytes (array's constructor would take each byte as one item)."""
    out = array("I")
    out.frombytes(data)
    return out


class Restored:
    """A restored document's entry in an index's term lists: its terms are in the one buffer the
    snapshot gave (building 100,000 arrays was an eighth of a restart's decode)."""

    __slots__ = ()


RESTORED = Restored()
NO_TERMS = memoryview(b"").cast("I")
DocTerms: TypeAlias = "array[int] | Restored | None"


def entries_of(
    terms: DocTerms, restored: memoryview, at: array[int], docno: int
) -> array[int] | memoryview | None:
    """A document's term entries (``termid << 8 | low byte``), wherever they are kept: its own
    array, or ``restored[at[docno] : at[docno + 1]]``."""
    if terms is RESTORED:
        return restored[at[docno] : at[docno + 1]]
    return cast("array[int] | None", terms)


def postings_of(
    flat: npt.NDArray[np.uint32], counts: npt.NDArray[np.int64], nterms: int
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.int64]]:
    """Postings (``docno << 8 | low byte``) grouped by term id, documents in order within a term,
    and each term's count, from the documents' term entries (``counts[docno]`` of them each)."""
    flat = np.ascontiguousarray(flat, dtype=np.uint32)
    tids = flat >> 8
    docnos = np.repeat(np.arange(len(counts), dtype=np.uint32), counts)
    postings = (docnos << np.uint32(8)) | (flat & np.uint32(0xFF))
    # A stable sort of 16-bit keys is a radix sort, far faster than on 32-bit keys.
    order = np.argsort(tids.astype(np.uint16) if nterms <= 1 << 16 else tids, kind="stable")
    return postings[order], np.bincount(tids, minlength=nterms).astype(np.int64)


def add_postings(arrays: Mapping[str, npt.NDArray[Any]]) -> dict[str, npt.NDArray[Any]]:
    """An index's arrays with their postings (a loader's lack them): a restart from a snapshot
    that holds them need not sort them out of the term lists again."""
    out = dict(arrays)
    if "postings" not in out:
        counts = np.asarray(out["doc_term_counts"], dtype=np.int64)
        out["postings"], out["term_postings"] = postings_of(out["doc_terms"], counts, len(out["terms.len"]))
    return out


_FloatArray = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class IndexSnapshot:
    """An index's documents and vocabulary at one moment (see Index.snapshot)."""

    ids_by_no: list[str | None]
    doc_terms: list[DocTerms]
    restored: memoryview
    restored_at: array[int]
    titles: list[str] | StringColumn  # a restored index's, until it changes (immutable both)
    dl: _FloatArray
    terms: list[str]
    postings: bytes | None = None  # uint32 each, grouped by term id (any order within a term)
    term_postings: npt.NDArray[np.int64] | None = None  # how many each term id has

    def live_ids(self) -> list[str]:
        """The documents' ids in the order arrays() stores them."""
        return [id for id in self.ids_by_no if id is not None]

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The index as numpy arrays, freed document numbers compacted away, with the postings
        (Index.from_snapshot takes them as they are; sorted out of the term lists if not given)."""
        live = [no for no, id in enumerate(self.ids_by_no) if id is not None]
        terms, restored, at = self.doc_terms, self.restored, self.restored_at
        entries = [entries_of(terms[no], restored, at, no) or NO_TERMS for no in live]
        out: dict[str, npt.NDArray[Any]] = {
            "dl": self.dl[live].astype(np.float32),
            "doc_term_counts": np.fromiter(map(len, entries), dtype=np.int64, count=len(entries)),
            "doc_terms": np.frombuffer(b"".join(e.tobytes() for e in entries), dtype=np.uint32),
        }
        for name, values in (
            ("ids", self.live_ids()),
            (
                "titles",
                self.titles.take(live)
                if isinstance(self.titles, StringColumn)
                else [self.titles[no] for no in live],
            ),
            ("terms", self.terms),
        ):
            out[f"{name}.blob"], out[f"{name}.len"] = pack_strings(values)
        if (
            self.postings is not None
            and self.term_postings is not None
            and len(self.term_postings) == len(self.terms)
        ):
            postings = np.frombuffer(self.postings, dtype=np.uint32)
            if len(live) != len(self.ids_by_no):  # numbers compacted away: the postings' follow
                renumber = np.zeros(len(self.ids_by_no), dtype=np.uint32)
                renumber[live] = np.arange(len(live), dtype=np.uint32)
                postings = (renumber[postings >> 8] << np.uint32(8)) | (postings & np.uint32(0xFF))
            out["postings"], out["term_postings"] = postings, self.term_postings
        return add_postings(out)
