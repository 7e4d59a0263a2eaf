"""Lists of strings as two numpy arrays, for the index snapshot: no per-item JSON, no pickle.

A column of N strings is one UTF-8 blob (uint8) and N lengths in characters (int64). Encoding
costs one join and one encode; decoding one decode and N slices, a small fraction of what
parsing the same strings out of a JSON document costs, and without the JSON text held in memory.
A ``StringColumn`` decodes once and slices a row only when it is asked for.
"""

from __future__ import annotations

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
    """The strings packed by ``pack_strings``, decoded in one pass and sliced row by row when asked
    for (``take``): a restart needs few of them before its first answer. The constructor raises
    ValueError if the arrays do not fit together; ``take`` never fails for rows in range."""

    __slots__ = ("_bounds", "_text")

    def __init__(self, blob: npt.NDArray[np.uint8], lengths: npt.NDArray[np.int64]) -> None:
        self._text, counts = _decoded(blob, lengths)
        self._bounds = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=self._bounds[1:])

    def __len__(self) -> int:
        return len(self._bounds) - 1

    def take(self, rows: Sequence[int]) -> list[str]:
        """The strings of these rows, in their order."""
        at = np.asarray(rows, dtype=np.intp)
        text = self._text
        starts, ends = self._bounds[at].tolist(), self._bounds[at + 1].tolist()
        return [text[a:b] for a, b in zip(starts, ends, strict=True)]


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
