from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memvault.search.index import Hit, Index
from memvault.search.indexarrays import postings_of
from memvault.search.text import terms_of


def ids(hits: list[Hit]) -> list[str]:
    return [h.id for h in hits]


def found(index: Index, query: str) -> list[str]:
    hits, _ = index.search(query)
    return ids(hits)


@pytest.fixture
def index() -> Index:
    ix = Index()
    ix.upsert(
        "projects/deploy-notes.md",
        title="Deploy notes",
        body="We shipped postgres to the staging cluster on Monday after the migration.",
        tags=["ops"],
    )
    ix.upsert(
        "people/alice.md",
        title="Alice",
        body="Alice prefers kubernetes and writes Rust. She reviews every migration.",
        tags=["team"],
    )
    ix.upsert(
        "recipes/bread.md",
        title="Sourdough bread",
        body="Flour, water, salt and a lively starter. Bake at 250 degrees.",
    )
    return ix


# --- tokenization ------------------------------------------------------------------------------


def test_tokenize_folds_case_and_width_and_splits_on_punctuation_and_underscore() -> None:
    fullwidth = "\uff37\uff2f\uff32\uff2c\uff24"  # "WORLD" in full-width letters
    assert terms_of(f"Hello, {fullwidth}! snake_case v2.0") == ["hello", "world", "snake", "case", "v2", "0"]


def test_tokenize_strips_common_english_suffixes() -> None:
    assert terms_of("deploys deployed deploying deploy") == ["deploy"] * 4
    assert terms_of("memories classes patches status") == ["memory", "class", "patch", "status"]


def test_tokenize_splits_cjk_runs_into_overlapping_bigrams() -> None:
    assert terms_of("東京都庁 tower") == ["東京", "京都", "都庁", "tower"]
    assert terms_of("猫") == ["猫"]
    assert terms_of("한국어") == ["한국", "국어"]


# --- matching ----------------------------------------------------------------------------------


def test_body_word_is_found(index: Index) -> None:
    assert found(index, "kubernetes") == ["people/alice.md"]


def test_title_tag_and_filename_words_are_found(index: Index) -> None:
    assert found(index, "sourdough") == ["recipes/bread.md"]
    assert found(index, "ops") == ["projects/deploy-notes.md"]
    assert found(index, "recipes") == ["recipes/bread.md"]
    assert found(index, "md") == []  # the extension is not a word of the name


def test_search_is_case_insensitive(index: Index) -> None:
    assert found(index, "KUBERNETES") == ["people/alice.md"]


def test_inflected_forms_match(index: Index) -> None:
    assert found(index, "deploying") == ["projects/deploy-notes.md"]
    assert found(index, "ship") == ["projects/deploy-notes.md"]  # body says "shipped"
    assert found(index, "reviewed") == ["people/alice.md"]  # body says "reviews"


def test_typo_in_query_is_tolerated(index: Index) -> None:
    assert found(index, "kubernetis") == ["people/alice.md"]
    assert sorted(found(index, "migraton")) == ["people/alice.md", "projects/deploy-notes.md"]


def test_half_typed_or_misspelt_inflection_matches_its_stem(index: Index) -> None:
    # "staging" is indexed as "stag"
    assert found(index, "stagin") == ["projects/deploy-notes.md"]
    assert found(index, "stagign") == ["projects/deploy-notes.md"]


def test_swapped_neighbour_letters_count_as_one_typo(index: Index) -> None:
    assert found(index, "postgers") == ["projects/deploy-notes.md"]


def test_long_words_tolerate_two_typos_short_words_one(index: Index) -> None:
    assert found(index, "mgiratoin") == found(index, "migration")  # 9 letters, 2 edits
    assert len(found(index, "mgiratoin")) == 2
    assert found(index, "flaar") == []  # 5 letters, 2 edits from "flour"
    assert found(index, "flaur") == ["recipes/bread.md"]


def test_words_shorter_than_four_letters_are_not_fuzzed() -> None:
    ix = Index()
    ix.upsert("a.md", title="", body="cat")
    assert found(ix, "cat") == ["a.md"]
    assert found(ix, "cot") == []


def test_numbers_are_not_fuzzed() -> None:
    ix = Index()
    ix.upsert("a.md", title="", body="released in 2024")
    assert found(ix, "2025") == []
    assert found(ix, "2024") == ["a.md"]


def test_prefix_matches(index: Index) -> None:
    assert found(index, "postg") == ["projects/deploy-notes.md"]
    assert found(index, "kub") == ["people/alice.md"]


