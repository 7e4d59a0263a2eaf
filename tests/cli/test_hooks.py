"""memvault hook: Claude Code's hooks fed real-shaped JSON and transcripts, with and without a server."""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio.to_thread
import pytest
from conftest import run_server, wait_for
from filelock import FileLock
from transcripts import SESSION, Transcript

from memvault.config import Settings
from memvault.records.sidecar import Sidecar
from memvault.records.summaries import SessionSummaries
from memvault.server import keys

MEMVAULT = Path(sys.executable).parent / "memvault"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Setup:
    home: Path
    root: Path
    project: Path
    transcript: Transcript
    env: dict[str, str]

    def run(self, event: str, payload: dict[str, Any] | str, *args: str) -> subprocess.CompletedProcess[str]:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        argv = [str(MEMVAULT), "hook", event, "--root", str(self.root), "--token", "alice", *args]
        return subprocess.run(argv, input=data, env=self.env, capture_output=True, text=True, timeout=60)

    def payload(self, event: str, **extra: Any) -> dict[str, Any]:
        return {
            "session_id": SESSION,
            "transcript_path": str(self.transcript.path),
            "cwd": str(self.project),
            "hook_event_name": event,
            **extra,
        }

    def summary(self) -> list[str]:
        """The session's versions' texts, oldest first (read from the vault's files)."""
        with Sidecar.open(self.root / "alice") as sidecar:
            from memvault.records import sync

            sync.sync(sidecar, self.root / "alice")
            return [
                v.summary for v in reversed(SessionSummaries(sidecar, max_chars=100_000).history(SESSION))
            ]


@pytest.fixture
def setup(tmp_path: Path) -> Iterator[Setup]:
    home = tmp_path / "home"
    project = tmp_path / "work" / "shop-api"
    (project / ".git").mkdir(parents=True)
    (project / ".git" / "config").write_text(
        '[remote "origin"]\n\turl = git@example.org:acme/storefront.git\n'
    )
    transcript = Transcript(home / ".claude" / "projects" / "-work-shop-api" / f"{SESSION}.jsonl", project)
    root = tmp_path / "memories"
    (root / "alice").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    # No server on this port: the hooks use the files. A generous deadline: the machine may be busy.
    env.update(HOME=str(home), MEMVAULT_PORT=str(free_port()), MEMVAULT_HOOK_TIMEOUT_SECONDS="60")
    yield Setup(home, root, project, transcript, env)


def memory(root: Path, name: str, title: str, body: str, priority: str = "P2") -> None:
    text = f"---\npriority: {priority}\ncreatedAt: 2026-11-01T10:00:00.000Z\n---\n# {title}\n\n{body}\n"
    (root / "alice" / name).write_text(text, encoding="utf-8")


def one_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("memvault hook: ")
    return lines[0]


# ---------------------------------------------------------------------------- capture


def test_stop_records_requests_and_final_answers_then_only_what_is_new(setup: Setup) -> None:
    setup.transcript.turn(
        "Add a retry to deploy.sh", "Let me read it first.", "Added 3 retries to deploy.sh."
    )
    done = setup.run("stop", setup.payload("Stop", stop_hook_active=False))
    assert (done.returncode, done.stdout, done.stderr) == (0, "", "")
    [first] = setup.summary()
    assert "Add a retry to deploy.sh" in first and "Added 3 retries to deploy.sh." in first
    # Not the assistant's intermediate text, tool output, or the client's own meta entries.
    assert "Let me read it first" not in first and "TOOLOUT" not in first and "/cost" not in first

    assert setup.run("stop", setup.payload("Stop")).returncode == 0
    assert len(setup.summary()) == 1  # nothing new, nothing appended

    setup.transcript.turn("Now write a test for it", "Wrote tests/test_deploy.py; it passes.")
    done = setup.run("pre-compact", setup.payload("PreCompact", trigger="auto", custom_instructions=""))
    assert (done.returncode, done.stderr) == (0, "")
    versions = setup.summary()
    assert len(versions) == 2
    added = versions[1][len(versions[0]) :]
    assert "Now write a test for it" in added and "tests/test_deploy.py" in added
    assert "Add a retry" not in added  # appended once, never again


