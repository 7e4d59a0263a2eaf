"""The command line as a user runs it: the real console script, in a subprocess."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from commands import (
    MEMVAULT,
    START_TIMEOUT,
    Server,
    clean_env,
    free_port,
    http,
    run,
    serving,
    utc_now,
    wait_until,
    write_memory_file,
)
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from memvault import __version__
from memvault.config import Settings

# ---------------------------------------------------------------------------- the CLI


def test_python_m_memvault_and_the_console_script_print_the_version() -> None:
    for argv in ([sys.executable, "-m", "memvault", "--version"], [str(MEMVAULT), "--version"]):
        result = run(argv, clean_env())
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"memvault {__version__}"


@pytest.mark.slow
@pytest.mark.anyio
async def test_serve_serves_the_root_from_memvault_root(tmp_path: Path, anyio_backend: str) -> None:
    root = tmp_path / "vault"
    # Accessed now: a stale one would be archived by the lazy sweep that follows the first read.
    write_memory_file(
        root / "alice" / "hand-note.md",
        title="Written by hand",
        priority="P1",
        accessed=utc_now(),
        body="The staging database is called heron.",
    )
    port = free_port()
    argv = [str(MEMVAULT), "serve", "--host", "127.0.0.1", "--port", str(port)]
    with serving(tmp_path, argv, clean_env(MEMVAULT_ROOT=str(root)), port) as server:
        server.wait_healthy()
        async with streamable_http_client(f"{server.url}/mcp/alice") as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = await session.call_tool("list_memory_titles", {})
                found = await session.call_tool("read_memory", {"query": "heron"})
        listed_text = "\n".join(getattr(c, "text", "") for c in listed.content)
        found_text = "\n".join(getattr(c, "text", "") for c in found.content)
        assert not listed.is_error and "hand-note.md|Written by hand|P1|" in listed_text
        assert not found.is_error and "staging database is called heron" in found_text
        assert server.stop() in (0, -signal.SIGTERM), server.logs()


def stale_vault(root: Path) -> dict[str, Path]:
    files = {
        "old": root / "alice" / "old-note.md",
        "pinned": root / "alice" / "old-but-p0.md",
        "fresh": root / "alice" / "fresh-note.md",
    }
    write_memory_file(
        files["old"],
        title="Old note",
        priority="P2",
        accessed="2020-01-01T00:00:00.000Z",
        body="Nobody has read this since 2020.",
    )
    write_memory_file(
        files["pinned"],
        title="Old but P0",
        priority="P0",
        accessed="2020-01-01T00:00:00.000Z",
        body="P0 is never archived.",
    )
    write_memory_file(
        files["fresh"], title="Fresh note", priority="P2", accessed=utc_now(), body="Read today."
    )
    return files


@pytest.mark.slow
def test_evict_dry_run_reports_the_old_memory_and_moves_nothing(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    files = stale_vault(root)
    before = {name: path.read_bytes() for name, path in files.items()}
    summary = run([str(MEMVAULT), "evict", "--root", str(root), "--dry-run"], clean_env())
    assert summary.returncode == 0, summary.stderr
    assert "alice: would archive 1 (1 P2 past their TTL)" in summary.stdout
    assert "old-note.md" not in summary.stdout and "--list shows each file" in summary.stdout
    result = run([str(MEMVAULT), "evict", "--root", str(root), "--dry-run", "--list"], clean_env())
    assert result.returncode == 0, result.stderr
    assert "alice: would archive 1" in result.stdout
    assert re.search(r"^\s+old-note\.md: P2, not accessed for \d+ days since 2020-01-01", result.stdout, re.M)
    assert "old-but-p0.md" not in result.stdout and "fresh-note.md" not in result.stdout
    assert {name: path.read_bytes() for name, path in files.items()} == before
    assert not (root / "alice" / "archive").exists()


@pytest.mark.slow
def test_evict_archives_the_old_memory(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    files = stale_vault(root)
    old = files["old"].read_bytes()
    result = run([str(MEMVAULT), "evict", "--root", str(root), "--list"], clean_env())
    assert result.returncode == 0, result.stderr
    assert "alice: archived 1" in result.stdout
    assert "old-note.md: P2, not accessed for" in result.stdout
    assert not files["old"].exists()
    assert (root / "alice" / "archive" / "old-note.md").read_bytes() == old
    assert files["pinned"].exists() and files["fresh"].exists()
    again = run([str(MEMVAULT), "evict", "--root", str(root)], clean_env())
    assert again.returncode == 0 and "alice: archived 0" in again.stdout


@pytest.mark.slow
@pytest.mark.parametrize(
    ("env", "flags", "message"),
    [
        ({"MEMVAULT_PORT": "abc"}, [], "MEMVAULT_PORT must be a number, not 'abc'"),
        ({"MEMVAULT_PORT": "70000"}, [], "MEMVAULT_PORT must be between 1 and 65535"),
        ({"MEMVAULT_PORT": "0"}, [], "MEMVAULT_PORT must be between 1 and 65535"),
        ({}, ["--port", "99999"], "between 1 and 65535"),
        ({}, ["--port", "http"], "argument --port: invalid int value: 'http'"),
    ],
    ids=["env-not-a-number", "env-too-large", "env-zero", "flag-too-large", "flag-not-a-number"],
)
def test_invalid_port_exits_2_with_a_clear_message(
    tmp_path: Path, env: dict[str, str], flags: list[str], message: str
) -> None:
    result = run(
        [str(MEMVAULT), "serve", "--root", str(tmp_path / "vault"), *flags], clean_env(**env), timeout=30
    )
    assert result.returncode == 2, result.stdout + result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "vault").exists()  # refused before touching anything


def _serve_on_a_busy_port(**env: str) -> tuple[subprocess.CompletedProcess[str], int]:
    """``memvault serve`` on a port another socket listens on; what it did, and the port."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cmd = [str(MEMVAULT), "serve", "--host", "127.0.0.1", "--port", str(port)]
        return run(cmd, clean_env(**env), timeout=60), port


