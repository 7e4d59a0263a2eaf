"""Session summaries: an agent's running record of a conversation; every change is a new version."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from memvault.clock import Clock, format_time, require_time, utcnow
from memvault.disk.markdown import clean_tags
from memvault.errors import InvalidArgument, MemvaultError, TooLarge, UnknownSession, quote
from memvault.records.sidecar import Sidecar, SidecarRecords
from memvault.records.summaryfiles import APPEND_SEPARATOR, Stored, TextBuilder, Version, stored_as, whole

__all__ = [
    "APPEND_SEPARATOR",
    "CanonicalFiles",
    "Head",
    "Page",
    "SessionInfo",
    "SessionSummaries",
    "SessionsImported",
    "Stored",
    "Version",
]

MAX_SESSION_ID_CHARS = 200
MAX_TITLE_CHARS = 200
# What one session may cost: its versions, and the characters its history stores, as a multiple of
# the largest text one call may send (each version keeps what it added, so this is what it holds).
MAX_SESSION_VERSIONS = 10_000
HISTORY_CHARS_PER_CONTENT = 50
SORT_KEYS = ("lastUpdated", "title")
ORDERS = ("asc", "desc")
DEFAULT_LIMIT = 20
MAX_LIMIT = 200

_COLUMNS = "session_id, version, ts, title, tags, summary"
_STORED = "session_id, version, ts, title, tags, summary, delta, coalesce(chars, length(summary))"


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """A session as list_summaries shows it: its latest version's metadata and how many versions."""

    session_id: str
    title: str | None
    tags: tuple[str, ...]
    last_updated: str
    versions: int
    chars: int


@dataclass(frozen=True, slots=True)
class Head:
    """A version without its text: what get_session_history lists."""

    version: int
    ts: str
    title: str | None
    tags: tuple[str, ...]
    chars: int


@dataclass(frozen=True, slots=True)
class Page:
    sessions: list[SessionInfo]
    total: int  # sessions matching the tag filter, before offset/limit
    offset: int


@dataclass(frozen=True, slots=True)
class SessionsImported:
    added: int
    unchanged: int
    conflicts: int  # same (session, version) already holds different content; the existing one is kept


# ---------------------------------------------------------------------------- checks


def check_session_id(session_id: str) -> str:
    if not isinstance(session_id, str) or not session_id.strip():
        raise InvalidArgument("sessionId is empty; pass the id you chose for this conversation.")
    if len(session_id) > MAX_SESSION_ID_CHARS:
        raise InvalidArgument(f"sessionId is longer than {MAX_SESSION_ID_CHARS} characters; use a short id.")
    if any(ch in session_id for ch in "\r\n\x00"):
        raise InvalidArgument("sessionId must be one line; use a short id such as '2026-02-10-deploy'.")
    return session_id


def check_title(title: str | None) -> str | None:
    """None keeps the current title; an empty string clears it."""
    if title is None:
        return None
    title = title.strip()
    if "\n" in title or "\r" in title:
        raise InvalidArgument("title must be one line.")
    if len(title) > MAX_TITLE_CHARS:
        raise InvalidArgument(f"title is longer than {MAX_TITLE_CHARS} characters; shorten it.")
    return title


def _check_text(text: str, what: str, limit: int) -> str:
    if not isinstance(text, str) or not text.strip():
        raise InvalidArgument(f"{what} is empty; say what happened in the session.")
    if len(text) > limit:
        raise InvalidArgument(
            f"{what} is {len(text):,} characters; the limit is {limit:,}. Shorten it, or keep the "
            "details in memories (write_memory) and only a summary here."
        )
    return text.strip()


# ---------------------------------------------------------------------------- rows


def _stored(row: Sequence[Any]) -> Stored:
    session_id, version, ts, title, tags, text, delta, chars = row
    return Stored(session_id, int(version), ts, title, tuple(json.loads(tags)), text, bool(delta), int(chars))


def stored_rows(conn: sqlite3.Connection, session_id: str, first: int = 0, last: int = 2**62) -> list[Stored]:
    """The session's stored versions from ``first`` to ``last``, oldest first."""
    rows = conn.execute(
        f"SELECT {_STORED} FROM session_versions WHERE session_id = ? AND version BETWEEN ? AND ? "
        "ORDER BY version",
        (session_id, first, last),
    ).fetchall()
    return [_stored(row) for row in rows]


