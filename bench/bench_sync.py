#!/usr/bin/env python
"""Writes with git sync on and off, side by side in one run (issue 48): a write must not wait for git.

    python bench/bench_sync.py [--writes 500] [--peer-every 1.0] [--out bench/RESULTS.md]

Two vaults, each a clone of its own bare remote on this disk, each served by memvault in this
process (the real server on a loopback port, the official MCP client): one with
``MEMVAULT_SYNC=git`` (the default interval; a sync follows each burst of writes a couple of
seconds later), one without. Unless ``--peer-every 0``, a peer clone of the synced vault's remote
writes a memory into the same token and syncs (``memvault sync --once``'s code) every that many
seconds, so the synced server also fetches and merges what another machine pushed while it is
being written to, holding the token's file lock for each merge. Writes (``write_memory``, a new
memory each, fsynced) alternate call by call between the two servers, so a noisy neighbour, and
the CPU the git processes take, costs both sides alike; what is left between them is what a write
waits for on the synced side. Reported: each side's p50/p90/p99/max, the ratios synced / plain,
the syncs, merges and commits the synced side made, the git processes' CPU, and whether every
write reached the remote in the end. With ``--pull N``, also the seconds until N new memories are
searchable: pulled by a synced server (another clone pushes them) against copied into a plain
server's vault.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import corpus
from harness import call, client, fs_type, machine_line, ms, pct, serve, update_results

from memvault.config import Settings
from memvault.git.loop import sync_vault
from memvault.git.running import running

TOKEN = "bench"
MARK_START = "<!-- bench_sync:start -->"
MARK_END = "<!-- bench_sync:end -->"
WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november".split()


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=120)
    return done.stdout


def clone_of_new_remote(work: Path, name: str) -> tuple[Path, Path]:
    """A bare remote and a clone of it, both under ``work``."""
    remote = work / f"{name}.git"
    git(work, "init", "--quiet", "--bare", "-b", "main", str(remote))
    git(work, "clone", "--quiet", str(remote), str(work / name))
    return remote, work / name


def content(n: int) -> str:
    words = [WORDS[(n * 7 + k * 3) % len(WORDS)] for k in range(40)]
    return f"Write {n}: " + " ".join(words) + "."


class Peer:
    """Another machine: writes a memory into the synced token's clone and syncs, every ``every`` s."""

    def __init__(self, clone: Path, every: float) -> None:
        self.clone, self.every = clone, every
        self.syncs = 0
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-peer", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        n = 0
        while not self._stop.wait(self.every):
            folder = self.clone / TOKEN
            folder.mkdir(exist_ok=True)
            (folder / f"peer-{n:05d}.md").write_text(f"# Peer {n}\n\n{content(n)}\n", encoding="utf-8")
            n += 1
            try:
                sync_vault(self.clone)
                self.syncs += 1
            except Exception as exc:  # a refused push (the remote moved): the next round retries
                self.errors.append(type(exc).__name__)


async def run(args: argparse.Namespace, work: Path) -> dict[str, object]:
    remote_on, on_root = clone_of_new_remote(work, "synced")
    _, off_root = clone_of_new_remote(work, "plain")
    base = Settings(embedder=args.embedder, capacity=10**9, log_level="warning")
    on_settings = base.replace(root=on_root, sync="git")
    off_settings = base.replace(root=off_root)
    peer: Peer | None = None
    if args.peer_every > 0:
        git(work, "clone", "--quiet", str(remote_on), str(work / "peer"))
        git(work / "peer", "config", "user.name", "peer")  # its commits told from the server's
        git(work / "peer", "config", "user.email", "peer@example.invalid")
        peer = Peer(work / "peer", args.peer_every)
    times: dict[str, list[float]] = {"plain": [], "synced": []}
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    load = [os.getloadavg()]
    started = time.monotonic()
    async with serve(on_settings) as on_server, serve(off_settings) as off_server:
        async with (
            client(f"{on_server.url}/mcp/{TOKEN}") as on_session,
            client(f"{off_server.url}/mcp/{TOKEN}") as off_session,
        ):
            sides = (("plain", off_session), ("synced", on_session))
            for n in range(args.warmup):
                for side, session in sides:
                    await call(session, "write_memory", {"title": f"Warm {side} {n}", "content": content(n)})
            if peer is not None:
                peer.start()
            try:
                for n in range(args.writes):
                    order = sides if n % 2 == 0 else sides[::-1]  # neither side always goes first
                    for side, session in order:
                        elapsed, reply = await call(
                            session, "write_memory", {"title": f"Note {side} {n}", "content": content(n)}
                        )
                        if not reply.startswith("Saved as "):
                            raise RuntimeError(f"write {n} on {side}: {reply[:200]}")
                        times[side].append(elapsed)
            finally:
                if peer is not None:
                    await asyncio.to_thread(peer.stop)
            timed_for = time.monotonic() - started
            load.append(os.getloadavg())
            loop = running(on_root)
            assert loop is not None, "the synced server runs no sync loop"

            def reached() -> bool:
                tree = git(remote_on, "ls-tree", "-r", "--name-only", "main").split()
                return sum(path.startswith(f"{TOKEN}/note-synced-") for path in tree) == args.writes

            deadline = time.monotonic() + 120
            while not await asyncio.to_thread(reached) and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
            all_there = await asyncio.to_thread(reached)
            syncs = loop.syncs
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    git_cpu = (children.ru_utime - children_before.ru_utime) + (children.ru_stime - children_before.ru_stime)
    log = git(on_root, "log", "--format=%an|%s", "main")
    subjects = [line.split("|", 1) for line in log.splitlines() if line.startswith("memvault|")]
    return {
        "times": times,
        "timed_for": timed_for,
        "load": load,
        "syncs": syncs,
        "commits": sum(1 for _, subject in subjects if subject.startswith(f"memvault: {TOKEN}:")),
        "merges": sum(1 for _, subject in subjects if subject.startswith("memvault: merge")),
        "peer_syncs": peer.syncs if peer else 0,
        "peer_errors": peer.errors if peer else [],
        "git_cpu": git_cpu,
        "all_there": all_there,
        "fs": fs_type(on_root),
    }


