"""The router of ``serve --processes N``: accepts connections, hands each to its vault's server process.

One Python process serves requests on about one core (the GIL); N processes on one vault root
serve on N. The router binds the port, starts N server processes (fresh interpreters: ``serve``
with a hidden ``--child``) and accepts. For each connection it peeks at the first request's head
(``MSG_PEEK``: nothing is consumed), takes its shard key as `memvault nginx` does
(:mod:`memvault.server.shard`) and passes the socket itself to that vault's process over a unix
socket pair (``SCM_RIGHTS``); the process serves it as if it had accepted it, and the router
forgets it. No byte of a request or a reply passes through the router.

A keep-alive connection can carry requests for several vaults (a proxy's pooled connections, a
client with two tokens on one server). A process that reads the head of a request for another
process's vault hands the connection back (``SCM_RIGHTS`` again, with the bytes it read of it),
and the router passes it on to that vault's process, which serves the request as the first one
of the connection: an MCP session lives in one process, so all its requests must reach it.

Hostile heads: the router waits for a head at most MEMVAULT_HEADER_TIMEOUT_SECONDS and reads at
most :data:`~memvault.server.shard.MAX_HEAD` bytes of it, then hands over what it has (the process
answers it as one process would). Connections are watched edge-triggered, so a partial head
waits for new bytes instead of waking the router again and again. MEMVAULT_MAX_CONNECTIONS bounds
the connections of the whole server: those waiting here plus those the processes report open;
the next one is answered 503 and closed.

A process that exits is started again (one log line); the router gives up, stopping the others,
when processes keep exiting before they serve. SIGTERM or SIGINT stops every process gracefully.

This module imports neither the MCP SDK nor numpy: the router stays small and starts at once.
"""

from __future__ import annotations

import collections
import functools
import logging
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from memvault.config import Settings
from memvault.logs import OncePer
from memvault.server.limits import BUSY
from memvault.server.shard import MAX_HEAD, WAIT, key_of, shard_of

log = logging.getLogger("memvault")

__all__ = [
    "CLOEXEC", "CLOSED", "HANDED", "MESSAGE_MOST", "MOVED", "MOVED_MOST", "READY", "Router", "channel_pair",
    "supported",
]  # fmt: skip

READY = b"ready"  # a server process's first message: it serves
CLOSED = 4  # then each message is a count (4 bytes, big-endian) of handed connections it closed
HANDED = b"c"  # the router's message with a new connection's descriptor
# A connection's descriptor with the bytes already read of it: a process hands back a request for
# another process's vault, the router passes it on (see the module's docstring). More bytes than
# this (a head is at most MAX_HEAD; the rest, the start of a body) and the process serves it itself:
# a message of a socket pair must fit its send buffer (Linux: 208 KiB unless raised).
MOVED = b"m"
MOVED_MOST = 192 * 1024
MESSAGE_MOST = len(MOVED) + MOVED_MOST  # the longest message on a channel, either way
ACCEPT_BATCH = 128  # connections accepted per wake, so waiting heads are read in between
QUICK_EXITS = 3  # processes exiting before they serve, in a row, before the router gives up
SERVED_SECONDS = 10.0  # a process that served this long before it exited was not a failed start
CONFIG_ERROR = 2  # a process's exit status for a setting it refused: no restart helps
PAUSE_SECONDS = 0.1  # accepting rests this long when the router is out of descriptors

# Descriptors received on a channel close on exec: no process started later inherits a client.
CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0)
_HEAD = select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET if hasattr(select, "epoll") else 0
_GONE = select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR if hasattr(select, "epoll") else 0


def channel_pair() -> tuple[socket.socket, socket.socket]:
    """The router's end and a server process's end of the socket pair between them (message
    boundaries kept; end of file when the other side exits)."""
    return socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)


@dataclass(slots=True)
class Child:
    """One server process, as the router sees it."""

    index: int
    process: subprocess.Popen[bytes]
    channel: socket.socket
    started: float
    ready: bool = False
    open: int = 0  # connections handed to it and not yet reported closed


