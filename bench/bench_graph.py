"""Graph tools side by side: memvault and the official MCP memory server, through the same client.

Both servers run as their own stdio processes, started and driven by the official Python MCP client
(``stdio_client`` + ``ClientSession``), each over its own copy of the same graph.jsonl (N entities
with observations and relations, written once before either starts). Then, alternating between
the two servers call by call so that a noisy neighbour costs both alike, it times each
call of create_entities (one new entity), create_relations (one new relation), add_observations
(one new observation on an existing entity) and search_nodes (an entity's name, such as
``entity-123``: both servers find the same handful, that entity and those whose name it starts), and
reports medians and p90 per tool and the ratio memvault / official. At the end it checks that both
files hold every entity, relation and observation written.

    python bench/bench_graph.py --entities 2000 --calls 200 \\
        --official "node /path/to/node_modules/@modelcontextprotocol/server-memory/dist/index.js" \\
        --out bench/RESULTS.md

``--official`` defaults to ``npx -y @modelcontextprotocol/server-memory``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import fs_type, machine_line, ms, pct, update_results

START = "<!-- bench_graph:start -->"
END = "<!-- bench_graph:end -->"
TOOLS = ("create_entities", "create_relations", "add_observations", "search_nodes")
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november".split()


def graph_lines(entities: int, seed: int) -> list[str]:
    """A graph as the official server writes it: compact JSON, entities, then relations."""
    rng = random.Random(seed)
    lines = []
    for n in range(entities):
        facts = [f"{rng.choice(WORDS)} {rng.choice(WORDS)} fact {n}-{k}" for k in range(3)]
        row = {
            "type": "entity",
            "name": f"entity-{n}",
            "entityType": rng.choice(WORDS),
            "observations": facts,
        }
        lines.append(json.dumps(row, separators=(",", ":")))
    for n in range(entities):
        row = {
            "type": "relation",
            "from": f"entity-{n}",
            "to": f"entity-{rng.randrange(entities)}",
            "relationType": rng.choice(WORDS),
        }
        lines.append(json.dumps(row, separators=(",", ":")))
    return lines


@contextlib.asynccontextmanager
async def connect(command: list[str], env: dict[str, str]) -> AsyncIterator[ClientSession]:
    params = StdioServerParameters(command=command[0], args=command[1:], env={**os.environ, **env})
    with open(os.devnull, "w") as quiet:
        async with stdio_client(params, errlog=quiet) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def timed(session: ClientSession, tool: str, args: dict[str, Any]) -> float:
    start = time.perf_counter()
    result = await session.call_tool(tool, args)
    elapsed = time.perf_counter() - start
    if getattr(result, "is_error", False):
        text = " ".join(getattr(c, "text", "") for c in result.content)
        raise RuntimeError(f"{tool} failed: {text[:300]}")
    return elapsed


def call_args(tool: str, i: int, entities: int, rng: random.Random) -> dict[str, Any]:
    if tool == "create_entities":
        return {
            "entities": [{"name": f"new-{i}", "entityType": "bench", "observations": [f"made in call {i}"]}]
        }
    if tool == "create_relations":
        return {
            "relations": [
                {"from": f"new-{i}", "to": f"entity-{rng.randrange(entities)}", "relationType": "bench"}
            ]
        }
    if tool == "add_observations":
        return {
            "observations": [{"entityName": f"entity-{rng.randrange(entities)}", "contents": [f"added {i}"]}]
        }
    return {"query": f"entity-{rng.randrange(entities)}"}


def check_file(path: Path, calls: int) -> str:
    """What the file holds of what the run wrote."""
    names, relations, added = set(), 0, 0
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("type") == "entity":
            names.add(row["name"])
            added += sum(1 for o in row.get("observations", []) if o.startswith("added "))
        elif row.get("relationType") == "bench":
            relations += 1
    made = sum(1 for i in range(calls) if f"new-{i}" in names)
    return f"{made}/{calls} entities, {relations}/{calls} relations, {added}/{calls} observations"


async def run(args: argparse.Namespace) -> str:
    work = Path(tempfile.mkdtemp(prefix="bench-graph-"))
    try:
        lines = graph_lines(args.entities, args.seed)
        text = "\n".join(lines)
        (work / "vault" / "bench").mkdir(parents=True)
        (work / "vault" / "bench" / "graph.jsonl").write_text(text + "\n", encoding="utf-8")
        official_file = work / "official" / "memory.jsonl"
        official_file.parent.mkdir()
        official_file.write_text(text, encoding="utf-8")
        memvault_cmd = [
            sys.executable,
            "-m",
            "memvault",
            "stdio",
            "--token",
            "bench",
            "--root",
            str(work / "vault"),
        ]
        official_cmd = shlex.split(args.official)
        times: dict[str, dict[str, list[float]]] = {
            s: {t: [] for t in TOOLS} for s in ("memvault", "official")
        }
        async with (
            connect(memvault_cmd, {"MEMVAULT_TOOLS": "graph"}) as mv,
            connect(official_cmd, {"MEMORY_FILE_PATH": str(official_file)}) as off,
        ):
            servers = {"memvault": mv, "official": off}
            for session in servers.values():  # warm up: the first call loads the graph
                await timed(session, "search_nodes", {"query": "warm"})
            for tool in TOOLS:
                rng = {name: random.Random(args.seed) for name in servers}
                for i in range(args.calls):
                    order = list(servers.items()) if i % 2 == 0 else list(servers.items())[::-1]
                    for name, session in order:
                        times[name][tool].append(
                            await timed(session, tool, call_args(tool, i, args.entities, rng[name]))
                        )
        kept = {
            "memvault": check_file(work / "vault" / "bench" / "graph.jsonl", args.calls),
            "official": check_file(official_file, args.calls),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return report(args, times, kept)


def official_label(command: str) -> str:
    """The official server as a package and version (never the path it was installed under)."""
    package = "@modelcontextprotocol/server-memory"
    for part in shlex.split(command):
        if package in part:
            root = Path(part[: part.index(package) + len(package)])
            with contextlib.suppress(OSError, ValueError, KeyError):
                version = json.loads((root / "package.json").read_text(encoding="utf-8"))["version"]
                node = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=10)
                return f"{package} {version} on node {node.stdout.strip()}"
            return package
    return command


def report(args: argparse.Namespace, times: dict[str, dict[str, list[float]]], kept: dict[str, str]) -> str:
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        f"## {now}: graph tools against the official memory server, {args.entities:,} entities (issue 35)",
        "",
        f"Machine: {machine_line()}; load average {os.getloadavg()[0]:.2f} at the end; files on "
        f"{fs_type(Path(tempfile.gettempdir()))}.",
        f"Official server: {official_label(args.official)}. Both as stdio processes, one official Python "
        f"MCP client, {args.calls} calls per tool, alternating between the servers call by call.",
        "",
        "| tool | memvault median | official median | memvault p90 | official p90 | ratio (medians) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for tool in TOOLS:
        mine, theirs = times["memvault"][tool], times["official"][tool]
        ratio = statistics.median(mine) / statistics.median(theirs)
        out.append(
            f"| {tool} | {ms(statistics.median(mine))} ms | {ms(statistics.median(theirs))} ms | "
            f"{ms(pct(mine, 0.9))} ms | {ms(pct(theirs, 0.9))} ms | {ratio:.2f} |"
        )
    out += [
        "",
        f"Written and found in the file afterwards: memvault {kept['memvault']}; "
        f"official {kept['official']}. memvault fsyncs each write before it answers (a rewrite: the "
        "file and its folder; an append: the file); the official server does not.",
        "",
    ]
    return "\n".join(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entities", type=int, default=2000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--seed", type=int, default=35)
    parser.add_argument("--official", default="npx -y @modelcontextprotocol/server-memory")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    section = asyncio.run(run(args))
    print(section)
    if args.out:
        command = f"python bench/bench_graph.py --entities {args.entities} --calls {args.calls}"
        update_results(args.out, section, command, START, END, grouped=False)


if __name__ == "__main__":
    main()
