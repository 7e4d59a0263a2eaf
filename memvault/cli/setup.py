"""memvault setup claude-code: the server, hooks and skill in Claude Code, and --remove to undo.

Registers the server with Claude Code, writes memvault's hooks into its settings and installs a
short skill; --remove undoes exactly that; --plugin writes the same as a plugin folder.

What setup changed is kept in ``<claude dir>/memvault/setup.json``: the settings file's bytes before
and a hash of them after, so --remove gives back the very same file when nobody changed it since,
and otherwise takes out only the hooks setup added."""

from __future__ import annotations

import argparse
import base64
import contextlib
import fcntl
import hashlib
import json
import os
import re
import secrets
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from memvault.config import Settings
from memvault.disk.files import atomic_write
from memvault.disk.names import valid_token

SERVER_NAME = "memvault"
HOOK_TIMEOUT = 5  # Claude Code's own cap on a hook (seconds); memvault gives up well before
CLAUDE_TIMEOUT = 60
# event in Claude Code's settings -> (matcher, memvault hook event)
HOOKS = {
    "SessionStart": ("startup|resume|clear|compact", "session-start"),
    "PreCompact": ("manual|auto", "pre-compact"),
    "Stop": (None, "stop"),
}

SKILL = """---
name: memvault
description: Long-term memory across sessions (memvault MCP server). Use at the start of a task to
  recall what earlier sessions learned about this project, and whenever a decision, a fact about the
  user or the codebase, or a fix worth reusing comes up, to save it.
---

# memvault: when to recall, when to save

The memvault MCP server keeps memories as markdown files that outlive this session.

Recall before you work:
- At the start of a task, and before answering "how do we ...", "what did we decide ...", call
  `recall(query=...)` with the project's and the task's words; read the best hits with
  `read_memory(filenames=[...])`.
- The session start already lists the P0 (always kept) memories and what recall finds for the
  project; after a compaction it shows this session's summary (`get_summary(sessionId=...)` for all).

Save as you go, not only at the end:
- A decision and why, a user preference, a command or fix that took effort, a gotcha of this
  codebase: `write_memory(title, content, tags=[project])`. Use `priority="P0"` only for what must
  never be forgotten; `supersedes=["old.md"]` when a memory replaces an older one.
- Keep one idea per memory, with a title a search would find; update an existing memory
  (`update_memory`) rather than writing a near-duplicate.

The hooks record each session's requests and final answers in a session summary under Claude
Code's session id (`get_session_history`); memories are for what is worth finding again.
"""


class SetupRefused(Exception):
    """Setup cannot go on; nothing was changed. The message says what to do."""


def add_parser(sub: Any, vault: argparse.ArgumentParser) -> None:
    setup = sub.add_parser(
        "setup",
        parents=[vault],
        help="connect Claude Code: register the server, write the hooks, install the skill",
        description="Connect Claude Code to memvault in one step: register the server (claude mcp add, "
        "user scope), write memvault's hooks into Claude Code's settings (kept atomic, mode 0600, "
        "everything else in the file kept) and install a short skill telling the agent when to recall "
        "and when to save. --remove undoes exactly what setup added; --plugin writes the same as a "
        "Claude Code plugin folder instead. `memvault setup git --root R` instead registers memvault's "
        "merge driver for the vault at R (its .gitattributes and the repository's merge.memvault "
        "config), so a git pull merges the graph, session summaries and memories without conflict "
        "markers; --dry-run and --remove apply to it too.",
    )
    setup.add_argument("client", choices=("claude-code", "git"), help="what to set up")
    how = setup.add_mutually_exclusive_group()
    how.add_argument(
        "--url", help="the server's MCP URL (default http://HOST:PORT/mcp/TOKEN, /mcp with a key)"
    )
    how.add_argument("--stdio", action="store_true", help="let Claude Code start memvault stdio itself")
    setup.add_argument("--key", help="a bearer key (memvault keys add) for a server with a keys file")
    setup.add_argument("--dry-run", action="store_true", help="say what would change; change nothing")
    setup.add_argument("--remove", action="store_true", help="undo what setup added")
    setup.add_argument("--claude-dir", type=Path, help="Claude Code's folder (default ~/.claude)")
    setup.add_argument("--plugin", type=Path, help="write a Claude Code plugin folder here instead")


