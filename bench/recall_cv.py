#!/usr/bin/env python
"""Cross-validated choice of a recall core, over LoCoMo and LongMemEval in both loadings at once.

    python bench/recall_cv.py --locomo ../shared/data/locomo --longmemeval ../shared/data/longmemeval

A candidate core is a pure function of a haystack's arrays (BM25 scores of every memory, its
embedding, creation times) and a question: ``rank`` below. Every candidate of the grid is scored on
every question of the four groups (two data sets x one memory per turn / per session); then, fold
by fold (five folds: one LoCoMo conversation and a fifth of the LongMemEval questions each), the
candidate with the best objective on the other four folds is scored on the held-out one. The
held-back figures pool every question as scored by the fold that did not see it; nothing reported
here was chosen by looking at the questions it is reported on. The objective is the mean, over the
four groups, of the issue's headline metrics (turn units: turn_any@10 and sess_all@10; session
units: sess_all@10 and sess_any@5), so no group is traded for another.

The texts, their BM25 scores and their vectors are computed as in bench/recall_bench.py (same
loaders, same cache of embeddings under /tmp).
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
import shlex
import sys
import time
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import recall_bench as rb
from harness import machine_line, update_results

FOLDS = 5
HEADLINE = {"turn": ("turn_any@10", "sess_all@10"), "session": ("sess_all@10", "sess_any@5")}
GAP = 3600.0  # neighbours in creation order within an hour, as memvault reads context


# ---------------------------------------------------------------------------- time words


def time_window(query: str, now: datetime) -> tuple[float, float] | None:
    """The span of creation times a question's time words name (memvault's own reading of them)."""
    from memvault.search.timewords import read_time

    spoken = read_time(query, now)
    return None if spoken is None else (spoken.start, spoken.end)


def query_words(query: str, now: datetime) -> str:
    """The query without its time words, as memvault searches it."""
    from memvault.search.timewords import read_time

    spoken = read_time(query, now)
    return spoken.rest if spoken is not None and rb.bm25_tokens(spoken.rest) else query


# ---------------------------------------------------------------------------- the core


@dataclass(frozen=True, slots=True)
class Params:
    vector: float = 1.0  # weight of the embedding leg against BM25 (each divided by its best)
    centre: str = "median"  # cosines measured above the haystack's median ("median") or from 0 ("zero")
    fusion: str = "sum"  # "sum" of normalised scores or "rrf"
    context: float = 0.0  # share of a neighbour's lexical score (memvault's neighbour context)
    context2: float = 0.0  # the same, two places away
    repeat: float = 0.0  # diversity: times the best cosine with a result already picked
    when: float = 0.0  # x(1 + this) for a memory created in the span a question names
    model: str = "wordllama"
    title: float = 0.0  # x(1 + this) for a memory whose title holds a query word

    def label(self) -> str:
        return (
            f"{self.model} x{self.vector:g} ({self.fusion}, cosine above {self.centre}), context "
            f"{self.context:g}/{self.context2:g}, repeat {self.repeat:g}, when {self.when:g}, "
            f"title {self.title:g}"
        )


@dataclass
class Hay:
    group: str
    unit: str
    name: str
    units: list[rb.Unit]
    questions: list[rb.Question]
    bm25: list[np.ndarray]
    cos: dict[str, list[np.ndarray]]
    matrix: dict[str, np.ndarray]
    prev: np.ndarray
    nxt: np.ndarray
    prev2: np.ndarray
    nxt2: np.ndarray
    titled: list[np.ndarray]  # per question: whether a unit's title holds a query word
    windows: list[tuple[float, float] | None]
    created: np.ndarray


def neighbours(created: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(created, kind="stable")
    n = len(created)
    prev = np.full(n, n)
    nxt = np.full(n, n)
    for a, b in itertools.pairwise(order):
        if created[b] - created[a] <= GAP:
            nxt[a], prev[b] = b, a
    return prev, nxt


def normalise(leg: np.ndarray, centre: str) -> np.ndarray:
    if centre == "median":
        leg = leg - float(np.median(leg))
    return rb.by_best(leg)


def rank(h: Hay, i: int, p: Params, limit: int = rb.LIMIT) -> list[int]:
    lex = rb.by_best(h.bm25[i])
    if p.context:
        padded = np.append(lex, 0.0)
        lex = lex + p.context * (padded[h.prev] + padded[h.nxt])
        if p.context2:
            lex = lex + p.context2 * (padded[h.prev2] + padded[h.nxt2])
    cos = h.cos[p.model][i]
    if p.fusion == "rrf":
        score = rb.rrf(h.bm25[i], cos - cos.min() + 1e-9)
    else:
        score = lex + p.vector * normalise(cos, p.centre) if p.vector else lex
    if p.title:
        score = score * np.where(h.titled[i], 1.0 + p.title, 1.0)
    window = h.windows[i]
    if p.when and window is not None:
        inside = (h.created >= window[0]) & (h.created <= window[1])
        score = score * np.where(inside, 1.0 + p.when, 1.0)
    if not p.repeat:
        return rb.top(score, limit)
    pool = rb.top(score, 4 * limit)
    if not pool:
        return []
    rows = np.array(pool)
    vecs = h.matrix[p.model][rows]
    rel = score[rows] / score[rows[0]]
    near = np.zeros(len(rows))
    taken = np.zeros(len(rows))
    picked = []
    for _ in range(min(limit, len(rows))):
        j = int(np.argmax(rel - p.repeat * near + taken))
        picked.append(int(rows[j]))
        taken[j] = -np.inf
        np.maximum(near, vecs @ vecs[j], out=near)
    return picked


# ---------------------------------------------------------------------------- data


def load(groups: dict[str, tuple[str, list[Path]]], caches: dict[str, rb.TextCache]) -> list[Hay]:
    from rank_bm25 import BM25Okapi

    out = []
    for group, (dataset, paths) in groups.items():
        for unit in ("turn", "session"):
            for hay in rb.LOADERS[dataset](paths, unit):
                texts = [u.text for u in hay.units]
                bm25 = BM25Okapi([rb.bm25_tokens(t) for t in texts])
                matrix = {m: c.embed(texts) for m, c in caches.items()}
                asked = [query_words(q.text, q.now) for q in hay.questions]
                queries = {m: c.embed(asked) for m, c in caches.items()}
                created = np.array([u.created.timestamp() for u in hay.units])
                prev, nxt = neighbours(created)
                n = len(created)
                prev2 = np.append(prev, n)[np.append(prev, n)]
                nxt2 = np.append(nxt, n)[np.append(nxt, n)]
                titles = [set(rb.bm25_tokens(u.title)) for u in hay.units]
                titled = []
                for q in hay.questions:
                    words = set(rb.bm25_tokens(q.text)) - rb.STOP
                    titled.append(np.array([bool(words & t) for t in titles]))
                out.append(
                    Hay(
                        group,
                        unit,
                        hay.name,
                        hay.units,
                        hay.questions,
                        [np.asarray(bm25.get_scores(rb.bm25_tokens(a))) for a in asked],
                        {m: [matrix[m] @ queries[m][j] for j in range(len(hay.questions))] for m in caches},
                        matrix,
                        prev,
                        nxt,
                        prev2[:n],
                        nxt2[:n],
                        titled,
                        [time_window(q.text, q.now) for q in hay.questions],
                        created,
                    )
                )
    for c in caches.values():
        c.save()
    return out


def fold_of(h: Hay) -> int:
    if h.group == "locomo":  # one conversation a fold
        return int(re.sub(r"\D", "", h.name)) % FOLDS
    return zlib.crc32(h.name.encode()) % FOLDS  # the same question in both loadings: the same fold


# ---------------------------------------------------------------------------- scoring


Key = tuple[str, str]  # (data set, unit)


def score_all(hays: list[Hay], p: Params) -> dict[Key, list[tuple[int, dict[str, bool]]]]:
    """Per group, per question: its fold and what it got."""
    out: dict[Key, list[tuple[int, dict[str, bool]]]] = defaultdict(list)
    for h in hays:
        f = fold_of(h)
        for i, q in enumerate(h.questions):
            s = rb.Scores()
            got = s.add([h.units[j] for j in rank(h, i, p)], q, h.unit)
            out[(h.group, h.unit)].append((f, got))
    return out


def objective(result: dict[Key, list[tuple[int, dict[str, bool]]]], folds: set[int]) -> float:
    parts = []
    for (_, unit), rows in result.items():
        kept = [got for f, got in rows if f in folds]
        if kept:
            parts += [100.0 * sum(g[m] for g in kept) / len(kept) for m in HEADLINE[unit]]
    return float(np.mean(parts)) if parts else 0.0


def grid() -> list[Params]:
    """The first run's grid (two models, median or zero centring, RRF) chose WordLlama, zero centring and
    summed scores in every fold; this one varies the rest around that."""
    out = []
    for vector in (0.5, 0.75, 1.0, 1.5):
        for context, context2 in ((0.0, 0.0), (0.3, 0.0), (0.5, 0.0), (0.3, 0.15), (0.7, 0.35)):
            for repeat in (0.0, 0.15):
                for when in (0.0, 0.5):
                    for title in (0.0, 0.25, 0.5):
                        out.append(
                            Params(
                                vector=vector,
                                centre="zero",
                                context=context,
                                context2=context2,
                                repeat=repeat,
                                when=when,
                                title=title,
                            )
                        )
    return out


def pct(rows: list[dict[str, bool]], metric: str) -> float:
    return 100.0 * sum(r[metric] for r in rows) / len(rows) if rows else 0.0


def fold_of_name(dataset: str, name: str) -> int:
    if dataset == "locomo":
        return int(re.sub(r"\D", "", name)) % FOLDS
    return zlib.crc32(name.encode()) % FOLDS


def package_cv(path: Path, command: str, only: str | None = None) -> str:
    """Cross-validate memvault's own weights over the outcomes bench/recall_bench.py --grid wrote:
    per fold, the setting of the grid with the best objective on the other folds, scored on it.
    ``only``: the settings whose label holds this text (a part of the grid ruled out otherwise)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    groups = sorted(data)
    labels = [
        label
        for label in data[groups[0]][0]["got"]
        if label.startswith("vector ") and (only is None or only in label)
    ]

    def objective(label: str, folds: set[int]) -> float:
        parts = []
        for group in groups:
            dataset, unit = group.split("/")
            kept = [r["got"][label] for r in data[group] if fold_of_name(dataset, r["haystack"]) in folds]
            parts += [100.0 * sum(g[m] for g in kept) / len(kept) for m in HEADLINE[unit] if kept]
        return float(np.mean(parts)) if parts else 0.0

    everything = set(range(FOLDS))
    chosen = {f: max(labels, key=lambda lb, f=f: objective(lb, everything - {f})) for f in range(FOLDS)}
    lines = [
        f"## {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}: memvault's recall weights, cross-validated "
        "over LoCoMo and LongMemEval",
        "",
        f"Command: `{command}`, on the outcomes of `python bench/recall_bench.py DATASET PATH --grid {path}` "
        "for both data sets (each question asked through memvault's recall under every setting of a grid).",
        "",
        f"Machine: {machine_line()}.",
        "",
        f"{len(labels)} settings of memvault's weights"
        + (f' (those of the grid whose label holds "{only}")' if only else "")
        + f"; {FOLDS} folds (one LoCoMo conversation and about a "
        "fifth of the LongMemEval questions each, a question in both loadings in the same fold). Objective: "
        "the mean of turn_any@10 and sess_all@10 (turn units) and of sess_all@10 and sess_any@5 (session "
        "units) over the four groups. Each question is scored with the setting chosen on the other folds.",
        "",
        "| fold | chosen on the other four | objective there | held back |",
        "|---|---|---:|---:|",
    ]
    for f, label in chosen.items():
        lines.append(
            f"| {f} | {label} | {objective(label, everything - {f}):.1f} | {objective(label, {f}):.1f} |"
        )
    lines.append("")
    baselines = [lb for lb in data[groups[0]][0]["got"] if not lb.startswith("vector ")]
    for group in groups:
        dataset, unit = group.split("/")
        metrics = [m for m in rb.metrics_for(unit) if "all@5" not in m or unit == "session"]
        rows = data[group]
        held = [r["got"][chosen[fold_of_name(dataset, r["haystack"])]] for r in rows]
        lines += [
            f"{dataset}, one memory per {unit} ({len(rows)} questions):",
            "",
            "| system | " + " | ".join(metrics) + " |",
            "|---|" + "---:|" * len(metrics),
            "| **memvault recall, held back** | "
            + " | ".join(f"**{pct(held, m):.1f}**" for m in metrics)
            + " |",
        ]
        for label in baselines:
            got = [r["got"][label] for r in rows]
            name = (
                "memvault recall, the defaults of the run (not held back)"
                if label == "memvault recall"
                else label
            )
            lines.append(f"| {name} | " + " | ".join(f"{pct(got, m):.1f}" for m in metrics) + " |")
        key = "turn_any@10" if unit == "turn" else "sess_all@10"
        shown = ["BM25", "wordllama", "BM25 + wordllama, each / its best, summed"]
        lines += [
            "",
            f"Per question type, {key}:",
            "",
            "| type | n | memvault, held back | " + " | ".join(shown) + " |",
            "|---|---:|---:|" + "---:|" * len(shown),
        ]
        for kind in sorted({r["kind"] for r in rows}):
            mine = [r for r in rows if r["kind"] == kind]
            held_kind = [r["got"][chosen[fold_of_name(dataset, r["haystack"])]] for r in mine]
            lines.append(
                f"| {kind} | {len(mine)} | {pct(held_kind, key):.1f} | "
                + " | ".join(
                    f"{pct([r['got'][b] for r in mine], key):.1f}" for b in shown if b in mine[0]["got"]
                )
                + " |"
            )
        lines.append("")
    best = max(labels, key=lambda lb: objective(lb, everything))
    lines += [f"Chosen on all folds: {best}.", ""]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--locomo", type=Path, nargs="+")
    parser.add_argument("--longmemeval", type=Path, nargs="+")
    parser.add_argument("--package", type=Path, help="cross-validate memvault's weights from a --grid file")
    parser.add_argument("--only", help="with --package: only the settings whose label holds this text")
    parser.add_argument(
        "--cache", type=Path, default=rb.Path(rb.tempfile.gettempdir()) / "memvault-recall-bench"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    command = shlex.join(["python", "bench/recall_cv.py", *(sys.argv[1:] if argv is None else argv)])
    if args.package:
        section = package_cv(args.package, command, args.only)
        print(section)
        if args.out:
            update_results(
                args.out,
                section,
                command,
                "<!-- recall-cv-package:start -->",
                "<!-- recall-cv-package:end -->",
                grouped=False,
            )
        return 0
    if not args.locomo or not args.longmemeval:
        parser.error("--locomo and --longmemeval (or --package)")
    started = time.perf_counter()
    caches = {m: rb.TextCache(args.cache, m, rb.ENCODERS[m]()) for m in ("wordllama", "static-model")}
    hays = load({"locomo": ("locomo", args.locomo), "longmemeval": ("longmemeval", args.longmemeval)}, caches)
    print(f"loaded in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    candidates = grid()
    results = {}
    for n, p in enumerate(candidates):
        results[p] = score_all(hays, p)
        if n % 20 == 0:
            print(f"{n}/{len(candidates)} scored ({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    # baselines through the same scorer: BM25 alone and each model alone
    plain = {
        "BM25": Params(vector=0.0),
        **{m: Params(vector=1e6, centre="zero", model=m) for m in caches},
    }
    plain_results = {name: score_all(hays, p) for name, p in plain.items()}
    held: dict[Key, list[dict[str, bool]]] = defaultdict(list)
    chosen = []
    for f in range(FOLDS):
        train = set(range(FOLDS)) - {f}
        best = max(candidates, key=lambda p: objective(results[p], train))
        chosen.append((f, best, objective(results[best], train), objective(results[best], {f})))
        for key, rows in results[best].items():
            held[key] += [got for g, got in rows if g == f]
    overall_best = max(candidates, key=lambda p: objective(results[p], set(range(FOLDS))))
    lines = [
        f"## {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}: a recall core chosen by cross-validation "
        "over LoCoMo and LongMemEval",
        "",
        f"Command: `{command}` ({time.perf_counter() - started:.0f} s)",
        "",
        f"Machine: {machine_line()}.",
        "",
        f"{len(candidates)} candidate cores; {FOLDS} folds (one LoCoMo conversation and about a fifth of the "
        "LongMemEval questions each, the same question in both loadings in the same fold). "
        "Objective: the mean "
        "of turn_any@10 and sess_all@10 (turn units) and of sess_all@10 and sess_any@5 (session units) "
        "over the four groups.",
        "",
        "| fold | chosen on the other four | objective there | objective held back |",
        "|---|---|---:|---:|",
    ]
    for f, p, fit, back in chosen:
        lines.append(f"| {f} | {p.label()} | {fit:.1f} | {back:.1f} |")
    lines += [
        "",
        "Held-back figures (each question scored by the fold that did not see it), beside the "
        "baselines run through the same scorer:",
        "",
    ]
    for key in sorted(held):
        unit = key[1]
        metrics = rb.metrics_for(unit)
        metrics = [m for m in metrics if "all@5" not in m or unit == "session"]
        lines += [
            f"{key[0]}, one memory per {unit}:",
            "",
            "| system | " + " | ".join(metrics) + " |",
            "|---|" + "---:|" * len(metrics),
        ]
        lines.append(
            "| **cross-validated core (held back)** | "
            + " | ".join(f"**{pct(held[key], m):.1f}**" for m in metrics)
            + " |"
        )
        for name, res in plain_results.items():
            rows = [got for _, got in res[key]]
            lines.append(f"| {name} | " + " | ".join(f"{pct(rows, m):.1f}" for m in metrics) + " |")
        for fusion in ("sum", "rrf"):
            p = Params(model="wordllama", fusion=fusion, centre="zero")
            rows = [got for _, got in (results.get(p) or score_all(hays, p))[key]]
            lines.append(
                f"| BM25 + wordllama ({fusion}, raw cosine) | "
                + " | ".join(f"{pct(rows, m):.1f}" for m in metrics)
                + " |"
            )
        lines.append("")
    lines += [f"Chosen on all five folds (what would ship): {overall_best.label()}.", ""]
    top10 = sorted(candidates, key=lambda p: -objective(results[p], set(range(FOLDS))))[:10]
    lines += [
        "Fitted objective of the ten best candidates on all folds (for reading, not for reporting):",
        "",
    ]
    lines += [f"- {objective(results[p], set(range(FOLDS))):.2f}: {p.label()}" for p in top10]
    section = "\n".join(lines) + "\n"
    print(section)
    if args.out:
        update_results(
            args.out, section, command, "<!-- recall-cv:start -->", "<!-- recall-cv:end -->", grouped=False
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
