"""The benchmarks' corpora: LoCoMo turns or synthetic prose as memories, a vault of them in mem-mcp's
file format, and query words of modest document frequency."""

from __future__ import annotations

import itertools
import json
import random
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memvault.disk.markdown import render_new
from memvault.disk.names import slugify

KINDS = ("title word", "body word", "typo", "two words")
DF_MIN, DF_MAX = 5, 200
STOP = frozenset(
    "a an and are as at be been but by do does did for from had has have he her his how i if in into is it "
    "its me my of on or our she so than that the their them then there these they this those to us was we "
    "were what when where which who why will with would you your just really yeah also about like that's "
    "it's i'm you're don't can't been being some very much more most".split()
)
WORD_RE = re.compile(r"[a-z]+")


@dataclass(frozen=True, slots=True)
class Doc:
    title: str
    content: str


def shift_year(date: str, years: int) -> str:
    """'1:56 pm on 8 May, 2023' moved on by some years (later passes over the data)."""
    return re.sub(r"(\d{4})\s*$", lambda m: str(int(m.group(1)) + years), date)


def locomo_docs(path: Path, n: int) -> list[Doc]:
    """LoCoMo turns, cycling over files and sessions until n; later passes shift the year and
    mark the title, so no two memories are identical."""
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    convs: list[tuple[str, list[tuple[str, list[dict[str, Any]]]]]] = []
    for file in files:
        data = json.loads(file.read_text(encoding="utf-8"))
        numbers = sorted(int(m.group(1)) for k in data if (m := re.fullmatch(r"session_(\d+)", k)))
        sessions = [(str(data.get(f"session_{k}_date_time", "")), data[f"session_{k}"]) for k in numbers]
        convs.append((file.stem, sessions))
    if not any(turns for _, sessions in convs for _, turns in sessions):
        raise SystemExit(f"no LoCoMo turns found under {path}")
    docs: list[Doc] = []
    seen: set[str] = set()
    serial = 0
    for cycle in itertools.count():
        for conv, sessions in convs:
            for date, turns in sessions:
                shifted = shift_year(date, cycle)
                for turn in turns:
                    speaker, dia, text = (
                        turn.get("speaker", "?"),
                        turn.get("dia_id", "?"),
                        turn.get("text", ""),
                    )
                    words = re.findall(r"[A-Za-z0-9']+", text)
                    if serial % 3 == 0 or len(words) < 3:
                        title = f"{speaker} {dia} conv {conv}"
                    else:
                        title = " ".join(words[:6])
                    if cycle:
                        title += f" ({cycle + 1})"
                    base, k = title, 2
                    while title.lower() in seen:
                        title, k = f"{base} #{k}", k + 1
                    seen.add(title.lower())
                    content = f"{shifted}: {speaker} said: {text}"
                    if turn.get("blip_caption"):
                        content += f" [shares a photo: {turn['blip_caption']}]"
                    docs.append(Doc(title, content))
                    serial += 1
                    if len(docs) >= n:
                        return docs
    raise AssertionError("unreachable")


FUNCTION_WORDS = (
    "the of and to a in is that it for on was with as at by this be from or have an they which one "
    "you were her all she there would their we him been has when who will more no if out so said what "
    "up its about into than them can only other new some could time these two may then do first any"
).split()
SYLLABLES = (
    "ka lo mi ter an vel dor pri su ne tal ro ben cas fi gu hem jo lin mor nat pel quo ris sta tor ul "
    "ven wex yar zen bra cle dru fen gra hol ist kor lum mar nor ope pra que ret sil tur ura vis"
).split()


def synthetic_docs(n: int, seed: int) -> list[Doc]:
    """English-like prose: function words plus a Zipf-distributed vocabulary of pseudo-words."""
    rng = random.Random(seed)
    vocab: list[str] = []
    seen: set[str] = set(FUNCTION_WORDS)
    while len(vocab) < 30_000:
        word = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if word not in seen:
            seen.add(word)
            vocab.append(word)
    words = FUNCTION_WORDS + vocab
    cum = list(itertools.accumulate(1.0 / (rank + 1) ** 1.05 for rank in range(len(words))))
    title_cum = list(itertools.accumulate(1.0 / (rank + 1) ** 0.9 for rank in range(len(vocab))))
    docs: list[Doc] = []
    titles: set[str] = set()
    for _ in range(n):
        sentences = []
        for _ in range(rng.randint(1, 4)):
            sentence = rng.choices(words, cum_weights=cum, k=rng.randint(6, 18))
            sentences.append(" ".join(sentence).capitalize() + ".")
        title = " ".join(rng.choices(vocab, cum_weights=title_cum, k=rng.randint(3, 6))).capitalize()
        base, k = title, 2
        while title.lower() in titles:
            title, k = f"{base} {k}", k + 1
        titles.add(title.lower())
        docs.append(Doc(title, " ".join(sentences)))
    return docs


