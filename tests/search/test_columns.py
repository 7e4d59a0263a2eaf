from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memvault.search.columns import StringColumn, pack_strings, unpack_strings


@given(st.lists(st.text()))
def test_strings_survive_packing(values: list[str]) -> None:
    blob, lengths = pack_strings(values)
    assert blob.dtype == np.uint8
    assert unpack_strings(blob, lengths) == values


@given(st.lists(st.sampled_from(["", "", "", "", "x", "dé", "東京", "a\U0001f600b"])))
def test_mostly_empty_columns_survive_packing(values: list[str]) -> None:
    assert unpack_strings(*pack_strings(values)) == values


def test_empty_column() -> None:
    assert unpack_strings(*pack_strings([])) == []
    assert unpack_strings(*pack_strings(["", ""])) == ["", ""]


def test_lengths_that_do_not_fit_the_blob_are_refused() -> None:
    blob, lengths = pack_strings(["abc", "dé"])
    with pytest.raises(ValueError, match="inconsistent"):
        unpack_strings(blob, lengths + 1)
    with pytest.raises(ValueError, match="inconsistent"):
        unpack_strings(blob, np.array([6, -1]))


@given(st.lists(st.text()), st.data())
def test_a_string_column_gives_any_rows_as_unpacking_would(values: list[str], data: st.DataObject) -> None:
    column = StringColumn(*pack_strings(values))
    assert len(column) == len(values)
    assert column.take(range(len(values))) == values
    rows = data.draw(st.lists(st.integers(0, len(values) - 1))) if values else []
    assert column.take(rows) == [values[i] for i in rows]


def test_a_string_column_refuses_lengths_that_do_not_fit_the_blob() -> None:
    blob, lengths = pack_strings(["abc", "dé"])
    for bad in (lengths + 1, np.array([6, -1])):
        with pytest.raises(ValueError, match="inconsistent"):
            StringColumn(blob, bad)
    with pytest.raises(ValueError):  # not UTF-8
        StringColumn(np.frombuffer(b"\xff", dtype=np.uint8), np.array([1]))
    with pytest.raises(ValueError):  # a character cut short at the end
        StringColumn(np.frombuffer(b"ab\xc3", dtype=np.uint8), np.array([2]))


def test_a_string_column_gives_back_characters_of_every_width_across_its_pieces() -> None:
    """The bytes are checked a piece at a time: characters of two to four bytes (and a lone
    surrogate, as pack_strings keeps it) straddle the pieces' edges at every offset."""
    values = ["", "a" * 65_535 + "é" + "b", "東" * 30_000, "x\U0001f600" * 20_000, "\ud800 lone", "dé", ""]
    for shift in range(4):
        shifted = ["y" * shift, *values]
        column = StringColumn(*pack_strings(shifted))
        assert column.take(range(len(shifted))) == shifted
        assert column.take([len(shifted) - 2, 1]) == [shifted[-2], shifted[1]]
