#!/usr/bin/env python
"""Issues 3 and 49: scale targets and a growth-table row, one token of N memories, a server process.

    python bench/bench_scale.py --memories 100000 [--locomo /work/shared/data/locomo] [--out bench/RESULTS.md]

Builds a vault of N memories for one token (LoCoMo turns cycled, or synthetic prose; the same
generator as bench_read.py), then runs `python -m memvault serve` as a child process (every
MEMVAULT_* variable cleared but MEMVAULT_CAPACITY=1000000000, so eviction leaves the vault alone)
and drives it over HTTP with the official MCP client. Its resident memory and CPU time come from
/proc/<pid>. Measured in one run, side by side:

- the time to merely read all N files (this process, one pass; and a fresh process that scans,
  reads, parses and indexes them with memvault's own functions, phase by phase, no server);
- server A, cold start (`.memvault/` deleted): process start -> first read_memory answer; then the
  background index snapshot; read_memory latency; RSS; then SIGKILL (no shutdown snapshot);
- servers B1..Bk, restarts after SIGKILL (from A's background snapshot; each but the last killed
  once its background work is done, as a server that ran a while): first answer each; the last
  one then: reads; RSS; idle CPU; 40 hand edits -> searchable; 1,000-file
  bursts -> fully indexed; idle CPU again; SIGTERM;
- servers C1..Ck, restarts after SIGTERM (shutdown snapshot): first answer each; reads and RSS on
  the last one.
"""

from __future__ import annotations

import argparse
import asyncio
import compileall
import contextlib
import json
import os
import random
import re
import shlex
import shutil
import signal
import statistics
import string
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
from harness import call, client, cpu_ticks, free_port, fs_type, machine, ms, pct, steal_share, update_results

import memvault
from memvault.disk.markdown import render_new

TOKEN = "scale"
KINDS = corpus.KINDS
MARK_START = "<!-- bench_scale:start -->"
MARK_END = "<!-- bench_scale:end -->"
CLK_TCK = os.sysconf("SC_CLK_TCK")
HEAD_RE = re.compile(r"^(\d+) hot memor")

# Targets of issue 49, stated for 100,000 memories (read p50 while vectors are computed: 10 ms);
# at 10,000: read p50 3 ms, write p50 3 ms (fsync kept), recall p50 10 ms. Issue 3's for the rest.
COLD_TARGET_S = 5.0
RESTART_TARGET_S = 1.5
RSS_TARGET_MB = 400.0
READ_BUSY_TARGET_S = 0.010
SMALL_READ_TARGET_S = 0.003
SMALL_WRITE_TARGET_S = 0.003
SMALL_RECALL_TARGET_S = 0.010
EDIT_P95_TARGET_S = 0.300
BURST_TARGET_S = 2.0


# ---------------------------------------------------------------------------- the server process


SERVER_TOOLS: str | None = None  # --tools: MEMVAULT_TOOLS for the server (default: all groups)
PY_SPY_HELPERS = False  # --py-spy-helpers: py-spy follows the helper processes too


def server_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    env["MEMVAULT_CAPACITY"] = "1000000000"
    if SERVER_TOOLS:
        env["MEMVAULT_TOOLS"] = SERVER_TOOLS
    return env