def test_prefix_needs_three_characters(index: Index) -> None:
    assert found(index, "ku") == []


def test_deployment_is_found_by_deploy() -> None:
    ix = Index()
    ix.upsert("a.md", title="", body="the deployment failed")
    assert found(ix, "deploy") == ["a.md"]


def test_exact_match_outranks_prefix_and_typo_matches() -> None:
    ix = Index()
    ix.upsert("typo.md", title="", body="the metric went up")  # "metric": one edit from "matric"
    ix.upsert("prefix.md", title="", body="the matrices were inverted")  # "matric" is a prefix
    ix.upsert("exact.md", title="", body="the matric was lost")
    hits, total = ix.search("matric")
    assert ids(hits) == ["exact.md", "prefix.md", "typo.md"]
    assert total == 3
    assert all(h.matched_all for h in hits)


def test_scores_match_near_terms_always_only_for_missing_words_or_never() -> None:
    ix = Index()
    ix.upsert("typo.md", title="", body="the metric went up")
    ix.upsert("prefix.md", title="", body="the matrices were inverted")
    ix.upsert("exact.md", title="", body="the matric was lost")
    near = {mode: ix.scores("matric", every=False, near=mode)[0] for mode in ("all", "missing", "none")}
    assert near == {
        "all": ["exact.md", "prefix.md", "typo.md"],
        "missing": ["exact.md"],
        "none": ["exact.md"],
    }
    # A word the vault does not hold still finds its memories by their near terms, unless none are wanted.
    assert ix.scores("metrik", every=False, near="missing")[0] == ["typo.md"]
    assert ix.scores("metrik", every=False, near="none")[0] == []
    assert ix.scores("metrik", every=False)[0] == ix.scores("metrik", every=False, near="all")[0]


def test_all_terms_required_before_any_term_fallback(index: Index) -> None:
    hits, total = index.search("migration kubernetes")
    assert ids(hits) == ["people/alice.md"]
    assert total == 1
    assert hits[0].matched_all


def test_any_term_fallback_when_no_memory_has_all_terms(index: Index) -> None:
    hits, total = index.search("kubernetes sourdough zebra")
    assert sorted(ids(hits)) == ["people/alice.md", "recipes/bread.md"]
    assert total == 2
    assert not any(h.matched_all for h in hits)


def test_any_term_fallback_ranks_more_matched_terms_first() -> None:
    ix = Index()
    ix.upsert("one.md", title="Apple", body="apple apple apple apple apple", tags=["apple"])
    ix.upsert("two.md", title="", body="apple banana and a long tail of other words here")
    for i in range(5):
        ix.upsert(f"filler{i}.md", title="", body="nothing to see")
    hits, total = ix.search("apple banana cherry")
    assert ids(hits) == ["two.md", "one.md"]
    assert hits[1].score > hits[0].score  # one.md scores higher, yet matched fewer terms
    assert total == 2


def test_unknown_word_matches_nothing(index: Index) -> None:
    assert index.search("zyzzyva") == ([], 0)


def test_empty_whitespace_or_punctuation_query_returns_nothing(index: Index) -> None:
    for query in ["", "   ", "?!.,;", "___"]:
        assert index.search(query) == ([], 0)


def test_search_of_empty_index_returns_nothing() -> None:
    assert Index().search("anything") == ([], 0)


def test_stop_words_are_ignored_when_query_has_other_terms(index: Index) -> None:
    # "the" is in deploy-notes only; it must not stop alice.md from matching all terms.
    hits, _ = index.search("the kubernetes")
    assert ids(hits) == ["people/alice.md"]
    assert hits[0].matched_all


def test_can_could_and_whom_are_function_words_too(index: Index) -> None:
    index.upsert("notes/could.md", title="", body="I could, could I? Whom can I ask?")
    hits, _ = index.search("could kubernetes")
    assert ids(hits) == ["people/alice.md"]


def test_stop_word_only_query_still_matches(index: Index) -> None:
    assert found(index, "the") == ["projects/deploy-notes.md"]


def test_cjk_text_is_searchable_by_bigrams() -> None:
    ix = Index()
    ix.upsert("tokyo.md", title="出張", body="来週は東京都庁で会議があります。")
    ix.upsert("kyoto.md", title="旅行", body="京都の寺を見に行く")
    ix.upsert("korea.md", title="", body="서울에서 한국어 수업")
    assert found(ix, "都庁") == ["tokyo.md"]
    assert found(ix, "会議") == ["tokyo.md"]
    assert sorted(found(ix, "京都")) == ["kyoto.md", "tokyo.md"]
    assert found(ix, "東京都庁") == ["tokyo.md"]
    assert found(ix, "한국어") == ["korea.md"]
    assert found(ix, "大阪") == []