def _base(conn: sqlite3.Connection, session_id: str, version: int) -> int:
    """The newest version at or before ``version`` stored whole: its text starts the build."""
    row = conn.execute(
        "SELECT max(version) FROM session_versions WHERE session_id = ? AND version <= ? AND delta = 0",
        (session_id, version),
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else 1


def _at(conn: sqlite3.Connection, session_id: str, version: int) -> Version | None:
    """One version with its whole text, built from the rows since the last whole one."""
    rows = stored_rows(conn, session_id, _base(conn, session_id, version), version)
    if not rows or rows[-1].version != version:
        return None
    builder = TextBuilder()
    for row in rows:
        builder.apply(row)
    return whole(rows[-1], builder.text())


def _latest(conn: sqlite3.Connection, session_id: str) -> Version | None:
    row = conn.execute(
        "SELECT max(version) FROM session_versions WHERE session_id = ?", (session_id,)
    ).fetchone()
    return None if row is None or row[0] is None else _at(conn, session_id, int(row[0]))


def insert_stored(conn: sqlite3.Connection, rows: Iterable[Stored], *, replace: bool = False) -> None:
    verb = "INSERT OR REPLACE" if replace else "INSERT"
    conn.executemany(
        f"{verb} INTO session_versions ({_COLUMNS}, delta, chars) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (r.session_id, r.version, r.ts, r.title, _tags_json(r.tags), r.text, int(r.delta), r.chars)
            for r in rows
        ],
    )


def _tags_json(tags: Sequence[str]) -> str:
    return json.dumps(list(tags), ensure_ascii=False)


class CanonicalFiles(Protocol):
    """Where sessions are canonical (memvault.records.sync.SessionFiles): checked before, written after."""

    def check(self, conn: sqlite3.Connection, session_id: str) -> None: ...

    def written(
        self, conn: sqlite3.Connection, new: Stored, latest: Version, *, meta: bool = False
    ) -> None: ...

    def linked(self, session_id: str) -> MemvaultError | None: ...


