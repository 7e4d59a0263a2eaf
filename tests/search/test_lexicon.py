"""Lexicon: cached query-term expansions stay what a fresh lookup gives as terms come and go."""

from __future__ import annotations

import random

from memvault.search import lexicon as lexicon_module
from memvault.search.lexicon import Lexicon

WORDS = [
    "deploy", "deployed", "deploying", "staging", "stag", "postgres", "postgers", "postgre", "release",
    "releases", "relase", "cat", "cats", "catalog", "kubernetes", "kubernets", "ab", "abc", "abcd",
    "abcde", "1234", "12345", "x1y2", "東京", "京都", "東", "migration", "migrate", "migrations",
]  # fmt: skip


def expansion(lex: Lexicon, query: str) -> dict[str, float]:
    return {lex.terms[tid]: weight for tid, weight in lex.expand(query)}


def fresh_expansion(lex: Lexicon, query: str) -> dict[str, float]:
    return expansion(Lexicon.from_terms(list(lex.terms)), query)


def test_cached_expansions_follow_terms_added_and_freed() -> None:
    """Random adds, frees and lookups: every lookup equals a lookup in a lexicon built afresh
    from the same terms (a cached expansion a new or freed term changes must not survive)."""
    rng = random.Random(5)
    queries = [*WORDS, "deplo", "stagin", "kubernetez", "relea", "catz", "東", "migratio", "123"]
    for _round in range(30):
        lex = Lexicon()
        held: dict[str, int] = {}
        for _ in range(200):
            action = rng.random()
            if action < 0.35:
                word = rng.choice(WORDS) if rng.random() < 0.8 else f"{rng.choice(WORDS)}{rng.randint(0, 9)}"
                if word not in lex:
                    held[word] = lex.add(word)
            elif action < 0.5 and held:
                word = rng.choice(sorted(held))
                lex.free(held.pop(word))
            else:
                query = rng.choice(queries)
                assert expansion(lex, query) == fresh_expansion(lex, query), query


def test_a_new_number_keeps_the_cached_expansions_of_words() -> None:
    lex = Lexicon()
    for word in ("deploy", "deployed", "staging"):
        lex.add(word)
    first = lex.expand("deploy")
    lex.add("4711")  # a write's new number: no word's expansion changes
    assert lex.expand("deploy") is first
    lex.add("deploys")  # a word it now matches as a prefix
    assert "deploys" in expansion(lex, "deploy")


def test_many_terms_added_at_once_drop_the_whole_cache(monkeypatch) -> None:
    monkeypatch.setattr(lexicon_module, "ADDED_CHECKED_MAX", 3)
    lex = Lexicon()
    lex.add("release")
    first = lex.expand("release")
    for n in range(4):
        lex.add(str(1000 + n))
    assert lex.expand("release") is not first
    assert lex.expand("release") == first