def test_single_cjk_character_query_matches_inside_longer_runs() -> None:
    ix = Index()
    ix.upsert("tokyo.md", title="", body="東京都庁")
    ix.upsert("cat.md", title="", body="猫")
    assert found(ix, "庁") == ["tokyo.md"]
    assert found(ix, "猫") == ["cat.md"]


def test_cjk_next_to_latin_is_split() -> None:
    ix = Index()
    ix.upsert("a.md", title="", body="東京tower2024")
    assert found(ix, "tower2024") == ["a.md"]
    assert found(ix, "東京") == ["a.md"]


# --- ranking -----------------------------------------------------------------------------------


def test_title_match_outranks_body_match() -> None:
    ix = Index()
    ix.upsert("body.md", title="Notes", body="something about the raft protocol")
    ix.upsert("title.md", title="Raft", body="something about a consensus protocol")
    assert found(ix, "raft") == ["title.md", "body.md"]


def test_filename_and_tag_match_outrank_body_match() -> None:
    ix = Index()
    ix.upsert("a.md", title="Notes", body="we talked about gardening today")
    ix.upsert("gardening.md", title="Notes", body="we talked about it today")
    ix.upsert("c.md", title="Notes", body="we talked about it today", tags=["gardening"])
    hits, _ = ix.search("gardening")
    assert ids(hits)[-1] == "a.md"
    assert set(ids(hits)[:2]) == {"gardening.md", "c.md"}


def test_title_match_outranks_filename_and_tag_match() -> None:
    ix = Index()
    ix.upsert("gardening.md", title="Notes", body="misc", tags=["gardening"])
    ix.upsert("b.md", title="Gardening", body="misc")
    assert found(ix, "gardening") == ["b.md", "gardening.md"]


def test_more_occurrences_rank_higher_in_equal_length_bodies() -> None:
    ix = Index()
    ix.upsert("once.md", title="", body="cache miss then a quiet day and nothing")
    ix.upsert("thrice.md", title="", body="cache cache cache then a quiet day and")
    ix.upsert("filler.md", title="", body="nothing relevant here at all today")
    assert found(ix, "cache") == ["thrice.md", "once.md"]


def test_near_exact_title_query_ranks_that_memory_first() -> None:
    ix = Index()
    ix.upsert("target.md", title="Postgres upgrade checklist", body="steps: backup, test, switch")
    for i in range(5):
        # Every word in a longer title, the filename, the tags and the body: higher BM25 scores.
        ix.upsert(
            f"postgres-upgrade-checklist-{i}.md",
            title=f"Postgres upgrade checklist, week {i} of the migration project",
            body="postgres upgrade checklist postgres upgrade checklist postgres upgrade",
            tags=["postgres", "upgrade", "checklist"],
        )
    for index in (ix, Index.from_snapshot(ix.snapshot().arrays())):  # as built, and after a restart
        hits, total = index.search("postgres upgrad checklist")  # one typo
        assert hits[0].id == "target.md"
        assert hits[0].score < hits[1].score
        assert total == 6


def test_scores_are_positive_and_descending_within_each_group(index: Index) -> None:
    hits, _ = index.search("migration")
    assert len(hits) == 2
    assert all(h.score > 0 for h in hits)
    assert hits[0].score >= hits[1].score


def test_limit_and_total() -> None:
    ix = Index()
    for i in range(30):
        ix.upsert(f"n{i:02}.md", title="", body="shared word " + "filler " * i)
    hits, total = ix.search("shared", limit=5)
    assert total == 30
    assert len(hits) == 5
    full, _ = ix.search("shared")
    assert ids(hits) == ids(full)[:5]
    assert ix.search("shared", limit=0) == ([], 30)
    assert ids(full)[0] == "n00.md"  # shortest body first (BM25 length normalisation)


# --- updates -----------------------------------------------------------------------------------


def test_remove_drops_memory_from_results(index: Index) -> None:
    index.remove("people/alice.md")
    assert found(index, "kubernetes") == []
    assert found(index, "migration") == ["projects/deploy-notes.md"]
    assert "people/alice.md" not in index
    assert len(index) == 2


def test_remove_of_unknown_id_is_a_no_op(index: Index) -> None:
    index.remove("nope.md")
    index.remove("nope.md")
    assert len(index) == 3


