"""The command line as a user and the Docker image run it: the real console script, in a subprocess.

No Docker engine runs here, so the image is tested through what it runs: the Dockerfile's CMD
(with the host and port swapped for a free loopback port), its ENV and HEALTHCHECK, the files it
copies, and the package installed from exactly those files into a fresh virtual environment.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from memvault import __version__
from memvault.config import SETTINGS, Settings

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
COMPOSE = REPO / "docker-compose.yml"
DOCKER_MD = REPO / "DOCKER.md"
DOCKERIGNORE = REPO / ".dockerignore"
MEMVAULT = Path(sys.executable).parent / "memvault"  # the console script of this environment

SETTING_NAMES = {spec.env for spec in SETTINGS.values()}
START_TIMEOUT = 30.0
STOP_TIMEOUT = 15.0


# ---------------------------------------------------------------------------- helpers


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll a condition until it is truthy; fail after a deadline (never a fixed sleep)."""
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout}s")
        time.sleep(0.05)


def clean_env(**extra: str) -> dict[str, str]:
    """The caller's environment without any MEMVAULT_* variable, plus what the test sets."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    env.update(extra)
    return env


def http(
    url: str,
    *,
    host: str | None = None,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 5.0,
) -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    if host is not None:
        request.add_header("Host", host)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def run(
    args: list[str], env: dict[str, str], timeout: float = 60.0, **kwargs: Any
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, env=env, capture_output=True, text=True, timeout=timeout, **kwargs)


# ---------------------------------------------------------------------------- the Dockerfile


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, with comments dropped and continuation lines joined."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        name, _, args = full.partition(" ")
        instructions.append((name.upper(), args.strip()))
    assert not pending, "Dockerfile ends with a continuation line"
    return instructions


def instruction(name: str) -> list[str]:
    return [args for key, args in dockerfile() if key == name]


def exec_form(args: str) -> list[str]:
    argv = json.loads(args)
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv), args
    return argv


def image_cmd() -> list[str]:
    (cmd,) = instruction("CMD")[-1:]
    return exec_form(cmd)


def image_env() -> dict[str, str]:
    env: dict[str, str] = {}
    for args in instruction("ENV"):
        for pair in shlex.split(args):
            key, sep, value = pair.partition("=")
            assert sep, f"ENV in the legacy 'ENV key value' form: {args}"
            env[key] = value
    return env


def image_healthcheck() -> list[str]:
    (args,) = instruction("HEALTHCHECK")[-1:]
    _, sep, cmd = args.partition(" CMD ")
    assert sep, f"HEALTHCHECK without an exec-form CMD: {args}"
    return exec_form(cmd)


def command_as_in_image(port: int, executable: Path = MEMVAULT) -> list[str]:
    """The image's CMD, run by this environment's console script on a loopback port."""
    argv = image_cmd()
    assert argv[0] == "memvault"
    argv = [str(executable), *argv[1:]]
    argv[argv.index("--host") + 1] = "127.0.0.1"
    argv[argv.index("--port") + 1] = str(port)
    return argv


# ---------------------------------------------------------------------------- a server process


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    port: int
    stdout: Path
    stderr: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def logs(self) -> str:
        return self.stdout.read_text(errors="replace") + self.stderr.read_text(errors="replace")

    def wait_healthy(self) -> dict[str, Any]:
        def healthy() -> dict[str, Any] | None:
            if self.process.poll() is not None:
                raise AssertionError(f"server exited with {self.process.returncode}:\n{self.logs()}")
            try:
                status, body = http(f"{self.url}/healthz", timeout=2)
            except OSError:
                return None
            return json.loads(body) if status == 200 else None

        return wait_until(healthy, START_TIMEOUT, "GET /healthz answers 200")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            raise AssertionError(f"server ignored SIGTERM for {STOP_TIMEOUT}s:\n{self.logs()}") from None


@contextmanager
def serving(tmp_path: Path, argv: list[str], env: dict[str, str], port: int) -> Iterator[Server]:
    logs = tmp_path / f"server-{port}"
    logs.mkdir()
    out, err = logs / "stdout", logs / "stderr"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(argv, env=env, cwd=tmp_path, stdout=stdout, stderr=stderr)
    server = Server(process, port, out, err)
    try:
        yield server
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def image_env_for(root: Path, **extra: str) -> dict[str, str]:
    """The image's ENV (vault moved from /data to a temp folder) over a clean environment."""
    env = clean_env(**image_env())
    env["MEMVAULT_ROOT"] = str(root)
    env.update(extra)
    return env