def test_a_capture_too_long_for_the_summary_starts_again_and_points_to_the_history(setup: Setup) -> None:
    setup.env["MEMVAULT_MAX_CONTENT_CHARS"] = "3000"
    for i in range(4):
        setup.transcript.turn(f"request {i} " + "x" * 500, f"answer {i} " + "y" * 900)
        assert setup.run("stop", setup.payload("Stop")).returncode == 0
    versions = setup.summary()
    assert len(versions) == 4
    assert all(len(v) <= 3000 for v in versions)
    assert "get_session_history" in versions[-1] and "request 3" in versions[-1]


# ---------------------------------------------------------------------------- session start


def test_session_start_after_a_compaction_prints_p0_titles_project_memories_and_the_summary(
    setup: Setup,
) -> None:
    memory(setup.root, "deploy.md", "Always deploy with make release", "Never by hand.", "P0")
    memory(setup.root, "storefront.md", "Storefront payment flow", "The storefront calls the payment API.")
    memory(setup.root, "cats.md", "Cat names", "Mittens and Tom.")
    setup.transcript.turn("Fix the checkout bug", "Fixed the rounding in checkout.py.")
    assert setup.run("pre-compact", setup.payload("PreCompact", trigger="manual")).returncode == 0

    done = setup.run("session-start", setup.payload("SessionStart", source="compact"))
    assert (done.returncode, done.stderr) == (0, "")
    context = done.stdout
    assert "Always deploy with make release (deploy.md)" in context
    assert "storefront.md" in context and "cats.md" not in context  # found by the git remote's name
    assert "Fixed the rounding in checkout.py." in context
    assert f'get_summary(sessionId="{SESSION}")' in context and "read_memory" in context
    assert "<!--" not in context  # the capture markers are the hooks' business, not the agent's
    assert len(context.rstrip("\n")) <= 2000

    fresh = setup.run("session-start", setup.payload("SessionStart", source="startup"))
    assert "Fixed the rounding" not in fresh.stdout  # the summary comes back only after a compaction
    assert "Always deploy with make release" in fresh.stdout


def test_session_start_context_stays_within_its_setting(setup: Setup) -> None:
    for i in range(40):
        memory(setup.root, f"rule-{i}.md", f"Rule number {i} about the storefront " + "z" * 80, "body", "P0")
    setup.env["MEMVAULT_HOOK_CONTEXT_CHARS"] = "600"
    done = setup.run("session-start", setup.payload("SessionStart", source="resume"))
    assert done.returncode == 0
    assert 100 < len(done.stdout.rstrip("\n")) <= 600
    assert "more not shown" in done.stdout


# ---------------------------------------------------------------------------- through a running server


@pytest.mark.anyio
async def test_hooks_use_the_running_server_with_its_key(
    setup: Setup, tmp_path: Path, anyio_backend: str
) -> None:
    keys_file = tmp_path / "keys.txt"
    key = "mv_" + "k" * 40
    keys_file.write_text(keys.render([keys.Grant("laptop", "alice", False, keys.digest(key))]))
    key_file = tmp_path / "key"
    key_file.write_text(key + "\n")
    memory(setup.root, "deploy.md", "Always deploy with make release", "Never by hand.", "P0")
    setup.transcript.turn("Rename the cart module", "Renamed cart.py to basket.py.")
    settings = Settings(root=setup.root, keys_file=keys_file, path_tokens="on")
    async with run_server(settings) as server:
        args = ("--url", f"{server.url}/mcp", "--key-file", str(key_file))

        def hooks() -> tuple[subprocess.CompletedProcess[str], subprocess.CompletedProcess[str]]:
            stop = setup.run("stop", setup.payload("Stop"), *args)
            start = setup.run("session-start", setup.payload("SessionStart", source="compact"), *args)
            return stop, start

        stop, start = await anyio.to_thread.run_sync(hooks)
        assert (stop.returncode, stop.stderr) == (0, "")
        assert (start.returncode, start.stderr) == (0, "")
        assert "Always deploy with make release (deploy.md)" in start.stdout
        assert "Renamed cart.py to basket.py." in start.stdout
        async with server.session("alice") as session:
            failed, history = await server.call(session, "get_session_history", sessionId=SESSION)
        assert not failed and "1 version" in history and "Rename the cart module" in history

        key_file.write_text("mv_wrong\n")
        refused = await anyio.to_thread.run_sync(lambda: setup.run("stop", setup.payload("Stop"), *args))
        assert refused.returncode == 0
        line = one_line(refused.stderr)
        assert "401" in line and "mv_" not in line  # says what to do; never echoes a key


# ---------------------------------------------------------------------------- never blocking, never failing


