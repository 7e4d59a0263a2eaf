"""bench/locomo.py on a tiny synthetic conversation (no benchmark data needed)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.filterwarnings("ignore:Callback with id .* already exists for watch:RuntimeWarning")


def load_bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_locomo", ROOT / "bench" / "locomo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_locomo"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def conversation() -> dict:
    topics = [
        ("Caroline", "I adopted a kitten named Pixel last week.", "Melanie", "Aww, what colour is Pixel?"),
        ("Caroline", "She is grey with white paws.", "Melanie", "I started pottery classes on Tuesdays."),
        ("Caroline", "My brother moved to Lisbon for work.", "Melanie", "Lisbon has great custard tarts!"),
    ]
    data: dict = {"speaker_a": "Caroline", "speaker_b": "Melanie"}
    for s, (a, a_text, b, b_text) in enumerate(topics, start=1):
        data[f"session_{s}_date_time"] = f"1:56 pm on {s} May, 2023"
        data[f"session_{s}"] = [
            {"speaker": a, "dia_id": f"D{s}:1", "text": a_text},
            {
                "speaker": b,
                "dia_id": f"D{s}:2",
                "text": b_text,
                "img_url": ["x"],
                "blip_caption": "a photo of a cup",
            },
        ]
        data[f"session_{s}_summary"] = "not evidence"
    data["qa"] = [
        {
            "question": "What is the name of Caroline's kitten?",
            "answer": "Pixel",
            "evidence": ["D1:1"],
            "category": 4,
        },
        {
            "question": "Where did Caroline's brother move?",
            "answer": "Lisbon",
            "evidence": ["D3:1"],
            "category": 1,
        },
        {
            "question": "What does Melanie do on Tuesdays?",
            "answer": "pottery",
            "evidence": ["D2:2; D1:2"],
            "category": 2,
        },
        {"question": "Unanswerable?", "adversarial_answer": "x", "evidence": ["D1:1"], "category": 5},
        {"question": "No evidence?", "answer": "x", "evidence": ["D"], "category": 3},
    ]
    return data


def test_evidence_ids_tolerate_the_data_sets_quirks():
    bench = load_bench()
    assert bench.evidence_ids(["D8:6; D9:17", "D:11:26", "D", "D8:6"]) == ("D8:6", "D9:17", "D11:26")


@pytest.mark.slow
def test_the_harness_runs_end_to_end_and_writes_its_section(tmp_path: Path):
    bench = load_bench()
    data = tmp_path / "data"
    data.mkdir()
    (data / "99.json").write_text(json.dumps(conversation()), encoding="utf-8")
    conv = bench.load_conversation(data / "99.json")
    assert [t.title for t in conv.turns[:2]] == ["D1:1 Caroline", "D1:2 Melanie"]
    assert conv.turns[1].content == (
        "Session date: 1:56 pm on 1 May, 2023\n"
        "Melanie: Aww, what colour is Pixel? [shares a photo: a photo of a cup]"
    )
    assert [q.category for q in conv.questions] == [4, 1, 2] and conv.skipped == 1

    results = tmp_path / "RESULTS.md"
    results.write_text(
        "# Benchmark results\n\n<!-- bench_read:start -->\nsomeone else's section\n<!-- bench_read:end -->\n",
        encoding="utf-8",
    )
    argv = [str(data), "--out", str(results), "--latency-memories", "60", "--dir", str(tmp_path)]
    assert bench.main(argv) == 0
    text = results.read_text(encoding="utf-8")
    assert "someone else's section" in text  # other benchmarks' sections stay
    assert text.count("<!-- locomo:start -->") == 1
    assert "embedder wordllama-l2-256" in text  # the default embedder
    assert "| all (categories 1-4) | 3 |" in text
    assert "turn any@10" in text and "session all@10" in text
    assert "recall at 60 memories in one token" in text
    # Three questions over six turns: every evidence turn is within the top 10.
    row = next(line for line in text.splitlines() if line.startswith("| all (categories 1-4)"))
    assert row.split("|")[4].strip() == "**100.0**"

    assert bench.main(argv) == 0  # the same command again replaces its own section
    assert results.read_text(encoding="utf-8").count("<!-- locomo:start -->") == 1
    assert not list(tmp_path.glob("memvault-locomo-*"))  # the temporary vault is gone


@pytest.mark.slow
def test_cross_validation_fits_on_the_others_and_scores_the_held_out(tmp_path: Path, monkeypatch):
    bench = load_bench()
    data = tmp_path / "data"
    data.mkdir()
    for name in ("97", "98", "99"):
        (data / f"{name}.json").write_text(json.dumps(conversation()), encoding="utf-8")
    # Small grids keep the test fast; the search and the report are the same.
    small = bench.Procedure("small", {"neighbour": (0.0, 0.3), "floor": (0.0, 0.9)}, 0.3)
    smaller = bench.Procedure("smaller", {"floor": (0.0, 0.9)}, 0.0)
    monkeypatch.setattr(bench, "PROCEDURES", [small, smaller])
    argv = [str(data), "--cv", "--latency-memories", "0", "--dir", str(tmp_path)]
    res = bench.Results()
    conversations = [bench.load_conversation(p) for p in bench.conversation_files([data])]
    settings = bench.Settings(root=tmp_path / "vault", capacity=10**9)
    import asyncio

    asyncio.run(bench.run_quality(conversations, settings, res, cv=True))
    cv = res.cv
    assert [f.held_out for f in cv.folds] == ["97", "98", "99"]
    for fold in cv.folds:
        assert fold.fitted.n == 6 and fold.held.n == 3  # fitted on two conversations, scored on the third
        assert fold.setting.weights.floor < 0.9  # a floor of 0.9 would cut the second evidence turn
        assert fold.procedure in ("small", "smaller")
    assert cv.held.n == 9 and cv.fitted.n == 9
    assert cv.evaluated >= 3
    text = bench.report(res, "python bench/locomo.py " + " ".join(argv))
    assert "held back (nested cross-validation)" in text and "| 97 |" in text
    assert set(cv.fixed) == {"small", "smaller"}


def test_the_weight_search_moves_only_for_a_gain_that_outweighs_the_noise(monkeypatch):
    bench = load_bench()
    procedure = bench.Procedure("neighbour", {"neighbour": (0.0, 0.3, 0.5)}, 0.3)
    start = bench.Setting(bench.DEFAULT_WEIGHTS.replace(neighbour=0.5))

    class Fixed(bench.Grid):
        """Scores by the neighbour weight alone, as given, on one 1000-question conversation."""

        def __init__(self, turn_by_neighbour: dict[float, int]) -> None:
            self.turn_by_neighbour = turn_by_neighbour

        async def scores(self, setting):  # type: ignore[no-untyped-def]
            s = bench.Scores(n=1000, session_all_10=950)  # far above its target: turn any@10 decides
            s.turn_any[10] = self.turn_by_neighbour[setting.weights.neighbour]
            return {"a": s}

    import asyncio

    # 0.1 point better (one question in 1000): not worth leaving the current weights for.
    small = Fixed({0.0: 770, 0.3: 771, 0.5: 770})
    assert asyncio.run(small.fit(["a"], start, procedure)).weights.neighbour == 0.5
    # A point better: the search moves.
    large = Fixed({0.0: 780, 0.3: 771, 0.5: 770})
    assert asyncio.run(large.fit(["a"], start, procedure)).weights.neighbour == 0.0


@pytest.mark.slow
def test_try_scores_candidate_weights_per_conversation_without_writing_them(tmp_path: Path, capsys):
    bench = load_bench()
    data = tmp_path / "data"
    data.mkdir()
    for name in ("98", "99"):
        (data / f"{name}.json").write_text(json.dumps(conversation()), encoding="utf-8")
    results = tmp_path / "RESULTS.md"
    argv = [str(data), "--latency-memories", "0", "--dir", str(tmp_path), "--out", str(results)]
    assert bench.main([*argv, "--try", "neighbour=0", "--try", "context=0.5/0.25, vector=0.3"]) == 0
    tried = [line for line in capsys.readouterr().out.splitlines() if line.startswith("tried:")]
    assert len(tried) == 2
    assert "[98 " in tried[0] and " 99 " in tried[0] and "neighbour 0," in tried[0]
    assert "context 0.5/0.25" in tried[1] and "vector 0.3" in tried[1]
    assert "tried:" not in results.read_text(encoding="utf-8")
    with pytest.raises(SystemExit, match="names among"):
        bench.main([*argv, "--try", "speed=2"])
    with pytest.raises(SystemExit, match="not a number"):
        bench.main([*argv, "--try", "neighbour=high"])
