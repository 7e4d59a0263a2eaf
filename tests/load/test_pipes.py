"""The helpers' answers: arrays out as they went in, and anything but one whole answer refused."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from memvault.load import pipes
from memvault.search.columns import pack_strings


def _arrays() -> dict[str, np.ndarray]:
    blob, lengths = pack_strings(["a.md", "ünï/東京.md", ""])
    return {
        "ids.blob": blob,
        "ids.len": lengths,
        "dl": np.array([1.5, 2.0, 0.0], dtype=np.float32),
        "empty": np.zeros(0, dtype=np.int64),
        "grid": np.arange(12, dtype=np.uint16).reshape(3, 4)[:, ::2],  # not contiguous
        "flags": np.array([True, False]),
        "when": np.array([3, -1], dtype=">i8"),
    }


def test_arrays_come_back_as_they_went():
    sent = _arrays()
    back = pipes.decode(b"".join(pipes.encode(sent)))
    assert list(back) == list(sent)
    for name, value in sent.items():
        assert back[name].dtype == value.dtype and back[name].shape == value.shape
        assert np.array_equal(back[name], value)


def test_only_one_whole_answer_is_taken(caplog):
    whole = b"".join(pipes.encode(_arrays()))
    for cut in (0, 5, len(pipes.MAGIC) + 3, len(pipes.MAGIC) + 8, len(pipes.MAGIC) + 20, len(whole) - 1):
        with pytest.raises(ValueError):
            pipes.decode(whole[:cut])
    with pytest.raises(ValueError):
        pipes.decode(whole + b"\x00")
    with pytest.raises(ValueError):
        pipes.decode(b"PK\x03\x04" + whole)  # an .npz, or anything else
    head = b'[["x", "|O", [1]]]'  # objects would need pickle: never
    with pytest.raises(ValueError):
        pipes.decode(pipes.MAGIC + len(head).to_bytes(8, "little") + head + bytes(8))
    with pytest.raises(TypeError):
        pipes.encode({"x": np.array([object()])})
    with caplog.at_level(logging.WARNING, logger="memvault"):
        assert pipes.answer("a helper", "doing it here", 0, whole[:-1], b"") is None
        assert pipes.answer("a helper", "doing it here", 1, whole, b"OSError\n") is None
    assert "a helper gave unreadable output (ValueError); doing it here" in caplog.text
    assert "a helper failed (exit 1: OSError); doing it here" in caplog.text
