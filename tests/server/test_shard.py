"""The router's shard key: what names the vault in a request head, and nothing a hostile head can bend."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memvault.server.shard import MAX_HEAD, WAIT, key_of, shard_of


@pytest.mark.parametrize(
    ("head", "key"),
    [
        (b"POST /mcp/alice HTTP/1.1\r\nHost: x\r\n\r\n", "alice"),
        (b"GET /mcp/alice/sse HTTP/1.1\r\n", "alice"),  # the request line decides before the headers end
        (b"POST /mcp/alice/messages/?session_id=1 HTTP/1.1\r\n", "alice"),
        (b"POST /mcp/alice?x=/mcp/bob HTTP/1.1\r\n", "alice"),
        (b"POST /mcp/al%69ce HTTP/1.1\r\n", "alice"),  # percent-encoded, as the app reads the path
        (b"POST http://localhost:3000/mcp/alice HTTP/1.1\r\n", "alice"),  # absolute form
        (b"POST /mcp/alice HTTP/1.1\n", "alice"),  # a bare LF
        (b"POST /mcp HTTP/1.1\r\nAuthorization: Bearer k3y\r\n\r\n", "k3y"),
        (b"GET /sse HTTP/1.1\r\nhost: x\r\nauthorization:   bEaReR   k3y  \r\n\r\n", "k3y"),
        (b"POST /messages/?session_id=1 HTTP/1.1\nAuthorization: Bearer k3y\n\n", "k3y"),
        (b"POST /mcp HTTP/1.1\r\nAuthorization: Basic abc\r\n\r\n", None),
        (b"POST /mcp/ HTTP/1.1\r\nAuthorization: Bearer k3y\r\n\r\n", "k3y"),  # an empty token: the key
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", None),
        (b"GET /mcpalice HTTP/1.1\r\n\r\n", None),
        (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\n\n", None),  # a TLS hello, or garbage
        (b"\r\n\r\n", None),  # no request line at all
        (b"GET\r\n\r\n", None),  # no path
        (b"GET  HTTP/1.1\r\n\r\n", None),
    ],
)
def test_the_key_is_the_path_token_else_the_bearer_key_else_none(head: bytes, key: str | None) -> None:
    assert key_of(head) == key


@pytest.mark.parametrize(
    "head",
    [
        b"",
        b"POST /mcp/ali",  # the request line is still coming
        b"POST /mcp HTTP/1.1\r\nAuthorization: Bearer k3y\r\n",  # the headers are still coming
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
    ],
)
def test_an_incomplete_head_waits_for_more(head: bytes) -> None:
    assert key_of(head) is WAIT


def test_a_head_past_the_bound_decides_with_what_it_has() -> None:
    endless_line = b"GET /" + b"a" * MAX_HEAD
    assert key_of(endless_line) is None and key_of(b"x" * (10 * MAX_HEAD)) is None
    endless_headers = b"POST /mcp HTTP/1.1\r\n" + b"X-Pad: " + b"p" * MAX_HEAD
    assert key_of(endless_headers) is None
    # A bearer header past the bound is never looked for; one within it without the blank line neither.
    late = b"POST /mcp HTTP/1.1\r\n" + b"X-Pad: p\r\n" * (MAX_HEAD // 10) + b"Authorization: Bearer k\r\n\r\n"
    assert len(late) > MAX_HEAD and key_of(late) is None
    assert key_of(b"POST /mcp/alice HTTP/1.1\r\n" + b"X: y\r\n" * MAX_HEAD) == "alice"


@pytest.mark.parametrize(
    "head",
    [
        # CRLF tricks: a header smuggled inside another's value, or a key in the body, names nothing.
        b"POST /mcp HTTP/1.1\r\nX-Note: a\rAuthorization: Bearer evil\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nX-Note: Authorization: Bearer evil\r\n\r\n",
        b"POST /mcp HTTP/1.1\r\nHost: x\r\n\r\nAuthorization: Bearer evil\r\n\r\n",
        b"POST /mcp HTTP/1.1 Authorization: Bearer evil\r\n\r\n",
        b"POST /mcp\r\n/mcp/evil HTTP/1.1\r\n\r\n",
    ],
)
def test_nothing_outside_the_request_line_and_authorization_header_names_a_vault(head: bytes) -> None:
    assert key_of(head) is None


def test_percent_encoding_and_slashes_cannot_make_a_token_of_another_path() -> None:
    assert key_of(b"GET /mcp/%2e%2e HTTP/1.1\r\n\r\n") == ".."  # a token the app refuses: any process
    assert key_of(b"GET /mcp/a%2Fb HTTP/1.1\r\n") == "a/b"
    assert key_of(b"GET /mcp/%ff%fe HTTP/1.1\r\n") == "\ufffd\ufffd"
    assert key_of(b"GET /x/../mcp/alice HTTP/1.1\r\n\r\n") is None


@given(st.binary(max_size=4 * 1024))
def test_any_bytes_give_a_key_none_or_wait_and_never_raise(head: bytes) -> None:
    key = key_of(head)
    assert key is None or key is WAIT or isinstance(key, str)
    if isinstance(key, str):
        assert 0 <= shard_of(key, 3) < 3


def test_the_shard_is_the_same_in_every_process_and_spreads_vaults() -> None:
    # Another interpreter (another hash seed) sends each vault where this one does: a restarted
    # server's processes agree with its router.
    here = [shard_of(f"agent{i:02d}", 3) for i in range(30)]
    code = "from memvault.server.shard import shard_of as s; print([s(f'agent{i:02d}',3) for i in range(30)])"
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
        assert out.stdout.strip() == str(here)
    assert shard_of("alice", 1) == 0
    spread = [shard_of(f"agent{i:02d}", 4) for i in range(400)]
    assert all(60 < spread.count(n) < 140 for n in range(4)), [spread.count(n) for n in range(4)]
    assert shard_of("\udcff", 2) in (0, 1)  # a key that is not valid UTF-8
