"""Claude Code transcripts as the client writes them, for the tests of the hooks and the importers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SESSION = "5f0c9a2e-1b7d-4c1e-9f3a-2d8e6b4a7c10"


class Transcript:
    """A Claude Code transcript as the client writes it: one JSON object per line, appended."""

    def __init__(self, path: Path, cwd: Path) -> None:
        self.path, self.cwd, self.n = path, cwd, 0
        path.parent.mkdir(parents=True, exist_ok=True)
        self._line({"type": "summary", "summary": "Earlier work", "leafUuid": "x"})

    def _line(self, entry: dict[str, Any]) -> str:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(entry) + "\n")
        return str(entry.get("uuid", ""))

    def _entry(self, kind: str, content: Any, **extra: Any) -> str:
        self.n += 1
        return self._line(
            {
                "parentUuid": f"uuid-{self.n - 1}" if self.n > 1 else None,
                "isSidechain": False,
                "userType": "external",
                "cwd": str(self.cwd),
                "sessionId": SESSION,
                "version": "2.1.197",
                "gitBranch": "main",
                "type": kind,
                "message": {"role": kind, "content": content},
                "uuid": f"uuid-{self.n}",
                "timestamp": f"2026-11-26T10:{self.n // 60:02d}:{self.n % 60:02d}.000Z",
                **extra,
            }
        )

    def turn(self, request: str, *answers: str) -> None:
        """A request, tool use in between, and the assistant's texts (the last is the final answer)."""
        self._entry("user", request)
        for i, answer in enumerate(answers):
            self._entry(
                "assistant",
                [{"type": "text", "text": answer}, {"type": "tool_use", "id": f"t{self.n}", "name": "Bash"}],
            )
            if i < len(answers) - 1:
                self._entry(
                    "user", [{"type": "tool_result", "tool_use_id": f"t{self.n}", "content": "TOOLOUT"}]
                )
        self._entry("user", "<command-name>/cost</command-name>", isMeta=True)

    def slash(self, command: str, args: str = "", output: str = "") -> None:
        """A slash command as the client writes it: the command, then its local output if any."""
        self._entry(
            "user",
            f"<command-name>{command}</command-name>\n<command-message>{command.lstrip('/')}"
            f"</command-message>\n<command-args>{args}</command-args>",
        )
        if output:
            self._entry("user", f"<local-command-stdout>{output}</local-command-stdout>")

    def answer(self, text: str) -> None:
        self._entry("assistant", [{"type": "text", "text": text}])

    def interrupted(self, for_tool_use: bool = True) -> None:
        """What the client writes when the user stops the assistant."""
        said = "[Request interrupted by user" + (" for tool use]" if for_tool_use else "]")
        self._entry("user", [{"type": "text", "text": said}])