def test_with_the_server_down_and_the_vault_missing_a_hook_exits_0_with_one_line(setup: Setup) -> None:
    setup.transcript.turn("Hello", "Hi.")
    setup.root = setup.root.parent / "no-such-root"
    for event, payload in [
        ("stop", setup.payload("Stop")),
        ("pre-compact", setup.payload("PreCompact", trigger="auto")),
        ("session-start", setup.payload("SessionStart", source="startup")),
    ]:
        done = setup.run(event, payload)
        assert (done.returncode, done.stdout) == (0, "")
        line = one_line(done.stderr)
        assert "no memvault server" in line and "root folder does not exist" in line
        assert str(setup.root) not in line
    assert not setup.root.exists()


def test_a_server_that_never_answers_cannot_hold_the_hook(setup: Setup) -> None:
    setup.transcript.turn("Hello", "Hi.")
    setup.env["MEMVAULT_HOOK_TIMEOUT_SECONDS"] = "0.5"
    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp/alice"
        for event in ("stop", "session-start"):
            done = setup.run(event, setup.payload("Stop", source="startup"), "--url", url)
            assert (done.returncode, done.stdout) == (0, "")
            line = one_line(done.stderr)
            assert any(why in line for why in ("did not answer in time", "gave up", "time ran out"))
    assert not (setup.root / "alice" / "sessions").exists()


def _timed(setup: Setup, count: int, *args: str) -> list[tuple[float, str]]:
    """``count`` session-start hooks spawned at once: each one's seconds from its spawn to its exit."""
    payload = json.dumps(setup.payload("SessionStart", source="startup")).encode()
    argv = [str(MEMVAULT), "hook", "session-start", "--root", str(setup.root), "--token", "alice", *args]
    procs = []
    for _ in range(count):
        spawned = time.monotonic()
        proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=setup.env
        )
        procs.append((spawned, proc))
    for _, proc in procs:
        assert proc.stdin is not None
        proc.stdin.write(payload)
        proc.stdin.close()
    ended: dict[int, float] = {}
    give_up = time.monotonic() + 60
    while len(ended) < count and time.monotonic() < give_up:
        for i, (_, proc) in enumerate(procs):
            if i not in ended and proc.poll() is not None:
                ended[i] = time.monotonic()
        time.sleep(0.002)  # polling for each exit's moment, not waiting for a result
    out = []
    for i, (spawned, proc) in enumerate(procs):
        if i not in ended:
            proc.kill()
        assert proc.wait() == 0 and proc.stderr is not None
        out.append((ended.get(i, math.inf) - spawned, proc.stderr.read().decode()))
        proc.stderr.close()
    return out


@pytest.mark.slow
def test_the_hooks_deadline_is_wall_time_from_the_process_start(setup: Setup) -> None:
    """The issue's bound: the default deadline holds from spawn to exit, the interpreter's start and
    the imports included, for one hook and for ten at once (within the 5 s setup gives Claude Code)."""
    del setup.env["MEMVAULT_HOOK_TIMEOUT_SECONDS"]  # the default
    with socket.socket() as silent:  # accepts connections (the kernel's backlog), never replies
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)
        url = ("--url", f"http://127.0.0.1:{silent.getsockname()[1]}/mcp/alice")
        [(seconds, stderr)] = _timed(setup, 1, *url)
        assert seconds < 1.0 and "gave up" in one_line(stderr)
        for seconds, stderr in _timed(setup, 10, *url):
            assert seconds < 5.0 and "gave up" in one_line(stderr)


def test_a_held_vault_lock_cannot_hold_the_hook(setup: Setup) -> None:
    setup.transcript.turn("Hello", "Hi.")
    setup.env["MEMVAULT_HOOK_TIMEOUT_SECONDS"] = "0.5"
    (setup.root / "alice" / ".memvault").mkdir()
    with socket.socket() as closed:  # bound, not listening: refused, whatever serves the default port
        closed.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{closed.getsockname()[1]}/mcp/alice"
        with FileLock(str(setup.root / "alice" / ".memvault" / "lock")):  # another process is writing
            done = setup.run("stop", setup.payload("Stop"), "--url", url)
    assert (done.returncode, done.stdout) == (0, "")
    assert "gave up" in one_line(done.stderr)


