"""Soak (issue 35's "Done when"): mixed calls over HTTP, legacy SSE and stdio across many tokens.

Starts a real `memvault serve` (a subprocess, its log kept) and a `memvault stdio` per stdio
token over the same vault, then for ``--minutes`` drives writes, reads, listings, recalls and
updates at tokens drawn from ``--tokens`` names. Every write the server acknowledged is checked on
disk at the end (in the hot set or the archive, its content whole); the server's RSS and loaded
tokens are sampled as it goes; its log is searched for tracebacks. Prints a summary, and with
``--out`` appends it to that file (bench/RESULTS.md).

    python bench/soak.py --minutes 10 --tokens 3000 --out bench/RESULTS.md
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import platform
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.sse import sse_client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def healthz(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{url}/healthz", timeout=10) as response:
        return dict(json.load(response))


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content if hasattr(c, "text"))


class Soak:
    def __init__(self, args: argparse.Namespace, root: Path, url: str) -> None:
        self.args = args
        self.root = root
        self.url = url
        self.rng = random.Random(args.seed)
        self.tokens = [f"soak{i:05d}" for i in range(args.tokens)]
        self.acked: list[tuple[str, str, str]] = []  # (token, filename, content) acknowledged
        self.calls: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.served: set[str] = set()
        self.deadline = 0.0

    def pick(self) -> str:
        token = self.rng.choice(self.tokens)
        self.served.add(token)
        return token

    async def one_call(self, session: ClientSession, token: str, transport: str) -> None:
        kind = self.rng.choices(["write", "read", "list", "recall", "update"], weights=[3, 4, 2, 2, 1], k=1)[
            0
        ]
        if kind == "write":
            content = f"soak note {self.rng.getrandbits(48):x} about {self.rng.choice(WORDS)}"
            result = await session.call_tool(
                "write_memory", {"title": f"Note {self.rng.getrandbits(32):x}", "content": content}
            )
            reply = text_of(result)
            if not result.is_error and reply.startswith("Saved as "):
                filename = reply.removeprefix("Saved as ").split(" (", 1)[0]
                self.acked.append((token, filename, content))
        elif kind == "read":
            result = await session.call_tool("read_memory", {"query": self.rng.choice(WORDS)})
        elif kind == "list":
            result = await session.call_tool("list_memory_titles", {})
        elif kind == "recall":
            result = await session.call_tool("recall", {"query": f"note about {self.rng.choice(WORDS)}"})
        else:
            listing = text_of(await session.call_tool("list_memory_titles", {}))
            names = [line.split("|", 1)[0] for line in listing.splitlines() if line.endswith("Z")]
            if not names:
                return
            result = await session.call_tool(
                "update_memory", {"filename": self.rng.choice(names), "append": "seen again"}
            )
        self.calls[f"{transport} {kind}"] += 1
        if result.is_error:
            self.errors[f"{kind}: {text_of(result)[:60]}"] += 1

    async def http_worker(self) -> None:
        while time.monotonic() < self.deadline:
            token = self.pick()
            try:
                async with streamable_http_client(f"{self.url}/mcp/{token}") as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        for _ in range(self.rng.randint(1, 4)):
                            await self.one_call(session, token, "http")
            except Exception as exc:  # counted; the soak goes on
                self.errors[f"http {type(exc).__name__}"] += 1

    async def sse_worker(self) -> None:
        while time.monotonic() < self.deadline:
            token = self.pick()
            try:
                async with sse_client(f"{self.url}/mcp/{token}/sse") as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        for _ in range(self.rng.randint(1, 4)):
                            await self.one_call(session, token, "sse")
            except Exception as exc:
                self.errors[f"sse {type(exc).__name__}"] += 1

    async def stdio_worker(self, token: str, log: Path) -> None:
        """One `memvault stdio` process for ``token``, beside the HTTP server on the same vault."""
        self.served.add(token)
        params = StdioServerParameters(
            command=sys.executable,
            args=["-m", "memvault", "stdio", "--root", str(self.root), "--token", token],
            env={k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")},
        )
        with log.open("w") as errlog:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    while time.monotonic() < self.deadline:
                        try:
                            await self.one_call(session, token, "stdio")
                        except Exception as exc:
                            self.errors[f"stdio {type(exc).__name__}"] += 1

    def lost(self) -> list[tuple[str, str]]:
        """Acknowledged writes whose file holds no longer the content written (hot or archived)."""
        missing = []
        for token, filename, content in self.acked:
            folder = self.root / token
            found = False
            for path in (folder / filename, folder / "archive" / filename):
                with contextlib.suppress(OSError):
                    if content in path.read_text(encoding="utf-8"):
                        found = True
                        break
            if not found:
                missing.append((token, filename))
        return missing


WORDS = [
    "harbour", "deploy", "postgres", "garden", "invoice", "kiwi", "Müller", "Köln", "walrus",
    "migration", "backup", "ticket", "review", "budget", "travel", "東京", "recipe", "ferry",
]  # fmt: skip


async def run(args: argparse.Namespace) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="memvault-soak-"))
    root = work / "vault"
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    env["MEMVAULT_MAX_LOADED_TOKENS"] = str(args.loaded)
    env.update(args.server_env)  # e.g. MALLOC_ARENA_MAX=2: the allocator's knobs, compared run to run
    server_log = work / "server.log"
    argv = [sys.executable, "-m", "memvault", "serve", "--root", str(root), "--port", str(port)]
    with server_log.open("wb") as out:
        server = subprocess.Popen(argv, env=env, stdout=out, stderr=out, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    while True:
        try:
            healthz(url)
            break
        except OSError:
            if server.poll() is not None or time.monotonic() - started > 60:
                raise SystemExit(f"server did not start:\n{server_log.read_text()}") from None
            await asyncio.sleep(0.1)
    soak = Soak(args, root, url)
    soak.deadline = time.monotonic() + args.minutes * 60
    samples: list[tuple[float, float, int, int, int]] = []  # (minutes, RSS MB, loaded, memories, served)

    async def sample() -> None:
        while time.monotonic() < soak.deadline:
            health = await asyncio.to_thread(healthz, url)
            samples.append(
                (
                    (time.monotonic() - (soak.deadline - args.minutes * 60)) / 60,
                    rss_mb(server.pid),
                    int(health["tokens_loaded"]),
                    int(health["memories_loaded"]),
                    len(soak.served),
                )
            )
            await asyncio.sleep(args.sample_seconds)

    stdio_tokens = soak.tokens[: args.stdio]
    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(sample())
            for _ in range(args.http):
                group.create_task(soak.http_worker())
            for _ in range(args.sse):
                group.create_task(soak.sse_worker())
            for i, token in enumerate(stdio_tokens):
                group.create_task(soak.stdio_worker(token, work / f"stdio-{i}.log"))
        final_rss = rss_mb(server.pid)
        final_health = healthz(url)
        final_loaded = int(final_health["tokens_loaded"])
        final_memories = int(final_health["memories_loaded"])
    finally:
        os.killpg(server.pid, signal.SIGINT)  # as Ctrl-C: a clean stop is part of the soak
        status = server.wait(60)
    logs = [server_log.read_text(errors="replace")]
    logs += [(work / f"stdio-{i}.log").read_text(errors="replace") for i in range(len(stdio_tokens))]
    tracebacks = sum(text.count("Traceback") for text in logs)
    lost = soak.lost()
    return {
        "work": work,
        "exit": status,
        "calls": soak.calls,
        "errors": soak.errors,
        "acked": len(soak.acked),
        "lost": lost,
        "served": len(soak.served),
        "samples": samples,
        "final_rss": final_rss,
        "final_loaded": final_loaded,
        "final_memories": final_memories,
        "tracebacks": tracebacks,
        "log_lines": sum(text.count("\n") for text in logs),
    }


def report(args: argparse.Namespace, result: dict[str, Any]) -> str:
    samples = result["samples"]
    calls = sum(result["calls"].values())
    git = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    load = os.getloadavg()
    lines = [
        "<!-- soak:start -->",
        f"## {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}: soak (issue 35), "
        f"{args.minutes:g} minutes, {args.tokens:,} tokens",
        "",
        f"Command: `python bench/soak.py --minutes {args.minutes:g} --tokens {args.tokens} "
        f"--loaded {args.loaded} --http {args.http} --sse {args.sse} --stdio {args.stdio}"
        + "".join(f" --server-env {k}={v}" for k, v in args.server_env.items())
        + "`",
        "",
        f"Machine: {os.cpu_count()} CPUs, Python {platform.python_version()}, {platform.system()} "
        f"{platform.release()}, memvault git {git}; load average after: {load[0]:.2f}. One "
        "`memvault serve` subprocess (MEMVAULT_MAX_LOADED_TOKENS as given) and "
        f"{args.stdio} `memvault stdio` processes on the same vault; {args.http} streamable HTTP "
        f"and {args.sse} legacy SSE clients, each opening a session on a random token for 1 to 4 "
        "calls (of 12: 3 writes, 4 reads, 2 listings, 2 recalls, 1 update that appends).",
        "",
        f"- Calls: {calls:,} ({', '.join(f'{k} {v:,}' for k, v in sorted(result['calls'].items()))}).",
        f"- Tokens served: {result['served']:,}; loaded at the end: {result['final_loaded']}.",
        f"- Acknowledged writes: {result['acked']:,}; lost: **{len(result['lost'])}**.",
        f"- Tracebacks in the logs (server and stdio, {result['log_lines']:,} lines): "
        f"**{result['tracebacks']}**; serve's exit status after SIGINT: {result['exit']}.",
        f"- Tool errors and client failures: {sum(result['errors'].values())}"
        + (
            f" ({'; '.join(f'{k}: {v}' for k, v in result['errors'].most_common(5))})"
            if result["errors"]
            else ""
        )
        + ".",
        "",
        "| minute | server RSS MB | tokens loaded | their memories | tokens served so far |",
        "|---:|---:|---:|---:|---:|",
    ]
    step = max(1, len(samples) // 12)
    for minute, rss, loaded, memories, served in samples[::step]:
        lines.append(f"| {minute:.1f} | {rss:.0f} | {loaded} | {memories:,} | {served:,} |")
    lines.append(
        f"| end | {result['final_rss']:.0f} | {result['final_loaded']} | {result['final_memories']:,} "
        f"| {result['served']:,} |"
    )
    lines += ["<!-- soak:end -->", ""]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--tokens", type=int, default=3000)
    parser.add_argument("--loaded", type=int, default=100, help="MEMVAULT_MAX_LOADED_TOKENS")
    parser.add_argument("--http", type=int, default=6, help="streamable HTTP clients")
    parser.add_argument("--sse", type=int, default=3, help="legacy SSE clients")
    parser.add_argument("--stdio", type=int, default=2, help="stdio processes (one token each)")
    parser.add_argument("--sample-seconds", type=float, default=15)
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for `memvault serve` only (repeatable), e.g. MALLOC_ARENA_MAX=2",
    )
    args = parser.parse_args()
    args.server_env = dict(item.split("=", 1) for item in args.server_env)
    result = asyncio.run(run(args))
    text = report(args, result)
    print(text)
    print(f"(vault and logs kept in {result['work']})", file=sys.stderr)
    if result["lost"]:
        print(f"lost writes: {result['lost'][:10]}", file=sys.stderr)
    if args.out is not None:
        with args.out.open("a", encoding="utf-8") as out:
            out.write("\n" + text)


if __name__ == "__main__":
    main()