class ServerProc:
    """`python -m memvault serve` in a child process; its output goes to a log file."""

    def __init__(self, root: Path, log_dir: Path, label: str, py_spy: Path | None = None) -> None:
        self.root = root
        self.label = label
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.url = f"{self.base}/mcp/{TOKEN}"
        self.log_path = log_dir / f"server-{label}.log"
        self.py_spy_dir = py_spy
        self.proc: subprocess.Popen[bytes] | None = None
        self.spy: subprocess.Popen[bytes] | None = None
        self.t0 = 0.0

    def start(self) -> None:
        cmd = [sys.executable, "-m", "memvault", "serve", "--root", str(self.root), "--port", str(self.port)]
        self.log = open(self.log_path, "wb")
        self.t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=server_env())
        if self.py_spy_dir is not None:
            out = self.py_spy_dir / f"py-spy-{self.label}.txt"
            self.spy = subprocess.Popen(
                [
                    "py-spy",
                    "record",
                    "--pid",
                    str(self.proc.pid),
                    "--rate",
                    "200",
                    "--threads",
                    *(["--subprocesses"] if PY_SPY_HELPERS else []),
                    "--format",
                    "raw",
                    "--output",
                    str(out),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def cpu(self) -> float:
        """utime + stime of the server, all threads, in seconds."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def mem(self) -> dict[str, float]:
        """VmRSS and VmHWM (peak) in MB."""
        out: dict[str, float] = {}
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM", "RssAnon", "RssFile"):
                out[key] = int(value.split()[0]) / 1024
        return out

    def log_tail(self, n: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        return ""

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 120.0) -> float:
        """Send sig, wait for the exit; seconds it took."""
        assert self.proc is not None
        start = time.perf_counter()
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError(
                    f"server {self.label} did not exit within {timeout:.0f} s of {sig!r}"
                ) from None
        elapsed = time.perf_counter() - start
        self.log.close()
        if self.spy is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.spy.wait(30)
        return elapsed

    def ensure_dead(self) -> None:
        if self.alive():
            assert self.proc is not None
            self.proc.kill()
            self.proc.wait()
        if self.spy is not None and self.spy.poll() is None:
            self.spy.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.spy.wait(10)


@dataclass
class Start:
    label: str
    up_s: float = 0.0  # process start -> /healthz answers (imports, app, uvicorn)
    flushed_mb: float = 0.0  # dirty page cache the previous servers left, written before this start
    flush_s: float = 0.0  # the os.sync() that wrote it
    answer_s: float = 0.0  # process start -> first read_memory answer (loads the token)
    cpu_s: float = 0.0  # server CPU up to the first answer
    mem_up: dict[str, float] = field(default_factory=dict)  # when /healthz first answers (nothing loaded)
    mem: dict[str, float] = field(default_factory=dict)  # right after the first answer
    settle_s: float | None = None  # after the first answer, until the server's CPU goes quiet
    settle_cpu_s: float | None = None
    stop_s: float | None = None  # SIGTERM -> exit (shutdown writes the snapshot)
    steal: float | None = None  # the host's share of this machine's CPU, process start -> first answer


def dirty_mb() -> float:
    """Page cache waiting to be written to disk (Dirty + Writeback in /proc/meminfo), in MB."""
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            fields = dict(line.split(":", 1) for line in handle)
        return sum(int(fields[k].split()[0]) for k in ("Dirty", "Writeback")) / 1024
    except (OSError, KeyError, ValueError):
        return 0.0


async def first_answer(server: ServerProc, query: str, label: str, deadline_s: float = 600.0) -> Start:
    """Start the server and time process start -> /healthz -> first read_memory answer."""
    res = Start(label)
    # What the servers before wrote (a cold start's embeddings: hundreds of MB into the sidecar) is
    # flushed first, so that no start pays for the kernel writing back its predecessors' pages.
    res.flushed_mb = dirty_mb()
    start = time.perf_counter()
    os.sync()
    res.flush_s = time.perf_counter() - start
    ticks = cpu_ticks()
    server.start()
    deadline = server.t0 + deadline_s
    while True:
        if not server.alive():
            raise RuntimeError(f"server {label} exited early:\n{server.log_tail()}")
        try:
            with urllib.request.urlopen(f"{server.base}/healthz", timeout=2) as resp:
                if resp.status == 200:
                    break
        except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
            pass
        if time.perf_counter() > deadline:
            raise RuntimeError(f"server {label} did not come up:\n{server.log_tail()}")
        await asyncio.sleep(0.01)
    res.up_s = time.perf_counter() - server.t0
    res.mem_up = server.mem()
    async with client(server.url) as session:
        _, text = await call(session, "read_memory", {"query": query})
    res.answer_s = time.perf_counter() - server.t0
    res.steal = steal_share(ticks, cpu_ticks())
    if text.startswith("No hot memories"):
        raise RuntimeError(f"first answer of server {label} found nothing for {query!r}")
    res.cpu_s = server.cpu()
    res.mem = server.mem()
    return res


async def settle(
    server: ServerProc, res: Start, quiet: float = 0.02, window: float = 1.0, deadline: float = 300.0
) -> None:
    """Wait until the server uses less than `quiet` s of CPU per `window` s twice in a row
    (background work after a load: index snapshot, eviction sweep, embeddings)."""
    start, cpu0 = time.perf_counter(), server.cpu()
    calm = 0
    last = cpu0
    while calm < 2 and time.perf_counter() - start < deadline:
        await asyncio.sleep(window)
        now = server.cpu()
        calm = calm + 1 if now - last < quiet else 0
        last = now
    res.settle_s = max(0.0, time.perf_counter() - start - 2 * window)
    res.settle_cpu_s = last - cpu0


@dataclass
class Idle:
    label: str
    total: float  # CPU seconds per minute, whole process
    main: float  # the main thread: the event loop (uvicorn's tick, the watcher's health check, the SDK)
    others: float  # every other thread: watchdog's inotify threads, worker threads, embeddings


def thread_cpu(pid: int) -> dict[int, float]:
    """utime + stime per thread of a process, in seconds."""
    out: dict[int, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{pid}/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
            out[int(tid)] = (int(fields[11]) + int(fields[12])) / CLK_TCK
    return out


async def idle_cpu(pid: int, seconds: float, label: str) -> Idle:
    """CPU seconds per minute of a process while nothing changes, main thread and the others."""
    before, t0 = thread_cpu(pid), time.perf_counter()
    await asyncio.sleep(seconds)
    after, wall = thread_cpu(pid), time.perf_counter() - t0
    delta = {tid: after[tid] - before.get(tid, 0.0) for tid in after}
    main = delta.get(pid, 0.0)
    return Idle(
        label, sum(delta.values()) * 60 / wall, main * 60 / wall, (sum(delta.values()) - main) * 60 / wall
    )


async def bare_uvicorn_idle(seconds: float, *, sse: bool = False) -> Idle:
    """The same idle window for uvicorn serving an empty Starlette app: the floor of any uvicorn server.

    With ``sse``, the app has one sse-starlette route, requested once before the window: like the
    MCP SDK's streams, that starts sse-starlette's shutdown watcher, which then polls twice a
    second for the life of the process whatever the app does.
    """
    port = free_port()
    code = (
        "import uvicorn\nfrom starlette.applications import Starlette\nfrom starlette.routing import Route\n"
        "from sse_starlette.sse import EventSourceResponse\n"
        "async def once():\n    yield {'data': 'hello'}\n"
        "async def stream(request):\n    return EventSourceResponse(once())\n"
        f"uvicorn.run(Starlette(routes=[Route('/sse', stream)] if {sse} else []), host='127.0.0.1', "
        f"port={port}, log_level='info', lifespan='on')"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        await asyncio.sleep(3)
        if sse:

            def fetch() -> None:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/sse", timeout=10) as resp:
                    resp.read()

            await asyncio.to_thread(fetch)
        label = "bare uvicorn, empty Starlette app" + (
            " with one finished sse-starlette stream" if sse else ""
        )
        return await idle_cpu(proc.pid, seconds, f"{label} (same window length)")
    finally:
        proc.terminate()
        proc.wait(10)


# ---------------------------------------------------------------------------- measures


@dataclass
class Reads:
    """One server's timed calls: read_memory per query kind, recall and write_memory, in turns."""

    label: str
    times: dict[str, list[float]] = field(default_factory=dict)
    hits: dict[str, int] = field(default_factory=dict)
    recalls: list[float] = field(default_factory=list)
    writes: list[float] = field(default_factory=list)
    server_cpu_ms: float = 0.0  # server CPU per timed read_memory (the rounds' reads only)
    mem: dict[str, float] = field(default_factory=dict)  # after the calls
    pending: tuple[int, int] | None = None  # memories waiting for a vector (/healthz) before / after

    def read_times(self) -> list[float]:
        return [t for k in KINDS for t in self.times[k]]


def pending_vectors(server: ServerProc) -> int:
    """Memories waiting for a vector, as /healthz says (-1 if it does not answer)."""
    try:
        with urllib.request.urlopen(f"{server.base}/healthz", timeout=10) as resp:
            return int(json.loads(resp.read())["embeddings"]["pending"])
    except (OSError, ValueError, KeyError):
        return -1


WRITTEN_RE = re.compile(r"Saved as (\S+\.md)")


async def reads(
    server: ServerProc,
    queries: dict[str, list[str]],
    questions: Sequence[str],
    docs: Sequence[corpus.Doc],
    calls: int,
    warmup: int,
    offset: int,
    label: str,
) -> Reads:
    """Rounds of calls on one session: read_memory of each of the four kinds, one recall (a
    question), one write_memory (a new memory, fsynced); `offset` picks other queries per server.
    The memories written are deleted afterwards (untimed), so the vault keeps its N memories."""
    out = Reads(label, {k: [] for k in KINDS}, dict.fromkeys(KINDS, 0))
    out.pending = (await asyncio.to_thread(pending_vectors, server), 0)
    rng = random.Random(offset * 7919 + len(label))
    written: list[str] = []
    cpu_total, n = 0.0, 0
    async with client(server.url) as session:
        for i in range(warmup + calls):
            timed = i >= warmup
            cpu0 = server.cpu()
            for kind in KINDS:
                pool = queries[kind]
                q = pool[(offset + i) % len(pool)]
                elapsed, text = await call(session, "read_memory", {"query": q})
                if timed:
                    out.times[kind].append(elapsed)
                    out.hits[kind] += not text.startswith("No hot memories")
            if timed:
                cpu_total += server.cpu() - cpu0
                n += len(KINDS)
            question = questions[(offset * 101 + i) % len(questions)]
            elapsed, _ = await call(session, "recall", {"query": question, "limit": 10})
            if timed:
                out.recalls.append(elapsed)
            doc = docs[rng.randrange(len(docs))]
            title = f"Scale write {label.split()[0]} {offset} {i} {doc.title}"[:150]
            elapsed, text = await call(
                session, "write_memory", {"title": title, "content": doc.content, "priority": "P1"}
            )
            if timed:
                out.writes.append(elapsed)
            m = WRITTEN_RE.search(text)
            if m:
                written.append(m.group(1))
        out.server_cpu_ms = cpu_total / n * 1000
        out.mem = server.mem()
        out.pending = (out.pending[0], await asyncio.to_thread(pending_vectors, server))
        for name in written:
            await call(session, "delete_memory", {"filename": name})
    return out


def recall_questions(locomo: Path | None, queries: dict[str, list[str]]) -> list[str]:
    """recall's queries: LoCoMo's questions where the turns are LoCoMo's, else the two-word queries."""
    out: list[str] = []
    if locomo is not None:
        files = sorted(locomo.glob("*.json")) if locomo.is_dir() else [locomo]
        for file in files:
            data = json.loads(file.read_text(encoding="utf-8"))
            out += [str(qa["question"]) for qa in data.get("qa", []) if qa.get("question")]
    if not out:
        out = list(queries["two words"])
    random.Random(5).shuffle(out)
    return out


def shows(text: str, name: str, word: str) -> bool:
    """The reply shows file `name` with `word` in it (the reply's first line repeats the query, so
    the word alone proves nothing)."""
    if text.startswith("No ") or f"[{name} | " not in text:
        return False
    return word in text.split("\n", 1)[-1]


def unique_word(rng: random.Random, taken: set[str]) -> str:
    while True:
        word = "zq" + "".join(rng.choice(string.ascii_lowercase) for _ in range(10))
        if word not in taken:
            taken.add(word)
            return word


POLL_S = 0.01  # --poll-ms


async def poll_until(
    session: Any, query: str, ok: Any, deadline_s: float, limit: int | None = None
) -> tuple[float | None, int]:
    """Poll read_memory(query) every POLL_S (10 ms) until ok(text).

    Returns (seconds from now, polls); None instead of seconds at the deadline."""
    start = time.perf_counter()
    polls = 0
    args: dict[str, Any] = {"query": query}
    if limit is not None:
        args["limit"] = limit
    while True:
        _, text = await call(session, "read_memory", args)
        polls += 1
        elapsed = time.perf_counter() - start
        if ok(text):
            return elapsed, polls
        if elapsed > deadline_s:
            return None, polls
        await asyncio.sleep(POLL_S)


@dataclass
class Edits:
    times: dict[str, list[float | None]] = field(default_factory=lambda: {"write": [], "replace": []})
    polls: list[int] = field(default_factory=list)


async def hand_edits(server: ServerProc, folder: Path, count: int, seed: int, taken: set[str]) -> Edits:
    """Edit random files by hand (half plain writes, half temp file + os.replace as editors do),
    each adding a new word to the body; time from the write until read_memory finds the word."""
    rng = random.Random(seed + 11)
    names = sorted(n for n in os.listdir(folder) if n.endswith(".md") and not n.startswith("."))
    out = Edits()
    async with client(server.url) as session:
        for i, name in enumerate(rng.sample(names, count)):
            path = folder / name
            text = path.read_text(encoding="utf-8")
            word = unique_word(rng, taken)
            at = text.rfind("\n\n---\n*Created:")
            new = text[:at] + f" {word}" + text[at:] if at > 0 else text.rstrip("\n") + f"\n{word}\n"
            mode = "write" if i % 2 == 0 else "replace"
            if mode == "write":
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(new)
            else:
                tmp = folder / f".{name}.swp"
                with open(tmp, "w", encoding="utf-8") as handle:
                    handle.write(new)
                os.replace(tmp, path)
            found, polls = await poll_until(session, word, lambda t, w=word, n=name: shows(t, n, w), 5.0)
            out.times[mode].append(found)
            out.polls.append(polls)
            await asyncio.sleep(rng.uniform(0.05, 0.15))  # separate edits, as a person's are
    return out


@dataclass
class Burst:
    files: int = 0
    write_s: float = 0.0
    last_found_s: float | None = None  # last write -> the last file's unique word found
    all_found_s: float | None = None  # last write -> a word common to all of them counts every file
    counted: int = 0
    server_cpu_s: float = 0.0  # server CPU from the first write until it settles
    settle_s: float | None = None
    listed_after_removal: int = 0  # list_memory_titles' count once the deletions settled


async def burst(
    server: ServerProc, folder: Path, docs: Sequence[corpus.Doc], count: int, seed: int, taken: set[str]
) -> Burst:
    """Write `count` new files as fast as possible (a git pull), then time until they are all indexed."""
    rng = random.Random(seed + 13)
    common = unique_word(rng, taken)
    words = [unique_word(rng, taken) for _ in range(count)]
    run = "".join(rng.choice(string.ascii_lowercase) for _ in range(6))
    now = datetime.now(UTC)
    fields = {"priority": "P1", "createdAt": now, "updatedAt": now, "lastAccessedAt": now}
    texts = []
    for i in range(count):
        doc = docs[rng.randrange(len(docs))]
        title = f"Pulled {run} {i} {doc.title}"[:150]
        texts.append(
            (
                folder / f"pulled-{run}-{i:05d}.md",
                render_new(title, f"{doc.content} {common} {words[i]}", fields),
            )
        )
    out = Burst(files=count)
    async with client(server.url) as session:
        cpu0 = server.cpu()
        start = time.perf_counter()
        for path, text in texts:
            with open(path, "w", encoding="utf-8") as handle:
                handle.write(text)
        last = time.perf_counter()
        out.write_s = last - start
        last_name = texts[-1][0].name
        found, _ = await poll_until(session, words[-1], lambda t: shows(t, last_name, words[-1]), 30.0)
        if found is not None:
            out.last_found_s = time.perf_counter() - last

            def all_counted(text: str) -> bool:
                m = HEAD_RE.match(text)
                out.counted = int(m.group(1)) if m else 0
                return out.counted >= count

            done, _ = await poll_until(session, common, all_counted, 30.0, limit=1)
            if done is not None:
                out.all_found_s = time.perf_counter() - last
    st = Start("burst")
    await settle(server, st)
    out.settle_s = st.settle_s
    out.server_cpu_s = server.cpu() - cpu0
    # Then remove them all at once (a checkout back), so the vault is N files again; once the server
    # is quiet, list_memory_titles (which does not stat files) must count the memories without them.
    for path, _ in texts:
        path.unlink()
    await asyncio.sleep(0.5)
    await settle(server, Start("removal"))
    async with client(server.url) as session:
        _, text = await call(session, "list_memory_titles", {})
    out.listed_after_removal = titles_total(text)
    return out


def titles_total(text: str) -> int:
    """How many memories a list_memory_titles reply covers (shown lines + those left out)."""
    lines = [line for line in text.splitlines() if line.strip()]
    m = re.match(r"\[(\d+) more left out", lines[-1]) if lines else None
    return len(lines) - 1 + int(m.group(1)) if m else len(lines)


# ---------------------------------------------------------------------------- baselines


CHILD = r"""
import json, os, resource, sys, time
t0 = time.perf_counter()
from pathlib import Path
from memvault.search.index import Index
from memvault.disk.markdown import parse_memory
from memvault.disk.vault import Vault
out = {"import": time.perf_counter() - t0}
vault = Vault(Path(sys.argv[1]))
t = time.perf_counter(); entries = list(vault.scan()); out["scan"] = time.perf_counter() - t
t = time.perf_counter()
raws = []
for id, _, st in entries:
    with open(vault.dir / id, "rb") as handle:
        raws.append(handle.read())
out["read"] = time.perf_counter() - t
t = time.perf_counter()
memories = [
    parse_memory(raw, id, mtime_ns=st.st_mtime_ns, size=st.st_size) for raw, (id, _, st) in zip(raws, entries)
]
out["parse"] = time.perf_counter() - t
t = time.perf_counter()
index = Index()
for m in memories:
    index.upsert(m.id, title=m.title, body=m.content, tags=m.tags)
index.search("anything")
out["index"] = time.perf_counter() - t
out["files"] = len(entries)
out["maxrss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""


@dataclass
class Baseline:
    read_s: float = 0.0  # this process: read every file's bytes once
    child_s: float = 0.0  # a fresh process: start, import, scan, read, parse, index, exit
    child: dict[str, float] = field(default_factory=dict)


def baseline(folder: Path) -> Baseline:
    out = Baseline()
    start = time.perf_counter()
    for entry in os.scandir(folder):
        if entry.name.endswith(".md"):
            with open(entry.path, "rb") as handle:
                handle.read()
    out.read_s = time.perf_counter() - start
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(folder)], capture_output=True, text=True, env=server_env()
    )
    out.child_s = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"baseline child failed:\n{proc.stderr[-2000:]}")
    out.child = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


# ---------------------------------------------------------------------------- the run


@dataclass
class Results:
    n: int
    source: str
    build_s: float = 0.0
    sync_s: float = 0.0  # os.sync() after writing the vault
    base: Baseline = field(default_factory=Baseline)
    cold: Start = field(default_factory=lambda: Start("A"))
    snapshot_s: float | None = None  # A's first answer -> snapshot.npz on disk
    snapshot_mb: float = 0.0
    after_kill: list[Start] = field(default_factory=list)
    after_term: list[Start] = field(default_factory=list)
    reads: list[Reads] = field(default_factory=list)  # once the server is quiet
    busy: Reads | None = None  # server A right after its first answer, while vectors are computed
    idle: list[Idle] = field(default_factory=list)
    idle_floor: Idle | None = None
    idle_sse_floor: Idle | None = None
    edits: Edits = field(default_factory=Edits)
    bursts: list[Burst] = field(default_factory=list)
    load: list[tuple[float, float, float]] = field(default_factory=list)
    peak_mb: float = 0.0  # highest VmHWM of any server
    dirty: str = ""  # `git status` of memvault/ (others may be editing the tree)


async def run(args: argparse.Namespace, tmp: Path, docs: list[corpus.Doc], res: Results) -> None:
    root = tmp / "vault"  # the server's root; its logs go beside it, where the watcher does not look
    folder = root / TOKEN
    state = folder / ".memvault"
    logs = tmp / "logs"
    logs.mkdir()
    spy = args.py_spy
    if spy is not None:
        spy.mkdir(parents=True, exist_ok=True)
    queries = corpus.pick_queries(docs, args.calls + args.warmup, args.seed)
    first_q = queries["body word"]
    questions = recall_questions(args.locomo, queries)
    taken: set[str] = set()
    servers: list[ServerProc] = []

    def note(msg: str) -> None:
        print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    try:
        res.base = baseline(folder)
        note(f"baseline: read {res.base.read_s:.2f} s; child {res.base.child_s:.2f} s {res.base.child}")

        # A: cold start, empty sidecar.
        shutil.rmtree(state, ignore_errors=True)
        a = ServerProc(root, logs, "A-cold", spy)
        servers.append(a)
        res.cold = await first_answer(a, first_q[0], "A")
        answered = time.time()
        note(f"A cold: first answer {res.cold.answer_s:.2f} s (up {res.cold.up_s:.2f} s), {res.cold.mem}")
        # Right away, while the background embedder computes the vectors of the whole token.
        res.busy = await reads(
            a, queries, questions, docs, args.calls, args.warmup, 3, "A (while vectors are computed)"
        )
        note(f"A reads while vectors are computed done, pending {res.busy.pending}, {res.busy.mem}")
        snap = state / "snapshot.npz"
        t = time.perf_counter()
        while not snap.exists():
            if time.perf_counter() - t > 600 or not a.alive():
                raise RuntimeError(f"no snapshot from server A:\n{a.log_tail()}")
            await asyncio.sleep(0.05)
        res.snapshot_s = snap.stat().st_mtime - answered
        res.snapshot_mb = snap.stat().st_size / 1e6
        await settle(a, res.cold)
        note(
            f"A: snapshot after {res.snapshot_s:.2f} s ({res.snapshot_mb:.0f} MB); settled after "
            f"{res.cold.settle_s:.1f} s"
        )
        res.reads.append(
            await reads(a, queries, questions, docs, args.calls, args.warmup, 0, "A (cold-loaded)")
        )
        note(f"A reads done, {res.reads[-1].mem}")
        a.stop(signal.SIGKILL)

        # B1..Bk: restarts after SIGKILL, from A's background snapshot. Each but the last settles
        # (its memories built, its background work done, as a server that ran a while) and is then
        # killed; the last serves on.
        for k in range(args.kills):
            b = ServerProc(root, logs, f"B{k + 1}-after-kill", spy)
            servers.append(b)
            st = await first_answer(b, first_q[1 + k], f"B{k + 1}")
            res.after_kill.append(st)
            note(f"B{k + 1} after SIGKILL: first answer {st.answer_s:.2f} s, {st.mem}")
            await settle(b, st)
            if k < args.kills - 1:
                b.stop(signal.SIGKILL)
        last = f"B{args.kills}"
        res.reads.append(
            await reads(b, queries, questions, docs, args.calls, args.warmup, 1, f"{last} (after SIGKILL)")
        )
        res.idle.append(await idle_cpu(b.pid, args.idle, f"server {last}, after loading and the reads"))
        note(f"B idle: {res.idle[-1]}")
        res.edits = await hand_edits(b, folder, args.edits, args.seed, taken)
        note(f"edits: {res.edits.times}")
        for k in range(args.bursts):
            res.bursts.append(await burst(b, folder, docs, args.burst, args.seed + 100 * k, taken))
            note(f"burst: {res.bursts[-1]}")
            await asyncio.sleep(1.0)
        res.idle.append(await idle_cpu(b.pid, args.idle, f"server {last}, after the edits and the bursts"))
        note(f"B idle: {res.idle[-1]}, {b.mem()}")
        res.idle_floor = await bare_uvicorn_idle(args.idle)
        note(f"bare uvicorn idle: {res.idle_floor}")
        res.idle_sse_floor = await bare_uvicorn_idle(args.idle, sse=True)
        note(f"bare uvicorn + sse-starlette idle: {res.idle_sse_floor}")
        st.stop_s = b.stop(signal.SIGTERM)
        note(f"{last} stopped in {st.stop_s:.2f} s")

        # C: restarts after SIGTERM, from the shutdown snapshot.
        for k in range(args.restarts):
            c = ServerProc(root, logs, f"C{k + 1}-after-term", spy)
            servers.append(c)
            st = await first_answer(c, first_q[1 + args.kills + k], f"C{k + 1}")
            note(f"C{k + 1} after SIGTERM: first answer {st.answer_s:.2f} s, {st.mem}")
            if k == args.restarts - 1:
                await settle(c, st)
                res.reads.append(
                    await reads(
                        c, queries, questions, docs, args.calls, args.warmup, 2, f"C{k + 1} (after SIGTERM)"
                    )
                )
            st.stop_s = c.stop(signal.SIGTERM)
            res.after_term.append(st)
        res.peak_mb = max(s.mem.get("VmHWM", 0.0) for s in [res.cold, *res.after_kill, *res.after_term])
        res.peak_mb = max(
            res.peak_mb, *(r.mem.get("VmHWM", 0.0) for r in [*res.reads, *([res.busy] if res.busy else [])])
        )
    finally:
        for server in servers:
            server.ensure_dead()


# ---------------------------------------------------------------------------- report


def verdict(ok: bool) -> str:
    return "met" if ok else "**MISSED**"


def s2(x: float | None) -> str:
    return "timed out" if x is None else f"{x:.2f}"


p = pct


def report(res: Results, args: argparse.Namespace, command: str, vault_fs: str) -> str:
    info = machine()
    n = res.n
    read_target = READ_BUSY_TARGET_S if n > 10_000 else SMALL_READ_TARGET_S
    all_reads = [t for r in res.reads for t in r.read_times()]
    read_p50 = statistics.median(all_reads)
    busy = res.busy
    busy_p50 = statistics.median(busy.read_times()) if busy else float("nan")
    all_writes = [t for r in res.reads for t in r.writes]
    all_recalls = [t for r in res.reads for t in r.recalls]
    restart = statistics.median([s.answer_s for s in res.after_term])
    restart_kill = statistics.median([s.answer_s for s in res.after_kill])
    edit_all = [t for mode in ("write", "replace") for t in res.edits.times[mode]]
    edit_ok = [t for t in edit_all if t is not None]
    edit_missing = len(edit_all) - len(edit_ok)
    edit_p95 = p(edit_ok, 0.95) if edit_ok and not edit_missing else None
    rss_loaded = max(r.mem.get("VmRSS", 0.0) for r in res.reads)
    idle_max = max(i.total for i in res.idle)
    idle_threads = max(i.others for i in res.idle)
    floor = res.idle_floor.total if res.idle_floor else 0.0
    sse_floor = res.idle_sse_floor.total if res.idle_sse_floor else floor
    tick = 0.01 * 60 / args.idle  # one clock tick per window, in s/min
    finished = [b.all_found_s for b in res.bursts]
    burst_s = None if None in finished else statistics.median(finished)  # type: ignore[type-var]
    base = res.base
    child = base.child
    scale_note = "" if n == 100_000 else f" (targets are stated for 100,000 memories; this run has {n:,})"
    lines = [
        f"## {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}: scale targets (issue 3), "
        f"{n:,} memories in one token ({res.source})",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {info['nproc']} CPUs ({info['cpu']}), {info['ram']} RAM, Python {info['python']}, "
        f"{info['os']}, mcp {info['mcp']}, memvault {info['memvault']} (git {info['git']}); vault on "
        f"{vault_fs}. "
        "The server is `python -m memvault serve` in its own process (MEMVAULT_* cleared but "
        "MEMVAULT_CAPACITY=1000000000; default log level, so uvicorn's access log and the SDK's request log "
        "go to a file), driven over HTTP on 127.0.0.1 with the official client from this process; its RSS "
        "and "
        "CPU come from /proc/<pid>; memvault's bytecode is compiled first, as an install leaves it. "
        f"Load average (1 min) at start / end: {res.load[0][0]:.2f} / {res.load[-1][0]:.2f} on "
        f"{info['nproc']} "
        "CPUs (a shared machine: read medians and ratios).",
        "",
        f"Vault: {n:,} files written in {res.build_s:.1f} s, then flushed to disk (`os.sync`, "
        f"{res.sync_s:.1f} s) so that the kernel's writeback of them does not land in the measurements.",
        "",
        *([f"Uncommitted changes in memvault/ when this ran: {res.dirty}.", ""] if res.dirty else []),
        f"| target{scale_note} | measured | target | |",
        "|---|---:|---:|---|",
        f"| first answer after a cold start (empty `.memvault/`) | {res.cold.answer_s:.2f} s "
        f"| <= {COLD_TARGET_S:g} s | {verdict(res.cold.answer_s <= COLD_TARGET_S)} |",
        f"| first answer after a restart with the cache (SIGTERM, shutdown snapshot; median of "
        f"{len(res.after_term)}) | {restart:.2f} s | <= {RESTART_TARGET_S:g} s | "
        f"{verdict(restart <= RESTART_TARGET_S)} |",
        f"| first answer after a restart following SIGKILL (background snapshot; median of "
        f"{len(res.after_kill)}) | {restart_kill:.2f} s "
        f"| <= {RESTART_TARGET_S:g} s | {verdict(restart_kill <= RESTART_TARGET_S)} |",
        f"| read_memory p50 over HTTP while vectors are computed (server A right after its first answer, "
        f"{len(busy.read_times()) if busy else 0} reads; memories waiting for a vector before / after: "
        f"{busy.pending if busy else '-'}) | {ms(busy_p50)} ms | <= {ms(READ_BUSY_TARGET_S)} ms | "
        f"{verdict(busy_p50 <= READ_BUSY_TARGET_S)} |",
        f"| read_memory p50 over HTTP, servers quiet (all {len(all_reads)} timed reads, {len(res.reads)} "
        f"servers) | {ms(read_p50)} ms | <= {ms(read_target)} ms | {verdict(read_p50 <= read_target)} |",
        f"| write_memory p50 over HTTP, fsynced ({len(all_writes)} writes, servers quiet) "
        f"| {ms(statistics.median(all_writes))} ms | <= {ms(SMALL_WRITE_TARGET_S)} ms (at 10,000) | "
        f"{verdict(statistics.median(all_writes) <= SMALL_WRITE_TARGET_S)} |",
        f"| recall p50 over HTTP ({len(all_recalls)} recalls, servers quiet) "
        f"| {ms(statistics.median(all_recalls))} ms | <= {ms(SMALL_RECALL_TARGET_S)} ms (at 10,000) | "
        f"{verdict(statistics.median(all_recalls) <= SMALL_RECALL_TARGET_S)} |",
        f"| server RSS with the vault loaded (VmRSS after the reads, highest of {len(res.reads)} servers) "
        f"| {rss_loaded:,.0f} MB | <= {RSS_TARGET_MB:.0f} MB | {verdict(rss_loaded <= RSS_TARGET_MB)} |",
        f"| server peak RSS (VmHWM, highest of all servers) | {res.peak_mb:,.0f} MB | <= "
        f"{RSS_TARGET_MB:.0f} MB "
        f"| {verdict(res.peak_mb <= RSS_TARGET_MB)} |",
        f"| hand edit -> searchable, p95 ({len(edit_all)} edits) | "
        + (f"{ms(edit_p95)} ms" if edit_p95 is not None else f"{edit_missing} not found within 5 s")
        + f" | <= {ms(EDIT_P95_TARGET_S)} ms | "
        f"{verdict(edit_p95 is not None and edit_p95 <= EDIT_P95_TARGET_S)} |",
        f"| {args.burst:,}-file burst fully indexed, after the last write (median of {len(res.bursts)}) "
        f"| {s2(burst_s)} s | <= {BURST_TARGET_S:.0f} s "
        f"| {verdict(burst_s is not None and burst_s <= BURST_TARGET_S)} |",
        f"| idle: the watcher's threads (and every thread but the event loop's), nothing changing "
        f"({args.idle:.0f} s windows, worst of {len(res.idle)}) | {idle_threads:.3f} s/min | none measurable "
        f"| {verdict(idle_threads <= tick)} |",
        f"| idle: the whole server process, above a bare uvicorn app's {floor:.3f} s/min "
        f"| {idle_max:.3f} s/min | none measurable | {verdict(idle_max - floor <= tick)} |",
        f"| idle: the whole server process, above a bare uvicorn app that served one sse-starlette stream "
        f"({sse_floor:.3f} s/min) | {idle_max:.3f} s/min | none measurable | "
        f"{verdict(idle_max - sse_floor <= tick)} |",
        "",
        f'Idle: /proc counts CPU in 10 ms ticks, so "none measurable" is read as at most one tick per '
        f"{args.idle:.0f} s window ({tick:.3f} s/min). uvicorn wakes its loop every 0.1 s whatever the app, "
        "hence the bare-app floor measured in the same run. The MCP SDK answers GET streams and the legacy "
        "transport with sse-starlette, whose first stream starts a shutdown watcher that polls twice a "
        "second for the life of the process; the second floor includes it.",
        "",
        "### Start-up against merely reading the files",
        "",
        "| | seconds | x reading the files |",
        "|---|---:|---:|",
        f"| read every file's bytes once (this process, one pass, page cache warm from writing them) "
        f"| {base.read_s:.2f} | 1.0 |",
        f"| a fresh process doing the server's load without a server: start + import {child['import']:.2f}, "
        f"scan + stat {child['scan']:.2f}, read {child['read']:.2f}, parse (`parse_memory`) "
        f"{child['parse']:.2f}, "
        f"index (`Index.upsert`) {child['index']:.2f}; peak RSS {child['maxrss_mb']:,.0f} MB "
        f"| {base.child_s:.2f} | {base.child_s / base.read_s:.1f} |",
    ]
    starts = [("A: cold start, `.memvault/` deleted", res.cold)]
    starts += [(f"B{i + 1}: restart after SIGKILL", s) for i, s in enumerate(res.after_kill)]
    starts += [(f"C{i + 1}: restart after SIGTERM", s) for i, s in enumerate(res.after_term)]
    for label, s in starts:
        lines.append(
            f"| {label}: process start -> first read_memory answer | {s.answer_s:.2f} | "
            f"{s.answer_s / base.read_s:.1f} |"
        )
    lines += [
        "",
        "| server | up (/healthz) s | first answer s | server CPU to first answer s | RSS when up MB "
        "| RSS at first answer MB | background work after it: s wall / s CPU | SIGTERM -> exit s "
        "| steal to first answer | flushed before it: MB / s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, s in starts:
        bg = f"{s.settle_s:.1f} / {s.settle_cpu_s:.1f}" if s.settle_s is not None else ""
        stop = f"{s.stop_s:.2f}" if s.stop_s is not None else "(SIGKILL)"
        steal = "-" if s.steal is None else f"{s.steal:.0%}"
        lines.append(
            f"| {label} | {s.up_s:.2f} | {s.answer_s:.2f} | {s.cpu_s:.2f} | {s.mem_up.get('VmRSS', 0):,.0f} "
            f"| {s.mem.get('VmRSS', 0):,.0f} | {bg} | {stop} | {steal} "
            f"| {s.flushed_mb:.0f} / {s.flush_s:.2f} |"
        )
    lines += [
        "",
        f"Server A wrote `.memvault/snapshot.npz` ({res.snapshot_mb:,.0f} MB) {s2(res.snapshot_s)} s after "
        "its "
        'first answer. "Background work" is the time after the first answer until the server\'s CPU stays '
        "under 20 ms per second twice in a row (the snapshot, an eviction sweep, embeddings), and the CPU "
        "it used. Steal: the share of the machine's CPU time its host gave to other guests meanwhile "
        "(/proc/stat), the shared machine's noise. Before each start the page cache the servers before "
        "left dirty is written out (`os.sync`, outside the timed part), so that no start pays for "
        "its predecessors' writeback.",
        "",
        f"### read_memory, recall and write_memory over HTTP ({args.calls} timed rounds per server after "
        f"{args.warmup} warm-up rounds; a round is one read_memory of each kind, one recall of a question "
        "and one write_memory of a new memory, fsynced, on one session; the memories written are deleted "
        "afterwards)",
        "",
        "| server | kind | p50 ms | p95 ms | non-empty replies |",
        "|---|---|---:|---:|---:|",
    ]
    timed = [*([busy] if busy else []), *res.reads]
    for r in timed:
        for kind in KINDS:
            t = r.times[kind]
            lines.append(
                f"| {r.label} | {kind} | {ms(statistics.median(t))} | {ms(p(t, 0.95))} | "
                f"{r.hits[kind]}/{len(t)} |"
            )
    lines += [
        "",
        "| server | read p50 / p99 ms (all kinds) | recall p50 / p99 ms | write p50 / p99 ms "
        "| server CPU ms per read | waiting for a vector before / after | VmRSS after MB | VmHWM MB "
        "| RssAnon MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in timed:
        t = r.read_times()
        lines.append(
            f"| {r.label} | {ms(statistics.median(t))} / {ms(p(t, 0.99))} "
            f"| {ms(statistics.median(r.recalls))} / {ms(p(r.recalls, 0.99))} "
            f"| {ms(statistics.median(r.writes))} / {ms(p(r.writes, 0.99))} | {r.server_cpu_ms:.2f} "
            f"| {r.pending[0] if r.pending else '-'} / {r.pending[1] if r.pending else '-'} "
            f"| {r.mem.get('VmRSS', 0):,.0f} | {r.mem.get('VmHWM', 0):,.0f} "
            f"| {r.mem.get('RssAnon', 0):,.0f} |"
        )
    lines += [
        "",
        "The growth table's row (restarts: medians; RSS: VmRSS after the calls, highest of the quiet "
        "servers, and the peak; read, recall and write: all the quiet servers' calls pooled):",
        "",
        "| memories | cold start s | restart s (SIGTERM / SIGKILL) | RSS / peak MB "
        "| read p50 / p99 ms (while vectors are computed) | read p50 / p99 ms | recall p50 / p99 ms "
        "| write p50 / p99 ms |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {n:,} | {res.cold.answer_s:.2f} | {restart:.2f} / {restart_kill:.2f} "
        f"| {rss_loaded:,.0f} / {res.peak_mb:,.0f} "
        f"| {ms(busy_p50)} / {ms(p(busy.read_times(), 0.99)) if busy else '-'} "
        f"| {ms(read_p50)} / {ms(p(all_reads, 0.99))} "
        f"| {ms(statistics.median(all_recalls))} / {ms(p(all_recalls, 0.99))} "
        f"| {ms(statistics.median(all_writes))} / {ms(p(all_writes, 0.99))} |",
        "",
        f"### Outside changes (server B{args.kills})",
        "",
        "| | p50 ms | p95 ms | max ms | not found in 5 s |",
        "|---|---:|---:|---:|---:|",
    ]
    for mode, label in (("write", "plain write"), ("replace", "temp file + os.replace")):
        got = [t for t in res.edits.times[mode] if t is not None]
        miss = len(res.edits.times[mode]) - len(got)
        if got:
            lines.append(
                f"| hand edit -> searchable, {label} ({len(res.edits.times[mode])}) | "
                f"{ms(statistics.median(got))} "
                f"| {ms(p(got, 0.95))} | {ms(max(got))} | {miss} |"
            )
    if edit_ok:
        lines.append(
            f"| hand edit -> searchable, all ({len(edit_all)}) | {ms(statistics.median(edit_ok))} "
            f"| {ms(p(edit_ok, 0.95))} | {ms(max(edit_ok))} | {edit_missing} |"
        )
    lines += [
        "",
        f"Each edit adds a new word to a random file's body; the time runs from the write until a "
        f"read_memory for the word (polled every {POLL_S * 1000:g} ms) returns it. "
        f"Polls per edit: median {statistics.median(res.edits.polls):.0f}.",
        "",
        f"Bursts: {len(res.bursts)} times, {args.burst:,} new files written as fast as possible (plain "
        "writes, "
        "one folder, like a git pull), then from the last write: read_memory for a word only the last file "
        "has "
        "(polled), then for a word all of them have (limit 1; the reply's header counts the matches) until "
        "it "
        "counts all of them. Server CPU is from the first write until the server is quiet again. Then all "
        "of them are deleted at once (a checkout back, so the vault has N files again) and, once the server "
        "is quiet, list_memory_titles counts the hot memories.",
        "",
        "| burst | writing ms | last file found s | all counted s | counted | server CPU s "
        "| listed after deleting them |",
        "|---|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {i + 1} | {b.write_s * 1000:,.0f} | {s2(b.last_found_s)} | {s2(b.all_found_s)} | "
            f"{b.counted:,} "
            f"| {b.server_cpu_s:.1f} | {b.listed_after_removal:,} |"
            for i, b in enumerate(res.bursts)
        ),
        "",
        "| idle window | CPU s per minute | main thread (event loop) | other threads (watchdog, workers, "
        "embeddings) |",
        "|---|---:|---:|---:|",
    ]
    lines += [
        f"| {i.label} | {i.total:.3f} | {i.main:.3f} | {i.others:.3f} |"
        for i in [*res.idle, *(f for f in (res.idle_floor, res.idle_sse_floor) if f)]
    ]
    return "\n".join(lines) + "\n"


def git_dirty() -> str:
    """Uncommitted files under memvault/ (the figures are for the tree as it was)."""
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            [
                "git",
                "-C",
                str(Path(__file__).resolve().parent.parent),
                "status",
                "--porcelain",
                "--",
                "memvault",
            ],
            capture_output=True,
            text=True,
            timeout=10,
        )
        return ", ".join(f"`{line[3:]}` ({line[:2].strip()})" for line in out.stdout.splitlines())
    return ""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--memories", type=int, default=100_000, help="memories in the vault (default 100000)"
    )
    parser.add_argument("--locomo", type=Path, help="a LoCoMo folder or .json file for realistic prose")
    parser.add_argument("--out", type=Path, help="add the results to this markdown file (bench/RESULTS.md)")
    parser.add_argument(
        "--calls", type=int, default=100, help="timed reads per kind per server (default 100)"
    )
    parser.add_argument("--warmup", type=int, default=5, help="untimed rounds before the reads (default 5)")
    parser.add_argument("--edits", type=int, default=40, help="hand edits (default 40)")
    parser.add_argument("--burst", type=int, default=1000, help="files in a burst (default 1000)")
    parser.add_argument("--bursts", type=int, default=3, help="bursts, one after the other (default 3)")
    parser.add_argument("--idle", type=float, default=20.0, help="seconds per idle-CPU window (default 20)")
    parser.add_argument("--restarts", type=int, default=3, help="restarts after SIGTERM (default 3)")
    parser.add_argument("--kills", type=int, default=3, help="restarts after SIGKILL (default 3)")
    parser.add_argument(
        "--poll-ms", type=float, default=10.0, help="poll interval after an outside change (default 10)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--tools", help="MEMVAULT_TOOLS for the server, e.g. memories,sessions,graph (no recall)"
    )
    parser.add_argument(
        "--dir", type=Path, help="parent folder for the temporary vault (default: system temp)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the vault folder afterwards")
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="attach `py-spy record --threads --format raw` to every server; collapsed stacks go to DIR",
    )
    parser.add_argument(
        "--py-spy-helpers",
        action="store_true",
        help="with --py-spy, follow the cold load's helper processes too (their answers may then come "
        "out cut off, and the server loads in process instead)",
    )
    args = parser.parse_args(argv)
    if args.memories < 1000:
        parser.error("--memories must be at least 1000")
    if args.restarts < 1 or args.kills < 1:
        parser.error("--restarts and --kills must be at least 1")
    global POLL_S
    POLL_S = args.poll_ms / 1000
    command = (
        shlex.join(["python", *sys.argv])
        if argv is None
        else shlex.join(["python", "bench/bench_scale.py", *argv])
    )

    source = f"LoCoMo turns from {args.locomo.name}/" if args.locomo else f"synthetic prose, seed {args.seed}"
    res = Results(n=args.memories, source=source)
    res.load.append(os.getloadavg())
    res.dirty = git_dirty()
    # The servers start as an installed memvault does, from compiled bytecode (pip compiles at
    # install; a first run writes it). Where PYTHONDONTWRITEBYTECODE is set, as on our machines,
    # every start would otherwise compile memvault's modules again (about 0.2 s).
    compileall.compile_dir(Path(memvault.__file__).parent, quiet=1)
    global SERVER_TOOLS, PY_SPY_HELPERS
    SERVER_TOOLS = args.tools
    PY_SPY_HELPERS = args.py_spy_helpers
    start = time.perf_counter()
    docs = corpus.docs(args.locomo, args.memories, args.seed)
    root = Path(tempfile.mkdtemp(prefix="memvault-scale-", dir=args.dir))
    try:
        corpus.write_vault(root / "vault" / TOKEN, docs, args.seed)
        res.build_s = time.perf_counter() - start
        # Flushed now: else the kernel writes the new files back 30 s after writing them (Linux's
        # dirty_expire), in the middle of the cold start, whose first run it slowed by 2-3 s.
        start = time.perf_counter()
        os.sync()
        res.sync_s = time.perf_counter() - start
        print(f"vault of {len(docs):,} written in {res.build_s:.1f} s", file=sys.stderr, flush=True)
        asyncio.run(run(args, root, docs, res))
        res.load.append(os.getloadavg())
        section = report(res, args, command, fs_type(root))
    finally:
        if args.keep:
            print(f"vault kept in {root}", file=sys.stderr)
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(section)
    if args.out:
        update_results(args.out, section, command, MARK_START, MARK_END, grouped=True)
        print(f"written to {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
