"""nginx in front of N memvault processes: each vault always reaches the same one (`memvault nginx`).

The shard key is what names the vault: the token in the path (``/mcp/<token>...``), else the bearer
key of a server with a keys file (``/mcp``, the legacy ``/sse`` and ``/messages/``; a key names one
vault, and every request of a client carries it). nginx hashes it consistently over the backends,
so every request, session and SSE stream of a vault reaches the same process, and adding a backend
moves only about 1/N of them. Two keys of one vault may land on two processes: the file locks and
the watcher keep that correct, only less cached. A backend that refuses connections is marked down
and its vaults go to the next one on the ring (``proxy_next_upstream``); a client whose session was
on it gets a 404 for the old session id and initializes again, as the MCP protocol expects. All
backends may serve one vault root: the file locks make that safe.
"""

from __future__ import annotations

import re

from memvault.errors import InvalidArgument

_BACKEND = re.compile(r"^[A-Za-z0-9.\-\[\]:]+:\d{1,5}$")


def check_backends(backends: list[str]) -> list[str]:
    """``host:port`` strings, each checked (they go into a configuration file verbatim)."""
    cleaned = [b.strip() for b in backends if b.strip()]
    if not cleaned:
        raise InvalidArgument("give at least one backend, as host:port (e.g. 127.0.0.1:3001).")
    for backend in cleaned:
        if not _BACKEND.match(backend) or not 0 < int(backend.rsplit(":", 1)[1]) < 65536:
            raise InvalidArgument(f"{backend[:80]!r} is not host:port (e.g. 127.0.0.1:3001).")
    return cleaned


def http_block(backends: list[str], *, listen: str = "3000", fail_timeout: int = 10) -> str:
    """The http-level configuration (upstream, map, server): for nginx's conf.d/ or an include."""
    servers = "\n".join(
        f"    server {b} max_fails=1 fail_timeout={fail_timeout}s;" for b in check_backends(backends)
    )
    return f"""# Written by `memvault nginx`: {len(backends)} memvault backend(s), vaults spread by hash.
map $http_authorization $memvault_key {{
    ~*^bearer\\s+(?<key>\\S+) $key;
    default "";
}}

map $uri $memvault_shard {{
    ~^/mcp/(?<token>[^/]+) $token;
    default $memvault_key;
}}

upstream memvault {{
    hash $memvault_shard consistent;
{servers}
    keepalive 64;
}}

server {{
    listen {listen};

    # Everything goes to memvault: /mcp/<token> and its legacy /sse, or with keys /mcp, /sse and
    # /messages/, /healthz, and the answers to OAuth probes and wrong URLs.
    location / {{
        proxy_pass http://memvault;
        proxy_http_version 1.1;
        proxy_set_header Connection "";
        proxy_set_header Host $http_host;
        proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
        # SSE streams (GET /mcp/<token>, the legacy /sse) must flow as they come.
        proxy_buffering off;
        proxy_cache off;
        proxy_read_timeout 24h;
        proxy_send_timeout 24h;
        client_max_body_size 2m;
        # A backend that is down (refused, reset before any byte): the vault's next one on the ring.
        # A request that reached a backend is never sent twice (POSTs are not idempotent).
        proxy_next_upstream error timeout http_502 http_503;
        proxy_next_upstream_tries 2;
        proxy_connect_timeout 2s;
    }}
}}
"""


def standalone(backends: list[str], *, listen: str = "3000", prefix: str = ".") -> str:
    """A whole nginx.conf around :func:`http_block` (foreground, logs and temp files under ``prefix``)."""
    return f"""worker_processes 1;
daemon off;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {prefix}/client_body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
{http_block(backends, listen=listen)}}}
"""
