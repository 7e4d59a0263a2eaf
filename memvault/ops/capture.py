"""What Claude Code's hooks do with a vault: record a session, and give a new one its context.

The session is recorded from its transcript; the context is short and bounded. The vault is
reached through :class:`VaultAccess`: a running server over HTTP, or the vault's files under the
same locks (memvault.ops.localvault)."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from memvault.ops import transcripts

SESSION_TAG = "claude-code"
MAX_GIT_CONFIG_BYTES = 64 * 1024
_REMOTE_URL = re.compile(r"^\s*url\s*=\s*(\S+)\s*$", re.M)
_WORD = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,80}")


class Refused(Exception):
    """The vault refused a change (a limit, a conflict); the message says why, for one stderr line."""


class VaultAccess(Protocol):
    """The few calls the hooks make, over HTTP (the tools) or on the files (the same operations)."""

    def latest_summary(self, session_id: str) -> str | None: ...

    def append_summary(self, session_id: str, text: str, title: str, tags: Sequence[str]) -> None: ...

    def replace_summary(self, session_id: str, text: str, title: str, tags: Sequence[str]) -> None: ...

    def p0_titles(self) -> list[str]: ...

    def recall(self, query: str, limit: int) -> list[str]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Captured:
    turns: int
    chars: int


def capture(
    vault: VaultAccess,
    session_id: str,
    transcript: transcripts.Transcript,
    *,
    budget: int,
    project: str | None,
) -> Captured:
    """Append to the session's summary what the transcript holds since the last capture (nothing
    when there is nothing new). A summary that would outgrow its limit starts again from the new
    text, pointing to the history, where every earlier version stays."""
    latest = vault.latest_summary(session_id)
    new_entries = transcripts.after(transcript.entries, transcripts.marker_in(latest))
    new = transcripts.turns(new_entries)
    through = transcripts.last_stamp(new_entries)
    text = transcripts.render(new, through, budget) if through is not None else ""
    if not text:
        return Captured(0, 0)
    project = project if project and _WORD.fullmatch(project) else None  # from hostile input: a plain name
    title = f"Claude Code: {project}" if project else "Claude Code session"
    tags = [SESSION_TAG, *([project] if project else [])]
    if latest is None:
        vault.append_summary(session_id, text, title, tags)
    else:
        try:
            vault.append_summary(session_id, text, title, tags)
        except Refused:
            call = f"get_session_history(sessionId={json.dumps(session_id)})"
            older = f"[Earlier captures of this session: {call}.]"
            vault.replace_summary(session_id, older + "\n\n" + text, title, tags)
    return Captured(len(new), len(text))


def project_words(cwd: str | None) -> list[str]:
    """The project's names for recall: its folder's name and its git remotes' repository names,
    read from ``.git/config`` as text (git itself is never run: a hostile config could run commands)."""
    if not cwd:
        return []
    folder = Path(cwd)
    if not folder.is_absolute():
        return []
    words = [folder.name] if _WORD.fullmatch(folder.name) else []
    config = folder / ".git" / "config"
    try:
        if (folder / ".git").is_symlink() or config.is_symlink() or not config.is_file():
            return words
        with open(config, "rb") as handle:
            text = handle.read(MAX_GIT_CONFIG_BYTES).decode("utf-8", "replace")
    except OSError:
        return words
    for url in _REMOTE_URL.findall(text):
        name = url.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1].removesuffix(".git")
        if _WORD.fullmatch(name) and name not in words:
            words.append(name)
    return words[:4]


def _section(lines: Sequence[str], room: int) -> str:
    out: list[str] = []
    used = 0
    for line in lines:
        line = line if len(line) <= 300 else line[:299] + "…"
        if used + len(line) + 1 > room:
            out.append(f"[{len(lines) - len(out)} more not shown]")
            break
        out.append(line)
        used += len(line) + 1
    return "\n".join(out)


def session_context(
    vault: VaultAccess, *, session_id: str | None, source: str, cwd: str | None, budget: int
) -> str:
    """What a session starts with: the P0 memories' titles, what recall finds for the project, and
    after a compaction the summary saved just before it; at most ``budget`` characters."""
    head = (
        "memvault: memories from earlier sessions. Read one with read_memory(filenames=[...]), find "
        "more with recall(query=...); save what is worth keeping with write_memory."
    )
    parts = [head]
    titles = vault.p0_titles()
    if titles:
        parts.append("Always-kept (P0) memories:\n" + _section([f"- {t}" for t in titles], budget // 4))
    words = project_words(cwd)
    if words:
        found = vault.recall(" ".join(words), 5)
        if found:
            parts.append(
                f"Related to this project ({', '.join(words)}):\n"
                + _section([f"- {line}" for line in found], budget // 3)
            )
    if source == "compact" and session_id:
        summary = vault.latest_summary(session_id)
        summary = transcripts.without_markers(summary).strip() if summary else None
        if summary:
            room = max(200, budget - sum(len(p) + 2 for p in parts) - 200)
            shown = summary if len(summary) <= room else "…" + summary[-room:]
            parts.append(
                "This session before the compaction (all of it: "
                f"get_summary(sessionId={json.dumps(session_id)})):\n" + shown
            )
    text = "\n\n".join(parts)
    if len(text) > budget:
        text = text[: budget - 1] + "…"
    return text if len(parts) > 1 else ""
