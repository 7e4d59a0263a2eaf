"""Which process of ``serve --processes N`` serves a connection: the shard key of its first head.

The key is what names the vault, as `memvault nginx` takes it: the token in the path
(``/mcp/<token>...``), else the bearer key of the ``Authorization`` header. Anything else
(``/healthz``, a wrong URL, garbage) has no key and may go to any process. The head is hostile
input: it is read only as far as needed, never beyond :data:`MAX_HEAD` bytes, and a head that
does not parse has no key (the process it reaches answers it as one process would). A wrong key
costs only a cache: every process serves every vault of the shared root correctly.

Imports only the standard library: the router imports this module and stays small.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import unquote

__all__ = ["MAX_HEAD", "WAIT", "key_of", "shard_of"]

MAX_HEAD = 16 * 1024  # bytes of a request head the router reads at most
WAIT = object()  # key_of's answer while the head is incomplete and within MAX_HEAD

_REQUEST_LINE = re.compile(rb"^[A-Za-z]{1,20} +(\S+)(?: +HTTP/\d\.\d)? *$")
_ABSOLUTE = re.compile(rb"^[A-Za-z][A-Za-z0-9+.\-]*://[^/?#]*")  # http://host:port/...
_BEARER = re.compile(rb"^authorization[ \t]*:[ \t]*bearer[ \t]+(\S+)", re.IGNORECASE)


def key_of(head: bytes, limit: int = MAX_HEAD) -> str | object | None:
    """The shard key of a connection whose first bytes are ``head``: the token of ``/mcp/<token>``,
    else the bearer key, else None (any process); :data:`WAIT` while more bytes could decide it.

    The request line decides alone when it names a token (its headers need not have come); a
    bearer key needs the whole head. Past ``limit`` bytes whatever is known decides."""
    head = head[:limit]
    end = head.find(b"\n")
    if end < 0:
        return WAIT if len(head) < limit else None
    token = _path_token(head[:end].rstrip(b"\r"))
    if token is not None:
        return token
    blank = _head_end(head)
    if blank < 0:
        return WAIT if len(head) < limit else None
    for line in head[end + 1 : blank].split(b"\n"):
        found = _BEARER.match(line.rstrip(b"\r"))
        if found:
            return found.group(1).decode("latin-1")
    return None


def _head_end(head: bytes) -> int:
    """Where the blank line ending the head starts (CRLF or bare LF lines), or -1."""
    ends = [i for i in (head.find(b"\r\n\r\n"), head.find(b"\n\n")) if i >= 0]
    return min(ends) if ends else -1


def _path_token(line: bytes) -> str | None:
    """The token of a request line's ``/mcp/<token>`` target (percent-decoded, as the app reads
    the path), or None."""
    found = _REQUEST_LINE.match(line)
    if not found:
        return None
    target = _ABSOLUTE.sub(b"", found.group(1), count=1)
    path = target.split(b"?", 1)[0].split(b"#", 1)[0]
    if not path.startswith(b"/mcp/"):
        return None
    token = unquote(path[5:].split(b"/", 1)[0].decode("latin-1"))
    return token or None


def shard_of(key: str, count: int) -> int:
    """The process (0 to count - 1) of a key: a stable hash (never Python's salted ``hash``), so
    every connection of a vault, and a restarted process's, reaches the same one."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count