def write_memory_file(path: Path, *, title: str, priority: str, accessed: str, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        "---\n"
        f"priority: {priority}\n"
        "createdAt: 2020-01-01T00:00:00.000Z\n"
        "updatedAt: 2020-01-01T00:00:00.000Z\n"
        f"lastAccessedAt: {accessed}\n"
        "---\n"
        f"# {title}\n\n{body}\n\n---\n*Created: 2020-01-01T00:00:00.000Z*\n",
        encoding="utf-8",
    )


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000Z", time.gmtime())


INITIALIZE = json.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "host-check", "version": "0"},
        },
    }
).encode()
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


# ---------------------------------------------------------------------------- the image's files


def test_dockerfile_runs_memvault_serve_on_all_interfaces_as_non_root() -> None:
    assert instruction("FROM") == ["python:3.11-slim"]
    cmd = image_cmd()
    assert cmd[:2] == ["memvault", "serve"]
    assert cmd[cmd.index("--host") + 1] == "0.0.0.0"
    assert cmd[cmd.index("--port") + 1] == "3000"
    users = instruction("USER")
    assert users, "no USER: the server would run as root"
    user = users[-1].split(":")[0]
    assert user not in ("root", "0")
    # The last USER comes before CMD, so it is the one the server runs as.
    names = [name for name, _ in dockerfile()]
    assert max(i for i, n in enumerate(names) if n == "USER") < names.index("CMD")
    assert image_env()["MEMVAULT_ROOT"] == "/data"
    assert any("/data" in args for args in instruction("VOLUME"))
    assert instruction("EXPOSE") == ["3000"]
    health = image_healthcheck()
    assert "http://127.0.0.1:3000/healthz" in " ".join(health)
    assert "curl" not in " ".join(health)  # the slim image has none


def test_dockerfile_copies_files_that_exist_and_dockerignore_lets_them_through() -> None:
    sources: list[str] = []
    for args in instruction("COPY"):
        parts = [p for p in args.split() if not p.startswith("--")]
        sources += parts[:-1]
    assert sources, "the Dockerfile copies nothing"
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    for source in sources:
        assert (REPO / source).exists(), f"COPY {source}: no such file in the build context"
        path = source.rstrip("/")
        probe = f"{path}/__init__.py" if (REPO / path).is_dir() else path
        assert not dockerignored(probe, patterns), f".dockerignore leaves {probe} out of the build"
    for private in (
        "memories/alice/note.md",
        ".venv/bin/python",
        ".git/config",
        "memvault/__pycache__/cli.cpython-311.pyc",
        "tests/test_cli_serve.py",
    ):
        assert dockerignored(private, patterns), f".dockerignore lets {private} into the build context"


def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule, simplified: the last pattern matching the path or one of its parents wins."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]

    def match(pattern: str, candidate: str) -> bool:
        if pattern.startswith("**/"):
            segments = candidate.split("/")
            return any(fnmatch.fnmatchcase("/".join(segments[i:]), pattern[3:]) for i in range(len(segments)))
        return fnmatch.fnmatchcase(candidate, pattern)

    ignored = False
    for raw in patterns:
        negated = raw.startswith("!")
        pattern = raw.lstrip("!").rstrip("/")
        if any(match(pattern, prefix) for prefix in prefixes):
            ignored = not negated
    return ignored


def compose_service() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    return document["services"]["memvault"]


DEFAULTED = re.compile(r"^\$\{(?P<name>[A-Z0-9_]+):-(?P<default>[^}]*)\}$")


def test_compose_file_runs_the_image_with_its_port_volume_and_healthcheck() -> None:
    service = compose_service()
    assert service["build"] == "."
    assert service["restart"] == "unless-stopped"
    assert any(str(p).endswith("${MCP_PORT:-3000}:3000") for p in service["ports"])
    volume_root = image_env()["MEMVAULT_ROOT"]
    assert f"${{MEMORIES_PATH:-./memories}}:{volume_root}" in service["volumes"]
    # Same probe as the image's HEALTHCHECK, so both mean the same thing.
    assert service["healthcheck"]["test"] == ["CMD", *image_healthcheck()]
    if "user" in service:
        user = os.path.expandvars(str(service["user"]))
        assert not user.startswith(("0:", "root")), "compose runs the server as root"
        assert "MEMORIES_UID:-10001" in str(service["user"])