class SessionSummaries(SidecarRecords):
    """One token's session summaries, queried in its sidecar; with ``files`` every change also goes
    to the session's files (memvault.records.sync), which are canonical. Thread-safe (the sidecar
    serialises)."""

    def __init__(
        self,
        sidecar: Sidecar | Callable[[], Sidecar],
        *,
        max_chars: int,
        clock: Clock = utcnow,
        files: CanonicalFiles | None = None,
    ) -> None:
        super().__init__(sidecar, max_chars=max_chars, clock=clock)
        self.files = files

    # ------------------------------------------------------------------ writing

    def upsert(
        self, session_id: str, summary: str, *, title: str | None = None, tags: Sequence[str] | None = None
    ) -> Version:
        """Save ``summary`` as the session's new latest version (creating the session if new)."""
        session_id = check_session_id(session_id)
        text = _check_text(summary, "summary", self.max_chars)
        return self._save(session_id, lambda _latest: text, title, tags)

    def append(
        self, session_id: str, content: str, *, title: str | None = None, tags: Sequence[str] | None = None
    ) -> Version:
        """A new version: the latest text, a blank line, then ``content`` (creates the session if new)."""
        session_id = check_session_id(session_id)
        addition = _check_text(content, "content", self.max_chars)

        def combine(latest: Version | None) -> str:
            if latest is None:
                return addition
            text = latest.summary.rstrip() + APPEND_SEPARATOR + addition
            if len(text) > self.max_chars:
                raise InvalidArgument(
                    f"appending would make the summary {len(text):,} characters; the limit is "
                    f"{self.max_chars:,}. Condense it with upsert_summary, then append again."
                )
            return text

        return self._save(session_id, combine, title, tags)

    def _save(
        self,
        session_id: str,
        text_for: Callable[[Version | None], str],
        title: str | None,
        tags: Sequence[str] | None,
    ) -> Version:
        title = check_title(title)
        tag_tuple = None if tags is None else clean_tags(tags)
        now = format_time(self.clock())
        history_limit = self.max_chars * HISTORY_CHARS_PER_CONTENT
        # Read-latest-then-insert in one BEGIN IMMEDIATE transaction: two appends, even from two
        # processes, cannot both build on the same latest version.
        with self.sidecar.transaction() as conn:
            if self.files is not None:
                self.files.check(conn, session_id)
            latest = _latest(conn, session_id)
            text = text_for(latest)
            if latest is not None:
                now = max(now, latest.ts)  # history stays in time order even if the clock steps back
            new = Version(
                session_id=session_id,
                version=1 if latest is None else latest.version + 1,
                ts=now,
                title=(title or None) if title is not None else (latest.title if latest else None),
                tags=tag_tuple if tag_tuple is not None else (latest.tags if latest else ()),
                summary=text,
            )
            row = stored_as(new, latest.summary if latest else None)
            count, held = conn.execute(
                "SELECT count(*), coalesce(sum(length(summary)), 0) FROM session_versions "
                "WHERE session_id = ?",
                (session_id,),
            ).fetchone()
            if count >= MAX_SESSION_VERSIONS:
                raise InvalidArgument(
                    f"Session {quote(session_id)} holds {count:,} versions, the most one session keeps; "
                    "nothing was saved. Continue in a new session: upsert_summary with a new sessionId "
                    "(for example the same id with '-2') and a condensed summary of this one."
                )
            if held + len(row.text) > history_limit:
                raise TooLarge(
                    f"Session {quote(session_id)}'s history",
                    held + len(row.text),
                    history_limit,
                    "Nothing was saved. Continue in a new session: upsert_summary with a new sessionId "
                    "(for example the same id with '-2') and a condensed summary of this one.",
                )
            insert_stored(conn, [row])
            if self.files is not None:
                self.files.written(conn, row, new)  # the file first: it commits before the copy does
        return new

    def update_metadata(
        self, session_id: str, *, title: str | None = None, tags: Sequence[str] | None = None
    ) -> Version:
        """Change title and/or tags of the latest version in place: no new version, same timestamp."""
        session_id = check_session_id(session_id)
        if title is None and tags is None:
            raise InvalidArgument("Nothing to change: give title, tags, or both.")
        title = check_title(title)
        tag_tuple = None if tags is None else clean_tags(tags)
        with self.sidecar.transaction() as conn:
            if self.files is not None:
                self.files.check(conn, session_id)
            latest = _latest(conn, session_id)
            if latest is None:
                raise self.unknown(session_id)
            new_title = (title or None) if title is not None else latest.title
            new_tags = tag_tuple if tag_tuple is not None else latest.tags
            conn.execute(
                "UPDATE session_versions SET title = ?, tags = ? WHERE session_id = ? AND version = ?",
                (new_title, _tags_json(new_tags), session_id, latest.version),
            )
            updated = Version(session_id, latest.version, latest.ts, new_title, new_tags, latest.summary)
            if self.files is not None:
                self.files.written(conn, stored_as(updated, None), updated, meta=True)
        return updated

    # ------------------------------------------------------------------ reading

    def unknown(self, session_id: str) -> MemvaultError:
        """No such session; or, when its file is a link never read through, that (LinkedFile)."""
        linked = self.files.linked(session_id) if self.files is not None else None
        return linked or UnknownSession(session_id)

    def latest(self, session_id: str) -> tuple[Version, int]:
        """The latest version and how many versions the session has (its number, when none is missing)."""
        session_id = check_session_id(session_id)
        with self.sidecar.snapshot() as conn:
            latest = _latest(conn, session_id)
            if latest is None:
                raise self.unknown(session_id)
            count = conn.execute(
                "SELECT count(*) FROM session_versions WHERE session_id = ?", (session_id,)
            ).fetchone()[0]
        return latest, int(count)

    def version(self, session_id: str, number: int) -> Version | None:
        """One version with its whole text; None when the session has no such version."""
        session_id = check_session_id(session_id)
        with self.sidecar.snapshot() as conn:
            found = _at(conn, session_id, number)
            if (
                found is None
                and conn.execute(
                    "SELECT 1 FROM session_versions WHERE session_id = ? LIMIT 1", (session_id,)
                ).fetchone()
                is None
            ):
                raise self.unknown(session_id)
        return found

    def heads(self, session_id: str) -> list[Head]:
        """Every version without its text, newest first."""
        session_id = check_session_id(session_id)
        with self.sidecar.snapshot() as conn:
            rows = conn.execute(
                "SELECT version, ts, title, tags, coalesce(chars, length(summary)) FROM session_versions "
                "WHERE session_id = ? ORDER BY version DESC",
                (session_id,),
            ).fetchall()
        if not rows:
            raise self.unknown(session_id)
        return [
            Head(int(n), ts, title, tuple(json.loads(tags)), int(chars)) for n, ts, title, tags, chars in rows
        ]

    def texts(self, session_id: str, numbers: Iterable[int]) -> dict[int, str]:
        """The whole texts of the given versions, built in one pass from the oldest one's base."""
        wanted = set(numbers)
        if not wanted:
            return {}
        session_id = check_session_id(session_id)
        with self.sidecar.snapshot() as conn:
            rows = stored_rows(conn, session_id, _base(conn, session_id, min(wanted)), max(wanted))
        builder, found = TextBuilder(), {}
        for row in rows:
            builder.apply(row)
            if row.version in wanted:
                found[row.version] = builder.text()
        return found

    def history(self, session_id: str) -> list[Version]:
        """Every version with its whole text, newest first (each text is built, so this costs the
        sum of every version's length: the tools list heads() and build only what they show)."""
        heads = self.heads(session_id)
        texts = self.texts(session_id, [h.version for h in heads])
        return [
            Version(session_id, h.version, h.ts, h.title, h.tags, texts[h.version])
            for h in heads
            if h.version in texts
        ]

    def listing(
        self,
        *,
        tag: str | None = None,
        limit: int | None = None,
        offset: int | None = None,
        sort_by: str | None = None,
        order: str | None = None,
    ) -> Page:
        """The latest version of each session, filtered by tag (case-insensitive), sorted and paged."""
        return list_sessions(self.infos(), tag=tag, limit=limit, offset=offset, sort_by=sort_by, order=order)

    def infos(self) -> list[SessionInfo]:
        """Every session's latest version, unsorted."""
        with self.sidecar.snapshot() as conn:
            rows = conn.execute(
                "SELECT s.session_id, s.title, s.tags, s.ts, c.n, coalesce(s.chars, length(s.summary)) "
                "FROM session_versions AS s JOIN ("
                "  SELECT session_id, max(version) AS v, count(*) AS n"
                "  FROM session_versions GROUP BY session_id"
                ") AS c ON s.session_id = c.session_id AND s.version = c.v"
            ).fetchall()
        return [
            SessionInfo(sid, title, tuple(json.loads(tags)), ts, int(n), int(chars))
            for sid, title, tags, ts, n, chars in rows
        ]

    # ------------------------------------------------------------------ export / import

    def export_rows(self) -> list[dict[str, Any]]:
        """Every version as a plain dict, sorted by session id and version (for JSON lines)."""
        with self.sidecar.snapshot() as conn:
            stored = [
                _stored(row)
                for row in conn.execute(
                    f"SELECT {_STORED} FROM session_versions ORDER BY session_id, version"
                )
            ]
        rows: list[Version] = []
        builder, current = TextBuilder(), None
        for row in stored:
            if row.session_id != current:
                builder, current = TextBuilder(), row.session_id
            builder.apply(row)
            rows.append(whole(row, builder.text()))
        return [
            {
                "kind": "session",
                "sessionId": v.session_id,
                "version": v.version,
                "ts": v.ts,
                "title": v.title,
                "tags": list(v.tags),
                "summary": v.summary,
            }
            for v in rows
        ]

    def parse_rows(self, rows: Iterable[Mapping[str, Any]]) -> list[Version]:
        """Exported rows checked as the tools check their arguments; raises InvalidArgument."""
        return [_version_from_row(row, self.max_chars) for row in rows]

    def import_rows(self, rows: Iterable[Mapping[str, Any]]) -> SessionsImported:
        """Load exported versions; a version already present is left alone, so importing twice is a no-op."""
        versions = self.parse_rows(rows)
        with self.sidecar.transaction() as conn:
            return self.import_into(conn, versions)

    @staticmethod
    def import_into(conn: sqlite3.Connection, versions: Iterable[Version]) -> SessionsImported:
        """Insert checked versions inside the caller's transaction (all of an import, or nothing)."""
        added = unchanged = conflicts = 0
        for v in versions:
            exists = conn.execute(
                "SELECT 1 FROM session_versions WHERE session_id = ? AND version = ?",
                (v.session_id, v.version),
            ).fetchone()
            if exists is None:
                insert_stored(conn, [stored_as(v, None)])
                added += 1
            elif _at(conn, v.session_id, v.version) == v:
                unchanged += 1
            else:
                conflicts += 1
        return SessionsImported(added, unchanged, conflicts)