def test_upsert_replaces_old_terms(index: Index) -> None:
    index.upsert("people/alice.md", title="Alice", body="Now into gardening.")
    assert found(index, "kubernetes") == []
    assert found(index, "gardening") == ["people/alice.md"]
    assert found(index, "team") == []  # tags replaced too
    assert len(index) == 3


def test_removed_words_leave_typo_and_prefix_vocabulary() -> None:
    ix = Index()
    ix.upsert("a.md", title="", body="kubernetes")
    ix.upsert("b.md", title="", body="unrelated")
    assert found(ix, "kubernetis") == ["a.md"]
    assert found(ix, "kuber") == ["a.md"]
    ix.upsert("a.md", title="", body="nothing")
    assert found(ix, "kubernetis") == []
    assert found(ix, "kuber") == []


def test_new_words_become_typo_and_prefix_candidates_after_cached_searches() -> None:
    ix = Index()
    ix.upsert("a.md", title="", body="postgres")
    assert found(ix, "postg") == ["a.md"]
    assert found(ix, "postgris") == ["a.md"]
    ix.upsert("b.md", title="", body="postgis")
    assert sorted(found(ix, "postg")) == ["a.md", "b.md"]
    assert sorted(found(ix, "postgris")) == ["a.md", "b.md"]  # one edit from "postgis" too


def test_reused_slot_does_not_inherit_old_terms() -> None:
    ix = Index()
    ix.upsert("old.md", title="", body="zebra")
    ix.remove("old.md")
    ix.upsert("new.md", title="", body="giraffe")
    assert found(ix, "zebra") == []
    assert found(ix, "giraffe") == ["new.md"]


def test_len_contains_and_ids_follow_upserts_and_removes() -> None:
    ix = Index()
    ix.upsert("a.md", title="A", body="x")
    ix.upsert("b.md", title="B", body="y")
    ix.upsert("a.md", title="A2", body="z")
    assert len(ix) == 2
    assert "a.md" in ix
    assert ix.ids() == ["a.md", "b.md"]
    ix.remove("a.md")
    assert ix.ids() == ["b.md"]
    assert "a.md" not in ix


def test_an_edit_moves_only_the_postings_that_change() -> None:
    ix = Index()
    ix.upsert("n.md", title="Garden", body="tomatoes and basil", tags=["summer"])
    ix.upsert("m.md", title="Other", body="tomatoes twice tomatoes", tags=[])
    before = {q: ix.search(q)[0] for q in ("tomatoes", "basil", "garden")}
    ix.upsert("n.md", title="Garden", body="tomatoes and basil", tags=["winter"])  # a tag only
    assert found(ix, "summer") == [] and found(ix, "winter") == ["n.md"]
    assert {q: ix.search(q)[0] for q in before} == before  # the unchanged words score as before
    ix.upsert("n.md", title="Garden", body="tomatoes tomatoes tomatoes and basil", tags=["winter"])
    assert found(ix, "tomatoes") == ["n.md", "m.md"]  # more of a word: its posting changed
    ix.remove("n.md")
    assert found(ix, "tomatoes") == ["m.md"] and found(ix, "winter") == [] and found(ix, "basil") == []


def test_tags_given_as_a_string_are_rejected() -> None:
    with pytest.raises(TypeError):
        Index().upsert("a.md", title="", body="", tags="ops")


def test_many_memories_and_words_grow_the_index() -> None:
    ix = Index()
    for i in range(1200):
        ix.upsert(f"n{i}.md", title=f"note {i}", body=f"common word{i}x unique{i}zz " * 3)
    for i in (0, 63, 64, 250, 1199):
        hits, total = ix.search(f"unique{i}zz")
        assert ids(hits) == [f"n{i}.md"], i
        assert total == 1
    hits, total = ix.search("common", limit=10)
    assert total == 1200
    assert len(hits) == 10


def test_removing_from_long_posting_lists_keeps_the_others() -> None:
    ix = Index()
    for i in range(1000):
        ix.upsert(f"n{i}.md", title="", body=f"common tag{i}q")
    removed = set(range(3, 1000, 7))
    for i in removed:
        ix.remove(f"n{i}.md")
    hits, total = ix.search("common")
    assert total == 1000 - len(removed)
    assert set(ids(hits)) == {f"n{i}.md" for i in range(1000) if i not in removed}


# --- properties --------------------------------------------------------------------------------

