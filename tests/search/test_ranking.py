"""ranking: how recall fuses words, context and meaning, weighs memories and spreads its picks."""

from __future__ import annotations

import itertools
import warnings
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memvault.disk.markdown import Memory
from memvault.search import ranking
from memvault.search.order import creation_order
from memvault.search.ranking import (
    DEFAULT_WEIGHTS,
    QUESTION_WORDS,
    blend,
    diversify,
    explains,
    factor,
    fuse,
    layout,
)
from memvault.search.text import terms_of
from memvault.search.vectors import VectorView

NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def chat(n: int, seconds: float = 10.0):
    """``n`` memories written ``seconds`` apart: one conversation, each the next one's neighbour."""
    return creation_order([f"m{i}.md" for i in range(n)], np.arange(n) * seconds, gap=3600.0)


def test_only_crowded_cosines_are_measured_from_the_lower_quartile():
    n = 8
    where = creation_order([f"m{i}.md" for i in range(n)], np.full(n, np.nan), gap=3600.0)
    lexical, eligible = np.zeros(n), np.ones(n, dtype=bool)

    def leg(cosines: list[float], centre: bool) -> np.ndarray:
        return fuse(lexical, np.array(cosines), eligible, where, centre=centre)[0]

    crowded = [0.90, 0.91, 0.90, 0.92, 0.95, 0.90, 0.91, 0.99]  # a transformer such as E5
    spread = [0.1, 0.3, 0.05, 0.2, 0.6, 0.1, 0.15, 0.8]  # MiniLM, WordLlama
    assert leg(crowded, False).min() > 0.8  # divided by the best alone, every memory near the top
    centred = leg(crowded, True)
    assert centred.max() == pytest.approx(ranking.VECTOR_WEIGHT)
    assert centred[0] == 0.0 and 0.0 < centred[3] < centred[4]  # the quartile and below count 0
    assert np.allclose(leg(spread, True), leg(spread, False))  # cosines that spread: as they were


def test_neighbours_stay_within_an_hour_of_each_other():
    keys: list[str | None] = ["a", "b", "c", None, "d"]
    created = np.array([0.0, 10.0, 4000.0, np.nan, 20.0])
    view = VectorView(
        keys,
        {k: i for i, k in enumerate(keys) if k},
        None,
        np.zeros(5, np.float32),
        np.zeros(5, bool),
        created,
        None,
        1,
    )
    where = layout(view)
    order = ["a", "b", "d", "c"]  # by creation time; c is 66 minutes after d
    assert [keys[int(r)] for r in np.argsort(where.position)[:4]] == order
    n = where.n
    before, after = where.neighbours(np.arange(n), 1)
    assert before.tolist() == [n, 0, n, n, 1]
    assert after.tolist() == [1, 4, n, n, n]
    assert where.neighbours(np.array([4]), 2)[0].tolist() == [0]  # two places back
    assert where.thread[2] != where.thread[0] and where.thread[3] == -1


def test_a_neighbour_borrows_a_share_of_a_hit_but_never_outranks_it():
    where = chat(5)
    lexical = np.array([0.0, 0.0, 8.0, 0.0, 0.0])
    score, borrowed = fuse(lexical, None, np.ones(5, dtype=bool), where)
    assert score[2] == pytest.approx(1.0) and borrowed[2] == 0.0
    # One place away CONTEXT[0] of the hit, two places CONTEXT[1]; all of it borrowed.
    assert score[1] == score[3] == pytest.approx(ranking.CONTEXT[0])
    assert score[0] == score[4] == pytest.approx(ranking.CONTEXT[1])
    assert np.allclose(borrowed, score - lexical / 8.0)
    assert score.argmax() == 2


def test_a_long_memory_borrows_less_of_its_neighbours_words():
    where = chat(3)
    lexical = np.array([0.0, 5.0, 0.0])
    words = ranking.CONTEXT_WORDS
    lengths = np.array([words / 2, 0.0, 4 * words])  # a terse note before the hit, a long reply after
    score, _ = fuse(lexical, None, np.ones(3, dtype=bool), where, lengths=lengths)
    assert score[0] == pytest.approx(ranking.CONTEXT[0])
    assert score[2] == pytest.approx(ranking.CONTEXT[0] / 4)


