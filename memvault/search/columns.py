"""Lists of strings as two numpy arrays, for the index snapshot: no per-item JSON, no pickle.

A column of N strings is one UTF-8 blob (uint8) and N lengths in characters (int64). Encoding
costs one join and one encode; decoding one decode and N slices, a small fraction of what
parsing the same strings out of a JSON document costs, and without the JSON text held in memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import accumulate, pairwise
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["pack_strings", "prefixed", "unpack_strings"]


def pack_strings(values: Sequence[str]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """``values`` as (blob, lengths); the inverse is ``unpack_strings``."""
    blob = "".join(values).encode("utf-8", "surrogatepass")
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=len(values))
    return np.frombuffer(blob, dtype=np.uint8), lengths


def unpack_strings(blob: npt.NDArray[np.uint8], lengths: npt.NDArray[np.int64]) -> list[str]:
    """The strings packed by ``pack_strings``. Raises ValueError if the arrays do not fit together."""
    text = np.ascontiguousarray(blob, dtype=np.uint8).tobytes().decode("utf-8", "surrogatepass")
    counts = np.asarray(lengths, dtype=np.int64)
    if counts.ndim != 1 or (len(counts) and int(counts.min()) < 0) or int(counts.sum()) != len(text):
        raise ValueError("string column is inconsistent")
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
