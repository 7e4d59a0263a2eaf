#!/usr/bin/env python
"""Many agents at once (issue 12): a mix of tool calls from N clients, against memvault and the SDK floor.

    python bench/bench_load.py [--tokens 32] [--memories 1000] [--seconds 20] [--locomo DIR]
                               [--out bench/RESULTS.md]

Builds a vault of N tokens x M memories (LoCoMo turns, or synthetic prose), last read 1-20 days
ago (so the first read of each memory today is one the access write-back acts on). Then, in the same
run, on the same machine, with the same light client (raw JSON-RPC over streamable HTTP, one
session per client, one keep-alive HTTP/1.1 connection each on asyncio streams, every client in
this one process; it takes about a sixth of the CPU httpx took, see Connection):

- the floor: `bench/floor_server.py`, a bare MCP SDK server with one trivial tool, every client
  calling it; run first and again last (the machine's speed drifts over minutes; memvault is set
  against the mean of the two);
- memvault: `python -m memvault serve` (MEMVAULT_CAPACITY=1000000000: no sweep interferes), each
  client on its own token, sending 55% read_memory, 15% recall, 10% list_memory_titles,
  12% write_memory, 8% update_memory, right after the tokens loaded (the embedding worker still
  busy with them).

Each phase runs for --seconds; reported: calls/s, p50/p95/p99 latency, failed calls, and memvault
against the floor.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
from harness import cpu_ticks, free_port, machine_line, ms, pct, steal_share, update_results

from memvault.disk.markdown import render_new
from memvault.disk.names import slugify

MARK_START = "<!-- bench_load:start -->"
MARK_END = "<!-- bench_load:end -->"
MIX = (
    ("read_memory", 55),
    ("recall", 15),
    ("list_memory_titles", 10),
    ("write_memory", 12),
    ("update_memory", 8),
)
HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


@dataclass
class Tally:
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    failed: Counter[str] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    def all(self) -> list[float]:
        return [x for values in self.latencies.values() for x in values]


class Connection:
    """One keep-alive HTTP/1.1 connection on asyncio streams, for one client's calls in turn.

    The load generator shares the machine's two cores with the servers it measures; httpx took about
    0.65 ms of CPU a call, nearly the SDK floor's server's own cost, so the client took a share of
    the cores the servers needed. This writes a request and reads a Content-Length or chunked reply,
    and nothing else.
    """

    def __init__(self, url: str) -> None:
        parts = urllib.parse.urlsplit(url)
        self.host, self.port, self.path = parts.hostname or "127.0.0.1", parts.port or 80, parts.path
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.retries = 0  # requests sent again after the server closed an idle connection

    async def post(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        reused = self.writer is not None
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection(self.host, self.port)
        head = [f"POST {self.path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        head += [f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
        try:
            self.writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
            status, fields, reply = await self.read(self.reader)
        except asyncio.IncompleteReadError as exc:
            self.close()
            if not (reused and exc.partial == b""):
                raise
            # The server closed the kept-alive connection as idle (uvicorn's keep-alive timeout)
            # before it read this request: a client starved of CPU on a loaded machine waited that
            # long between two calls. Nothing was done; send it again on a new connection.
            self.retries += 1
            return await self.post(body, headers)
        except BaseException:
            self.close()  # a half-read reply leaves the connection unusable
            raise
        if fields.get("connection", "").lower() == "close":
            self.close()
        return status, fields, reply

    @staticmethod
    async def read(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
        lines = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        fields = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            if name:
                fields[name.strip().lower()] = value.strip()
        if "content-length" in fields:
            return status, fields, await reader.readexactly(int(fields["content-length"]))
        if fields.get("transfer-encoding", "").lower() != "chunked":
            raise ValueError("a reply without a length")
        chunks = []
        while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        await reader.readuntil(b"\r\n")  # the (empty) trailer
        return status, fields, b"".join(chunks)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class Client:
    """One MCP session over raw JSON-RPC: initialize, then tools/call, nothing else."""

    def __init__(self, url: str) -> None:
        self.http, self.session, self.next_id = Connection(url), "", 0

    async def start(self) -> None:
        reply = await self.rpc(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "load", "version": "1"},
            },
        )
        assert "result" in reply, reply
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await self.http.post(json.dumps(note).encode(), self.headers())

    def headers(self) -> dict[str, str]:
        extra = {"Mcp-Session-Id": self.session, "MCP-Protocol-Version": "2025-06-18"} if self.session else {}
        return {**HEADERS, **extra}

    async def rpc(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        status, fields, reply = await self.http.post(json.dumps(body).encode(), self.headers())
        if status != 200:
            return {"error": {"message": f"HTTP {status}"}}
        self.session = fields.get("mcp-session-id", self.session)
        text = reply.decode()
        if fields.get("content-type", "").startswith("text/event-stream"):
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        return dict(json.loads(text))

    async def call(self, tool: str, args: dict[str, Any]) -> str | None:
        """None when the call worked, else why not."""
        async with asyncio.timeout(60):
            reply = await self.rpc("tools/call", {"name": tool, "arguments": args})
        if "error" in reply:
            return str(reply["error"].get("message", "error"))[:60]
        if reply.get("result", {}).get("isError"):
            return str(reply["result"]["content"][0]["text"])[:60]
        return None


def recent_reads(i: int, now: datetime, rng: random.Random) -> dict[str, Any]:
    """The fields a memory gets by default: a P1 memory last read 1-20 days ago."""
    return {"priority": "P1", "lastAccessedAt": now - timedelta(days=rng.uniform(1, 20))}


def write_tokens(
    root: Path,
    tokens: int,
    docs: list[corpus.Doc],
    per_token: int,
    seed: int,
    fields_for: Any = recent_reads,
) -> list[list[str]]:
    """Each token's files, created 21-60 days ago, their priority and last read from
    ``fields_for(i, now, rng)`` (i: the memory's number in its token); returns each token's file
    names."""
    rng = random.Random(seed)
    now = datetime.now(UTC)
    names: list[list[str]] = []
    for t in range(tokens):
        folder = root / f"agent{t:02d}"
        folder.mkdir(parents=True)
        mine: list[str] = []
        for i in range(per_token):
            doc = docs[(t * per_token + i) % len(docs)]
            created = now - timedelta(days=rng.uniform(21, 60))
            fields = {"priority": "P1", "createdAt": created, "updatedAt": created}
            fields |= fields_for(i, now, rng)
            name = f"{slugify(doc.title)[:60]}-{i}.md"
            (folder / name).write_text(render_new(doc.title, doc.content, fields), encoding="utf-8")
            mine.append(name)
        names.append(mine)
    return names


def start(
    cmd: list[str], env: dict[str, str], port: int, log: Path, cwd: str | None = None
) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1)
            return proc
        except OSError as exc:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited: {log.read_text()[-2000:]}") from exc
            if "404" in str(exc):  # the floor has no /healthz: it is up
                return proc
            time.sleep(0.1)
    raise RuntimeError("server did not start")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()


async def drive(urls: list[str], seconds: float, plan: Any, *, warm: Any = None) -> tuple[Tally, float]:
    """Every client in a loop for ``seconds``: ``plan(i, rng)`` gives its next (tool, args)."""
    clients = [Client(url) for url in urls]
    try:
        await asyncio.gather(*(c.start() for c in clients))
        if warm is not None:
            await asyncio.gather(*(c.call(*warm(i)) for i, c in enumerate(clients)))
        tally = Tally()
        end = time.monotonic() + seconds

        async def loop(i: int, client: Client) -> None:
            rng = random.Random(i)
            while time.monotonic() < end:
                tool, args = plan(i, rng)
                t0 = time.perf_counter()
                try:
                    why = await client.call(tool, args)
                except (OSError, EOFError, asyncio.LimitOverrunError, ValueError, StopIteration) as exc:
                    why = type(exc).__name__
                tally.latencies[tool].append(time.perf_counter() - t0)
                if why is not None:
                    tally.failed[tool] += 1
                    tally.reasons[why] += 1

        t0 = time.monotonic()
        await asyncio.gather(*(loop(i, c) for i, c in enumerate(clients)))
        return tally, time.monotonic() - t0
    finally:
        for client in clients:
            client.http.close()


def memvault_plan(names: list[list[str]], words: list[str], only: str | None = None) -> Any:
    weights = [w for t, w in MIX if only in (None, t)]
    tools = [t for t, _ in MIX if only in (None, t)]
    counter = [0]

    def plan(i: int, rng: random.Random) -> tuple[str, dict[str, Any]]:
        tool = rng.choices(tools, weights)[0]
        word = rng.choice(words)
        if tool == "read_memory":
            if rng.random() < 0.3:
                return tool, {"filenames": [rng.choice(names[i])]}
            return tool, {"query": word}
        if tool == "recall":
            return tool, {"query": f"what did they say about {word}?"}
        if tool == "list_memory_titles":
            return tool, {}
        if tool == "write_memory":
            counter[0] += 1
            return tool, {
                "title": f"Load note {i} {counter[0]}",
                "content": f"About {word}, number {counter[0]}.",
            }
        return tool, {"filename": rng.choice(names[i]), "tags": [word[:20]]}

    return plan


def report(tally: Tally, elapsed: float) -> dict[str, Any]:
    values = tally.all()
    return {
        "calls": len(values),
        "rate": len(values) / elapsed,
        "p50": pct(values, 0.5),
        "p95": pct(values, 0.95),
        "p99": pct(values, 0.99),
        "failed": sum(tally.failed.values()),
        "reasons": dict(tally.reasons.most_common(3)),
        "per_tool": {t: (len(v), pct(v, 0.5), pct(v, 0.99)) for t, v in sorted(tally.latencies.items())},
    }


def row(name: str, result: dict[str, Any], floor: dict[str, Any]) -> str:
    ratio = result["rate"] / floor["rate"]
    return (
        f"| {name} | {result['rate']:,.0f} | {ratio:.2f} | {ms(result['p50'])} | {ms(result['p99'])} | "
        f"{result['failed']} | {result['server_cpu_ms_per_call']:.2f} | {result['client_cpu']:.2f} | "
        f"{'-' if result.get('steal') is None else format(result['steal'], '.0%')} |"
    )


def floor_mean(floors: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """What memvault is set against: the mean rate of the floor runs (one before it, one after; the
    machine's speed drifts over minutes)."""
    return {"rate": sum(f["rate"] for f in floors.values()) / len(floors)}


def write_section(
    args: argparse.Namespace,
    floors: dict[str, dict[str, Any]],
    results: dict[str, dict[str, Any]],
    loaded: float,
) -> None:
    """The RESULTS section; "x floor" is against :func:`floor_mean`."""
    mv = results["memvault, one process"]
    floor = floor_mean(floors)
    command = "python bench/bench_load.py"
    command += f" --tokens {args.tokens} --memories {args.memories} --seconds {args.seconds:g}"
    command += (" --locomo ../shared/data/locomo" if args.locomo else "") + (" --nginx" if args.nginx else "")
    command += f" --processes {args.processes}" if args.processes else ""
    command += " --out bench/RESULTS.md"
    per_tool = [
        f"| {tool} | {n:,} | {ms(p50)} | {ms(p99)} |" for tool, (n, p50, p99) in mv["per_tool"].items()
    ]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        f"## {stamp}: many agents at once (issue 12), {args.tokens} clients x {args.memories:,} memories",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {machine_line()}. Client (raw JSON-RPC over streamable HTTP, one keep-alive "
        "connection and session per client on asyncio streams, all in one process) and servers in "
        "separate processes on this machine; the servers' CPU per call and the client's cores below.",
        "",
        f"Each client on its own token, for {args.seconds:g} s right after the tokens loaded (loading all "
        f"of them took {loaded:.1f} s; the embedding worker still busy with them): 55% read_memory (30% of "
        "them by filename), 15% recall, 10% list_memory_titles, 12% write_memory, 8% update_memory. "
        "Memories were last read 1-20 days ago, so first reads write lastAccessedAt back. The floor: the "
        "same clients against a bare MCP SDK server with one trivial tool (bench/floor_server.py), same run, "
        "once before memvault and once after: the machine's speed drifts over minutes, so x floor is "
        f"against the mean of the two ({floor['rate']:,.0f} calls/s). "
        "Steal: the share of the machine's CPU time its host gave to other guests during that window "
        "(/proc/stat); the phases run one after another, so unequal steal skews their ratios.",
        "",
        "| server | calls/s | x floor | p50 ms | p99 ms | failed | server CPU ms/call | client cores "
        "| steal |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(row(f"{name} (one trivial tool)", result, floor) for name, result in floors.items()),
        *(row(name, result, floor) for name, result in results.items()),
        "",
        "| memvault tool (one process) | calls | p50 ms | p99 ms |",
        "|---|---:|---:|---:|",
        *per_tool,
        "",
    ]
    update_results(args.out, "\n".join(lines), command, MARK_START, MARK_END, grouped=False)


def run_memvault(
    args: argparse.Namespace,
    env: dict[str, str],
    root: Path,
    processes: int,
    work: Path,
    names: list[list[str]],
    words: list[str],
    by_router: bool = False,
) -> tuple[dict[str, Any], float]:
    """Start ``processes`` servers on the vault (behind nginx when more than one; with ``by_router``,
    one `memvault serve --processes N`), load every token, then drive the mix; returns the report
    and the seconds the loading took."""
    ports = [free_port() for _ in range(1 if by_router else processes)]
    servers = []
    proxy = None
    try:
        for n, port in enumerate(ports):
            mv_env = {
                **env,
                "MEMVAULT_ROOT": str(root),
                "MEMVAULT_PORT": str(port),
                "MEMVAULT_CAPACITY": "1000000000",
                "MEMVAULT_LOG_LEVEL": "warning",
                "MEMVAULT_PROCESSES": str(processes if by_router else 1),
            }
            cmd = [sys.executable, "-m", "memvault", "serve"]
            log = work / f"memvault-{processes}-{n}{'-routed' if by_router else ''}.log"
            servers.append(start(cmd, mv_env, port, log))
        front = ports[0]
        if processes > 1 and not by_router:
            front = free_port()
            proxy = start_nginx([f"127.0.0.1:{p}" for p in ports], front, work / f"nginx-{processes}")
        urls = [f"http://127.0.0.1:{front}/mcp/agent{t:02d}" for t in range(args.tokens)]
        t0 = time.monotonic()
        listing = ("list_memory_titles", {})
        asyncio.run(drive(urls, 0, lambda i, rng: listing, warm=lambda i: listing))
        loaded = time.monotonic() - t0
        spy = None
        if args.spy and processes == 1:
            spy_cmd = [
                "py-spy",
                "record",
                "-p",
                str(servers[0].pid),
                "-d",
                str(int(args.seconds)),
                "-f",
                "raw",
            ]
            spy_cmd += ["-o", str(args.spy), "--threads"] + (["--gil"] if args.gil else [])
            spy = subprocess.Popen(spy_cmd)
        probes = ports * processes if by_router else ports  # keyless: each process in turn
        embed0 = [embedding_state(p) for p in probes]
        pids = [p for s in servers for p in (s.pid, *children_of(s.pid))]  # the router's processes too
        cpu0 = [cpu_seconds(p) for p in pids], time.process_time()
        sys0 = sum(cpu_seconds(p, system=True) for p in pids)
        main0 = sum(cpu_seconds(p, task=p) for p in pids)
        ticks = cpu_ticks()
        tally, elapsed = asyncio.run(drive(urls, args.seconds, memvault_plan(names, words, args.only)))
        steal = steal_share(ticks, cpu_ticks())
        server_cpu = sum(cpu_seconds(p) for p in pids) - sum(cpu0[0])
        result = report(tally, elapsed)
        result["server_cpu"] = server_cpu / elapsed
        embed1 = [embedding_state(p) for p in probes]
        result["vectors_pending"] = (sum(e[0] for e in embed0), sum(e[0] for e in embed1))
        result["embedding_cpu"] = (sum(e[1] for e in embed1) - sum(e[1] for e in embed0)) / elapsed
        result["server_loop"] = (sum(cpu_seconds(p, task=p) for p in pids) - main0) / elapsed
        result["server_sys"] = (sum(cpu_seconds(p, system=True) for p in pids) - sys0) / elapsed
        result["client_cpu"] = (time.process_time() - cpu0[1]) / elapsed
        result["server_cpu_ms_per_call"] = 1000 * server_cpu / max(1, result["calls"])
        result["steal"] = steal
        if spy is not None:
            spy.wait(60)
        return result, loaded
    finally:
        if proxy is not None:
            stop(proxy)
        for server in servers:
            stop(server)


def embedding_state(port: int) -> tuple[int, float]:
    """Memories still waiting for a vector, and the embedding worker's CPU seconds so far, in the
    server on ``port`` (its /healthz)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as reply:
        embeddings = json.loads(reply.read()).get("embeddings", {})
    return int(embeddings.get("pending", 0)), float(embeddings.get("cpu_seconds", 0.0))


def children_of(pid: int) -> list[int]:
    """The live child processes of ``pid`` (Linux): `serve --processes N`'s server processes."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split() if entry.name.isdigit() else []
        except OSError:
            continue
        if fields and int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


def cpu_seconds(pid: int, *, system: bool = False, task: int | None = None) -> float:
    """User + system (or only system) CPU seconds a process (or one of its threads) has used so far
    (Linux)."""
    where = f"/proc/{pid}/task/{task}/stat" if task is not None else f"/proc/{pid}/stat"
    fields = Path(where).read_text().rpartition(")")[2].split()
    return (int(fields[12]) + (0 if system else int(fields[11]))) / os.sysconf("SC_CLK_TCK")


def start_nginx(backends: list[str], port: int, prefix: Path) -> subprocess.Popen[bytes]:
    from memvault.server import nginx

    prefix.mkdir(parents=True)
    conf = prefix / "nginx.conf"
    conf.write_text(nginx.standalone(backends, listen=f"127.0.0.1:{port}", prefix=str(prefix)))
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    with open(prefix / "stderr.log", "wb") as log:
        proc = subprocess.Popen([binary, "-c", str(conf), "-p", str(prefix)], stdout=log, stderr=log)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return proc
        time.sleep(0.05)
    raise RuntimeError("nginx did not start: " + (prefix / "stderr.log").read_text())


def run_floor(args: argparse.Namespace, env: dict[str, str], here: Path, work: Path) -> dict[str, Any]:
    """The same clients against bench/floor_server.py (one trivial tool) for --seconds."""
    port = free_port()
    floor = start(
        [sys.executable, str(here / "floor_server.py"), "--port", str(port)], env, port, work / "floor.log"
    )
    try:
        urls = [f"http://127.0.0.1:{port}/mcp/" for _ in range(args.tokens)]
        cpu0 = cpu_seconds(floor.pid), time.process_time()
        ticks = cpu_ticks()
        tally, elapsed = asyncio.run(drive(urls, args.seconds, lambda i, rng: ("echo", {"text": "hi"})))
        steal = steal_share(ticks, cpu_ticks())
        floor_cpu = cpu_seconds(floor.pid) - cpu0[0]
        result = report(tally, elapsed)
        result["client_cpu"] = (time.process_time() - cpu0[1]) / elapsed
        result["server_cpu"] = floor_cpu / elapsed
        result["server_cpu_ms_per_call"] = 1000 * floor_cpu / max(1, result["calls"])
        result["steal"] = steal
        return result
    finally:
        stop(floor)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--memories", type=int, default=1000, help="memories per token")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--locomo", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--nginx", action="store_true", help="also two memvault processes behind nginx")
    parser.add_argument("--processes", type=int, help="also `memvault serve --processes N`")
    parser.add_argument(
        "--spy", type=Path, help="py-spy the server during the load (collapsed stacks to this file)"
    )
    parser.add_argument("--gil", action="store_true", help="with --spy: only what holds the GIL")
    parser.add_argument(
        "--no-floor", action="store_true", help="skip the floor (for profiling; nothing is written)"
    )
    parser.add_argument("--floor-only", action="store_true", help="only the floor (nothing is written)")
    parser.add_argument("--only", choices=[t for t, _ in MIX], help="with --no-floor: this tool alone")
    args = parser.parse_args()

    here = Path(__file__).resolve().parent
    work = Path(tempfile.mkdtemp(prefix="memvault-load-"))
    try:
        n_docs = min(args.tokens * args.memories, 20_000)
        docs = corpus.docs(args.locomo, n_docs, args.seed)
        root = work / "vault"
        t0 = time.monotonic()
        names = write_tokens(root, args.tokens, docs, args.memories, args.seed)
        print(f"vault: {args.tokens} x {args.memories} in {time.monotonic() - t0:.1f} s", flush=True)
        words = [w for d in docs[:2000] for w in d.content.split() if w.isalpha() and len(w) > 5][:5000]
        env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}

        if args.floor_only:
            args.no_floor = False
        if args.no_floor:
            result, loaded = run_memvault(args, env, root, 1, work, names, words)
            print(json.dumps({"loaded": loaded, **result}, indent=1, default=str))
            return 0
        floor_result = run_floor(args, env, here, work)
        print(f"floor: {floor_result['rate']:.0f} calls/s", flush=True)
        if args.floor_only:
            print(json.dumps(floor_result, indent=1, default=str))
            return 0

        pristine = work / "pristine"
        if args.nginx or args.processes:
            shutil.copytree(root, pristine)  # every phase starts from the same vault
        mv_result, loaded = run_memvault(args, env, root, 1, work, names, words)
        results = {"memvault, one process": mv_result}
        routed = f"memvault, serve --processes {args.processes}"
        phases = [(routed, args.processes, True)] if args.processes else []
        phases += [("memvault, 2 processes behind nginx", 2, False)] if args.nginx else []
        for name, processes, by_router in phases:
            shutil.rmtree(root)
            shutil.copytree(pristine, root)
            results[name], _ = run_memvault(args, env, root, processes, work, names, words, by_router)
        floor_after = run_floor(args, env, here, work)  # the floor again (see floor_mean)
        floors = {"SDK floor, before": floor_result, "SDK floor, after": floor_after}
        reference = floor_mean(floors)
        for name, result in {**floors, **results}.items():
            print(f"{name}: {result['rate']:.0f} calls/s ({result['rate'] / reference['rate']:.2f})")
        print(json.dumps({**floors, **results}, indent=1, default=str))
        if args.out:
            write_section(args, floors, results, loaded)
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