def test_compose_passes_every_setting_through_and_repeats_no_default() -> None:
    environment = compose_service()["environment"]
    assert isinstance(environment, dict) and environment
    # Root, host and port are the image's business: the volume, the CMD, the port mapping.
    wanted = SETTING_NAMES - {"MEMVAULT_ROOT", "MEMVAULT_HOST", "MEMVAULT_PORT"}
    assert set(environment) == wanted, "compose must pass every documented setting, and only those"
    for name, value in environment.items():
        found = DEFAULTED.match(str(value))
        assert found and found["name"] == name, f"{name}: pass it through as ${{{name}:-}}"
        assert found["default"] == "", f"{name}: compose repeats a default; leave it to the server"
    # Nothing set in .env: every value is empty, and empty means the server's own default.
    assert Settings.from_env(dict.fromkeys(environment, "")) == Settings()


def test_docker_compose_config_accepts_the_file(tmp_path: Path) -> None:
    docker = shutil.which("docker")
    if docker is None or run([docker, "compose", "version"], clean_env(), timeout=30).returncode != 0:
        pytest.skip("no `docker compose` plugin on this machine")
    result = run([docker, "compose", "-f", str(COMPOSE), "config", "-q"], clean_env(), timeout=60, cwd=REPO)
    assert result.returncode == 0, result.stderr


def test_docker_md_documents_start_connect_and_only_real_settings() -> None:
    text = DOCKER_MD.read_text(encoding="utf-8")
    for needed in (
        "docker compose up -d",
        "http://localhost:3000/mcp/<token>",
        "claude mcp add --transport http memvault http://localhost:3000/mcp/<token>",
        "10001",
        "chown",
        "MCP_PORT",
        "MEMORIES_PATH",
        "MEMVAULT_ALLOWED_HOSTS",
        "MEMVAULT_TOKENS_FILE",
        ":ro",
        "/healthz",
    ):
        assert needed in text, f"DOCKER.md does not mention {needed!r}"
    for name in set(re.findall(r"MEMVAULT_[A-Z0-9_]+", text)):
        assert name in SETTING_NAMES, f"DOCKER.md names {name}, which is not a setting"
    for name, default in re.findall(r"^\| `(MEMVAULT_[A-Z0-9_]+)` \| `?([^|`]*)`? \|", text, re.M):
        spec = next(s for s in SETTINGS.values() if s.env == name)
        if not spec.default.startswith("("):
            assert default == spec.default, f"DOCKER.md says {name} defaults to {default}"


# ---------------------------------------------------------------------------- what the image runs


def test_image_command_serves_healthz_and_stops_cleanly_on_sigterm(tmp_path: Path) -> None:
    root = tmp_path / "vault"  # does not exist yet: the server creates it
    port = free_port()
    argv = command_as_in_image(port)
    assert argv[1:3] == ["serve", "--host"]
    with serving(tmp_path, argv, image_env_for(root), port) as server:
        health = server.wait_healthy()
        assert health["status"] == "ok"
        assert health["version"] == __version__
        assert health["watcher"] in ("inotify", "polling")
        assert root.is_dir()
        code = server.stop()
        # uvicorn re-raises the SIGTERM it handled once shutdown is done: both mean a clean stop.
        assert code in (0, -signal.SIGTERM), server.logs()
        assert "Application shutdown complete" in server.logs()
        assert "Traceback" not in server.logs()


def test_image_healthcheck_command_passes_against_the_server_and_fails_without_one(tmp_path: Path) -> None:
    port = free_port()
    probe = [
        sys.executable if a == "python" else a.replace("127.0.0.1:3000", f"127.0.0.1:{port}")
        for a in image_healthcheck()
    ]
    assert probe != image_healthcheck()
    down = run(probe, clean_env(), timeout=30)
    assert down.returncode != 0
    with serving(tmp_path, command_as_in_image(port), image_env_for(tmp_path / "vault"), port) as server:
        server.wait_healthy()
        up = run(probe, clean_env(), timeout=30)
        assert up.returncode == 0, up.stderr
        server.stop()


