"""vectors: a token's rows, int8 vectors and kept token ids, and the queue of memories to embed."""

from __future__ import annotations

import numpy as np

from memvault.disk.markdown import Memory
from memvault.search.embedders import TOKEN_BUDGET, normalise_rows
from memvault.search.vectors import TokenVectors, matvec, quantize, quantize_rows


def test_quantized_vectors_keep_dot_products_within_one_percent():
    rng = np.random.default_rng(7)
    vectors = normalise_rows(rng.normal(size=(300, 512)))
    query = normalise_rows(rng.normal(size=(1, 512)))[0]
    tv = TokenVectors()
    for i in range(300):
        tv.changed(Memory(id=f"m{i}.md", title="t", content=f"c{i}"))
    work, _ = tv.take(1000)
    tv.install("hash-512", [(w, "h", vectors[int(w.key[1:-3])]) for w in work])
    view = tv.snapshot()
    assert view.matrix is not None and view.matrix.dtype == np.int8
    exact = np.array([vectors[int(k[1:-3])] @ query for k in view.keys if k])
    got = view.similarity(query, len(exact))
    assert got is not None
    assert np.abs(got - exact).max() < 0.01 * np.abs(exact).max()
    rows = np.array([view.rows["m5.md"], view.rows["m9.md"]])
    back = view.matrix[rows] * view.scale[rows, None]
    assert np.abs(back - vectors[[5, 9]]).max() < 0.01


def test_rows_without_a_vector_score_zero_and_a_zero_vector_quantizes_to_zero():
    q, scale = quantize(np.zeros(8, dtype=np.float32))
    assert not q.any() and scale == 0
    tv = TokenVectors()
    tv.changed(Memory(id="a.md", title="t", content="a"))
    tv.changed(Memory(id="b.md", title="t", content="b"))
    work, _ = tv.take(1)
    tv.install("hash-16", [(work[0], "h", normalise_rows(np.ones((1, 16)))[0])])
    view = tv.snapshot()
    got = view.similarity(normalise_rows(np.ones((1, 16)))[0], 2)
    assert got is not None
    assert sorted(got.round(3).tolist()) == [0.0, 1.0]
    assert view.similarity(np.ones(8, dtype=np.float32), 2) is None  # another dimension


def test_matvec_of_an_int8_matrix_equals_the_float_product():
    rng = np.random.default_rng(3)
    matrix = rng.integers(-127, 128, size=(2000, 96)).astype(np.int8)
    vector = rng.normal(size=96).astype(np.float32)
    assert np.allclose(matvec(matrix, vector), matrix.astype(np.float32) @ vector, rtol=1e-5, atol=1e-3)


def test_vector_matrix_grows_with_the_rows_not_faster():
    """Issue 9, 1: the matrix doubled at every quarter's growth of the rows (5,000 writes -> GBs)."""
    tv = TokenVectors()
    vector = normalise_rows(np.ones((1, 16)))[0]
    for i in range(5000):
        tv.changed(Memory(id=f"m{i}.md", title="t", content=f"c{i}"))
        work, _ = tv.take(10)
        tv.install("hash-16", [(w, f"h{i}", vector) for w in work])
    view = tv.snapshot()
    assert view.matrix is not None
    rows = len(view.keys)
    assert rows == 5000
    # Capacity stays within the growth step (a quarter, at least 64) of the rows in use.
    assert len(view.matrix) == len(view.has_vector) <= rows * 1.25 + 64
    assert view.matrix.nbytes < 200_000  # 5,000 x 16 int8 plus slack, not megabytes


def test_a_row_without_token_ids_yet_has_none_and_a_changed_text_drops_them():
    tv = TokenVectors()
    for name in ("a", "b", "c"):
        tv.changed(Memory(id=f"{name}.md", title="t", content=name))
    work, _ = tv.take(2)
    vector = np.ones(16, dtype=np.float32) / 4
    tv.install("wordllama-l2-16", [(w, "h", vector) for w in work], [np.array([7, 9], np.uint16), None])
    view = tv.snapshot()
    got = view.tokens_of(view.rows["a.md"])
    assert got is not None and got.tolist() == [7, 9]
    assert view.tokens_of(view.rows["b.md"]) is None  # a vector without ids: no MaxSim score
    assert view.tokens_of(view.rows["c.md"]) is None  # pending: no vector, no ids
    tv.dropped("a.md")
    assert tv.snapshot().tokens_of(view.rows["a.md"]) is None