WORDS = st.text(alphabet=st.characters(categories=("Ll", "Lu", "Lo", "Nd")), min_size=1, max_size=8)
IDS = st.sampled_from([f"m{i}.md" for i in range(6)])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("upsert"), IDS, st.lists(WORDS, min_size=1, max_size=8)),
        st.tuples(st.just("remove"), IDS, st.just([])),
    ),
    max_size=25,
)


@pytest.mark.slow
@settings(deadline=None, max_examples=150)
@given(OPS)
def test_every_live_memory_is_found_by_its_words_and_removed_ones_never(
    ops: list[tuple[str, str, list[str]]],
) -> None:
    ix = Index()
    model: dict[str, list[str]] = {}
    for op, id, words in ops:
        if op == "upsert":
            ix.upsert(id, title="", body=" ".join(words))
            model[id] = words
        else:
            ix.remove(id)
            model.pop(id, None)

    assert sorted(ix.ids()) == sorted(model)
    all_words = {w for words in model.values() for w in words} | {"gone", "zzzz"}
    for word in all_words:
        hits, total = ix.search(word)
        hit_ids = ids(hits)
        assert set(hit_ids) <= set(model)
        assert len(hit_ids) == len(set(hit_ids)) == total
        for id, words in model.items():
            if word in words:
                assert id in hit_ids
                assert next(h for h in hits if h.id == id).matched_all


def test_very_long_query_is_bounded_and_still_answers() -> None:
    ix = Index()
    ix.upsert("a.md", title="", body="alpha")
    hits, total = ix.search("alpha " + " ".join(f"w{i}" for i in range(500)))
    assert ids(hits) == ["a.md"]
    assert total == 1
    assert not hits[0].matched_all


def test_memories_stay_searchable_across_batched_posting_flushes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("memvault.search.index._FLUSH_AT", 7)
    ix = Index()
    for i in range(40):
        ix.upsert(f"n{i}.md", title="", body=f"shared w{i}q and more words here")
        if i % 3 == 0:
            ix.upsert(f"n{i}.md", title="", body=f"shared w{i}q replaced")
    ix.remove("n5.md")
    assert ix.search("shared")[1] == 39
    assert found(ix, "w7q") == ["n7.md"]
    assert found(ix, "w5q") == []
    assert sorted(found(ix, "replaced")) == sorted(f"n{i}.md" for i in range(0, 40, 3))


def _results(ix: Index, queries: list[str]) -> list[list[tuple[str, float, bool]]]:
    return [[(h.id, round(h.score, 6), h.matched_all) for h in ix.search(q)[0]] for q in queries]


def test_snapshot_round_trip_answers_every_query_the_same(index: Index) -> None:
    index.upsert("cjk.md", title="東京の会議", body="東京で会議 and café", tags=["日本"])
    index.upsert("gone.md", title="Gone", body="temporary words")
    index.remove("gone.md")  # a freed document number and freed terms
    restored = Index.from_snapshot(index.snapshot().arrays())
    queries = [
        "migration",
        "kubernets",
        "deploy",
        "東京",
        "会",
        "café",
        "starter bake",
        "temporary",
        "alice rust",
    ]
    assert _results(restored, queries) == _results(index, queries)
    assert sorted(restored.ids()) == sorted(index.ids())
    restored.upsert("new.md", title="New", body="postgres again")  # the restored index stays writable
    assert sorted(found(restored, "postgres")) == ["new.md", "projects/deploy-notes.md"]


def test_a_restored_index_edits_and_snapshots_like_the_one_it_came_from() -> None:
    """A restored document's terms are slices of the snapshot's buffer until it changes: an edit
    or a removal must drop exactly its old postings, and a later snapshot must mix both kinds."""
    docs = {f"d{i}.md": (f"Title {i}", f"common word{i % 7} unique{i} shared{i % 3}") for i in range(60)}
    built = Index()
    for id, (title, body) in docs.items():
        built.upsert(id, title=title, body=body, tags=[f"t{int(id[1:-3]) % 4}"])
    restored = Index.from_snapshot(built.snapshot().arrays())
    for ix in (built, restored):
        for i in range(0, 60, 3):
            ix.upsert(f"d{i}.md", title=f"Edited {i}", body=f"rewritten{i} common", tags=["t9"])
        for i in range(1, 60, 5):
            ix.remove(f"d{i}.md")
        ix.upsert("d1.md", title="Back", body="returned unique1")  # a freed number, used again
    queries = ["common", "unique4", "unique57", "rewritten6", "word2", "shared1", "t9", "t1", "edited"]
    queries += ["title", "unique1", "returned", "d7"]
    assert _results(restored, queries) == _results(built, queries)
    assert found(restored, "unique57") == []  # the edit dropped the restored document's old terms
    again = Index.from_snapshot(restored.snapshot().arrays())
    assert _results(again, queries) == _results(built, queries)
    assert sorted(again.ids()) == sorted(built.ids())


