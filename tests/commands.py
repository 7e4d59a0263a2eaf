"""Running memvault as a user does: the console script in a subprocess, a free port, a clean
environment, a server process waited on with a deadline (tests of the CLI and of the Docker image)."""

from __future__ import annotations

import json
import os
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

MEMVAULT = Path(sys.executable).parent / "memvault"  # the console script of this environment
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


INITIALIZE_REQUEST = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "memvault-tests", "version": "0"},
    },
}
INITIALIZE = json.dumps(INITIALIZE_REQUEST).encode()
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