def test_port_mapped_host_headers_are_accepted_and_others_need_allowed_hosts(tmp_path: Path) -> None:
    """Through `-p 8080:3000` a client sends Host localhost:8080; a LAN name needs the allowlist."""

    def initialize(server: Server, host: str) -> tuple[int, bytes]:
        return http(f"{server.url}/mcp/alice", host=host, data=INITIALIZE, headers=MCP_HEADERS)

    port = free_port()
    with serving(tmp_path, command_as_in_image(port), image_env_for(tmp_path / "a"), port) as server:
        server.wait_healthy()
        for host in ("localhost:8080", "127.0.0.1:3000", f"localhost:{port}"):
            status, body = initialize(server, host)
            assert status == 200, (host, status, body)
        assert initialize(server, "mybox:3000")[0] == 421
        server.stop()
    port = free_port()
    env = image_env_for(tmp_path / "b", MEMVAULT_ALLOWED_HOSTS="mybox:*")
    with serving(tmp_path, command_as_in_image(port), env, port) as server:
        server.wait_healthy()
        status, body = initialize(server, "mybox:3000")
        assert status == 200, body
        assert initialize(server, "evil.example:3000")[0] == 421
        server.stop()


def test_package_installed_from_the_image_files_into_a_fresh_venv_serves(tmp_path: Path) -> None:
    """What `pip install .` in the image does: only the COPY'd files, a new environment, then CMD."""
    context = tmp_path / "context"
    context.mkdir()
    for args in instruction("COPY"):
        parts = [p for p in args.split() if not p.startswith("--")]
        for source in parts[:-1]:
            origin = REPO / source.rstrip("/")
            if origin.is_dir():
                shutil.copytree(origin, context / origin.name, ignore=shutil.ignore_patterns("__pycache__"))
            else:
                shutil.copy2(origin, context / origin.name)
    venv = tmp_path / "venv"
    made = run([sys.executable, "-m", "venv", "--without-pip", str(venv)], clean_env())
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    installed = run(
        [
            sys.executable,
            "-m",
            "pip",
            "--python",
            str(python),
            "install",
            "-q",
            "--no-deps",
            "--disable-pip-version-check",
            str(context),
        ],
        clean_env(),
        timeout=300,
    )
    assert installed.returncode == 0, installed.stdout + installed.stderr
    # The dependencies come from this environment (after the fresh site-packages on sys.path);
    # memvault itself must come from the fresh install, not from this checkout.
    purelib = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(run([str(python), "-c", purelib], clean_env()).stdout.strip())
    here = run([sys.executable, "-c", purelib], clean_env()).stdout.strip()
    (site / "zz_test_dependencies.pth").write_text(here + "\n", encoding="utf-8")
    locate = "import memvault, pathlib; print(pathlib.Path(memvault.__file__).parent)"
    where = run([str(python), "-c", locate], clean_env(), cwd=tmp_path)
    package = Path(where.stdout.strip())
    assert package == site / "memvault", where.stdout + where.stderr
    shipped = {p.name for p in package.glob("*.py")}
    assert shipped == {p.name for p in (REPO / "memvault").glob("*.py")}

    port = free_port()
    argv = command_as_in_image(port, executable=venv / "bin" / "memvault")
    with serving(tmp_path, argv, image_env_for(tmp_path / "vault"), port) as server:
        health = server.wait_healthy()
        assert health["status"] == "ok" and health["version"] == __version__
        assert server.stop() in (0, -signal.SIGTERM), server.logs()


# ---------------------------------------------------------------------------- the CLI


def test_python_m_memvault_and_the_console_script_print_the_version() -> None:
    for argv in ([sys.executable, "-m", "memvault", "--version"], [str(MEMVAULT), "--version"]):
        result = run(argv, clean_env())
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == f"memvault {__version__}"


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


def test_serve_on_a_busy_port_fails_and_says_so(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run(
            [str(MEMVAULT), "serve", "--host", "127.0.0.1", "--port", str(port)],
            clean_env(MEMVAULT_ROOT=str(tmp_path / "vault")),
            timeout=60,
        )
    assert result.returncode == 1
    assert "serving" not in result.stdout  # bound before announcing (issue 13)
    assert (
        f"cannot listen on 127.0.0.1:{port}: another program" in result.stderr and "--port" in result.stderr
    )
    assert "Traceback" not in result.stderr


def test_held_slow_connections_neither_exhaust_descriptors_nor_flood_the_log(tmp_path: Path) -> None:
    """Issue 9, 6: 21,000 held slow connections exhausted file descriptors, and the log took 450,000
    tracebacks in 15 s. Here the server may open only 256 files and 300 connections are held."""
    import resource
    import socket

    port = free_port()
    env = clean_env(
        MEMVAULT_ROOT=str(tmp_path / "vault"),
        MEMVAULT_MAX_CONNECTIONS="40",
        MEMVAULT_HEADER_TIMEOUT_SECONDS="1",
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

    def refuse(settings: Settings) -> None:
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