@pytest.mark.slow
@pytest.mark.parametrize("processes", ["1", "2"])
def test_serve_on_a_busy_port_fails_and_says_so(tmp_path: Path, processes: str) -> None:
    result, port = _serve_on_a_busy_port(MEMVAULT_ROOT=str(tmp_path / "vault"), MEMVAULT_PROCESSES=processes)
    assert result.returncode == 1
    assert "serving" not in result.stdout  # bound before announcing (issue 13)
    assert (
        f"cannot listen on 127.0.0.1:{port}: another program" in result.stderr and "--port" in result.stderr
    )
    assert "Traceback" not in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("processes", ["1", "2"])
def test_held_slow_connections_neither_exhaust_descriptors_nor_flood_the_log(
    tmp_path: Path, processes: str
) -> None:
    """Issue 9, 6: 21,000 held slow connections exhausted file descriptors, and the log took 450,000
    tracebacks in 15 s. Here the server may open only 256 files and 300 connections are held."""
    import resource
    import socket

    port = free_port()
    env = clean_env(
        MEMVAULT_ROOT=str(tmp_path / "vault"),
        MEMVAULT_MAX_CONNECTIONS="40",
        MEMVAULT_HEADER_TIMEOUT_SECONDS="1",
        MEMVAULT_PROCESSES=processes,
    )
    out, err = tmp_path / "stdout", tmp_path / "stderr"

    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    argv = [str(MEMVAULT), "serve", "--host", "127.0.0.1", "--port", str(port)]
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(argv, env=env, stdout=stdout, stderr=stderr, preexec_fn=low_limit)
    server = Server(process, port, out, err)
    held: list[socket.socket] = []
    try:
        server.wait_healthy()
        for _ in range(300):
            try:
                sock = socket.create_connection(("127.0.0.1", port), timeout=2)
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n")  # headers never end
                held.append(sock)
            except OSError:
                break
        # Silent connections are dropped after the header timeout: the server answers again.
        wait_until(
            lambda: http(f"{server.url}/healthz", timeout=2)[0] == 200,
            START_TIMEOUT,
            "healthz answers while slow connections are held",
        )
        assert process.poll() is None
    finally:
        for sock in held:
            sock.close()
        assert server.stop() in (0, -signal.SIGTERM), server.logs()[-2000:]
    lines = server.logs().splitlines()
    assert len(lines) < 50, "\n".join(lines[:50])
    assert not any("Traceback" in line for line in lines), "\n".join(lines[:50])
    assert any("MEMVAULT_MAX_CONNECTIONS" in line for line in lines), "\n".join(lines[:50])


