from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memvault.search.columns import pack_strings, unpack_strings


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
