"""Memories in the order they were written: who was written just before and after whom.

Recall reads a memory with its neighbours (memvault.search.ranking: context and spread); a neighbour
is a memory written within ``gap`` seconds of the next one, a thread a run of such memories.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

_T = TypeVar("_T", bound=np.generic)
_TABLED = 2  # neighbours this many places away are kept in a layout's table (ranking.CONTEXT's reach)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where each row sits in creation order: position and thread; neighbours on demand.

    Never changed once made (a recall in another thread may be reading it): the next layout of the
    same rows is a new one, made from this (``creation_order``'s ``since``)."""

    n: int
    live: npt.NDArray[np.bool_]
    archived: npt.NDArray[np.bool_]
    position: npt.NDArray[np.float64]  # rank in creation order (NaN: unknown creation time)
    thread: npt.NDArray[np.intp]  # runs of memories written within ``gap`` seconds of each other; -1 = none
    order: npt.NDArray[np.intp]  # the rows with a known creation time in creation order (ties: by row)
    # What it was made from, for the next one: keys and creation times by row, the gap.
    keys: Sequence[str | None] = field(repr=False)
    created: npt.NDArray[np.float64] = field(repr=False)
    gap: float = field(repr=False)
    # The arrays above are the heads of longer ones (live, archived, position, thread, order): the
    # room past their ends, which this layout never reads, is for the next one made from it, once.
    room: list[tuple[npt.NDArray[Any], ...]] = field(default_factory=list, repr=False, compare=False)
    # Every row's neighbours up to _TABLED places away, once asked about as many rows as it has
    # (_table): the rows asked so far, then the table. Filled once, never changed after.
    steps: list[Any] = field(default_factory=lambda: [0, None], repr=False, compare=False)

    def neighbours(
        self, rows: npt.NDArray[np.intp], k: int
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
        """For each of ``rows``, the row written ``k`` places earlier and the one ``k`` places
        later in the same thread, or ``n`` where there is none."""
        table = self._table(rows, k)
        if table is not None:
            return table[rows, 2 * k - 2], table[rows, 2 * k - 1]
        before, after = self._around(rows, (-k, k))
        return before, after

    def near(self, rows: npt.NDArray[np.intp], depth: int) -> npt.NDArray[np.intp]:
        """The rows at most ``depth`` places from one of ``rows`` in its thread (``rows`` not
        counted unless they are one another's neighbours), ascending."""
        if depth < 1 or not len(rows):
            return np.zeros(0, dtype=np.intp)
        table = self._table(rows, depth)
        if table is not None:  # a mark per row, read back in order: no sort
            marks = np.zeros(self.n + 1, dtype=bool)
            marks[table[rows, : 2 * depth]] = True
            return np.flatnonzero(marks[: self.n])
        found = distinct(
            np.concatenate(self._around(rows, [s for k in range(1, depth + 1) for s in (-k, k)]))
        )
        return found[: int(np.searchsorted(found, self.n))]  # without "no neighbour" (n, the largest)

    def _table(self, rows: npt.NDArray[np.intp], depth: int) -> npt.NDArray[np.intp] | None:
        """Every row's neighbours (n rows, columns -1, 1, -2, 2, ... up to ``_TABLED`` places), once
        this layout has been asked about at least as many rows as it has: from then on a recall
        reads its rows' neighbours from it. A layout asked only once or twice (rows moving between
        recalls) is never worth the table. None until then, or past ``_TABLED``. Two threads may
        both make it: they make the same table."""
        steps = self.steps
        if depth > _TABLED:
            return None
        if steps[1] is None:
            steps[0] += len(rows)
            if steps[0] < self.n:
                return None
            every = np.arange(self.n, dtype=np.intp)
            table = np.stack(self._around(every, [s for k in range(1, _TABLED + 1) for s in (-k, k)]), axis=1)
            steps[1] = table
        return cast("npt.NDArray[np.intp]", steps[1])

    def _around(self, rows: npt.NDArray[np.intp], steps: Sequence[int]) -> list[npt.NDArray[np.intp]]:
        """For each step, each row's neighbour that many places away in its thread, or ``n``."""
        rank = self.position[rows]
        known = ~np.isnan(rank)
        at = np.where(known, rank, -1.0).astype(np.intp)
        size = self.order.size
        own = self.thread[rows]
        sides = []
        for step in steps:
            j = at + step
            inside = known & (j >= 0) & (j < size)
            if not inside.any():
                sides.append(np.full(len(rows), self.n, dtype=np.intp))
                continue
            other = self.order[np.where(inside, j, 0)]
            sides.append(np.where(inside & (self.thread[other] == own), other, self.n))
        return sides


def distinct(values: npt.NDArray[_T]) -> npt.NDArray[_T]:
    """``values`` sorted, each once: np.unique, without its overhead, which is most of its time on
    the few thousand values a query has."""
    if not values.size:
        return values
    values = np.sort(values)
    keep = np.empty(values.size, dtype=bool)
    keep[0] = True
    np.not_equal(values[1:], values[:-1], out=keep[1:])
    return values[keep]


def creation_order(
    keys: Sequence[str | None],
    created: npt.NDArray[np.float64],
    *,
    gap: float,
    since: Layout | None = None,
) -> Layout:
    """Rows (keys by row, None = free) in the order they were written (``created``: POSIX seconds,
    NaN = unknown); neighbours are only those written within ``gap`` seconds of the next one.

    ``since``: the layout of the same rows a little earlier (``keys`` and ``created`` are the
    caller's copies, never changed in place). Only the rows whose key or creation time moved since
    are placed again, and only the ranks from the first that moved are counted again: a write moves
    a row or two, mostly at the end, and a large vault's full sort was most of its recall."""
    n = len(keys)
    created = created[:n]
    if since is not None and since.gap == gap and n >= since.n:
        moved = _moved(since, keys, created, max(_FEW, n // 8))
        if moved is not None:
            grown = _appended(since, keys, created, moved)
            return grown if grown is not None else _updated(since, keys, created, moved)
    live = np.array([key is not None for key in keys], dtype=bool)
    archived = np.array([key is not None and key.startswith("archive/") for key in keys], dtype=bool)
    rows = np.flatnonzero(live & ~np.isnan(created))
    order = rows[np.argsort(created[rows], kind="stable")]  # ties: the order the rows were added
    room = _room_for(n)
    arrays = (
        _grown(live, n, False, room),
        _grown(archived, n, False, room),
        np.full(room, np.nan),
        np.full(room, -1, dtype=np.intp),
        _grown(order, order.size, 0, room),
    )
    _rank(order, created, gap, arrays[2][:n], arrays[3][:n], 0)
    return _made(arrays, n, order.size, keys, created, gap)


def _room_for(n: int) -> int:
    """Places in a layout's arrays for ``n`` rows: an eighth more, for the rows written next."""
    return n + n // 8 + 64


def _made(
    arrays: tuple[npt.NDArray[Any], ...],
    n: int,
    size: int,
    keys: Sequence[str | None],
    created: npt.NDArray[np.float64],
    gap: float,
) -> Layout:
    """The layout whose arrays are the heads of ``arrays`` (``size``: rows in creation order)."""
    live, archived, position, thread, order = arrays
    heads = live[:n], archived[:n], position[:n], thread[:n], order[:size]
    return Layout(n, *heads, keys, created, gap, [arrays])


_FEW = 64  # up to this many moved rows (or an eighth), placing them again beats a sort
_SEARCHED = 8  # up to this many rows placed by a binary search each (else by one over all times)


def _moved(
    since: Layout, keys: Sequence[str | None], created: npt.NDArray[np.float64], most: int
) -> npt.NDArray[np.intp] | None:
    """The rows whose key or creation time differs from ``since``'s, and the rows added after it;
    None if there are more than ``most``."""
    m = since.n
    if len(keys) - m > most:
        return None
    # Bit for bit: NaN == NaN here (a NaN of other bits is only placed again for nothing).
    old = np.ascontiguousarray(since.created[:m]).view(np.int64)
    new = np.ascontiguousarray(created[:m]).view(np.int64)
    times = np.flatnonzero(old != new)
    named = _differing(since.keys, keys, m, most) if times.size <= most else None
    if named is None:
        return None
    moved = distinct(np.concatenate([times, named, np.arange(m, len(keys), dtype=np.intp)]))
    return moved if moved.size <= most else None


def _differing(
    old: Sequence[str | None], new: Sequence[str | None], m: int, most: int
) -> npt.NDArray[np.intp] | None:
    """The rows below ``m`` whose key differs (None: more than ``most``), by halving: list
    comparison runs in C and mostly meets the same string objects, so a few changes among many
    keys cost about two passes over them instead of a Python loop."""
    if old == (new if len(new) == m else new[:m]):  # ``old`` holds m keys
        return np.zeros(0, dtype=np.intp)
    out: list[int] = []
    spans = [(0, m, True)]  # (lo, hi, known to differ)
    while spans:
        lo, hi, differs = spans.pop()
        if not differs and old[lo:hi] == new[lo:hi]:
            continue
        if hi - lo <= 32:
            out.extend(i for i in range(lo, hi) if old[i] != new[i])
            if len(out) > most:
                return None
            continue
        mid = (lo + hi) // 2
        if old[lo:mid] == new[lo:mid]:
            spans.append((mid, hi, True))  # the difference is on the right
        else:
            spans += [(mid, hi, False), (lo, mid, True)]
    return np.array(out, dtype=np.intp)


def _updated(
    since: Layout, keys: Sequence[str | None], created: npt.NDArray[np.float64], moved: npt.NDArray[np.intp]
) -> Layout:
    """``since`` with the ``moved`` rows taken out and put back where they belong now (by creation
    time, ties by row, as the full sort puts them); ranks and threads counted again from the first
    place that changed."""
    n, m = len(keys), since.n
    room = _room_for(n)
    live, archived = _grown(since.live, n, False, room)[:n], _grown(since.archived, n, False, room)[:n]
    position, thread = _grown(since.position, n, np.nan, room)[:n], _grown(since.thread, n, -1, room)[:n]
    for row in moved.tolist():
        key = keys[row]
        live[row] = key is not None
        archived[row] = key is not None and key.startswith("archive/")
    was = moved[moved < m]
    was = was[~np.isnan(since.position[was])]
    order = since.order
    first = order.size
    if was.size:
        ranks = since.position[was].astype(np.intp)
        first = int(ranks.min())
        order = np.delete(order, ranks)
        position[was] = np.nan
        thread[was] = -1
    come = moved[live[moved] & ~np.isnan(created[moved])]
    if come.size:
        come = come[np.lexsort((come, created[come]))]
        at = _places(order, created, come)
        first = min(first, int(at.min()))
        order = np.insert(order, at, come)
    _rank(order, created, since.gap, position, thread, first)
    arrays = (live.base, archived.base, position.base, thread.base, _grown(order, order.size, 0, room))
    return _made(arrays, n, order.size, keys, created, since.gap)


def _appended(
    since: Layout, keys: Sequence[str | None], created: npt.NDArray[np.float64], moved: npt.NDArray[np.intp]
) -> Layout | None:
    """``since`` grown in the room past its arrays' ends, when rows only came after its last row
    and those with a creation time go after every row it orders (a memory written now): nothing
    is copied. None otherwise, or when the room is taken or too small. Only one layout grows into
    a layout's room (the next made from the same one copies), so two never write the same places,
    and none writes where an older one reads."""
    n, m, size = len(keys), since.n, since.order.size
    if not moved.size or moved[0] < m:  # ``moved`` is ascending
        return None
    try:
        arrays = since.room.pop()
    except IndexError:
        return None
    live, archived, position, thread, order = arrays
    rows = moved.tolist()
    comes = [r for r in rows if keys[r] is not None and not np.isnan(created[r])]
    come = np.array(comes, dtype=np.intp)
    last = float(created[since.order[-1]]) if size else -np.inf
    if len(live) < n or len(order) < size + come.size or (come.size and float(created[come].min()) < last):
        since.room.append(arrays)  # nothing written: the room is free again
        return None
    for row in rows:
        key = keys[row]
        live[row] = key is not None
        archived[row] = key is not None and key.startswith("archive/")
    position[m:n] = np.nan
    thread[m:n] = -1
    order[size : size + come.size] = come[np.lexsort((come, created[come]))]
    _rank(order[: size + come.size], created, since.gap, position[:n], thread[:n], size)
    return _made(arrays, n, size + come.size, keys, created, since.gap)


def _grown(values: npt.NDArray[_T], n: int, fill: object, room: int) -> npt.NDArray[_T]:
    """``values`` in a new array of ``room`` places, ``fill`` from ``n`` on (``n`` >= its length)."""
    out = np.empty(room, dtype=values.dtype)
    out[: len(values)] = values
    out[len(values) :] = fill
    return out


def _places(
    order: npt.NDArray[np.intp], created: npt.NDArray[np.float64], come: npt.NDArray[np.intp]
) -> npt.NDArray[np.intp]:
    """Where each of ``come`` (rows not in ``order``) goes into ``order``: after the rows created
    before it and those created at the same time with a lower row number."""
    if come.size <= _SEARCHED:  # a binary search each, without gathering every row's time
        return np.array(
            [bisect.bisect_left(order, (created[r], r), key=lambda o: (created[o], o)) for r in come],
            dtype=np.intp,
        )
    times = created[order]
    at = np.searchsorted(times, created[come], side="left")
    ends = np.searchsorted(times, created[come], side="right")
    for i in np.flatnonzero(ends > at).tolist():  # equal creation times: by row among them
        at[i] += int(np.searchsorted(order[at[i] : ends[i]], come[i]))
    return at


def _rank(
    order: npt.NDArray[np.intp],
    created: npt.NDArray[np.float64],
    gap: float,
    position: npt.NDArray[np.float64],
    thread: npt.NDArray[np.intp],
    first: int,
) -> None:
    """Set (in place) the position and thread of the rows ``order[first:]``; those before them
    stand. Threads are numbered from 0 in creation order, each a run without a gap over ``gap``."""
    if first >= order.size:
        return
    rows = order[first:]
    position[rows] = np.arange(first, order.size, dtype=np.float64)
    breaks = np.diff(created[order[max(first - 1, 0) :]]) > gap
    if first == 0:
        thread[rows] = np.concatenate([[0], np.cumsum(breaks, dtype=np.intp)])
    else:
        thread[rows] = thread[order[first - 1]] + np.cumsum(breaks, dtype=np.intp)


def stable_order(keys: npt.NDArray[np.uint32]) -> npt.NDArray[np.intp]:
    """``np.argsort(keys, kind="stable")``, by 16-bit halves: numpy sorts 16-bit keys by radix and
    32-bit ones by timsort, several times slower (this sort was most of the flush that the first
    query after a burst of writes pays)."""
    if not keys.size or int(keys.max()) <= 0xFFFF:
        return np.argsort(keys.astype(np.uint16), kind="stable")
    low = np.argsort((keys & 0xFFFF).astype(np.uint16), kind="stable")
    return low[np.argsort((keys[low] >> 16).astype(np.uint16), kind="stable")]


def best(docs: npt.NDArray[np.intp], values: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.intp]:
    """Positions of the ``k`` highest of ``values`` (those of ``docs``), best first (ties: lower
    docno)."""
    if k <= 0 or docs.size == 0:
        return np.zeros(0, dtype=np.intp)
    if k >= docs.size:
        return np.lexsort((docs, -values))
    part = np.argpartition(-values, k - 1)[:k]
    return part[np.lexsort((docs[part], -values[part]))]
