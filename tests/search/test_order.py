"""order: memories in creation order, their neighbours and threads."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memvault.search.order import Layout, creation_order


def test_neighbours_are_the_memories_written_just_before_and_after_within_the_gap():
    # Rows added out of order; c and d an hour after a and b; e has no known creation time.
    keys = ["b.md", "a.md", "d.md", "c.md", "e.md"]
    created = np.array([10.0, 0.0, 3610.0, 3600.0, np.nan])
    where = creation_order(keys, created, gap=60.0)
    n = where.n
    assert n == 5
    assert where.position.tolist()[:4] == [1.0, 0.0, 3.0, 2.0] and np.isnan(where.position[4])
    # a -> b, then a gap of an hour: c -> d, a thread of their own.
    before, after = where.neighbours(np.arange(n), 1)
    assert after.tolist() == [n, 0, n, 2, n]
    assert before.tolist() == [1, n, 3, n, n]
    assert where.thread.tolist() == [0, 0, 1, 1, -1]
    # Two places away there is no one inside a thread of two.
    before, after = where.neighbours(np.arange(n), 2)
    assert (before == n).all() and (after == n).all()
    assert where.near(np.array([1]), 2).tolist() == [0]  # a's thread holds b alone


def test_free_rows_and_archived_rows():
    keys = ["x.md", None, "archive/y.md"]
    created = np.array([0.0, 1.0, 2.0])
    where = creation_order(keys, created, gap=60.0)
    assert where.live.tolist() == [True, False, True]
    assert where.archived.tolist() == [False, False, True]
    # The free row is skipped: x and y are each other's neighbours.
    before, after = where.neighbours(np.arange(3), 1)
    assert after[0] == 2 and before[2] == 0
    assert where.thread[1] == -1


def test_ties_keep_the_order_rows_were_added():
    where = creation_order(["p.md", "q.md", "r.md"], np.zeros(3), gap=60.0)
    assert where.position.tolist() == [0.0, 1.0, 2.0]
    assert where.neighbours(np.arange(3), 1)[1].tolist() == [1, 2, 3]


def same_layout(a: Layout, b: Layout) -> bool:
    rows = np.arange(a.n)
    return (
        a.n == b.n
        and all(
            np.array_equal(x, y, equal_nan=True)
            for x, y in (
                (a.live, b.live),
                (a.archived, b.archived),
                (a.position, b.position),
                (a.thread, b.thread),
                (a.order, b.order),
            )
        )
        and all(
            np.array_equal(x, y)
            for k in (1, 2, 3)
            for x, y in zip(a.neighbours(rows, k), b.neighbours(rows, k), strict=True)
        )
    )


TIMES = st.one_of(st.just(float("nan")), st.integers(min_value=0, max_value=12).map(lambda t: t * 30.0))
EDITS = st.lists(
    st.tuples(
        st.sampled_from(["add", "drop", "archive", "retime", "rename"]),
        st.integers(min_value=0, max_value=10_000),
        TIMES,
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(TIMES, min_size=0, max_size=40), st.lists(EDITS, min_size=1, max_size=4))
def test_a_layout_made_from_the_last_one_equals_one_made_afresh(start: list[float], batches):
    """Rows come (appended or in a free row), go, move to the archive, change creation time (equal
    times are frequent here): a layout made from the one before, batch after batch, is the one a
    full sort makes."""
    keys: list[str | None] = [f"m{i}.md" for i in range(len(start))]
    created = np.array(start, dtype=np.float64)
    where = creation_order(list(keys), created.copy(), gap=60.0)
    made = 0
    for batch in batches:
        for what, pick, at in batch:
            live = [i for i, k in enumerate(keys) if k is not None]
            free = [i for i, k in enumerate(keys) if k is None]
            if what == "add" or not live:
                made += 1
                row = free[pick % len(free)] if free and pick % 2 else len(keys)
                if row == len(keys):
                    keys.append(None)
                    created = np.append(created, np.nan)
                keys[row], created[row] = f"new{made}.md", at
                continue
            row = live[pick % len(live)]
            if what == "drop":
                keys[row], created[row] = None, np.nan
            elif what == "archive":  # the same row, the same time, another folder
                keys[row] = f"archive/{keys[row]}"
            elif what == "retime":
                created[row] = at
            else:
                made += 1
                keys[row] = f"renamed{made}.md"
        # With room to spare past the rows, as the vectors keep it.
        spare = np.concatenate([created, np.full(5, np.nan)])
        again = creation_order(list(keys), spare.copy(), gap=60.0, since=where)
        assert same_layout(again, creation_order(list(keys), spare.copy(), gap=60.0))
        where = again


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=3), min_size=0, max_size=30),
    st.lists(st.tuples(st.integers(min_value=0, max_value=3), st.booleans()), min_size=1, max_size=30),
)
def test_a_burst_of_rows_at_equal_times_goes_among_the_others_by_row(start: list[int], burst):
    """Many rows at once (an import, a pull), most created at the same moments as rows already
    there, some in rows freed just before: each goes after the rows created before it and among
    those of its time by row, as a full sort puts them."""
    keys: list[str | None] = [f"m{i}.md" for i in range(len(start))]
    created = np.array([t * 10.0 for t in start], dtype=np.float64)
    for row in range(0, len(keys), 3):  # every third row freed, as a move leaves it
        keys[row], created[row] = None, np.nan
    where = creation_order(list(keys), created.copy(), gap=15.0)
    free = [i for i, k in enumerate(keys) if k is None]
    for i, (t, reuse) in enumerate(burst):
        row = free.pop() if reuse and free else len(keys)
        if row == len(keys):
            keys.append(None)
            created = np.append(created, np.nan)
        keys[row], created[row] = f"burst{i}.md", t * 10.0
    again = creation_order(list(keys), created.copy(), gap=15.0, since=where)
    assert same_layout(again, creation_order(list(keys), created.copy(), gap=15.0))


@settings(max_examples=200, deadline=None)
@given(st.lists(TIMES, min_size=0, max_size=30), st.lists(st.integers(min_value=0, max_value=29), max_size=8))
def test_neighbours_and_near_are_those_of_the_sorted_rows(times: list[float], picked: list[int]):
    """Neighbours k places away are the rows k places away in creation order with no gap over
    ``gap`` between; near is every such row within ``depth`` of the rows asked."""
    n = len(times)
    keys: list[str | None] = [None if i % 5 == 4 else f"m{i}.md" for i in range(n)]
    where = creation_order(keys, np.array(times, dtype=np.float64), gap=60.0)
    known = sorted((t, i) for i, t in enumerate(times) if keys[i] is not None and not np.isnan(t))
    ranked = [i for _, i in known]

    def naive(row: int, step: int) -> int:
        if row not in ranked or not 0 <= ranked.index(row) + step < len(ranked):
            return n
        lo, hi = sorted((ranked.index(row), ranked.index(row) + step))
        run = [times[r] for r in ranked[lo : hi + 1]]
        return (
            ranked[ranked.index(row) + step] if all(b - a <= 60.0 for a, b in itertools.pairwise(run)) else n
        )

    # The few rows asked first, then every row, again and again (as recalls of one token ask a
    # layout that stands): the same answers each time.
    some = np.array([p for p in picked if p < n], dtype=np.intp)
    for rows in [some, np.arange(n), some, np.arange(n)[::-1], some]:
        for k in (1, 2):
            before, after = where.neighbours(rows, k)
            assert before.tolist() == [naive(r, -k) for r in rows.tolist()]
            assert after.tolist() == [naive(r, k) for r in rows.tolist()]
        for depth in (1, 2, 3):
            expected = {naive(r, s) for r in rows.tolist() for k in range(1, depth + 1) for s in (-k, k)}
            assert where.near(rows, depth).tolist() == sorted(expected - {n})


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=20),
    st.lists(st.integers(min_value=5, max_value=9), min_size=1, max_size=5),
    st.lists(st.integers(min_value=5, max_value=9), min_size=1, max_size=5),
)
def test_layouts_made_from_one_layout_leave_it_and_each_other_as_they_were(start, first, second):
    """A recall may still read a layout while the next is made from it, and two recalls may each
    make their own from the same one: rows written after it (at its end, the common case) change
    neither it nor the other."""
    keys: list[str | None] = [f"m{i}.md" for i in range(len(start))]
    created = np.array([t * 10.0 for t in start], dtype=np.float64)
    where = creation_order(list(keys), created.copy(), gap=15.0)
    kept = creation_order(list(keys), created.copy(), gap=15.0)

    def grown(times: list[int], name: str) -> tuple[list[str | None], np.ndarray]:
        more = keys + [f"{name}{i}.md" for i in range(len(times))]
        return more, np.concatenate([created, np.array(times, dtype=np.float64) * 10.0])

    one = grown(first, "a")
    a = creation_order(*one, gap=15.0, since=where)
    two = grown(second, "b")
    b = creation_order(*two, gap=15.0, since=where)
    c = creation_order(*grown(first + second, "c"), gap=15.0, since=a)
    assert same_layout(where, kept)
    assert same_layout(a, creation_order(*one, gap=15.0))
    assert same_layout(b, creation_order(*two, gap=15.0))
    assert same_layout(c, creation_order(*grown(first + second, "c"), gap=15.0))