def command(settings: Settings, args: argparse.Namespace) -> int:
    claude_dir = (args.claude_dir or Path.home() / ".claude").expanduser()
    try:
        if args.remove:
            with _setup_lock(claude_dir):
                return remove(claude_dir, dry_run=args.dry_run)
        plan = Plan.make(settings, args, claude_dir)
        if args.plugin is not None:
            return plan.write_plugin(args.plugin, dry_run=args.dry_run)
        with _setup_lock(claude_dir):
            if (claude_dir / "memvault" / "setup.json").exists():
                # Set up already (say over HTTP, now --stdio or --key): one command switches, by
                # undoing exactly what the earlier setup added before writing the new one.
                if args.dry_run:
                    print("memvault is set up here already; would first undo that (what --remove does):")
                    remove(claude_dir, dry_run=True)
                    print("then:")
                    return plan.install(dry_run=True)
                print("memvault is set up here already; undoing that first (what --remove does)")
                remove(claude_dir, dry_run=False)
            return plan.install(dry_run=args.dry_run)
    except SetupRefused as exc:
        print(f"memvault: {exc}", file=sys.stderr)
        return 1


def memvault_command() -> list[str]:
    """How Claude Code starts this memvault: the console script beside this Python, else ``-m``."""
    script = Path(sys.executable).parent / "memvault"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "memvault"]


def _write(path: Path, data: bytes, mode: int = 0o600) -> None:
    """Atomically, with ``mode``, fsync'd: a crash leaves the old file or the new, never half."""
    atomic_write(path, data, mode=mode)


class _Number(str):
    """A number as the settings file spells it (``1e400``, ``0.1000000000000000055511``), written
    back unchanged: json would turn the first into Infinity (not JSON) and round the second."""


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:
            raise SetupRefused(
                f"Claude Code's settings.json has the key {json.dumps(key)[:80]} twice in one object, and "
                "which one Claude Code reads is unclear; keep one, then run setup again. Nothing changed."
            )
        data[key] = value
    return data


_LONE_SURROGATE = re.compile(r"[\ud800-\udfff]")