@pytest.mark.slow
@pytest.mark.parametrize(
    "command",
    [
        *("serve", "stdio", "keys", "evict", "check", "migrate", "reindex", "nginx", "export", "import"),
        *("hook", "setup", "import-from"),
    ],
)
def test_every_subcommand_help_says_what_it_does(command: str) -> None:
    result = run([str(MEMVAULT), command, "--help"], clean_env())
    assert result.returncode == 0
    description = result.stdout.split("\n\n")[1]
    assert len(description.split()) >= 12, result.stdout


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("git") is None, reason="needs git to make a real .git folder")
def test_git_in_the_vault_brings_no_watcher_warnings(tmp_path: Path) -> None:
    root = tmp_path / "vault"
    (root / "alice").mkdir(parents=True)
    port = free_port()
    env = clean_env(MEMVAULT_ROOT=str(root), MEMVAULT_PORT=str(port))
    git = ["git", "-c", "user.email=a@example.org", "-c", "user.name=A"]
    with serving(tmp_path, [str(MEMVAULT), "serve"], env, port) as server:
        server.wait_healthy()
        for folder in (root, root / "alice"):
            run([*git, "init", "-q"], env, cwd=folder)
            for i in range(4):  # git makes nested folders in quick succession
                (folder / f"note-{i}.md").write_text(f"# Note {i}\n\nbody\n")
                run([*git, "add", "-A"], env, cwd=folder)
                run([*git, "commit", "-q", "-m", str(i)], env, cwd=folder)
        status, _ = http(f"{server.url}/healthz")
        assert status == 200
        assert server.stop() in (0, -signal.SIGTERM), server.logs()
    assert "Warning" not in server.logs() and ".git" not in server.logs(), server.logs()[-2000:]


@pytest.mark.slow
@pytest.mark.parametrize("command", ["reindex", "check", "import", "evict", "migrate"])
def test_long_commands_show_progress_on_a_terminal_only(tmp_path: Path, command: str) -> None:
    import fcntl
    import pty
    import struct
    import termios

    root = tmp_path / "vault"
    (root / "alice").mkdir(parents=True)
    for i in range(300):
        (root / "alice" / f"n{i}.md").write_text(f"# Note {i}\n\nbody {i}\n")
    export = tmp_path / "export.jsonl"
    export.write_text(
        "".join(
            json.dumps(
                {"token": "alice", "kind": "entity", "name": f"E{i}", "entityType": "t", "observations": []}
            )
            + "\n"
            for i in range(300)
        )
    )
    argv = [str(MEMVAULT), command, "--root", str(root), *([str(export)] if command == "import" else [])]
    unit = b"lines/s" if command == "import" else b"files/s"
    quiet = run(argv, clean_env())
    assert quiet.returncode == 0 and unit.decode() not in quiet.stderr and "\r" not in quiet.stderr
    leader, follower = pty.openpty()
    # A terminal of 100 columns (a new pty has 0, and a bar of width 0 prints nothing).
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        shown = subprocess.run(
            argv,
            env=clean_env(),
            stderr=follower,
            stdout=subprocess.PIPE,
            timeout=60,
        )
        os.close(follower)
        seen = b""
        with contextlib.suppress(OSError):
            while chunk := os.read(leader, 65536):
                seen += chunk
    finally:
        os.close(leader)
    assert shown.returncode == 0
    assert unit in seen, seen[-300:]