def test_left_out_rows_score_nothing_and_do_not_set_the_scale():
    where = chat(3, seconds=7200.0)  # hours apart: no neighbours
    lexical = np.array([10.0, 5.0, 0.0])
    eligible = np.array([False, True, True])
    score, _ = fuse(lexical, np.array([0.9, 0.1, 0.3]), eligible, where, vector_weight=0.5)
    assert score[0] == 0.0
    assert score[1] == pytest.approx(1.0 + 0.5 * 0.1 / 0.3)  # the best eligible one sets the scale
    assert score[2] == pytest.approx(0.5)


def test_cosines_below_the_embedders_noise_floor_count_nothing():
    where = chat(3, seconds=7200.0)
    cosines = np.array([0.5, 0.08, 0.2])
    score, _ = fuse(np.zeros(3), cosines, np.ones(3, dtype=bool), where, vector_floor=0.1, vector_weight=1.0)
    assert score.tolist() == pytest.approx([1.0, 0.0, 0.4])


def memory(content: str, title: str = "Note", **fields: object) -> Memory:
    return Memory(id="note.md", title=title, content=content, **fields)  # type: ignore[arg-type]


def test_a_clear_match_holds_every_word_asked_for_and_asks_nothing():
    terms = set(terms_of("which editor does the user like")) - QUESTION_WORDS
    assert terms == set(terms_of("editor user like"))
    assert explains(memory("The user likes Neovim.", title="Editor preference"), terms)
    assert not explains(memory("The user likes Neovim."), terms)  # "editor" is nowhere
    # A question holding the words is no answer: its answer is the turn after it.
    assert not explains(memory("Which editor would the user like?"), terms)
    assert not explains(memory("The user likes Neovim.", title="Editor"), set())


def test_importance_recency_and_priority_order_near_ties():
    plain = factor(memory("x"), last_access=None, now=NOW)
    assert plain == 1.0
    assert factor(memory("x", importance=1.0), last_access=None, now=NOW) > plain
    assert factor(memory("x", importance=0.0), last_access=None, now=NOW) < plain
    assert factor(memory("x", priority="P0"), last_access=None, now=NOW) > factor(
        memory("x", priority="P1"), last_access=None, now=NOW
    )
    fresh = factor(memory("x"), last_access=NOW, now=NOW)
    old = factor(memory("x"), last_access=NOW - timedelta(days=90), now=NOW)
    assert fresh > old > plain
    assert max(fresh, factor(memory("x", importance=1.0, priority="P0"), last_access=NOW, now=NOW)) < 1.5


def test_after_the_free_picks_a_near_neighbour_gives_way_to_another_conversation():
    # Rows 0-2 one conversation, row 3 another, a day later, scoring a little less.
    where = creation_order([f"m{i}.md" for i in range(4)], np.array([0.0, 10.0, 20.0, 86400.0]), gap=3600.0)
    scores = np.array([1.0, 0.95, 0.9, 0.85])
    by_score = [row for row, _, _ in diversify(range(4), scores, 4, where, neighbour_penalty=0.0)]
    assert by_score == [0, 1, 2, 3]
    spread = diversify(range(4), scores, 4, where, neighbour_penalty=0.2, free=1)
    assert [row for row, _, _ in spread][:2] == [0, 3]
    free = diversify(range(4), scores, 4, where, neighbour_penalty=0.2, free=3)
    assert [row for row, _, _ in free] == [0, 1, 2, 3]
    row, value, relevance = spread[0]
    assert (row, value, relevance) == (0, 1.0, 1.0)


@given(
    st.lists(st.floats(min_value=0.01, max_value=10.0), min_size=1, max_size=30),
    st.integers(min_value=1, max_value=30),
    st.integers(min_value=0, max_value=30),
)
def test_picked_values_never_rise_down_the_list(scores: list[float], limit: int, free: int):
    n = len(scores)
    where = creation_order([f"m{i}.md" for i in range(n)], np.arange(n) * 600.0, gap=3600.0)
    picked = diversify(range(n), np.array(scores), limit, where, free=free)
    assert len(picked) == min(limit, n) and len({row for row, _, _ in picked}) == len(picked)
    values = [value for _, value, _ in picked]
    assert all(a >= b - 1e-12 for a, b in itertools.pairwise(values))
    assert all(value <= relevance + 1e-12 for _, value, relevance in picked)


