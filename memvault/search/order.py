"""Memories in the order they were written: who was written just before and after whom.

Recall reads a memory with its neighbours (memvault.search.ranking: context and spread); a neighbour
is a memory written within ``gap`` seconds of the next one, a thread a run of such memories.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each row sits in creation order: neighbours (``n`` = none), position, thread."""

    n: int
    live: npt.NDArray[np.bool_]
    archived: npt.NDArray[np.bool_]
    before: tuple[npt.NDArray[np.intp], ...]  # before[k][row]: the row written k + 1 places earlier, or n
    after: tuple[npt.NDArray[np.intp], ...]
    position: npt.NDArray[np.float64]  # rank in creation order (NaN: unknown creation time)
    thread: npt.NDArray[np.intp]  # runs of memories written within ``gap`` seconds of each other; -1 = none


def creation_order(
    keys: Sequence[str | None], created: npt.NDArray[np.float64], *, depth: int, gap: float
) -> Layout:
    """Rows (keys by row, None = free) in the order they were written (``created``: POSIX seconds,
    NaN = unknown); neighbours are only those written within ``gap`` seconds of the next one."""
    n = len(keys)
    live = np.array([key is not None for key in keys], dtype=bool)
    archived = np.array([key is not None and key.startswith("archive/") for key in keys], dtype=bool)
    created = created[:n]
    rows = np.flatnonzero(live & ~np.isnan(created))
    order = rows[np.argsort(created[rows], kind="stable")]  # ties: the order the rows were added
    position = np.full(n, np.nan)
    position[order] = np.arange(order.size, dtype=np.float64)
    thread = np.full(n, -1, dtype=np.intp)
    if order.size:
        breaks = np.concatenate([[True], np.diff(created[order]) > gap])
        thread[order] = np.cumsum(breaks) - 1
    before: list[npt.NDArray[np.intp]] = []
    after: list[npt.NDArray[np.intp]] = []
    for k in range(1, depth + 1):
        prev = np.full(n, n, dtype=np.intp)
        nxt = np.full(n, n, dtype=np.intp)
        if order.size > k:
            same = thread[order[k:]] == thread[order[:-k]]
            prev[order[k:][same]] = order[:-k][same]
            nxt[order[:-k][same]] = order[k:][same]
        before.append(prev)
        after.append(nxt)
    return Layout(n, live, archived, tuple(before), tuple(after), position, thread)


def stable_order(keys: npt.NDArray[np.uint32]) -> npt.NDArray[np.intp]:
    """``np.argsort(keys, kind="stable")``, by 16-bit halves: numpy sorts 16-bit keys by radix and
    32-bit ones by timsort, several times slower (this sort was most of the flush that the first
    query after a burst of writes pays)."""
    if not keys.size or int(keys.max()) <= 0xFFFF:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    low = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    return low[np.argsort((keys[low] >> 16).astype(np.uint16), kind="stable")]


def top(docs: npt.NDArray[np.intp], key: npt.NDArray[np.float64], k: int) -> list[int]:
    """The ``k`` docnos of ``docs`` with the highest ``key``, best first (ties: lower docno)."""
    if k <= 0 or docs.size == 0:
        return []
    values = key[docs]
    if k < docs.size:
        part = np.argpartition(-values, k - 1)[:k]
        docs, values = docs[part], values[part]
    order = np.lexsort((docs, -values))
    result: list[int] = docs[order].tolist()
    return result