def test_connections_to_the_serve_socket_have_nagle_off():
    """serve binds its own socket; asyncio sets TCP_NODELAY only on sockets that say they are TCP.
    With Nagle on, every reply waited for the client's delayed ACK (44 ms a call, found in the
    100k benchmark)."""
    import asyncio

    from memvault.cli.serve import listen

    async def accepted_nodelay() -> int:
        sock = listen("127.0.0.1", 0)
        assert sock is not None
        seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                conn = transport.get_extra_info("socket")
                seen.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(seen, 10)
        finally:
            writer.close()
            server.close()

    assert asyncio.run(accepted_nodelay()) != 0


def test_serve_hands_the_gil_over_sooner_than_pythons_default(monkeypatch: pytest.MonkeyPatch) -> None:
    from memvault.cli import serve as cli
    from memvault.errors import MemvaultError
    from memvault.server import app, limits

    def refuse(settings: Settings, **kwargs: object) -> None:
        raise MemvaultError("stop here")

    monkeypatch.setattr(app, "create_app", refuse)  # serve stops right after its process setup
    monkeypatch.setattr(limits, "quiet_accept_failures", lambda: None)  # no filter left behind
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        assert cli.serve(Settings()) == 2
        assert sys.getswitchinterval() == pytest.approx(limits.SWITCH_INTERVAL)
        assert limits.SWITCH_INTERVAL < 0.005
    finally:
        sys.setswitchinterval(before)


# ---------------------------------------------------------------------------- a restart


async def _snapshotted(root: Path, token: str, count: int) -> Path:
    """A vault of ``count`` memories that a server has loaded and closed: its snapshot written."""
    from memvault.ops.service import Service

    folder = root / token
    for i in range(count):
        write_memory_file(
            folder / f"note-{i}.md", title=f"Note {i}", priority="P1", accessed=utc_now(), body=f"word{i}"
        )

    service = Service(Settings(root=root, embedder="hash"))
    await service.store.state(token)
    await service.close()
    assert (folder / ".memvault" / "snapshot.npz").is_file()
    return folder


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_restarted_server_loads_its_vault_unasked_and_misses_no_edit_made_meanwhile(
    tmp_path: Path, anyio_backend: str
) -> None:
    """A restart begins loading the vault it saved last before any request (while it imports),
    and an edit made while it starts is in its first answer."""
    root = tmp_path / "vault"
    folder = await _snapshotted(root, "alice", 600)
    await _snapshotted(root, "bob", 600)
    os.utime(folder / ".memvault" / "snapshot.npz")  # alice's written last
    port = free_port()
    argv = [str(MEMVAULT), "serve", "--host", "127.0.0.1", "--port", str(port)]
    env = clean_env(MEMVAULT_ROOT=str(root), MEMVAULT_EMBEDDER="hash")
    with serving(tmp_path, argv, env, port) as server:
        write_memory_file(
            folder / "note-7.md", title="Note 7", priority="P1", accessed=utc_now(), body="now a heron"
        )
        server.wait_healthy()
        health = wait_until(
            lambda: (h := server.wait_healthy())["tokens_loaded"] == 1 and h, START_TIMEOUT, "alice loads"
        )
        assert health["memories_loaded"] == 600  # alice's alone: no request has come yet
        async with streamable_http_client(f"{server.url}/mcp/alice") as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                found = await session.call_tool("read_memory", {"query": "heron"})
        text = "\n".join(getattr(c, "text", "") for c in found.content)
        assert not found.is_error and "now a heron" in text, text
        assert server.stop() in (0, -signal.SIGTERM), server.logs()


@pytest.mark.slow
def test_a_restart_on_a_busy_port_fails_and_says_so(tmp_path: Path) -> None:
    """The early load of a restart ends with the server that could not listen."""
    root = tmp_path / "vault"
    asyncio.run(_snapshotted(root, "alice", 600))
    result, port = _serve_on_a_busy_port(MEMVAULT_ROOT=str(root), MEMVAULT_EMBEDDER="hash")
    assert result.returncode == 1
    assert f"cannot listen on 127.0.0.1:{port}: another program" in result.stderr
    assert "Traceback" not in result.stderr and "serving" not in result.stdout