def _version_from_row(row: Mapping[str, Any], max_chars: int) -> Version:
    try:
        session_id = row["sessionId"]
        if not isinstance(session_id, str):
            raise InvalidArgument("sessionId must be text")
        session_id = check_session_id(session_id)
        version = row["version"]
        ts = row["ts"]
        title = row.get("title")
        tags = row.get("tags") or []
        summary = row["summary"]
        if not isinstance(version, int) or isinstance(version, bool) or not 1 <= version < 2**62:
            raise InvalidArgument("version must be a whole number from 1")
        if not isinstance(ts, str):
            raise InvalidArgument("ts must be a time")
        ts = format_time(require_time(ts))
        if not isinstance(summary, str) or (title is not None and not isinstance(title, str)):
            raise InvalidArgument("summary and title must be text")
        if len(summary) > max_chars:
            raise InvalidArgument(f"the summary is {len(summary):,} characters; the limit is {max_chars:,}")
        title = check_title(title)
        if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
            raise InvalidArgument("tags must be a list of text")
        return Version(session_id, version, ts, title or None, clean_tags(tags), summary)
    except (KeyError, ValueError, TypeError, OverflowError, InvalidArgument) as exc:
        reason = f"{type(exc).__name__}: {exc}" if isinstance(exc, KeyError) else str(exc)
        raise InvalidArgument(f"a session version that cannot be imported ({reason:.300})") from None


