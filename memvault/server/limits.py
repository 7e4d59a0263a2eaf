"""Process limits under load: the open-file limit, connections, and the log floods they cause.

A server that runs out of file descriptors fails every new connection and every file it opens,
and asyncio logs a traceback for each refused accept: held slow connections once wrote 450,000
of them (193 MB) in 15 s. ``serve`` raises the soft limit to the hard one, caps connections
(MEMVAULT_MAX_CONNECTIONS, answered 503 by uvicorn above it) and installs :class:`OncePer` on the
loggers that repeat one failure per event.
"""

from __future__ import annotations

import asyncio
import logging
import sys

from memvault.logs import OncePer

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows
    resource = None  # type: ignore[assignment]

log = logging.getLogger("memvault")

# How long a thread holds the GIL while another waits for it (Python's default: 5 ms). The event
# loop waits for it behind background threads (write-backs, access records, the embedding worker);
# a shorter interval served more calls a second in bench_load's mix (bench/RESULTS.md).
SWITCH_INTERVAL = 0.0005
# asyncio's message when accept() fails for want of descriptors (EMFILE/ENFILE/ENOBUFS/ENOMEM).
ACCEPT_FAILED = "socket.accept() out of system resource"


def favour_the_event_loop() -> None:
    """Hand the GIL over sooner (SWITCH_INTERVAL), so background threads hold up requests less."""
    sys.setswitchinterval(SWITCH_INTERVAL)


def raise_open_file_limit(wanted: int) -> tuple[int, int]:
    """Raise the soft RLIMIT_NOFILE towards the hard limit (at least ``wanted`` if allowed);
    returns (soft before, soft now). Containers often start at 1,024 with a far higher hard limit."""
    if resource is None:  # pragma: no cover
        return (0, 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, wanted)
    if soft == resource.RLIM_INFINITY or soft >= target:
        return (soft, soft)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    except (ValueError, OSError):
        return (soft, soft)
    return (soft, target)


def _accept_failed(record: logging.LogRecord) -> bool:
    """A refused accept, or one of the retries asyncio then schedules (one per connection waiting,
    a second later) failing because the listening socket closed meanwhile: a shutdown under the
    same flood logged a traceback for each."""
    if not isinstance(record.msg, str):
        return False
    return record.msg.startswith(ACCEPT_FAILED) or (
        record.msg.startswith("Exception in callback") and "._start_serving(" in record.msg
    )


def quiet_accept_failures() -> OncePer:
    """At most one line per window for refused accepts (descriptors exhausted); returns the filter."""
    flood = OncePer(_accept_failed)
    logging.getLogger("asyncio").addFilter(flood)
    return flood


BUSY = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\nconnection: close\r\n"
    b"retry-after: 1\r\ncontent-length: 76\r\n\r\n"
    b'{"error": "too many open connections (MEMVAULT_MAX_CONNECTIONS); try again"}'
)
assert BUSY.endswith(b"}") and len(BUSY.split(b"\r\n\r\n", 1)[1]) == 76


def http_protocol() -> type[asyncio.Protocol]:
    """uvicorn's HTTP/1.1 protocol over httptools (llhttp, in C) when it is installed, else over h11
    (pure Python): the parser was a tenth of the event loop's time under load (bench/RESULTS.md)."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools is a dependency; h11 stays uvicorn's own
        from uvicorn.protocols.http.h11_impl import H11Protocol

        return H11Protocol
    return HttpToolsProtocol


def guarded_protocol(max_connections: int, header_timeout: float) -> type[asyncio.Protocol]:
    """uvicorn's HTTP protocol (:func:`http_protocol`) with a cap on open connections (the next
    one is answered 503 and closed at once, so held connections cannot exhaust the descriptors)
    and a deadline for a new connection's first request (slow or silent clients are dropped;
    keep-alive covers the rest)."""
    base = http_protocol()
    refused = OncePer(lambda record: True)

    class GuardedProtocol(base):  # type: ignore[valid-type,misc]
        _admitted = False
        _first_request: asyncio.TimerHandle | None = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            if len(self.connections) >= max_connections:
                assert isinstance(transport, asyncio.WriteTransport)
                transport.write(BUSY)
                transport.close()
                message = f"refused connections: {max_connections} are open (MEMVAULT_MAX_CONNECTIONS)"
                refused.note(log, logging.WARNING, message)
                return
            self._admitted = True
            super().connection_made(transport)  # type: ignore[arg-type]
            self._first_request = self.loop.call_later(header_timeout, self._no_first_request)

        def _no_first_request(self) -> None:
            if self.cycle is None and not self.transport.is_closing():
                self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            if not self._admitted:
                return
            if self._first_request is not None:
                self._first_request.cancel()
            super().connection_lost(exc)

    return GuardedProtocol
