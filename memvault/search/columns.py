"""Lists of strings as two numpy arrays, for the index snapshot: no per-item JSON, no pickle.

A column of N strings is one UTF-8 blob (uint8) and N lengths in characters (int64). Encoding
costs one join and one encode; decoding one decode and N slices, a small fraction of what
parsing the same strings out of a JSON document costs, and without the JSON text held in memory.
A ``StringColumn`` keeps the bytes and decodes a row only when it is asked for.
"""

from __future__ import annotations

import codecs
from collections.abc import Mapping, Sequence
from itertools import accumulate, pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["StringColumn", "pack_strings", "prefixed", "unpack_strings"]


def pack_strings(values: Sequence[str]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """``values`` as (blob, lengths); the inverse is ``unpack_strings``."""
    blob = "".join(values).encode("utf-8", "surrogatepass")
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    return np.frombuffer(blob, dtype=np.uint8), lengths


def _decoded(
    blob: npt.NDArray[np.uint8], lengths: npt.NDArray[np.int64]
) -> tuple[str, npt.NDArray[np.int64]]:
    """The blob's text and the lengths, checked against each other (ValueError if they do not fit)."""
    text = str(memoryview(np.ascontiguousarray(blob, dtype=np.uint8)), "utf-8", "surrogatepass")
    counts = np.asarray(lengths, dtype=np.int64)
    if counts.ndim != 1 or (len(counts) and int(counts.min()) < 0) or int(counts.sum()) != len(text):
        raise ValueError("string column is inconsistent")
    return text, counts


class StringColumn:
    """The strings packed by ``pack_strings``, kept as their UTF-8 bytes and decoded row by row
    when asked for (``take``): a restart needs few of them before its first answer. A column's
    text decoded whole took four bytes a character as soon as one character lay beyond the
    Basic Multilingual Plane (one emoji in 100,000 memories made their contents 73 MB, every page
    of it new to the process), where the bytes take one. The constructor checks the bytes (in
    pieces) and raises ValueError if the arrays do not fit together; ``take`` never fails for
    rows in range."""

    __slots__ = ("_bounds", "_bytes")

    def __init__(self, blob: npt.NDArray[np.uint8], lengths: npt.NDArray[np.int64]) -> None:
        data = np.ascontiguousarray(blob, dtype=np.uint8).ravel()
        counts = np.asarray(lengths, dtype=np.int64)
        if counts.ndim != 1 or (len(counts) and int(counts.min()) < 0):
            raise ValueError("string column is inconsistent")
        self._bounds = _byte_bounds(data, counts)
        self._bytes = memoryview(data)

    def __len__(self) -> int:
        return len(self._bounds) - 1

    def take(self, rows: Sequence[int]) -> list[str]:
        """The strings of these rows, in their order."""
        at = np.asarray(rows, dtype=np.intp)
        data = self._bytes
        starts, ends = self._bounds[at].tolist(), self._bounds[at + 1].tolist()
        return [str(data[a:b], "utf-8", "surrogatepass") for a, b in zip(starts, ends, strict=True)]


_PIECE = 1 << 12  # bytes checked at a time: their text, small and freed at once, reuses the same memory


def _byte_bounds(data: npt.NDArray[np.uint8], counts: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Where each string of ``counts`` characters starts in the UTF-8 ``data``, and where the last
    ends; ValueError if ``data`` is not UTF-8 (``surrogatepass``, as ``pack_strings`` wrote it) or
    holds another number of characters."""
    decoder = codecs.getincrementaldecoder("utf-8")("surrogatepass")
    view = memoryview(data)
    chars = 0
    leads = []  # where the multi-byte characters start, in the pieces that hold some
    try:
        for start in range(0, len(data), _PIECE):
            piece = view[start : start + _PIECE]
            decoded = len(decoder.decode(piece))
            chars += decoded
            if decoded != len(piece):  # (a piece holding a character's first byte always differs)
                leads.append(np.flatnonzero(data[start : start + _PIECE] >= 0xC0) + start)
        chars += len(decoder.decode(b"", final=True))
    except UnicodeDecodeError as exc:
        raise ValueError("string column is not UTF-8") from exc
    bounds = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=bounds[1:])
    if chars != int(bounds[-1]):
        raise ValueError("string column is inconsistent")
    if leads:
        at = np.concatenate(leads)
        firsts = data[at]
        more = 1 + (firsts >= 0xE0).astype(np.int64) + (firsts >= 0xF0)  # bytes after the first
        before = np.zeros(len(at) + 1, dtype=np.int64)
        np.cumsum(more, out=before[1:])
        # A string starting at character c starts c bytes in, plus the extra bytes of every
        # multi-byte character before it.
        bounds += before[np.searchsorted(at - before[:-1], bounds, side="left")]
    return bounds


def unpack_strings(blob: npt.NDArray[np.uint8], lengths: npt.NDArray[np.int64]) -> list[str]:
    """The strings packed by ``pack_strings``. Raises ValueError if the arrays do not fit together."""
    text, counts = _decoded(blob, lengths)
    filled = np.flatnonzero(counts)
    if 2 * len(filled) < len(counts):  # mostly empty (problems, tag sets): slice only the others
        out = [""] * len(counts)
        ends = np.cumsum(counts)[filled]
        for i, a, b in zip(filled.tolist(), (ends - counts[filled]).tolist(), ends.tolist(), strict=True):
            out[i] = text[a:b]
        return out
    bounds = [0, *accumulate(counts.tolist())]
    return [text[a:b] for a, b in pairwise(bounds)]


def prefixed(data: Mapping[str, npt.NDArray[Any]], prefix: str) -> dict[str, npt.NDArray[Any]]:
    """The arrays of ``data`` whose names start with ``prefix``, under the rest of their names."""
    return {key[len(prefix) :]: data[key] for key in data if key.startswith(prefix)}