def test_a_rerankers_view_is_added_to_the_share_of_the_best():
    weighted = np.array([4.0, 2.0, 1.0, 0.5, 0.0])
    # The reranker looked at rows 0-2 and could score 0 and 2 (row 1's tokens are pending).
    blend(weighted, [0, 1, 2, 3], [0, 1, 2], [0, 2], [0.1, 0.9], 0.3)
    assert weighted.tolist() == pytest.approx([1.0, 0.5, 0.25 + 0.3, 0.125, 0.0])


def test_a_reranker_that_scores_all_alike_changes_no_order():
    weighted = np.array([3.0, 2.0, 1.0])
    blend(weighted, [0, 1, 2], [0, 1, 2], [0, 1, 2], [5.0, 5.0, 5.0], 1.0)
    assert weighted.tolist() == pytest.approx([1.0, 2 / 3, 1 / 3])


def test_weights_are_replaced_per_call_not_in_place():
    lighter = DEFAULT_WEIGHTS.replace(vector=0.0, floor=0.0)
    assert (lighter.vector, lighter.floor) == (0.0, 0.0)
    assert DEFAULT_WEIGHTS.vector == ranking.VECTOR_WEIGHT and DEFAULT_WEIGHTS.floor == ranking.FLOOR


@given(
    st.lists(
        st.tuples(
            st.one_of(st.just(0.0), st.floats(min_value=0.1, max_value=20.0)),  # lexical
            st.floats(min_value=-0.5, max_value=1.0),  # cosine
            st.booleans(),  # eligible
            st.integers(min_value=0, max_value=400),  # words
            st.integers(min_value=0, max_value=40),  # minutes
        ),
        min_size=1,
        max_size=25,
    ),
    st.sampled_from([0.0, 0.1]),
)
def test_fuse_gives_every_row_what_reading_all_rows_gives(rows, floor: float):
    """Context is worked out for a hit's neighbours only; every row's score and borrowed share are
    those of the plain definition over every row, to the last bit."""
    n = len(rows)
    lexical = np.array([r[0] for r in rows])
    cosines = np.array([r[1] for r in rows])
    eligible = np.array([r[2] for r in rows])
    lengths = np.array([float(r[3]) for r in rows])
    where = creation_order([f"m{i}.md" for i in range(n)], np.array([r[4] * 60.0 for r in rows]), gap=600.0)
    score, read = fuse(lexical, cosines, eligible, where, lengths=lengths, vector_floor=floor)
    # The plain definition, over every row.
    want_score, want_read = np.zeros(n), np.zeros(n)
    top = float(lexical[eligible].max()) if eligible.any() else 0.0
    if top > 0:
        lx = np.append(lexical / top, 0.0)
        want_score += lx[:-1]
        for k, weight in enumerate(ranking.CONTEXT, 1):
            prev, nxt = where.neighbours(np.arange(n), k)
            want_read += weight * (lx[prev] + lx[nxt])
        words = ranking.CONTEXT_WORDS
        want_read *= np.minimum(1.0, words / np.maximum(lengths, words))
        want_score += want_read
    if eligible.any():
        best = float(cosines[eligible].max())
        if best > 0 and best >= floor:
            kept = np.where(cosines >= floor, np.clip(cosines, 0.0, None), 0.0)
            with np.errstate(over="ignore"):  # a row left out (zeroed below) may pass a tiny best
                want_score += ranking.VECTOR_WEIGHT * kept / best
    want_score[~eligible] = 0.0
    want_read[~eligible] = 0.0
    assert score.tolist() == want_score.tolist() and read.tolist() == want_read.tolist()


def diversify_reference(candidates, scores, limit, where, *, neighbour_penalty, scale=10.0, free=0):
    """diversify as it was before the weight went into the closeness table: the reference."""
    given = np.asarray(candidates, dtype=np.intp)
    if not given.size:
        return []
    rows = given[np.lexsort((given, -scores[given]))]
    left = rows.tolist()
    top = float(scores[left[0]]) or 1.0
    rel = scores[rows].astype(np.float64) / top
    close = None
    if neighbour_penalty:
        positions, threads = where.position[rows], where.thread[rows]
        same = (threads[:, None] == threads[None, :]) & (threads >= 0)[:, None]
        close = np.where(same, np.exp(-np.abs(positions[:, None] - positions[None, :]) / scale), 0.0)
    near = np.zeros(len(left))
    taken = np.zeros(len(left))
    picked = []
    for k in range(min(limit, len(left))):
        value = rel + taken
        if k >= free:
            value -= neighbour_penalty * near
        i = int(np.argmax(value))
        picked.append((left[i], float(value[i]), float(rel[i])))
        taken[i] = -np.inf
        if close is not None:
            np.fmax(near, close[i], out=near)
    return picked