def _check_text(value: Any) -> None:
    """Refuse a string holding half of a UTF-16 pair (a ``\\ud800`` escape alone): no UTF-8 file can
    hold it, so writing the settings back would fail or change it."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack += list(item)
            stack += item.values()
        elif isinstance(item, list):
            stack += item
        elif isinstance(item, str) and not isinstance(item, _Number) and _LONE_SURROGATE.search(item):
            raise SetupRefused(
                "Claude Code's settings.json holds a \\u escape of half a character (a lone surrogate, "
                "such as \\ud800), which is not text; fix or remove it, then run setup again. Nothing "
                "changed."
            )


def parse_settings(raw: bytes) -> Any:
    """The settings as json reads them, but numbers kept as written and a repeated key refused
    (SetupRefused); ValueError for what is not JSON."""
    data = json.loads(
        raw, object_pairs_hook=_pairs, parse_float=_Number, parse_int=_Number, parse_constant=_Number
    )
    _check_text(data)
    return data


def dump_settings(data: Any) -> bytes:
    """The settings as JSON text (indented by two), numbers as they were read."""
    mark = f"memvault-number-{secrets.token_hex(8)}:"
    numbers: list[str] = []

    def marked(value: Any) -> Any:
        if isinstance(value, _Number):
            numbers.append(str(value))
            return f"{mark}{len(numbers) - 1}"
        if isinstance(value, dict):
            return {k: marked(v) for k, v in value.items()}
        if isinstance(value, list):
            return [marked(v) for v in value]
        return value

    text = json.dumps(marked(data), indent=2, ensure_ascii=False)
    text = re.sub(f'"{re.escape(mark)}(\\d+)"', lambda m: numbers[int(m.group(1))], text)
    return (text + "\n").encode("utf-8")


@contextlib.contextmanager
def _setup_lock(claude_dir: Path) -> Any:
    """One setup or --remove at a time in a Claude Code folder (an flock on the folder itself, so
    nothing is left behind): a second one waits, then finds what the first did."""
    try:
        fd = os.open(claude_dir, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except FileNotFoundError:  # no folder, nothing to undo; setup makes it
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _read_settings(path: Path) -> tuple[bytes | None, dict[str, Any]]:
    if path.is_symlink() or (path.exists() and not path.is_file()):
        raise SetupRefused(f"{path.name} in Claude Code's folder is not a regular file; nothing changed")
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, {}
    except OSError as exc:
        raise SetupRefused(
            f"cannot read Claude Code's {path.name} ({exc.strerror}); nothing changed"
        ) from None
    try:
        data = parse_settings(raw) if raw.strip() else {}
    except (ValueError, RecursionError):
        raise SetupRefused(
            f"Claude Code's {path.name} is not valid JSON; fix it (or move it away), then run setup again. "
            "Nothing changed."
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("hooks", {}), dict):
        raise SetupRefused(f"Claude Code's {path.name} does not hold a JSON object with a hooks object")
    return raw, data


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _claude(*args: str) -> subprocess.CompletedProcess[str] | None:
    claude = shutil.which("claude")
    if claude is None:
        return None
    try:
        return subprocess.run(
            [claude, *args], capture_output=True, text=True, timeout=CLAUDE_TIMEOUT, stdin=subprocess.DEVNULL
        )
    except (OSError, subprocess.TimeoutExpired):
        return None


class Plan:
    """What setup writes, worked out before anything is written."""

    def __init__(
        self, claude_dir: Path, token: str | None, url: str | None, key: str | None, root: Path, stdio: bool
    ) -> None:
        self.claude_dir = claude_dir
        self.token, self.url, self.key, self.root, self.stdio = token, url, key, root, stdio
        self.state_dir = claude_dir / "memvault"
        self.key_file = self.state_dir / "key"

    @classmethod
    def make(cls, settings: Settings, args: argparse.Namespace, claude_dir: Path) -> Plan:
        token, url, key = args.token, args.url, args.key
        if url is not None:
            parts = urlsplit(url)
            if parts.scheme not in ("http", "https") or not parts.netloc:
                raise SetupRefused("--url must be an http(s) URL such as http://127.0.0.1:3000/mcp/my-token")
            segments = [s for s in parts.path.split("/") if s]
            if len(segments) >= 2 and segments[-2] == "mcp" and token is None:
                token = segments[-1]
        if token is not None and not valid_token(token):
            raise SetupRefused("--token is not a valid token name ([A-Za-z0-9][A-Za-z0-9._-]*)")
        if token is None and (args.stdio or key is None):
            raise SetupRefused(
                "say which vault Claude Code uses: --token NAME (or a --url ending in /mcp/NAME)"
            )
        if key is not None and (not key.strip() or any(c.isspace() for c in key) or len(key) > 200):
            raise SetupRefused("--key must be one key as memvault keys add printed it")
        if url is None and not args.stdio:
            base = f"http://{settings.host}:{settings.port}/mcp"
            url = base if key else f"{base}/{token}"
        return cls(claude_dir, token, url, key, settings.root.resolve(), bool(args.stdio))

    # ------------------------------------------------------------------ the pieces

    def hook_command(self, event: str, plugin: bool = False) -> str:
        words = [*memvault_command(), "hook", event, "--root", str(self.root)]
        if self.token:
            words += ["--token", self.token]
        if self.url and not self.stdio:
            words += ["--url", self.url]
        if self.key:
            words += ["--key-file", str(self.key_file)]
        words += ["--transcripts", str(self.claude_dir / "projects")]
        return shlex.join(words)

    def hooks(self) -> dict[str, list[dict[str, Any]]]:
        out: dict[str, list[dict[str, Any]]] = {}
        for name, (matcher, event) in HOOKS.items():
            entry: dict[str, Any] = {}
            if matcher is not None:
                entry["matcher"] = matcher
            entry["hooks"] = [
                {"type": "command", "command": self.hook_command(event), "timeout": HOOK_TIMEOUT}
            ]
            out[name] = [entry]
        return out

    def server(self) -> dict[str, Any]:
        if self.stdio:
            command = memvault_command()
            assert self.token is not None
            args = [*command[1:], "stdio", "--token", self.token, "--root", str(self.root)]
            return {"type": "stdio", "command": command[0], "args": args}
        server: dict[str, Any] = {"type": "http", "url": self.url}
        if self.key:
            server["headers"] = {"Authorization": f"Bearer {self.key}"}
        return server

    def mcp_add(self) -> list[str]:
        if self.stdio:
            server = self.server()
            return ["mcp", "add", "--scope", "user", SERVER_NAME, "--", server["command"], *server["args"]]
        assert self.url is not None
        args = ["mcp", "add", "--scope", "user", "--transport", "http", SERVER_NAME, self.url]
        if self.key:
            args += ["--header", f"Authorization: Bearer {self.key}"]
        return args

    def shown(self, args: list[str]) -> str:
        """A claude command as printed: the key never shown."""
        text = shlex.join(["claude", *args])
        return text.replace(self.key, "<key>") if self.key else text

    # ------------------------------------------------------------------ install

    def install(self, *, dry_run: bool) -> int:
        settings_file = self.claude_dir / "settings.json"
        before, data = _read_settings(settings_file)
        state_file = self.state_dir / "setup.json"
        if state_file.exists() and not dry_run:
            raise SetupRefused(
                "memvault is set up in this Claude Code already; run memvault setup claude-code --remove "
                "first, then set it up again"
            )
        hooks = data.setdefault("hooks", {})
        for name, entries in self.hooks().items():
            present = hooks.get(name)
            if present is not None and not isinstance(present, list):
                raise SetupRefused(
                    f"the {name} hooks in Claude Code's settings are not a list; fix them first"
                )
            hooks[name] = [*(present or []), *entries]
        after = dump_settings(data)
        skill_file = self.claude_dir / "skills" / "memvault" / "SKILL.md"
        skill_ours = not skill_file.exists()
        add = self.mcp_add()
        if dry_run:
            print(f"would add memvault's hooks (SessionStart, PreCompact, Stop) to {settings_file}:")
            print(json.dumps(self.hooks(), indent=2))
            print(f"would install the skill {skill_file}" if skill_ours else f"would keep {skill_file}")
            print(f"would run: {self.shown(add)}")
            return 0
        mode = None if before is None else os.stat(settings_file).st_mode & 0o777
        registered = _claude("mcp", "get", SERVER_NAME)
        if self.key:
            _write(self.key_file, (self.key + "\n").encode("utf-8"))
        _write(settings_file, after)
        if skill_ours:
            _write(skill_file, SKILL.encode("utf-8"), 0o644)
        state = {
            "settings_before": None if before is None else base64.b64encode(before).decode("ascii"),
            "settings_after": _sha(after),
            "settings_mode": mode,
            "commands": [self.hook_command(event) for _, event in HOOKS.values()],
            "skill": _sha(SKILL.encode("utf-8")) if skill_ours else None,
            "registered": False,
        }
        print(f"wrote memvault's hooks into {settings_file} (SessionStart, PreCompact, Stop)")
        if skill_ours:
            print(f"installed the skill {skill_file}")
        else:
            print(f"kept the existing {skill_file}")
        if registered is not None and registered.returncode == 0:
            print("a server named memvault is registered with Claude Code already; kept it as it is")
        else:
            done = _claude(*add)
            if done is not None and done.returncode == 0:
                state["registered"] = True
                print(f"registered the server: {self.shown(add)}")
            else:
                print(
                    f"could not run claude; register the server yourself: {self.shown(add)}", file=sys.stderr
                )
        # Registering runs Claude Code, which may rewrite its settings (it migrates old keys): --remove
        # restores the bytes from before setup if the file is still as setup leaves it.
        with contextlib.suppress(OSError):
            state["settings_after"] = _sha(settings_file.read_bytes())
        _write(state_file, json.dumps(state, indent=2).encode("utf-8"))
        return 0

    # ------------------------------------------------------------------ plugin

    def write_plugin(self, folder: Path, *, dry_run: bool) -> int:
        folder = folder.expanduser()
        if folder.exists() and any(folder.iterdir()):
            raise SetupRefused("the --plugin folder is not empty; choose a new folder")
        files = {
            ".claude-plugin/plugin.json": {
                "name": "memvault",
                "version": "1.0.0",
                "description": "Long-term memory for Claude Code: memvault's server, hooks and skill.",
            },
            ".mcp.json": {"mcpServers": {SERVER_NAME: self.server()}},
            "hooks/hooks.json": {"hooks": self.hooks()},
        }
        if dry_run:
            for name in [*files, "skills/memvault/SKILL.md"]:
                print(f"would write {folder / name}")
            return 0
        for name, value in files.items():
            _write(folder / name, (json.dumps(value, indent=2) + "\n").encode("utf-8"))
        _write(folder / "skills" / "memvault" / "SKILL.md", SKILL.encode("utf-8"), 0o644)
        start = shlex.join(["claude", "--plugin-dir", str(folder)])
        print(f"wrote the plugin to {folder}; start Claude Code with: {start}")
        return 0


# ---------------------------------------------------------------------------- remove


def _without(data: dict[str, Any], commands: set[str]) -> dict[str, Any]:
    """The settings with every hook whose command setup added taken out (and what that empties)."""
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        return data
    for name in list(hooks):
        entries = hooks[name]
        if not isinstance(entries, list):
            continue
        kept = []
        for entry in entries:
            if isinstance(entry, dict) and isinstance(entry.get("hooks"), list):
                inner = [
                    h for h in entry["hooks"] if not (isinstance(h, dict) and h.get("command") in commands)
                ]
                if not inner and entry["hooks"]:
                    continue
                entry = {**entry, "hooks": inner}
            kept.append(entry)
        if kept:
            hooks[name] = kept
        else:
            del hooks[name]
    if not hooks:
        del data["hooks"]
    return data


def remove(claude_dir: Path, *, dry_run: bool) -> int:
    state_dir = claude_dir / "memvault"
    state_file = state_dir / "setup.json"
    try:
        state = json.loads(state_file.read_bytes())
        if not isinstance(state, dict) or not isinstance(state.get("commands"), list):
            raise ValueError
    except FileNotFoundError:
        raise SetupRefused("memvault setup claude-code left no record here; nothing to remove") from None
    except (OSError, ValueError):
        raise SetupRefused(
            "memvault's setup record (memvault/setup.json) is damaged; nothing removed"
        ) from None
    settings_file = claude_dir / "settings.json"
    current, data = _read_settings(settings_file)
    before = state.get("settings_before")
    if current is not None and _sha(current) == state.get("settings_after"):
        restored: bytes | None = None if before is None else base64.b64decode(before)
        how = "restored Claude Code's settings as they were before setup"
    else:
        restored = dump_settings(_without(data, set(state["commands"])))
        how = "took memvault's hooks out of Claude Code's settings (changed since setup: the rest kept)"
    skill_file = claude_dir / "skills" / "memvault" / "SKILL.md"
    skill_ours = skill_file.is_file() and state.get("skill") == _sha(skill_file.read_bytes())
    if dry_run:
        print(f"would have {how}")
        print("would remove the skill" if skill_ours else "would keep the skill")
        print("would run: claude mcp remove --scope user memvault" if state.get("registered") else "")
        return 0
    if current is not None:
        if restored is None:
            settings_file.unlink()
        else:
            mode = (
                state.get("settings_mode")
                if restored == (None if before is None else base64.b64decode(before))
                else None
            )
            _write(settings_file, restored, mode if isinstance(mode, int) else 0o600)
    print(how)
    if skill_ours:
        skill_file.unlink()
        for folder in (skill_file.parent, skill_file.parent.parent):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        print("removed the skill")
    if state.get("registered"):
        done = _claude("mcp", "remove", "--scope", "user", SERVER_NAME)
        if done is not None and done.returncode == 0:
            print("unregistered the server memvault from Claude Code")
        else:
            print("could not run claude; remove the server yourself: claude mcp remove --scope user memvault")
    (state_dir / "key").unlink(missing_ok=True)
    state_file.unlink()
    if not any(state_dir.iterdir()):
        state_dir.rmdir()
    return 0
