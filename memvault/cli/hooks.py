"""memvault hook <event>: Claude Code's hooks, which never hold the client up.

Session start prints a short context; pre-compact and stop record the session from its
transcript. A hook never holds the client up: its work runs against a deadline counted from the
process's start (the interpreter's start and the imports included), it talks to a running server
when there is one (else to the vault's files, under the same locks), and whatever goes wrong it
exits 0 with one line on stderr. Claude Code runs hooks concurrently (panes, subagents): the hooks
of one session record it one at a time, under a lock on its transcript."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memvault.config import SETTINGS, Settings
from memvault.disk.names import valid_token
from memvault.errors import MemvaultError

if TYPE_CHECKING:
    from memvault.ops.capture import VaultAccess

EVENTS = ("session-start", "pre-compact", "stop")
SOURCES = ("startup", "resume", "clear", "compact")
MAX_INPUT_BYTES = 1024 * 1024
TRANSCRIPT_TAIL_BYTES = 8 * 1024 * 1024  # a long session's older part was captured by earlier hooks
CAPTURE_CHARS = 8000
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_IMPORTED = time.monotonic()  # when /proc cannot tell the process's start: the next best thing


def started() -> float:
    """When this process started, on time.monotonic()'s clock: the hook's deadline counts the
    interpreter's start and the imports, which take a good part of it on a busy machine."""
    now = time.monotonic()
    try:
        with open("/proc/self/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()  # the name before ")" may hold spaces
        ticks = int(fields[19])  # field 22, starttime: clock ticks after boot
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):  # not Linux
        return _IMPORTED
    return now - age if 0 <= age < 600 else _IMPORTED


class Skip(Exception):
    """The hook has nothing it can do; the message is the one line it prints on stderr."""


@dataclass(frozen=True, slots=True)
class HookArgs:
    event: str
    token: str | None
    url: str | None
    key_file: Path | None
    transcripts: Path | None


class Watch:
    """The hook's deadline, counted from the process's start. When it passes, whatever the hook is
    doing (importing on a busy machine, waiting for a lock, reading a socket that never answers),
    the watch prints one line and ends the process with status 0."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.deadline = started() + seconds
        self._end = threading.Lock()  # taken by whichever ends the process: the hook or the watch
        threading.Thread(target=self._watch, name="memvault-hook-deadline", daemon=True).start()

    def _watch(self) -> None:
        while (left := self.deadline - time.monotonic()) > 0:
            time.sleep(left)
        if self._end.acquire(blocking=False):
            _say(
                f"gave up after {self.seconds:g}s (MEMVAULT_HOOK_TIMEOUT_SECONDS) so as not to hold "
                "Claude Code up; is the machine busy, the vault very large, or its lock held?"
            )
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)  # the hook may be inside a lock or a socket read: leave it, never wait for it

    def finish(self) -> None:
        """Claim the process's end for the hook; when the watch has claimed it, wait for its exit."""
        if not self._end.acquire(blocking=False):
            threading.Event().wait()


_watch: Watch | None = None


def watch(environ: Mapping[str, str]) -> None:
    """Start the hook's watch before the rest of the command line is even imported."""
    global _watch
    try:
        seconds = Settings.from_env(environ).hook_timeout_seconds
    except MemvaultError:  # main says what is wrong with the setting; the default bounds the wait
        seconds = float(SETTINGS["hook_timeout_seconds"].default)
    _watch = Watch(seconds)


def run(settings: Settings, args: HookArgs) -> int:
    """Run one hook within settings.hook_timeout_seconds of the process's start; always exit status 0."""
    guard = _watch or Watch(settings.hook_timeout_seconds)
    from memvault.cli.remote import Unreachable

    out, problem = "", ""
    try:
        out = _hook(settings, args, guard.deadline)
    except (Skip, Unreachable) as exc:  # Unreachable: the server went away during the hook
        problem = str(exc)
    except Exception as exc:  # a hook must never fail the client: one line, exit 0
        problem = f"failed ({type(exc).__name__}); the session goes on without memvault"
    guard.finish()
    if problem:
        _say(problem)
    elif out:
        sys.stdout.write(out + "\n")
    return 0


def _say(line: str) -> None:
    print(f"memvault hook: {' '.join(line.split())}", file=sys.stderr)


def _input() -> dict[str, Any]:
    if sys.stdin is None or sys.stdin.isatty():
        raise Skip("expects the hook's JSON on stdin, as Claude Code sends it; nothing done")
    raw = sys.stdin.buffer.read(MAX_INPUT_BYTES + 1)
    if len(raw) > MAX_INPUT_BYTES:
        raise Skip("the hook's input is larger than 1 MiB; nothing done")
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise Skip("the hook's input is not JSON; nothing done") from None
    if not isinstance(data, dict):
        raise Skip("the hook's input is not a JSON object; nothing done")
    return data


def _session_id(data: dict[str, Any], required: bool) -> str | None:
    value = data.get("session_id")
    if isinstance(value, str) and _SESSION_ID.fullmatch(value):
        return value
    if required:
        raise Skip("the hook's input has no usable session_id; nothing recorded")
    return None


def _cwd(data: dict[str, Any]) -> str | None:
    value = data.get("cwd")
    if isinstance(value, str) and len(value) < 4096 and "\x00" not in value and os.path.isabs(value):
        return value
    return None


