"""Keys: a bearer key names its vault and scope, so no vault name travels in a URL (hashes only on disk)."""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import secrets
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from memvault.disk.files import atomic_write
from memvault.disk.names import valid_token
from memvault.errors import InvalidArgument

log = logging.getLogger("memvault")

SCOPES = ("rw", "ro")
KEY_PREFIX = "mv_"
HEADER = "# memvault keys: name, vault (token), scope (rw or ro), sha256 of the key. Keys are never stored.\n"


@dataclass(frozen=True, slots=True)
class Grant:
    """What one key may do: its name (for people), its vault, read-only or not."""

    name: str
    token: str
    read_only: bool
    digest: str  # sha256 hex of the key


def digest(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def parse(text: str) -> list[Grant]:
    """The grants of a keys file; a malformed line is an InvalidArgument naming its line number."""
    grants = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split()
        if len(parts) != 4 or parts[2] not in SCOPES or len(parts[3]) != 64 or not valid_token(parts[1]):
            raise InvalidArgument(
                f"keys file, line {number}: expected 'name token rw|ro sha256hex'; fix or remove the line "
                "(memvault keys list shows the file's keys)."
            )
        grants.append(Grant(parts[0], parts[1], parts[2] == "ro", parts[3].lower()))
    return grants


def render(grants: list[Grant]) -> str:
    lines = [f"{g.name} {g.token} {'ro' if g.read_only else 'rw'} {g.digest}\n" for g in grants]
    return HEADER + "".join(lines)


SETTLING = 2.0  # seconds after an in-place change during which an empty or broken file is still being written


class KeyRing:
    """The keys file as the server reads it: checked for changes (a stat) on every lookup, so a
    revoked key is refused at once, without a restart. Comparisons take the same time whatever
    the key (hmac.compare_digest over every grant).

    An editor that saves in place truncates the file, then writes it: a lookup in between read an
    empty (or half-written) file and refused every key. A change in place that reads as empty,
    malformed, without a key or cut within a line, while it is younger than SETTLING, keeps the
    grants read before; a well-formed change (a revocation) is taken at once, and so is a file
    replaced whole (``memvault keys``). While the file's time is that recent it is read again at
    each lookup, so a second change within one tick of a coarse clock is not missed.
    """

    def __init__(self, path: Path, *, now: Callable[[], float] = time.time) -> None:
        self.path = path
        self.now = now
        self._stamp: tuple[int, int, int] | None = None
        self._inode: int | None = None  # of the file the grants were read from
        self._grants: list[Grant] = []
        self._logged: str | None = None  # the last problem logged: each is logged once
        self._lock = threading.Lock()

    def grants(self) -> list[Grant]:
        try:
            st = os.stat(self.path)
            stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
        except OSError:
            stamp = (0, -1, 0)
        with self._lock:
            if stamp != self._stamp:
                self._reload(stamp)
            return self._grants

    def _reload(self, stamp: tuple[int, int, int]) -> None:
        """Read the file in one go and check that it did not change while it was read (lock held)."""
        settling = self.now() - stamp[0] / 1e9 < SETTLING
        same_file = self._inode == stamp[2]
        try:
            with open(self.path, "rb") as handle:
                data = handle.read()
                st = os.fstat(handle.fileno())
            if (st.st_mtime_ns, st.st_size, st.st_ino) != stamp:
                return  # changed while read: read again at the next lookup
            grants = parse(data.decode("utf-8-sig"))  # a BOM (Notepad) is not part of the first name
            problem = None
        except (OSError, UnicodeDecodeError, InvalidArgument) as exc:
            grants, problem = [], str(exc)
        # Empty, cut within a line, or malformed, moments after a change in place: most likely an
        # editor between truncating and writing. The grants read before stand until it settles.
        unfinished = problem is not None or not grants or not data.endswith(b"\n")
        if unfinished and settling and same_file:
            return
        self._stamp = None if settling else stamp
        self._inode = stamp[2]
        self._grants = grants
        if problem is None:
            self._logged = None
            return
        if problem != self._logged:
            # Unreadable or malformed: no key works (failing closed), and the log says why, once.
            self._logged = problem
            log.error("keys file unusable, every key is refused until it is fixed: %s", problem)

    def find(self, key: str) -> Grant | None:
        wanted = digest(key)
        found = None
        for grant in self.grants():
            if hmac.compare_digest(wanted, grant.digest):
                found = grant
        return found


# ---------------------------------------------------------------------------- `memvault keys`


def _load(path: Path) -> list[Grant]:
    return parse(path.read_text(encoding="utf-8-sig")) if path.exists() else []


def add(path: Path, name: str, token: str, *, read_only: bool) -> str:
    """A new key for ``token``, written to the keys file by its hash; returns the key (shown once)."""
    if not name or any(c.isspace() for c in name) or name.startswith("#"):
        raise InvalidArgument("a key's name is one word (no spaces), e.g. laptop-claude.")
    if not valid_token(token):
        raise InvalidArgument(f"{token!r} is not a valid token.")
    grants = _load(path)
    if any(g.name == name for g in grants):
        raise InvalidArgument(f"a key named {name!r} exists already; revoke it first or pick another name.")
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    grants.append(Grant(name, token, read_only, digest(key)))
    _write(path, grants)
    return key


def revoke(path: Path, name: str) -> None:
    grants = _load(path)
    kept = [g for g in grants if g.name != name]
    if len(kept) == len(grants):
        raise InvalidArgument(f"no key named {name!r}; memvault keys list shows the names.")
    _write(path, kept)


def _write(path: Path, grants: list[Grant]) -> None:
    atomic_write(path, render(grants).encode("utf-8"))
    os.chmod(path, 0o600)  # hashes only, but nobody else needs to read them


def listing(path: Path) -> list[str]:
    return [f"{g.name}\t{g.token}\t{'read-only' if g.read_only else 'read-write'}" for g in _load(path)]


def command(path: Path, action: str, name: str | None, token: str | None, *, read_only: bool) -> int:
    """`memvault keys add|list|revoke`: prints what it did; the exit status."""
    try:
        if action == "list":
            for line in listing(path):
                print(line)
            return 0
        if not name:
            print(f"memvault: keys {action} needs the key's name.", file=sys.stderr)
            return 2
        if action == "revoke":
            revoke(path, name)
            print(f"Revoked {name}.")
            return 0
        if not token:
            print("memvault: keys add needs --token, the vault the key opens.", file=sys.stderr)
            return 2
        key = add(path, name, token, read_only=read_only)
    except InvalidArgument as exc:
        print(f"memvault: {exc}", file=sys.stderr)
        return 2
    scope = "read-only" if read_only else "read-write"
    print(f"{key}\n(the {scope} key {name!r} for vault {token!r}; shown only now, keep it secret)")
    return 0
