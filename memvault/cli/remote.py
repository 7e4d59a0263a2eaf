"""A running memvault serve reached over streamable HTTP, for the hooks.

The few tool calls the hooks make, with the standard library only (a hook must start fast), every
request bounded by the hook's deadline."""

from __future__ import annotations

import json
import re
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

from memvault import __version__
from memvault.ops.capture import Refused

PROTOCOL_VERSION = "2025-06-18"
MAX_REPLY_BYTES = 1024 * 1024
_TITLE_LINE = re.compile(r"^(?P<file>[^|]+)\|(?P<title>.*)\|(?P<priority>P[0-2])\|[^|]*(?:\|.*)?$")


class Unreachable(Exception):
    """The server cannot be used: ``down`` when nothing listens at the URL (then the vault's files
    may be used instead), else it answered wrongly (a refused key, not an MCP endpoint)."""

    def __init__(self, why: str, *, down: bool = False) -> None:
        super().__init__(why)
        self.down = down


class RemoteVault:
    """memvault.ops.capture.VaultAccess over MCP: one session, opened on the first call."""

    def __init__(self, url: str, key: str | None, deadline: float) -> None:
        self.url = url
        self.key = key
        self.deadline = deadline  # time.monotonic() by which every call has returned
        self.session: str | None = None
        self._ids = 0

    def _post(self, payload: dict[str, Any], *, method: str = "POST") -> tuple[dict[str, Any] | None, Any]:
        left = self.deadline - time.monotonic()
        if left <= 0:
            # Not down: the vault's files would take longer still.
            raise Unreachable("gave up: the hook's time ran out (MEMVAULT_HOOK_TIMEOUT_SECONDS)")
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.key:
            headers["Authorization"] = f"Bearer {self.key}"
        if self.session:
            headers["Mcp-Session-Id"] = self.session
            headers["Mcp-Protocol-Version"] = PROTOCOL_VERSION
        data = json.dumps(payload).encode("utf-8") if method == "POST" else None
        request = urllib.request.Request(self.url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(request, timeout=left) as response:
                body = response.read(MAX_REPLY_BYTES + 1)
                session = response.headers.get("mcp-session-id")
                kind = response.headers.get("content-type", "")
        except urllib.error.HTTPError as exc:
            exc.close()  # its body is never read: leave no socket open
            if exc.code == 401:
                raise Unreachable(
                    "the server refused the key (401); run memvault setup claude-code --key with a valid "
                    "key (memvault keys add)"
                ) from None
            raise Unreachable(
                f"the server answered HTTP {exc.code}; is the URL a memvault /mcp URL?"
            ) from None
        except (OSError, ValueError) as exc:
            reason = getattr(exc, "reason", exc)
            if isinstance(reason, TimeoutError):
                raise Unreachable("the server did not answer in time") from None
            raise Unreachable("no memvault server answers at its URL", down=self.session is None) from None
        if session and self.session is None:
            self.session = session
        if not body or "id" not in payload:
            return None, None
        if len(body) > MAX_REPLY_BYTES:
            raise Unreachable("the server's reply is too large")
        message = _message(body, kind)
        if not isinstance(message, dict) or "result" not in message:
            raise Unreachable("the server did not answer as an MCP server")
        return message, message["result"]

    def open(self) -> None:
        if self.session is not None:
            return
        self._ids += 1
        self._post(
            {
                "jsonrpc": "2.0",
                "id": self._ids,
                "method": "initialize",
                "params": {
                    "protocolVersion": PROTOCOL_VERSION,
                    "capabilities": {},
                    "clientInfo": {"name": "memvault-hook", "version": __version__},
                },
            }
        )
        self._post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        """(is_error, text) of a tool call."""
        self.open()
        self._ids += 1
        _, result = self._post(
            {
                "jsonrpc": "2.0",
                "id": self._ids,
                "method": "tools/call",
                "params": {"name": tool, "arguments": arguments},
            }
        )
        if not isinstance(result, dict):
            raise Unreachable("the server did not answer as an MCP server")
        content = result.get("content")
        texts = [c["text"] for c in content or [] if isinstance(c, dict) and isinstance(c.get("text"), str)]
        return bool(result.get("isError")), "\n".join(texts)

    def close(self) -> None:
        if self.session is None or self.deadline - time.monotonic() <= 0.05:
            return
        try:
            self._post({}, method="DELETE")
        except Unreachable:
            pass  # the server forgets idle sessions by itself

    # ------------------------------------------------------------------ VaultAccess

    def latest_summary(self, session_id: str) -> str | None:
        failed, text = self.call("get_summary", {"sessionId": session_id, "maxLength": 16_000})
        if failed:
            return None
        _, _, body = text.partition("]\n")  # the reply's header: "# title\n[facts]\n"
        return body.strip("\n")

    def append_summary(self, session_id: str, text: str, title: str, tags: Sequence[str]) -> None:
        args = {"sessionId": session_id, "content": text, "title": title, "tags": list(tags)}
        failed, reply = self.call("append_summary", args)
        if failed:
            raise Refused(reply)

    def replace_summary(self, session_id: str, text: str, title: str, tags: Sequence[str]) -> None:
        args = {"sessionId": session_id, "summary": text, "title": title, "tags": list(tags)}
        failed, reply = self.call("upsert_summary", args)
        if failed:
            raise Refused(reply)

    def p0_titles(self) -> list[str]:
        failed, text = self.call("list_memory_titles", {})
        if failed:
            return []
        titles = []
        for line in text.splitlines():
            match = _TITLE_LINE.match(line.strip())
            if match and match["priority"] == "P0":
                titles.append(f"{match['title'].strip()} ({match['file'].strip()})")
        return titles

    def recall(self, query: str, limit: int) -> list[str]:
        failed, text = self.call("recall", {"query": query, "limit": limit})
        if failed:
            return []
        return [line for line in text.splitlines() if line.count("|") >= 2][:limit]


def _message(body: bytes, kind: str) -> Any:
    """The JSON-RPC message of a reply: a JSON body, or the last data event of an SSE stream."""
    text = body.decode("utf-8", "replace")
    if kind.startswith("text/event-stream"):
        data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
        text = data[-1] if data else ""
    try:
        return json.loads(text)
    except ValueError:
        return None