def test_a_snapshot_taken_before_changes_keeps_the_old_state(index: Index) -> None:
    frozen = index.snapshot()
    index.upsert("people/alice.md", title="Alice", body="now only gardening")
    index.remove("recipes/bread.md")
    restored = Index.from_snapshot(frozen.arrays())
    assert found(restored, "kubernetes") == ["people/alice.md"]
    assert found(restored, "sourdough") == ["recipes/bread.md"]
    assert found(restored, "gardening") == []


def test_a_snapshot_with_terms_out_of_range_is_refused(index: Index) -> None:
    arrays = index.snapshot().arrays()
    arrays["doc_terms"] = arrays["doc_terms"] | np.uint32(0xFFFF00)
    with pytest.raises(ValueError, match="unknown terms"):
        Index.from_snapshot(arrays)
    arrays = index.snapshot().arrays()
    arrays["dl"] = arrays["dl"][:-1]
    with pytest.raises(ValueError, match="inconsistent"):
        Index.from_snapshot(arrays)


@settings(max_examples=300, deadline=None)
@given(st.text(min_size=1, max_size=40))
def test_one_terms_character_set_is_the_vectorised_ones(term: str) -> None:
    from memvault.search.lexicon import char_mask, char_masks

    assert char_mask(term) == int(char_masks([term, "x"])[0])


def test_a_snapshot_stores_the_postings_and_one_without_them_restores_the_same() -> None:
    """The postings a restart once sorted out of the documents' term lists come with the snapshot;
    a loader's arrays, and snapshots of version 5, have none and give the same index."""
    ix = Index()
    ix.upsert("target.md", title="Postgres upgrade checklist", body="steps: backup, test, switch")
    for i in range(40):
        ix.upsert(
            f"n{i}.md", title=f"Note {i} on postgres", body=f"word{i % 5} shared upgrade{i % 3}", tags=["t"]
        )
    ix.remove("n7.md")
    arrays = ix.snapshot().arrays()
    assert {"postings", "term_postings"} <= set(arrays)
    # The index's own postings, renumbered past the freed document: per term, what a sort gives.
    counts = arrays["doc_term_counts"]
    sorted_postings, per_term = postings_of(arrays["doc_terms"], counts, len(arrays["terms.len"]))
    assert arrays["term_postings"].tolist() == per_term.tolist()
    ends = np.cumsum(per_term).tolist()
    for start, end in zip([0, *ends[:-1]], ends, strict=True):
        assert sorted(arrays["postings"][start:end].tolist()) == sorted_postings[start:end].tolist()
    bare = {k: v for k, v in arrays.items() if k not in ("postings", "term_postings")}
    queries = ["postgres upgrad checklist", "word3", "upgrade1", "shared", "note 12 on postgres", "t"]
    want = _results(ix, queries)
    for restored in (Index.from_snapshot(arrays), Index.from_snapshot(bare)):
        assert _results(restored, queries) == want
        assert _results(Index.from_snapshot(restored.snapshot().arrays()), queries) == want  # unchanged
        restored.upsert(
            "late.md", title="Postgres upgrade checklists", body="more steps"
        )  # titles as a list now
        restored.remove("n3.md")
        ix2 = Index.from_snapshot(restored.snapshot().arrays())
        assert _results(ix2, queries) == _results(restored, queries)
        assert [h.id for h in ix2.search("postgres upgrade checklist")[0][:2]] == ["target.md", "late.md"]


def test_postings_that_do_not_fit_the_documents_are_refused() -> None:
    ix = Index()
    for i in range(10):
        ix.upsert(f"n{i}.md", title=f"Note {i}", body=f"word{i % 3} common")
    arrays = ix.snapshot().arrays()
    short = dict(arrays, postings=arrays["postings"][:-1])
    moved = dict(arrays, term_postings=np.roll(arrays["term_postings"], 1))
    for bad in (short, moved):
        with pytest.raises(ValueError, match="postings do not fit"):
            Index.from_snapshot(bad)
    beyond = dict(arrays, postings=arrays["postings"] | np.uint32(0xFFFF00))
    with pytest.raises(ValueError, match="unknown documents"):
        Index.from_snapshot(beyond)