async def searchable(session: object, count: int, word: str, deadline: float) -> None:
    """Until memory_stats counts ``count`` hot memories and a search finds ``word``."""
    while time.monotonic() < deadline:
        _, stats = await call(session, "memory_stats", {})  # type: ignore[arg-type]
        if stats.startswith(f"Memories: {count} hot"):
            _, found = await call(session, "read_memory", {"query": word})  # type: ignore[arg-type]
            if word in found:
                return
        await asyncio.sleep(0.1)
    raise RuntimeError(f"{count} memories were not searchable in time")


async def arrived(path: Path, deadline: float) -> float:
    """When ``path`` exists: the last file the merge writes (git writes them in path order)."""
    while time.monotonic() < deadline:
        if path.exists():
            return time.monotonic()
        await asyncio.sleep(0.05)
    raise RuntimeError("the pulled files did not arrive in time")


async def pull(args: argparse.Namespace, work: Path) -> dict[str, float]:
    """Seconds until N new memories are searchable: pulled by the synced server (from the end of
    another clone's push), and copied into a plain server's vault (from the start of the copy)."""
    (work / "pull").mkdir()
    remote, synced_root = clone_of_new_remote(work / "pull", "synced")
    _, plain_root = clone_of_new_remote(work / "pull", "plain")
    staging = work / "pull" / "staging"
    corpus.write_vault(staging, corpus.synthetic_docs(args.pull, 7), 7)
    last = f"pullword{args.pull - 1:05d}"
    files = sorted(staging.glob("*.md"))
    for n, path in enumerate(files):  # a word each file alone holds
        path.write_text(path.read_text(encoding="utf-8") + f"\npullword{n:05d}\n", encoding="utf-8")
    last_file = files[-1].name
    base = Settings(embedder=args.embedder, capacity=10**9, log_level="warning")
    result: dict[str, float] = {}
    async with (
        serve(base.replace(root=synced_root, sync="git", sync_interval_seconds=1.0)) as synced,
        serve(base.replace(root=plain_root)) as plain,
        client(f"{synced.url}/mcp/{TOKEN}") as synced_session,
        client(f"{plain.url}/mcp/{TOKEN}") as plain_session,
    ):
        for session in (synced_session, plain_session):  # each token loaded and watched first
            await call(session, "write_memory", {"title": "Already here", "content": "loaded first"})
        start = time.monotonic()
        await asyncio.to_thread(shutil.copytree, staging, plain_root / TOKEN / "pulled")
        await searchable(plain_session, args.pull + 1, last, start + 600)
        result["copied"] = time.monotonic() - start

        peer = work / "pull" / "peer"
        git(work / "pull", "clone", "--quiet", str(remote), str(peer))
        await asyncio.to_thread(shutil.copytree, staging, peer / TOKEN / "pulled")
        await asyncio.to_thread(sync_vault, peer)  # committed and pushed: not timed
        start = time.monotonic()
        landed = asyncio.create_task(arrived(synced_root / TOKEN / "pulled" / last_file, start + 600))
        await searchable(synced_session, args.pull + 1, last, start + 600)
        result["pulled"] = time.monotonic() - start
        result["merged"] = await landed - start
    return result


