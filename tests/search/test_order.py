"""order: memories in creation order, their neighbours and threads."""

from __future__ import annotations

import numpy as np

from memvault.search.order import creation_order


def test_neighbours_are_the_memories_written_just_before_and_after_within_the_gap():
    # Rows added out of order; c and d an hour after a and b; e has no known creation time.
    keys = ["b.md", "a.md", "d.md", "c.md", "e.md"]
    created = np.array([10.0, 0.0, 3610.0, 3600.0, np.nan])
    where = creation_order(keys, created, depth=2, gap=60.0)
    n = where.n
    assert n == 5
    assert where.position.tolist()[:4] == [1.0, 0.0, 3.0, 2.0] and np.isnan(where.position[4])
    # a -> b, then a gap of an hour: c -> d, a thread of their own.
    assert where.after[0].tolist() == [n, 0, n, 2, n]
    assert where.before[0].tolist() == [1, n, 3, n, n]
    assert where.thread.tolist() == [0, 0, 1, 1, -1]
    # Two places away there is no one inside a thread of two.
    assert (where.before[1] == n).all() and (where.after[1] == n).all()


def test_free_rows_and_archived_rows():
    keys = ["x.md", None, "archive/y.md"]
    created = np.array([0.0, 1.0, 2.0])
    where = creation_order(keys, created, depth=1, gap=60.0)
    assert where.live.tolist() == [True, False, True]
    assert where.archived.tolist() == [False, False, True]
    # The free row is skipped: x and y are each other's neighbours.
    assert where.after[0][0] == 2 and where.before[0][2] == 0
    assert where.thread[1] == -1


def test_ties_keep_the_order_rows_were_added():
    where = creation_order(["p.md", "q.md", "r.md"], np.zeros(3), depth=1, gap=60.0)
    assert where.position.tolist() == [0.0, 1.0, 2.0]
    assert where.after[0].tolist() == [1, 2, 3]