def session_ids(conn: sqlite3.Connection, prefix: str, limit: int) -> list[str]:
    """Up to ``limit`` session ids that start with ``prefix`` (ASCII letters in either case), by id."""
    pattern = prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
    rows = conn.execute(
        "SELECT DISTINCT session_id FROM session_versions WHERE session_id LIKE ? ESCAPE '\\' "
        "ORDER BY session_id LIMIT ?",
        (pattern, limit),
    )
    return [session_id for (session_id,) in rows]


def list_sessions(
    infos: Sequence[SessionInfo],
    *,
    tag: str | None = None,
    limit: int | None = None,
    offset: int | None = None,
    sort_by: str | None = None,
    order: str | None = None,
) -> Page:
    """Filter, sort and page session infos (pure; list_summaries' rules)."""
    sort_by = sort_by or "lastUpdated"
    if sort_by not in SORT_KEYS:
        raise InvalidArgument(f"sortBy must be {' or '.join(SORT_KEYS)}, not {quote(sort_by)}.")
    # Newest first is what an agent usually wants; titles read best A to Z.
    order = order or ("desc" if sort_by == "lastUpdated" else "asc")
    if order not in ORDERS:
        raise InvalidArgument(f"order must be asc or desc, not {quote(order)}.")
    limit = DEFAULT_LIMIT if limit is None else limit
    if not 1 <= limit <= MAX_LIMIT:
        raise InvalidArgument(f"limit must be between 1 and {MAX_LIMIT}.")
    offset = offset or 0
    if offset < 0:
        raise InvalidArgument("offset must be 0 or more.")
    chosen = list(infos)
    if tag is not None and tag.strip():
        wanted = tag.strip().casefold()
        chosen = [s for s in chosen if any(t.casefold() == wanted for t in s.tags)]
    chosen.sort(key=lambda s: s.session_id)
    if sort_by == "title":
        chosen.sort(key=lambda s: (s.title or s.session_id).casefold(), reverse=order == "desc")
    else:
        chosen.sort(key=lambda s: s.last_updated, reverse=order == "desc")
    return Page(chosen[offset : offset + limit], len(chosen), offset)