def row(name: str, values: list[float]) -> str:
    cells = [ms(pct(values, q)) for q in (0.5, 0.9, 0.99)] + [ms(max(values))]
    return f"| {name} | " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--writes", type=int, default=500, help="timed writes per side")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument(
        "--peer-every", type=float, default=1.0, help="seconds between the peer's pushes (0: none)"
    )
    parser.add_argument("--embedder", default="hash", help="MEMVAULT_EMBEDDER of both servers")
    parser.add_argument(
        "--pull", type=int, default=0, help="also time N new memories pulled, against N copied in (0: no)"
    )
    parser.add_argument("--dir", type=Path, help="where the temporary vaults go (the disk matters)")
    parser.add_argument("--out", type=Path, help="add a section to this RESULTS.md")
    args = parser.parse_args()
    logging.disable(logging.INFO)  # the client's and server's lines per request
    if shutil.which("git") is None:
        print("bench_sync: git is not installed", file=sys.stderr)
        return 2
    work = Path(tempfile.mkdtemp(prefix="bench-sync-", dir=args.dir))
    env_before = {k: os.environ.get(k) for k in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM")}
    try:
        # The machine's own git configuration stays out: no identity (memvault's default), no hooks.
        config = work / "gitconfig"
        config.write_text("[init]\n\tdefaultBranch = main\n[commit]\n\tgpgsign = false\n", encoding="utf-8")
        os.environ.update(GIT_CONFIG_GLOBAL=str(config), GIT_CONFIG_NOSYSTEM="1")
        result = asyncio.run(run(args, work))
        pulled = asyncio.run(pull(args, work)) if args.pull > 0 else None
    finally:
        for key, value in env_before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        shutil.rmtree(work, ignore_errors=True)
    times = result["times"]
    assert isinstance(times, dict)
    plain, synced = times["plain"], times["synced"]
    ratio50 = pct(synced, 0.5) / pct(plain, 0.5)
    ratio99 = pct(synced, 0.99) / pct(plain, 0.99)
    lines = [
        "| server | p50 ms | p90 ms | p99 ms | max ms |",
        "|---|---:|---:|---:|---:|",
        row("plain (sync off)", plain),
        row("synced (MEMVAULT_SYNC=git)", synced),
    ]
    load = result["load"]
    assert isinstance(load, list)
    peer = (
        f"a peer clone wrote and pushed a memory every {args.peer_every:g} s ({result['peer_syncs']} syncs)"
        if args.peer_every > 0
        else "no peer"
    )
    summary = (
        f"synced / plain: p50 {ratio50:.2f}, p99 {ratio99:.2f}. The timed writes took "
        f"{result['timed_for']:.0f} s; the synced server made {result['syncs']} syncs in all, "
        f"{result['commits']} commit(s) of its writes and {result['merges']} merge(s) of what the peer "
        f"pushed; {peer}. Git's processes (the "
        f"synced server's and the peer's) took {result['git_cpu']:.1f} s of CPU. Every synced write "
        f"reached the remote afterwards: {'yes' if result['all_there'] else 'NO'}."
    )
    if pulled is not None:
        summary += (
            f"\n\n{args.pull:,} new memories reached search (memory_stats counts them, a search finds the "
            f"last) {pulled['pulled']:.1f} s after another clone pushed them, the synced server syncing "
            f"every second (so up to 1 s of that is waiting for the next sync; the files were all in the "
            f"clone after {pulled['merged']:.1f} s), against "
            f"{pulled['copied']:.1f} s for the same files copied into a plain server's vault "
            f"(from the start of the copy): {pulled['pulled'] / pulled['copied']:.2f}x."
        )
    print("\n".join(lines))
    print(summary)
    if args.out:
        command = f"python bench/bench_sync.py --writes {args.writes}"
        if args.peer_every != 1.0:
            command += f" --peer-every {args.peer_every:g}"
        if args.pull:
            command += f" --pull {args.pull}"
        if args.embedder != "hash":
            command += f" --embedder {args.embedder}"
        command += " --out bench/RESULTS.md"
        stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        section = "\n".join(
            [
                f"## {stamp}: writes with git sync on and off, side by side (issue 48)",
                "",
                f"Command: `{command}`",
                "",
                f"Machine: {machine_line()}; vaults on {result['fs']}. Load average "
                f"{load[0][0]:.2f} before, {load[-1][0]:.2f} after. Both servers and the client in one "
                f"process; {args.writes} `write_memory` calls per side (each a new memory, fsynced), "
                "alternating call by call, embedder "
                f"`{args.embedder}`.",
                "",
                *lines,
                "",
                summary,
                "",
            ]
        )
        update_results(args.out, section, command, MARK_START, MARK_END, grouped=False)
    return 0 if result["all_there"] else 1


if __name__ == "__main__":
    sys.exit(main())