def docs(locomo: Path | None, n: int, seed: int) -> list[Doc]:
    """``n`` documents: LoCoMo turns from ``locomo`` (a folder or a file) if given, else synthetic prose."""
    return locomo_docs(locomo, n) if locomo else synthetic_docs(n, seed)


def write_vault(folder: Path, docs: Sequence[Doc], seed: int) -> None:
    """Files in mem-mcp's format, mostly P1, created in the last 60 days, accessed today."""
    rng = random.Random(seed + 1)
    folder.mkdir(parents=True)
    now = datetime.now(UTC)
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    used: set[str] = set()
    for doc in docs:
        created = now - timedelta(days=rng.uniform(1, 60))
        updated = created + (now - created) * rng.random() * 0.5
        # Accessed earlier today: the default writeback policy ('day') then leaves files alone on read.
        accessed = today + (now - today) * rng.random()
        r = rng.random()
        priority = "P0" if r < 0.05 else "P2" if r < 0.15 else "P1"
        fields = {
            "priority": priority,
            "createdAt": created,
            "updatedAt": updated,
            "lastAccessedAt": accessed,
        }
        stem = slugify(doc.title)
        name, k = f"{stem}.md", 2
        while name in used:
            name, k = f"{stem}-{k}.md", k + 1
        used.add(name)
        (folder / name).write_text(render_new(doc.title, doc.content, fields), encoding="utf-8")


# ---------------------------------------------------------------------------- queries


QUERY_SAMPLE = 100_000


def pick_queries(docs: Sequence[Doc], count: int, seed: int) -> dict[str, list[str]]:
    """Per query kind, `count` queries (distinct where the data allows) matching a modest number
    of memories: words with a document frequency between DF_MIN and DF_MAX, counted over the
    first QUERY_SAMPLE memories (a million LoCoMo turns repeat 100,000 ten times: no word would
    stay modest, and the same queries then find ten times the memories, as they should)."""
    rng = random.Random(seed + 2)
    docs = docs[:QUERY_SAMPLE]
    df: Counter[str] = Counter()
    title_df: Counter[str] = Counter()
    doc_words: list[list[str]] = []
    for doc in docs:
        tw = set(WORD_RE.findall(doc.title.lower()))
        bw = set(WORD_RE.findall(doc.content.lower()))
        title_df.update(tw)
        df.update(tw | bw)
        doc_words.append(sorted(bw))

    def modest(w: str) -> bool:
        return len(w) >= 4 and w not in STOP and DF_MIN <= df[w] <= DF_MAX

    title_words = sorted(w for w in title_df if modest(w))
    body_words = sorted(w for w in df if modest(w) and title_df[w] == 0)
    long_words = [w for w in body_words if len(w) >= 6]
    vocab = set(df)

    def sample(pool: list[str]) -> list[str]:
        if not pool:
            raise SystemExit("no query words in the modest frequency range; use more memories")
        if len(pool) >= count:
            return rng.sample(pool, count)
        return [rng.choice(pool) for _ in range(count)]

    def typo(word: str) -> str:
        letters = "abcdefghijklmnopqrstuvwxyz"
        for _ in range(100):
            i = rng.randrange(1, len(word) - 1)  # keep the first letter, as most typos do
            op = rng.choice(("sub", "del", "ins", "swap"))
            if op == "sub":
                out = word[:i] + rng.choice(letters.replace(word[i], "")) + word[i + 1 :]
            elif op == "del":
                out = word[:i] + word[i + 1 :]
            elif op == "ins":
                out = word[:i] + rng.choice(letters) + word[i:]
            else:
                out = word[:i] + word[i + 1] + word[i] + word[i + 2 :]
            if out != word and out not in vocab:
                return out
        return word[:-1] + ("x" if word[-1] != "x" else "z")

    pairs: list[str] = []
    seen_pairs: set[str] = set()
    for _ in range(count * 200):
        if len(pairs) >= count:
            break
        words = [w for w in doc_words[rng.randrange(len(doc_words))] if modest(w)]
        if len(words) < 2:
            continue
        a, b = rng.sample(words, 2)
        query = f"{a} {b}"
        if query not in seen_pairs:
            seen_pairs.add(query)
            pairs.append(query)
    if not pairs:
        raise SystemExit("no two-word queries found; use more memories")
    while len(pairs) < count:
        pairs.append(rng.choice(pairs))
    return {
        "title word": sample(title_words),
        "body word": sample(body_words),
        "typo": [typo(w) for w in sample(long_words)],
        "two words": pairs,
    }
