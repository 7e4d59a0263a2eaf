"""The Docker image, tested through what it runs (no Docker engine here): the Dockerfile's CMD
(with the host and port swapped for a free loopback port), its ENV and HEALTHCHECK, the files it
copies, compose, DOCKER.md, and the package installed from exactly those files into a fresh venv.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from commands import (
    INITIALIZE,
    MCP_HEADERS,
    MEMVAULT,
    Server,
    clean_env,
    free_port,
    http,
    run,
    serving,
    wait_until,
)

from memvault import __version__
from memvault.config import SETTINGS, Settings

REPO = Path(__file__).resolve().parents[1]
DOCKERFILE = REPO / "Dockerfile"
COMPOSE = REPO / "docker-compose.yml"
DOCKER_MD = REPO / "DOCKER.md"
DOCKERIGNORE = REPO / ".dockerignore"

SETTING_NAMES = {spec.env for spec in SETTINGS.values()}


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


def image_env_for(root: Path, **extra: str) -> dict[str, str]:
    """The image's ENV (vault moved from /data to a temp folder) over a clean environment."""
    env = clean_env(**image_env())
    env["MEMVAULT_ROOT"] = str(root)
    env.update(extra)
    return env


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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


@pytest.mark.slow
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


# ---------------------------------------------------------------------------- syncing with git


def test_the_image_has_git_for_sync() -> None:
    installs = " ".join(args for args in instruction("RUN") if "apt-get install" in args)
    assert re.search(r"\bgit\b", installs) and "openssh-client" in installs
    assert "rm -rf /var/lib/apt/lists/*" in installs  # no package lists left in the image


def synced_replicas() -> tuple[dict[str, Any], list[dict[str, Any]]]:
    document = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    services = document["services"]
    return document, [services["memvault-sync-a"], services["memvault-sync-b"]]


def test_compose_synced_profile_runs_two_replicas_on_their_own_clones_behind_nginx() -> None:
    from memvault.server import nginx

    document, replicas = synced_replicas()
    plain = compose_service()
    sources = []
    for replica in replicas:
        assert replica["profiles"] == ["synced"]
        # Every setting passed through as for the plain service, and sync switched on.
        assert replica["environment"] == {**plain["environment"], "MEMVAULT_SYNC": "git"}
        (data,) = [v for v in replica["volumes"] if str(v).endswith(":/data")]
        sources.append(data.rsplit(":", 1)[0])
        assert replica["healthcheck"] == plain["healthcheck"] and replica["user"] == plain["user"]
        shell = replica["command"]
        assert shell[:2] == ["sh", "-c"] and shell[2].endswith("exec " + shlex.join(image_cmd()))
    assert len(set(sources)) == 2, "each replica needs a clone of its own"
    front = document["services"]["nginx-synced"]
    assert front["profiles"] == ["synced"] and set(front["depends_on"]) == {
        "memvault-sync-a",
        "memvault-sync-b",
    }
    (conf,) = front["configs"]
    content = document["configs"][conf["source"]]["content"].replace("$$", "$")
    assert content == nginx.http_block(["memvault-sync-a:3000", "memvault-sync-b:3000"], listen="3000")


@pytest.mark.slow
def test_the_synced_replicas_command_clones_its_remote_then_serves_and_syncs(tmp_path: Path) -> None:
    git = shutil.which("git")
    if git is None:
        pytest.skip("git is not installed")
    quiet_git = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    remote = tmp_path / "vault.git"
    made = run([git, "init", "-q", "--bare", "-b", "main", str(remote)], clean_env(**quiet_git))
    assert made.returncode == 0, made.stderr
    _, (replica, _) = synced_replicas()
    port = free_port()
    clone = tmp_path / "clone"  # in the image, /data: an empty volume on the first start
    clone.mkdir()
    script = (
        replica["command"][2]
        .replace('"${SYNC_REMOTE:-/remote}"', shlex.quote(str(remote)))
        .replace("/data", shlex.quote(str(clone)))
        .replace("exec memvault", f"exec {shlex.quote(str(MEMVAULT))}")
        .replace("--host 0.0.0.0 --port 3000", f"--host 127.0.0.1 --port {port}")
    )
    env = image_env_for(clone, **quiet_git, MEMVAULT_SYNC="git", MEMVAULT_SYNC_INTERVAL_SECONDS="1")
    with serving(tmp_path, ["sh", "-c", script], env, port) as server:
        server.wait_healthy()
        assert (clone / ".git").is_dir()  # cloned on the first start
        (clone / "team").mkdir()
        (clone / "team" / "note.md").write_text("# Note\n\nwritten beside the server\n", encoding="utf-8")

        def pushed() -> bool:
            shown = run(
                [git, "--git-dir", str(remote), "log", "--name-only", "--format=", "main"], clean_env()
            )
            return "team/note.md" in shown.stdout

        wait_until(pushed, 60, "the replica pushes what changed in its clone")

        def synced() -> bool:
            return json.loads(http(f"{server.url}/healthz", timeout=2)[1])["sync"]["state"] == "ok"

        wait_until(synced, 30, "/healthz says the sync is ok")
        assert server.stop() in (0, -signal.SIGTERM), server.logs()
