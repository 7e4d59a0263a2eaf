"""remote: the hooks' few tool calls to a running server, and how each way it can fail is said."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from memvault.cli.remote import MAX_REPLY_BYTES, RemoteVault, Unreachable
from memvault.ops.capture import Refused

Reply = tuple[int, dict[str, str], bytes]


class Server:
    """A stand-in MCP endpoint on a loopback port: ``answer`` maps each request to a reply."""

    def __init__(self, answer: Callable[[str, dict[str, str], dict[str, Any] | None], Reply]) -> None:
        self.seen: list[tuple[str, dict[str, str], dict[str, Any] | None]] = []
        seen, lock = self.seen, threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def _reply(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(size)) if size else None
                headers = {k.lower(): v for k, v in self.headers.items()}
                with lock:
                    seen.append((self.command, headers, body))
                status, extra, data = answer(self.command, headers, body)
                self.send_response(status)
                for name, value in extra.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_POST = do_DELETE = _reply

            def log_message(self, *args: object) -> None:
                pass

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}/mcp/alice"
        self.thread = threading.Thread(target=self.http.serve_forever, args=(0.02,), daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()


def mcp(tools: dict[str, tuple[bool, str]]) -> Callable[[str, dict[str, str], dict[str, Any] | None], Reply]:
    """An MCP server whose tools answer (is_error, text); its session id is 's-1'."""

    def answer(method: str, headers: dict[str, str], body: dict[str, Any] | None) -> Reply:
        if method == "DELETE" or body is None or "id" not in body:
            return 202, {}, b""
        if body["method"] == "initialize":
            result: dict[str, Any] = {"protocolVersion": "2025-06-18", "capabilities": {}}
            return 200, {"Content-Type": "application/json", "Mcp-Session-Id": "s-1"}, reply(body, result)
        failed, text = tools[body["params"]["name"]]
        result = {"content": [{"type": "text", "text": text}], "isError": failed}
        return 200, {"Content-Type": "application/json"}, reply(body, result)

    return answer


def reply(body: dict[str, Any], result: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": body["id"], "result": result}).encode()


@pytest.fixture
def serve() -> Iterator[Callable[..., Server]]:
    servers: list[Server] = []

    def start(answer: Callable[[str, dict[str, str], dict[str, Any] | None], Reply]) -> Server:
        servers.append(Server(answer))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def vault(server: Server, key: str | None = "k-123", seconds: float = 10.0) -> RemoteVault:
    return RemoteVault(server.url, key, time.monotonic() + seconds)


def test_a_call_opens_one_session_and_sends_the_key(serve: Callable[..., Server]) -> None:
    server = serve(mcp({"recall": (False, "deploy.md | Deploy | 0.91 | make stage\nnot a result line")}))
    remote = vault(server)
    assert remote.recall("deploy", 5) == ["deploy.md | Deploy | 0.91 | make stage"]
    assert remote.recall("deploy", 5) == ["deploy.md | Deploy | 0.91 | make stage"]
    remote.close()
    methods = [(m, (b or {}).get("method")) for m, _, b in server.seen]
    assert methods == [
        ("POST", "initialize"),
        ("POST", "notifications/initialized"),
        ("POST", "tools/call"),
        ("POST", "tools/call"),
        ("DELETE", None),
    ]
    assert all(h["authorization"] == "Bearer k-123" for _, h, _ in server.seen)
    assert all(h.get("mcp-session-id") == "s-1" for _, h, _ in server.seen[1:])


def test_p0_titles_are_read_from_the_listing(serve: Callable[..., Server]) -> None:
    listing = (
        "file | title | priority | updated\n"
        "rules.md | Never deploy on Fridays | P0 | 2026-01-05\n"
        "notes.md | Some notes | P2 | 2026-01-06\n"
    ).replace(" | ", "|")
    remote = vault(serve(mcp({"list_memory_titles": (False, listing)})))
    assert remote.p0_titles() == ["Never deploy on Fridays (rules.md)"]


def test_a_summary_is_read_without_its_header_and_none_when_there_is_none(
    serve: Callable[..., Server],
) -> None:
    remote = vault(serve(mcp({"get_summary": (False, "# Claude Code\n[3 versions]\nwhat was done")})))
    assert remote.latest_summary("abc") == "what was done"
    missing = vault(serve(mcp({"get_summary": (True, "No session 'abc'.")})))
    assert missing.latest_summary("abc") is None


def test_a_refused_change_is_refused_with_the_servers_words(serve: Callable[..., Server]) -> None:
    said = "The summary is 70,000 characters; the limit is 64,000."
    remote = vault(serve(mcp({"append_summary": (True, said), "upsert_summary": (True, said)})))
    with pytest.raises(Refused, match="the limit is 64,000"):
        remote.append_summary("abc", "text", "title", ["claude-code"])
    with pytest.raises(Refused, match="the limit is 64,000"):
        remote.replace_summary("abc", "text", "title", ["claude-code"])


def test_a_reply_as_an_event_stream_is_read_from_its_last_data_line(serve: Callable[..., Server]) -> None:
    tools = mcp({"recall": (False, "a.md | A | 0.50 | x")})

    def streamed(method: str, headers: dict[str, str], body: dict[str, Any] | None) -> Reply:
        status, extra, data = tools(method, headers, body)
        if extra.get("Content-Type") != "application/json":
            return status, extra, data
        return (
            status,
            {**extra, "Content-Type": "text/event-stream"},
            b"event: message\ndata: " + data + b"\n\n",
        )

    assert vault(serve(streamed)).recall("a", 5) == ["a.md | A | 0.50 | x"]


def test_a_refused_key_says_how_to_set_a_valid_one(serve: Callable[..., Server]) -> None:
    remote = vault(serve(lambda *_: (401, {}, b"")))
    with pytest.raises(Unreachable, match="refused the key") as caught:
        remote.recall("x", 5)
    assert "memvault keys add" in str(caught.value) and not caught.value.down
    assert "k-123" not in str(caught.value)


def test_a_server_that_is_not_memvault_is_said_so(serve: Callable[..., Server]) -> None:
    with pytest.raises(Unreachable, match="HTTP 404; is the URL a memvault /mcp URL") as caught:
        vault(serve(lambda *_: (404, {}, b"not here"))).recall("x", 5)
    assert not caught.value.down
    page = (200, {"Content-Type": "text/html"}, b"<html>hello</html>")
    with pytest.raises(Unreachable, match="did not answer as an MCP server"):
        vault(serve(lambda *_: page)).recall("x", 5)


def test_a_reply_too_large_is_refused_unread(serve: Callable[..., Server]) -> None:
    huge = (200, {"Content-Type": "application/json"}, b" " * (MAX_REPLY_BYTES + 10))
    with pytest.raises(Unreachable, match="too large"):
        vault(serve(lambda *_: huge)).recall("x", 5)


def test_nothing_listening_is_down_so_the_files_may_be_used(serve: Callable[..., Server]) -> None:
    server = serve(mcp({}))
    server.close()
    with pytest.raises(Unreachable, match="no memvault server answers") as caught:
        vault(server).recall("x", 5)
    assert caught.value.down


def test_a_deadline_already_passed_sends_nothing(serve: Callable[..., Server]) -> None:
    server = serve(mcp({"recall": (False, "")}))
    with pytest.raises(Unreachable, match="time ran out") as caught:
        vault(server, seconds=-1).recall("x", 5)
    assert not caught.value.down
    assert server.seen == []