def transcript_path(data: dict[str, Any], allowed: Path) -> Path:
    """The transcript the hook names, if it is a regular ``.jsonl`` file inside ``allowed`` (Claude
    Code's projects folder): a hostile path to anything else is never opened."""
    value = data.get("transcript_path")
    if not isinstance(value, str) or "\x00" in value or not value.endswith(".jsonl"):
        raise Skip("the hook's input names no transcript (.jsonl); nothing recorded")
    path = Path(value)
    try:
        real, inside = path.resolve(strict=True), allowed.resolve(strict=True)
        usable = path.is_absolute() and real.is_relative_to(inside) and real.is_file()
    except (OSError, RuntimeError):
        usable = False
    if not usable:
        raise Skip(
            "the transcript the hook names is not a file in Claude Code's projects folder "
            "(--transcripts); nothing recorded"
        )
    return real


@contextlib.contextmanager
def one_capture_at_a_time(transcript: Path, deadline: float) -> Iterator[None]:
    """Held while a hook records the session of this transcript, so hooks run at once (Claude Code
    starts them concurrently) never read the same capture marker and append the same turns twice.
    The lock is the transcript's own (flock is advisory: Claude Code's appends go on), so it needs
    no file of its own and is released when the process ends, however it ends."""
    try:
        import fcntl
    except ImportError:  # no flock here (Windows): captures are not serialised
        yield
        return
    try:
        fd = os.open(transcript, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        raise Skip("cannot read the transcript; nothing recorded") from None
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Skip(
                        "another hook of this session was still recording it; nothing recorded"
                    ) from None
                time.sleep(0.01)
            except OSError:  # a file system without flock (some network ones): go on unserialised
                break
        yield
    finally:
        os.close(fd)  # releases the lock


def _key(key_file: Path | None) -> str | None:
    if key_file is None:
        return None
    try:
        with open(key_file, "rb") as handle:
            key = handle.read(512).decode("utf-8", "replace").strip().splitlines()
    except OSError:
        raise Skip(
            "cannot read the key file (--key-file); run memvault setup claude-code --key again"
        ) from None
    return key[0].strip() if key else None


def _vault(settings: Settings, args: HookArgs, deadline: float) -> VaultAccess:
    """A running server's vault if one answers, else the files; Skip when neither can be used."""
    from memvault.cli.remote import RemoteVault, Unreachable

    key = _key(args.key_file)
    url = args.url
    if url is None:
        base = f"http://{settings.host}:{settings.port}/mcp"
        url = base if key or args.token is None else f"{base}/{args.token}"
    remote = RemoteVault(url, key, deadline)
    try:
        remote.open()
        return remote
    except Unreachable as exc:
        if not exc.down:
            raise Skip(str(exc)) from None
        why = str(exc)
    if args.token is None:
        raise Skip(f"{why}, and no --token names the vault's files; start memvault serve") from None
    if not settings.root.is_dir():
        raise Skip(f"{why}, and the vault's root folder does not exist (MEMVAULT_ROOT or --root)")
    if settings.token_dir(args.token).is_symlink():
        raise Skip("the token's folder is a symbolic link; memvault never works through one")
    from memvault.ops.localvault import LocalVault

    return LocalVault(settings, args.token)


def _hook(settings: Settings, args: HookArgs, deadline: float) -> str:
    from memvault.ops import capture, transcripts

    if args.token is not None and not valid_token(args.token):
        raise Skip("--token is not a valid token name; nothing done")
    data = _input()
    cwd = _cwd(data)
    if args.event == "session-start":
        source = data.get("source") if data.get("source") in SOURCES else "startup"
        session_id = _session_id(data, required=False)
        vault = _vault(settings, args, deadline)
        try:
            return capture.session_context(
                vault, session_id=session_id, source=str(source), cwd=cwd, budget=settings.hook_context_chars
            )
        finally:
            vault.close()
    session_id = _session_id(data, required=True)
    assert session_id is not None
    allowed = args.transcripts or Path.home() / ".claude" / "projects"
    path = transcript_path(data, allowed)
    with one_capture_at_a_time(path, deadline):
        # Read under the lock: a hook that waited sees what the one before it recorded.
        try:
            transcript = transcripts.read(path, limit_bytes=TRANSCRIPT_TAIL_BYTES)
        except OSError:
            raise Skip("cannot read the transcript; nothing recorded") from None
        vault = _vault(settings, args, deadline)
        try:
            project = Path(cwd).name if cwd else None
            budget = min(CAPTURE_CHARS, settings.max_content_chars // 2)
            capture.capture(vault, session_id, transcript, budget=budget, project=project)
        except capture.Refused as exc:
            raise Skip(f"the vault refused the session's summary: {exc}") from None
        finally:
            vault.close()
    return ""


def add_parser(sub: Any, vault: argparse.ArgumentParser) -> None:
    hook = sub.add_parser(
        "hook",
        parents=[vault],
        help="Claude Code's hooks: session-start prints a context, pre-compact and stop record the session",
        description="Run one of Claude Code's hooks, reading the hook's JSON on stdin. session-start "
        "prints a short context (P0 titles, what recall finds for the project, after a compaction the "
        "summary saved before it); pre-compact and stop append what is new in the transcript to the "
        "session's summary. Always exits 0 within MEMVAULT_HOOK_TIMEOUT_SECONDS; a problem is one line "
        "on stderr. memvault setup claude-code writes these hooks into Claude Code's settings.",
    )
    hook.add_argument("event", choices=EVENTS)
    hook.add_argument(
        "--url", help="the running server's MCP URL (default http://HOST:PORT/mcp/TOKEN, or /mcp with a key)"
    )
    hook.add_argument("--key-file", type=Path, help="a file holding the bearer key (memvault keys add)")
    hook.add_argument(
        "--transcripts",
        type=Path,
        help="the only folder transcripts are read from (default ~/.claude/projects)",
    )


def command(settings: Settings, args: argparse.Namespace) -> int:
    return run(settings, HookArgs(args.event, args.token, args.url, args.key_file, args.transcripts))