def test_kept_token_ids_take_the_room_they_need_and_a_view_keeps_what_it_saw():
    """Memories mostly keep far fewer ids than the budget: they are stored one after another, not in
    a budget-wide matrix; rows given new ids and dropped rows leave garbage that a drained queue
    tidies away, while a view taken before keeps its own."""
    tv = TokenVectors()
    rng = np.random.default_rng(5)
    want = {}
    for i in range(3000):
        tv.changed(Memory(id=f"m{i}.md", title="t", content=f"c{i}"))
    vector = np.ones(16, dtype=np.float32) / 4
    while True:
        work, _ = tv.take(64)
        if not work:
            break
        ids = [rng.integers(0, 60000, size=rng.integers(0, 40)).astype(np.uint16) for _ in work]
        want.update({w.key: i.tolist() for w, i in zip(work, ids, strict=True)})
        tv.install("wordllama-l2-16", [(w, "h", vector) for w in work], ids)
    before = tv.snapshot()
    assert before.tokens is not None and before.tokens.nbytes < 3000 * TOKEN_BUDGET * 2 / 4
    old = {k: before.tokens_of(before.rows[k]).tolist() for k in ("m1.md", "m2.md")}
    for i in range(0, 3000, 2):  # new texts, new ids: the old ones are garbage
        tv.changed(Memory(id=f"m{i}.md", title="t", content=f"new {i}"))
    tv.dropped("m1.md")
    while True:
        work, _ = tv.take(500)
        if not work:
            break
        ids = [np.full(5, int(w.key[1:-3]) % 60000, dtype=np.uint16) for w in work]
        want.update({w.key: i.tolist() for w, i in zip(work, ids, strict=True)})
        tv.install("wordllama-l2-16", [(w, "h2", vector) for w in work], ids)
    view = tv.snapshot()
    assert view.tokens is not None and len(view.tokens) < 1.2 * sum(
        len(v) for k, v in want.items() if k != "m1.md"
    )
    for key, ids in want.items():
        got = view.tokens_of(view.rows[key]) if key in view.rows else None
        assert (got.tolist() if got is not None else None) == (None if key == "m1.md" else ids)
    assert {k: before.tokens_of(before.rows[k]).tolist() for k in old} == old  # the old view's ids stand


def test_vectors_quantized_together_are_quantized_as_one_by_one():
    rng = np.random.default_rng(1)
    for dtype in (np.float32, np.float64):
        for _ in range(50):
            n, dim = int(rng.integers(4, 70)), int(rng.integers(1, 300))
            vectors = [(rng.normal(size=dim) * 10.0 ** rng.integers(-20, 20)).astype(dtype) for _ in range(n)]
            vectors[0][:] = 0
            vectors[1][0], vectors[2][0] = np.inf, np.nan
            together = quantize_rows(vectors)
            assert together is not None
            for i, vector in enumerate(vectors):
                alone, scale = quantize(vector)
                assert np.array_equal(together[0][i], alone) and together[1][i] == scale
    assert quantize_rows([np.ones(4, np.float32), np.ones(5, np.float32)]) is None  # one shape only
    assert quantize_rows([np.ones(4, np.float32), np.ones(4, np.float64)]) is None  # one type only


def test_token_ids_of_many_rows_are_those_of_each_row():
    """tokens_of_rows gives what tokens_of gives row by row: ids, an empty list, or None (no ids
    kept, no vector yet, a dropped row, a row past the end), in the order asked, repeats too."""
    tv = TokenVectors()
    rng = np.random.default_rng(3)
    for i in range(200):
        tv.changed(Memory(id=f"m{i}.md", title="t", content=f"c{i}"))
    vector = np.ones(16, dtype=np.float32) / 4
    work, _ = tv.take(150)  # the last 50 stay pending
    ids = [
        None if k % 9 == 0 else rng.integers(0, 60000, size=int(rng.integers(0, 20))).astype(np.uint16)
        for k in range(len(work))
    ]
    tv.install("wordllama-l2-16", [(w, "h", vector) for w in work], ids)
    tv.dropped("m3.md")
    view = tv.snapshot()
    rows = [int(r) for r in rng.integers(0, len(view.keys) + 20, size=300)]
    many = view.tokens_of_rows(rows)
    one = [view.tokens_of(r) for r in rows]
    assert [None if t is None else t.tolist() for t in many] == [
        None if t is None else t.tolist() for t in one
    ]
    assert sum(t is None for t in one) > 10 and sum(t is not None and t.size > 0 for t in one) > 100
