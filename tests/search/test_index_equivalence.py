"""Index.search and Index.scores equal the old dense scoring (tests/search/index_reference.py) bit for
bit: the same hits in the same order, the same float32 scores, the same counts."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from memvault.search.index import NEAR_MODES, Index
from tests.search.index_reference import ReferenceIndex
from tests.strategies import PROPS

WORDS = [
    "deploy", "postgres", "staging", "cluster", "migration", "kubernetes", "sourdough", "starter",
    "alice", "bob", "review", "monday", "garden", "tomato", "tomatoes", "bicycle", "repair", "travel",
    "kyoto", "museum", "painting", "concert", "violin", "deadline", "report", "budget",
]  # fmt: skip
STOP = ["the", "and", "of", "a", "to"]
FILLER = ["lorem", "ipsum", "dolor", "amet", "consectetur", "adipiscing", "elit", "sed"]


def typo(word: str, at: int) -> str:
    i = at % len(word)
    return word[:i] + ("x" if word[i] != "x" else "y") + word[i + 1 :]


words = st.sampled_from(WORDS + STOP)
texts = st.lists(words, max_size=30).map(" ".join)
docs = st.tuples(
    st.integers(0, 40),  # which id
    st.lists(words, min_size=1, max_size=4).map(" ".join),  # title
    texts,
    st.lists(st.sampled_from(WORDS), max_size=3),  # tags
)
steps = st.lists(st.one_of(docs, st.integers(0, 40)), min_size=1, max_size=40)  # upsert or remove

query_words = st.one_of(
    st.sampled_from(WORDS + STOP),
    st.tuples(st.sampled_from(WORDS), st.integers(0, 20)).map(lambda t: typo(*t)),  # a typo
    st.tuples(st.sampled_from(WORDS), st.integers(3, 6)).map(lambda t: t[0][: t[1]]),  # a prefix
    st.just("zzqxvw"),  # matches nothing
)
queries = st.lists(query_words, min_size=1, max_size=6).map(" ".join)


def build(kind: type[Index], plan: list[object], filler: int) -> Index:
    index = kind()
    # Memories no query word matches: the matched ones are few among many docnos.
    for n in range(filler):
        index.upsert(f"filler/{n}.md", title=FILLER[n % len(FILLER)], body=" ".join(FILLER[: n % 7 + 1]))
    for step in plan:
        if isinstance(step, int):
            index.remove(f"notes/{step}.md")
        else:
            no, title, body, tags = step  # type: ignore[misc]
            index.upsert(f"notes/{no}.md", title=title, body=body, tags=tags)
    return index


def same_scores(got: tuple[list[str], np.ndarray], want: tuple[list[str], np.ndarray]) -> None:
    assert got[0] == want[0]
    assert got[1].dtype == want[1].dtype == np.float32
    assert np.array_equal(got[1].view(np.uint32), want[1].view(np.uint32))


def check(new: Index, old: Index, query: str, limit: int | None) -> None:
    got, want = new.search(query, limit=limit), old.search(query, limit=limit)
    assert got == want  # Hit's score is a float: equal means bit for bit here
    same_scores(new.scores(query, limit=limit), old.scores(query, limit=limit))
    for near in NEAR_MODES:
        same_scores(
            new.scores(query, limit=limit, every=False, near=near),
            old.scores(query, limit=limit, every=False, near=near),
        )


@PROPS
@given(
    plan=steps,
    filler=st.sampled_from([0, 3, 400]),
    asked=st.lists(queries, min_size=1, max_size=5),
    limit=st.one_of(st.none(), st.integers(0, 12)),
)
def test_scoring_equals_the_old_dense_scoring(
    plan: list[object], filler: int, asked: list[str], limit: int | None
) -> None:
    new, old = build(Index, plan, filler), build(ReferenceIndex, plan, filler)
    titles = [step[1] for step in plan if not isinstance(step, int)]  # type: ignore[index]
    for query in [*asked, *titles[:3]]:
        check(new, old, query, limit)
        check(new, old, f"{query} {query}", limit)  # every term twice


def test_scoring_equals_the_old_on_a_larger_vault() -> None:
    rng = np.random.default_rng(49)
    vocab = [f"w{n}" for n in range(3000)]
    new, old = Index(), ReferenceIndex()
    for n in range(3000):
        body = " ".join(rng.choice(vocab, size=int(rng.integers(1, 60)), p=None).tolist())
        title = " ".join(rng.choice(vocab, size=3).tolist())
        for index in (new, old):
            index.upsert(f"m/{n}.md", title=title, body=body, tags=[str(rng.integers(0, 9))] if n % 3 else [])
        if n % 7 == 0:
            for index in (new, old):
                index.remove(f"m/{n // 2}.md")
    for _ in range(200):
        query = " ".join(rng.choice(vocab, size=int(rng.integers(1, 5))).tolist())
        check(new, old, query, None)
        check(new, old, query, 10)