@pytest.mark.parametrize(
    "payload, why",
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ({"session_id": "../../etc/passwd", "transcript_path": "x.jsonl"}, "session_id"),
        ({"session_id": SESSION, "transcript_path": "/etc/passwd"}, "no transcript"),
        ({"session_id": SESSION, "transcript_path": 7}, "no transcript"),
    ],
)
def test_hostile_input_is_refused_with_one_line(setup: Setup, payload: Any, why: str) -> None:
    done = setup.run("stop", payload)
    assert (done.returncode, done.stdout) == (0, "")
    assert why in one_line(done.stderr)
    assert not (setup.root / "alice" / "sessions").exists()


def test_a_transcript_outside_claude_codes_folder_is_never_read(setup: Setup, tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere" / "secret.jsonl"
    Transcript(secret, setup.project).turn("SECRET request", "SECRET answer")
    inside = setup.transcript.path.parent / "link.jsonl"
    inside.symlink_to(secret)  # a link inside the folder to a file outside it
    for path in (secret, inside, setup.transcript.path.parents[3] / "elsewhere" / "secret.jsonl"):
        done = setup.run("stop", {**setup.payload("Stop"), "transcript_path": str(path)})
        assert done.returncode == 0
        assert "not a file in Claude Code's projects folder" in one_line(done.stderr)
    assert not (setup.root / "alice" / "sessions").exists()


def test_a_damaged_transcript_line_is_passed_over(setup: Setup) -> None:
    setup.transcript.turn("First request", "First answer.")
    with setup.transcript.path.open("a") as handle:
        handle.write('{"type": "user", "message": {"content": [\n')  # cut off mid-write
        handle.write('{"type": "assistant", "message": "not a dict", "uuid": 5}\n')
    done = setup.run("stop", setup.payload("Stop"))
    assert (done.returncode, done.stderr) == (0, "")
    assert "First answer." in setup.summary()[0]


def test_a_bad_setting_still_exits_0_with_one_line(setup: Setup) -> None:
    setup.env["MEMVAULT_PORT"] = "not-a-port"
    done = setup.run("session-start", setup.payload("SessionStart", source="startup"))
    assert (done.returncode, done.stdout) == (0, "")
    assert "MEMVAULT_PORT" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_only_the_tail_of_a_long_transcript_is_read_and_the_capture_goes_on_from_its_time(
    tmp_path: Path,
) -> None:
    from memvault.ops import transcripts

    log = Transcript(tmp_path / "t.jsonl", tmp_path)
    for i in range(30):
        log.turn(f"request {i}", f"answer {i}")
    size = log.path.stat().st_size
    tail = transcripts.read(log.path, limit_bytes=size // 3)
    assert not tail.whole and tail.entries  # the cut first line is dropped, the rest parsed
    requests = [t.request for t in transcripts.turns(tail.entries)]
    assert requests[-1] == "request 29" and "request 0" not in requests
    # A capture marker naming an entry no longer in the tail: what came after its time is new.
    whole = transcripts.read(log.path, limit_bytes=size)
    marker = transcripts.turns(whole.entries)[25].through
    new = transcripts.turns(transcripts.after(tail.entries, marker))
    assert [t.request for t in new] == [f"request {i}" for i in range(26, 30)]


def test_a_hostile_working_folder_name_never_reaches_the_title(setup: Setup) -> None:
    setup.transcript.turn("Hello", "Hi.")
    done = setup.run("stop", {**setup.payload("Stop"), "cwd": "/tmp/evil\nname: x"})
    assert (done.returncode, done.stderr) == (0, "")
    assert "Hi." in setup.summary()[0]


# ---------------------------------------------------------------------------- hooks racing


def _together(setup: Setup, runs: list[tuple[str, dict[str, Any]]], *args: str) -> list[tuple[int, str]]:
    """Start every hook at once (as Claude Code does across panes and subagents); their exits."""
    procs = []
    for event, _ in runs:
        argv = [str(MEMVAULT), "hook", event, "--root", str(setup.root), "--token", "alice", *args]
        procs.append(
            subprocess.Popen(
                argv,
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                env=setup.env,
                text=True,
            )
        )
    for proc, (_, payload) in zip(procs, runs, strict=True):
        assert proc.stdin is not None
        proc.stdin.write(json.dumps(payload))
        proc.stdin.close()
    out = []
    for proc in procs:
        assert proc.stderr is not None
        out.append((proc.wait(timeout=120), proc.stderr.read()))
        proc.stderr.close()
    return out


def _racing_hooks_record_each_request_once(setup: Setup, *args: str) -> str:
    runs = [("stop", setup.payload("Stop")) for _ in range(7)]
    runs += [("pre-compact", setup.payload("PreCompact", trigger="auto")) for _ in range(3)]
    for trial in range(3):
        setup.transcript.turn(f"Request number {trial} please", f"Answer number {trial}.")
        for status, stderr in _together(setup, runs, *args):
            assert (status, stderr) == (0, "")
    latest = setup.summary()[-1]
    for trial in range(3):
        assert latest.count(f"Request number {trial} please") == 1, latest
        assert latest.count(f"Answer number {trial}.") == 1, latest
    return latest


@pytest.mark.slow
def test_ten_hooks_at_once_on_the_vaults_files_record_each_request_once(setup: Setup) -> None:
    _racing_hooks_record_each_request_once(setup)


@pytest.mark.slow
@pytest.mark.anyio
async def test_ten_hooks_at_once_through_the_server_record_each_request_once(
    setup: Setup, anyio_backend: str
) -> None:
    async with run_server(Settings(root=setup.root, path_tokens="on")) as server:
        url = ("--url", f"{server.url}/mcp/alice")
        await anyio.to_thread.run_sync(lambda: _racing_hooks_record_each_request_once(setup, *url))


@pytest.mark.parametrize(
    ("hook", "event"), [("stop", "Stop"), ("pre-compact", "PreCompact")], ids=["stop", "pre-compact"]
)
def test_slash_commands_and_interruptions_are_not_recorded_as_requests(
    setup: Setup, hook: str, event: str
) -> None:
    setup.transcript.turn("Fix the login bug", "Fixed it.")
    setup.transcript.slash("/model", output="Set model to opus")
    setup.transcript.interrupted()
    setup.transcript.turn("Now the logout bug", "Done too.")
    done = setup.run(hook, setup.payload(event, trigger="auto"))
    assert (done.returncode, done.stderr) == (0, "")
    summary = setup.summary()[-1]
    assert "Fix the login bug" in summary and "Now the logout bug" in summary
    assert "/model" not in summary and "interrupted" not in summary


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_hook_that_reaches_its_deadline_mid_append_leaves_no_duplicate(
    setup: Setup, anyio_backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46, 4: a Stop hook whose time ran out while the server was still writing its append
    left the append to land later, after the next hook had read the summary without it: that hook
    appended the same turns again."""
    from memvault.records import sync
    from memvault.tools import summaries

    written, pick = sync.SessionFiles.written, summaries.pick_version
    slow = threading.Event()
    go_on = threading.Event()
    reads: list[str] = []

    def held(self: Any, *args: Any, **kwargs: Any) -> None:
        if slow.is_set():
            go_on.wait(30)  # the server is slow to write this append (a busy disk, a big history)
        written(self, *args, **kwargs)

    def read(found: Any, session_id: str, *args: Any) -> Any:
        if slow.is_set():
            reads.append(session_id)  # a hook asks for the summary (get_summary)
        return pick(found, session_id, *args)

    monkeypatch.setattr(sync.SessionFiles, "written", held)
    monkeypatch.setattr(summaries, "pick_version", read)
    async with run_server(Settings(root=setup.root, path_tokens="on")) as server:
        url = ("--url", f"{server.url}/mcp/alice")

        def stop() -> subprocess.CompletedProcess[str]:
            return setup.run("stop", setup.payload("Stop"), *url)

        setup.transcript.turn("First request please", "First answer.")
        done = await anyio.to_thread.run_sync(stop)
        assert (done.returncode, done.stderr) == (0, "")
        setup.transcript.turn("Second request please", "Second answer.")
        setup.env["MEMVAULT_HOOK_TIMEOUT_SECONDS"] = "1"
        slow.set()
        done = await anyio.to_thread.run_sync(stop)  # its append is being written when time runs out
        assert done.returncode == 0 and "gave up" in done.stderr and len(reads) == 1
        async with anyio.create_task_group() as tasks:
            tasks.start_soon(anyio.to_thread.run_sync, stop)  # the next hook, while that write goes on
            await wait_for(lambda: len(reads) == 2, timeout=30)  # it has asked for the summary
            slow.clear()
            go_on.set()
        setup.env["MEMVAULT_HOOK_TIMEOUT_SECONDS"] = "60"
        done = await anyio.to_thread.run_sync(stop)
        assert (done.returncode, done.stderr) == (0, "")
        latest = setup.summary()[-1]
        for request in ("First request please", "Second request please"):
            assert latest.count(request) == 1, latest
