"""rerankers: each kind found by name, what a loaded one scores, and what /healthz is told of it."""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memvault.config import Settings
from memvault.errors import InvalidArgument
from memvault.kinds import RERANKERS
from memvault.search.embedders.wordllama import BLOCK, MAX_QUERY_CHARS, WordLlamaEmbedder, table_maxsim
from memvault.search.rerankers import (
    RerankerStatus,
    RerankerUnavailable,
    Reranking,
    load_reranker,
    shown,
    token_reranker,
)
from memvault.search.rerankers.maxsim import MaxSim, Widened


class Model:
    """A stand-in for sentence-transformers' CrossEncoder: a pair scores the query's words it holds."""

    seen: ClassVar[list[tuple[str, str]]] = []

    def __init__(self, target: str, **options: object) -> None:
        if not target.startswith("/models/"):
            raise OSError(f"We couldn't connect to the hub to fetch {target}")

    def predict(self, pairs: Sequence[tuple[str, str]], **options: object) -> np.ndarray:
        Model.seen = list(pairs)
        if any("explode" in text for _, text in pairs):
            raise RuntimeError("CUDA out of memory")
        return np.array([[float(sum(w in text for w in query.split()))] for query, text in pairs])


@pytest.fixture
def cross_encoder(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = type(sys)("sentence_transformers")
    fake.CrossEncoder = Model  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sentence_transformers", fake)


def test_each_kind_is_found_by_name(cross_encoder: None):
    assert load_reranker("off") is None
    maxsim = load_reranker(" MaxSim ")
    assert maxsim is not None and maxsim.name == "maxsim" and token_reranker(maxsim) is maxsim
    model = load_reranker("cross-encoder:/models/ms-marco")
    assert model is not None and model.name == "cross-encoder:/models/ms-marco"
    assert token_reranker(model) is None  # it reads texts
    assert {kind.name for kind in RERANKERS} == {"off", "maxsim", "cross-encoder"}


def test_the_settings_name_every_kind_the_table_offers():
    with pytest.raises(InvalidArgument) as caught:
        Settings.from_env({"MEMVAULT_RERANKER": "bert"})
    assert all(kind.name in str(caught.value) for kind in RERANKERS)
    with pytest.raises(InvalidArgument, match="needs a model"):
        Settings.from_env({"MEMVAULT_RERANKER": "cross-encoder"})


def test_a_cross_encoder_scores_pairs_in_order_and_reads_a_bounded_text(cross_encoder: None):
    model = load_reranker("cross-encoder:/models/ms-marco")
    assert model is not None
    scores = model.score("deploy friday", ["nothing here", "deploy on friday", "deploy " + "x" * 5000])
    assert scores.tolist() == [0.0, 2.0, 1.0]
    assert max(len(text) for _, text in Model.seen) <= 2000
    with pytest.raises(RerankerUnavailable, match=r"the cross-encoder failed \(RuntimeError\)"):
        model.score("q", ["explode"])


def test_a_cross_encoder_that_cannot_load_says_why_without_its_path(
    cross_encoder: None, monkeypatch: pytest.MonkeyPatch
):
    with pytest.raises(RerankerUnavailable, match=r"could not load the cross-encoder \(OSError\)"):
        load_reranker("cross-encoder:org/model-on-a-hub")  # the hub is unreachable
    monkeypatch.setitem(sys.modules, "sentence_transformers", None)
    with pytest.raises(RerankerUnavailable, match="not installed"):
        load_reranker("cross-encoder:/models/ms-marco")


def test_maxsim_scores_the_token_ids_a_token_embedder_kept():
    maxsim = token_reranker(load_reranker("maxsim"))
    assert maxsim is not None
    embedder = WordLlamaEmbedder()
    _, kept = embedder.embed_with_tokens(["I bought a Fender Stratocaster", "The cat eats salmon"])
    scores = maxsim.score_tokens(embedder, "guitar", kept)
    assert scores[0] > scores[1]
    with pytest.raises(RerankerUnavailable):
        maxsim.score("guitar", ["texts are not what it reads"])


def test_healthz_is_told_which_reranker_is_in_effect(cross_encoder: None):
    assert Reranking("off").status(tokens=True) == RerankerStatus("off", None)
    assert Reranking("maxsim").status(tokens=True) == RerankerStatus("maxsim", None)
    assert Reranking("maxsim").status(tokens=False) == RerankerStatus("off", None)  # hash: no ids
    assert Reranking("maxsim").status(tokens=None) == RerankerStatus("maxsim (loading)", None)
    waiting = Reranking("cross-encoder:/models/ms-marco")
    assert waiting.status(tokens=True) == RerankerStatus("cross-encoder:ms-marco (not loaded yet)", None)
    assert waiting.get() is not None  # recall loads it; the status never did
    assert waiting.status(tokens=False) == RerankerStatus("cross-encoder:ms-marco", None)
    waiting.failed(RerankerUnavailable("the cross-encoder failed (RuntimeError)"))
    status = waiting.status(tokens=True)
    assert status.name == "off"
    assert (
        status.fallback == "cross-encoder:ms-marco stopped working: the cross-encoder failed (RuntimeError)"
    )


def test_a_reranker_that_cannot_load_is_tried_once(cross_encoder: None):
    calls = []

    def loader() -> None:
        calls.append(1)
        raise RerankerUnavailable("could not load the cross-encoder (OSError)")

    reranking = Reranking("cross-encoder:/models/gone", loader=loader)
    assert reranking.get() is None and reranking.get() is None and len(calls) == 1
    status = reranking.status(tokens=True)
    assert status.name == "off" and (status.fallback or "").startswith("cross-encoder:gone could not load")


def test_a_path_in_a_name_shows_as_its_folders_name():
    assert shown("cross-encoder:/home/someone/models/ms-marco") == "cross-encoder:ms-marco"
    assert shown("cross-encoder:./ms-marco") == "cross-encoder:ms-marco"
    assert (
        shown("cross-encoder:cross-encoder/ms-marco-MiniLM") == "cross-encoder:cross-encoder/ms-marco-MiniLM"
    )
    assert shown("maxsim") == "maxsim"


@functools.cache
def wordllama() -> WordLlamaEmbedder:
    return WordLlamaEmbedder()


RERANKER = MaxSim()
WORDS = st.sampled_from(
    "guitar Fender Stratocaster the cat eats salmon I bought a new car yesterday and "
    "piano lessons on Tuesday with Mary , ? 2023 musical instruments café naïve".split()
)


def reference_maxsim(table, query: str, memories) -> np.ndarray:
    """WordLlama's MaxSim as it was before it skipped np.unique and widened rows once (kept here,
    frozen, as the reference the faster code must match bit for bit)."""
    out = np.zeros(len(memories), dtype=np.float64)
    raw = table.tokenizer.encode(query[:MAX_QUERY_CHARS], add_special_tokens=False).ids
    q = np.unique(np.clip(np.asarray(raw, dtype=np.intp), 0, table.table.shape[0] - 1))
    q = q[~table.skip[q]]
    sizes = np.fromiter(map(len, memories), dtype=np.intp, count=len(memories))
    have = np.flatnonzero(sizes)
    if not q.size or not have.size:
        return out
    w = table.norms[q]
    w = w / w.sum()
    ids = np.concatenate([memories[i] for i in have.tolist()])
    distinct = np.unique(ids)
    rows = distinct.astype(np.intp)
    unit = table.table[q].astype(np.float32) / np.maximum(table.norms[q], 1e-9)[:, None]
    wide = table.table[rows].astype(np.float32)
    cosines = np.empty((len(unit), len(wide)), dtype=np.float32)
    step = max(1, BLOCK // max(1, unit.size))
    for start in range(0, len(wide), step):
        np.matmul(unit, wide[start : start + step].T, out=cosines[:, start : start + step])
    cosines /= np.maximum(table.norms[rows], 1e-9)
    starts = np.zeros(len(have), dtype=np.intp)
    np.cumsum(sizes[have][:-1], out=starts[1:])
    best = np.maximum.reduceat(cosines[:, np.searchsorted(distinct, ids)], starts, axis=1)
    out[have] = (best * w[:, None]).sum(axis=0, dtype=np.float64)
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.lists(WORDS, max_size=30).map(" ".join), max_size=12),
    st.lists(WORDS, max_size=8).map(" ".join),
    st.lists(st.integers(min_value=0, max_value=11), max_size=4),
)
def test_maxsim_gives_the_embedders_own_maxsim_to_the_last_bit(texts, query: str, pending: list[int]):
    """The reranker's MaxSim over the embedder's token table scores each memory as the embedder's
    maxsim (the reference) does, bit for bit: memories without tokens (pending) and queries of
    stop words alone included."""
    embedder = wordllama()
    _, kept = embedder.embed_with_tokens(texts)
    for i in pending:
        if i < len(kept):
            kept[i] = kept[i][:0]
    want = reference_maxsim(embedder.tokens, query, kept).tobytes()
    assert embedder.maxsim(query, kept).tobytes() == want
    plain = table_maxsim(embedder.tokens, query, kept)
    assert plain.dtype == np.float64 and plain.tobytes() == want
    # Through one reranker, whose widened rows outlive the call (those of earlier examples too).
    assert RERANKER.score_tokens(embedder, query, kept).tobytes() == want


def test_widened_rows_are_the_tables_rows_as_float32_however_they_grow():
    """Rows asked in batches (repeats, rows asked before, batches larger than the room kept) are
    the float16 table's rows widened, bit for bit."""
    rng = np.random.default_rng(11)
    table = rng.normal(size=(5000, 8)).astype(np.float16)
    table[7] = np.inf
    wide = Widened(table)
    for size in (3, 300, 1, 2000, 50, 4000):
        ids = rng.integers(0, len(table), size=size).astype(np.intp)
        got = wide.rows(ids)
        assert got.dtype == np.float32 and got.tobytes() == table[ids].astype(np.float32).tobytes()