class Router:
    """Accepts on ``listener`` and hands connections to ``count`` server processes, each started
    with ``command(index, fd)`` (``fd``: its end of the channel). ``announce`` runs once, when
    every process first serves."""

    def __init__(
        self,
        settings: Settings,
        listener: socket.socket,
        command: Callable[[int, int], list[str]],
        announce: Callable[[], None],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.count = settings.processes
        self.listener = listener
        self.command = command
        self.announce = announce
        self.clock = clock
        self.poll = select.epoll()
        self.children: list[Child] = []
        self.by_fd: dict[int, Callable[[int, int], None]] = {}  # fd -> handler(fd, events)
        self.waiting: dict[int, socket.socket] = {}  # connections whose head is still coming
        self.deadlines: collections.deque[tuple[float, int, socket.socket]] = collections.deque()
        self.turn = 0  # the next process for a connection without a key
        self.quick_exits = 0
        self.announced = False
        self.paused_until = 0.0
        self.exit_code: int | None = None  # set: the loop ends and the router stops with it
        self.stopping = False
        self.refused = OncePer(lambda record: True)

    # ------------------------------------------------------------------ running

    def run(self) -> int:
        """Serve until a signal (0) or until processes keep failing (non-zero); every process has
        exited when this returns."""
        wake_read, wake_write = socket.socketpair()
        wake_read.setblocking(False)
        wake_write.setblocking(False)
        previous = {s: signal.signal(s, self._signalled) for s in (signal.SIGTERM, signal.SIGINT)}
        old_wakeup = signal.set_wakeup_fd(wake_write.fileno(), warn_on_full_buffer=False)
        try:
            self.listener.setblocking(False)
            self.listener.set_inheritable(False)
            self._watch(wake_read.fileno(), select.EPOLLIN, lambda fd, events: _drain(wake_read))
            for index in range(self.count):
                self.children.append(self._start(index))
            while self.exit_code is None:
                self._turn()
        finally:  # also when the router itself fails: no server process is left behind
            self._stop()
            signal.set_wakeup_fd(old_wakeup)
            for number, handler in previous.items():
                signal.signal(number, handler)
            wake_read.close()
            wake_write.close()
            self.poll.close()
        return self.exit_code

    def _turn(self) -> None:
        now = self.clock()
        timeout = -1.0
        if self.deadlines:
            timeout = max(0.0, self.deadlines[0][0] - now)
        if self.paused_until:
            if now >= self.paused_until:
                self.paused_until = 0.0
                self._watch(self.listener.fileno(), select.EPOLLIN, self._accept)
            else:
                rest = self.paused_until - now
                timeout = rest if timeout < 0 else min(timeout, rest)
        for fd, events in self.poll.poll(timeout):
            handler = self.by_fd.get(fd)
            if handler is not None:
                handler(fd, events)
        self._expire(self.clock())

    def _watch(self, fd: int, events: int, handler: Callable[[int, int], None]) -> None:
        self.poll.register(fd, events)
        self.by_fd[fd] = handler

    def _unwatch(self, fd: int) -> None:
        # Before the socket is closed: a descriptor in flight to a process keeps its registration.
        self.by_fd.pop(fd, None)
        try:
            self.poll.unregister(fd)
        except (OSError, ValueError):
            pass

    def _signalled(self, number: int, frame: object) -> None:
        if self.stopping:  # a second signal while the processes stop: stop them now
            for child in self.children:
                if child.process.poll() is None:
                    child.process.kill()
        self.exit_code = 0 if self.exit_code is None else self.exit_code

    # ------------------------------------------------------------------ connections

    def open_connections(self) -> int:
        """Connections of the whole server: waiting for their head here, or handed over and open."""
        return len(self.waiting) + sum(child.open for child in self.children)

    def _accept(self, fd: int, events: int) -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                conn, _ = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as exc:  # out of descriptors: rest, rather than spin on a ready listener
                log.warning("accepting connections paused: %s", exc.strerror or exc)
                self._unwatch(self.listener.fileno())
                self.paused_until = self.clock() + PAUSE_SECONDS
                return
            if self.open_connections() >= self.settings.max_connections:
                _refuse(conn)
                most = self.settings.max_connections
                message = f"refused connections: {most} are open (MEMVAULT_MAX_CONNECTIONS)"
                self.refused.note(log, logging.WARNING, message)
                continue
            conn.setblocking(False)
            self.waiting[conn.fileno()] = conn
            deadline = self.clock() + self.settings.header_timeout_seconds
            self.deadlines.append((deadline, conn.fileno(), conn))
            self._watch(conn.fileno(), _HEAD, self._head)

    def _head(self, fd: int, events: int) -> None:
        conn = self.waiting.get(fd)
        if conn is None:
            return
        try:
            head = conn.recv(MAX_HEAD, socket.MSG_PEEK)
        except BlockingIOError:
            return
        except OSError:
            head = b""
        key = key_of(head) if head else None
        if not head or (key is WAIT and events & _GONE):
            self._drop(fd)  # closed, or half-closed before its head was whole
        elif key is not WAIT:
            self._hand(fd, key if isinstance(key, str) else None)

    def _hand(self, fd: int, key: str | None) -> None:
        conn = self.waiting.pop(fd)
        self._unwatch(fd)
        if key is None:
            index, self.turn = self.turn, (self.turn + 1) % self.count
        else:
            index = shard_of(key, self.count)
        self._send(self.children[index], conn, HANDED)

    def _send(self, child: Child, conn: socket.socket, message: bytes) -> None:
        """``conn`` to ``child`` with ``message`` (HANDED, or MOVED and the bytes read of it)."""
        try:
            socket.send_fds(child.channel, [message], [conn.fileno()])
            child.open += 1
        except OSError:  # its queue is full, or it has just exited
            _refuse(conn)
        conn.close()

    def _moved(self, child: Child, message: bytes, fds: list[int]) -> None:
        """A process handed back a connection whose next request is another process's (MOVED)."""
        child.open = max(0, child.open - 1)
        socks = [socket.socket(fileno=fd) for fd in fds]
        for extra in socks[1:]:  # a process sends one; more would only leak here
            extra.close()
        read = message[len(MOVED) :]
        key = key_of(read)
        index = shard_of(key, self.count) if isinstance(key, str) else child.index
        self._send(self.children[index], socks[0], MOVED + read)

    def _drop(self, fd: int) -> None:
        conn = self.waiting.pop(fd, None)
        self._unwatch(fd)
        if conn is not None:
            conn.close()

    def _expire(self, now: float) -> None:
        while self.deadlines and self.deadlines[0][0] <= now:
            _, fd, conn = self.deadlines.popleft()
            if self.waiting.get(fd) is conn:
                self._drop(fd)

    # ------------------------------------------------------------------ server processes

    def _start(self, index: int) -> Child:
        mine, theirs = channel_pair()
        try:
            process = subprocess.Popen(
                self.command(index, theirs.fileno()), pass_fds=(theirs.fileno(),), process_group=0
            )
        finally:
            theirs.close()
        mine.setblocking(False)
        child = Child(index, process, mine, self.clock())
        self._watch(mine.fileno(), select.EPOLLIN, functools.partial(self._heard, child))
        return child

    def _open(self) -> None:
        """Every process serves: listen (as one process does once it serves) and say so."""
        self.announced = True
        self.listener.listen(2048)  # uvicorn's backlog
        self._watch(self.listener.fileno(), select.EPOLLIN, self._accept)
        self.announce()

    def _heard(self, child: Child, fd: int, events: int) -> None:
        while True:
            try:
                message, fds, _, _ = socket.recv_fds(child.channel, MESSAGE_MOST, 4, CLOEXEC)
            except BlockingIOError:
                return
            except OSError:
                message, fds = b"", []
            if fds:
                self._moved(child, message, fds)
            elif not message:
                self._exited(child)
                return
            elif message == READY:
                child.ready = True
                if not self.announced and all(c.ready for c in self.children):
                    self._open()
            elif len(message) == CLOSED:
                child.open = max(0, child.open - int.from_bytes(message, "big"))

    def _exited(self, child: Child) -> None:
        self._unwatch(child.channel.fileno())
        child.channel.close()
        code = _reap(child.process)
        if self.stopping:
            return
        served = child.ready and self.clock() - child.started >= SERVED_SECONDS
        self.quick_exits = 0 if served else self.quick_exits + 1
        if not child.ready and code == CONFIG_ERROR:
            self.exit_code = CONFIG_ERROR  # it said why on stderr
            return
        if self.quick_exits >= QUICK_EXITS:
            log.error("server processes keep exiting before they serve (%d in a row); stopping", QUICK_EXITS)
            self.exit_code = 1
            return
        log.warning("server process %d exited (status %s); starting another", child.index, code)
        self.children[child.index] = self._start(child.index)

    def _stop(self) -> None:
        self.stopping = True
        if self.listener.fileno() >= 0:
            self._unwatch(self.listener.fileno())
        self.listener.close()
        for fd in list(self.waiting):
            self._drop(fd)
        for child in self.children:
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        for child in self.children:
            child.process.wait()
            child.channel.close()


def _reap(process: subprocess.Popen[bytes]) -> int:
    """A process whose channel closed: it is exiting; its status."""
    try:
        return process.wait(10)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()


def _refuse(conn: socket.socket) -> None:
    try:
        conn.setblocking(False)
        conn.send(BUSY)
    except OSError:
        pass
    conn.close()


def _drain(sock: socket.socket) -> None:
    try:
        while sock.recv(512):
            pass
    except OSError:
        pass


def supported() -> bool:
    """Whether this system has what the router needs (epoll, descriptor passing): Linux."""
    return hasattr(select, "epoll") and hasattr(socket, "send_fds") and sys.platform.startswith("linux")