@given(
    st.lists(
        st.tuples(
            st.one_of(st.just(0.0), st.floats(min_value=0.0, max_value=10.0)),  # score
            st.one_of(st.none(), st.integers(min_value=0, max_value=60)),  # minutes (None: unknown)
        ),
        min_size=0,
        max_size=40,
    ),
    st.integers(min_value=1, max_value=40),
    st.integers(min_value=0, max_value=40),
    st.sampled_from([0.0, 0.2, 0.7, -0.3]),
)
def test_diversify_picks_what_the_plain_greedy_loop_picks(rows, limit: int, free: int, penalty: float):
    """Every pick, its value and its relevance, to the last bit, as the plain loop that weighs
    the closest pick at each step (the reference above)."""
    n = len(rows)
    created = np.array([np.nan if m is None else m * 60.0 for _, m in rows])
    where = creation_order([f"m{i}.md" for i in range(n)], created, gap=600.0)
    scores = np.array([s for s, _ in rows])
    candidates = [i for i in range(n) if i % 7 != 3]
    got = diversify(candidates, scores, limit, where, neighbour_penalty=penalty, free=free)
    want = diversify_reference(candidates, scores, limit, where, neighbour_penalty=penalty, free=free)
    assert [(r, np.float64(v).tobytes(), x) for r, v, x in got] == [
        (r, np.float64(v).tobytes(), x) for r, v, x in want
    ]


def blend_reference(weighted, candidates, rows, scored, raw, weight):
    """blend as it was, row by row: the reference."""
    values = np.asarray(raw, dtype=np.float64)
    low, high = (float(values.min()), float(values.max())) if len(values) else (0.0, 0.0)
    spread = dict(
        zip(scored, (values - low) / (high - low) if high > low else np.zeros(len(scored)), strict=True)
    )
    top = (float(weighted[rows[0]]) if rows else 0.0) or 1.0
    for row in rows:
        weighted[row] = weighted[row] / top + weight * spread.get(row, 0.0)
    chosen = set(rows)
    weighted[[r for r in candidates if r not in chosen]] /= top


@given(
    st.lists(st.floats(min_value=0.0, max_value=5.0), min_size=1, max_size=40),
    st.data(),
    st.sampled_from([0.3, 1.0, 0.0, -0.5]),
)
def test_blend_adds_what_the_row_by_row_loop_adds(scores: list[float], data, weight: float):
    """Every candidate's score after blend, to the last bit, as the plain loop over the rows."""
    n = len(scores)
    candidates = data.draw(st.lists(st.integers(0, n - 1), unique=True))
    best = sorted(candidates, key=lambda r: -scores[r])
    rows = best[: data.draw(st.integers(0, len(best)))]
    scored = [r for r in rows if data.draw(st.booleans())]
    raw = data.draw(st.lists(st.floats(-10.0, 10.0), min_size=len(scored), max_size=len(scored)))
    got, want = np.array(scores), np.array(scores)
    blend(got, candidates, rows, scored, raw, weight)
    blend_reference(want, candidates, rows, scored, raw, weight)
    assert got.tobytes() == want.tobytes()


def test_a_tiny_best_cosine_with_a_larger_row_left_out_scores_without_overflow() -> None:
    """The best eligible cosine can be far below an ineligible row's (float32 rows): dividing by it
    overflowed for the row that is zeroed anyway, and warned."""
    where = creation_order(["m0.md", "m1.md"], np.array([0.0, 60.0]), gap=600.0)
    vector = np.array([1e-44, 1.0], dtype=np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        score, _ = fuse(
            np.zeros(2), vector, np.array([True, False]), where, lengths=np.ones(2), vector_floor=0.0
        )
    assert score[1] == 0.0 and 0.0 < score[0] <= 1.0
