"""Session summaries and the graph in the vault's files: written with every change, read into the sidecar.

The files are canonical (``graph.jsonl`` and ``sessions/`` in a token folder, see
memvault.records.summaryfiles); the sidecar's tables are a copy for queries. A write changes the files
inside the sidecar transaction that changes the copy, before it commits: a crash between the two
leaves the files newer, and the next sync takes them. ``sync`` compares each file's stat with the
one recorded when the copy was made and reloads what differs: a git pull, a restored backup, a
clone without ``.memvault/``, a person's edit. A file with lines git left (conflict markers) or
that do not parse is served as far as it reads and refused for writes until a person fixes it.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from operator import itemgetter
from pathlib import Path

from memvault.clock import format_time
from memvault.disk import safe
from memvault.disk.files import NotRegularFile, atomic_write, file_change
from memvault.disk.names import GRAPH_FILE, SESSIONS_DIR
from memvault.errors import FileConflict, InvalidArgument, LinkedFile, LinkedFolder, MemvaultError
from memvault.records.graphfile import compose, entity_line, parse, relation_line
from memvault.records.graphsearch import Entity, Relation
from memvault.records.sidecar import Sidecar
from memvault.records.summaries import insert_stored, stored_rows
from memvault.records.summaryfiles import (
    HISTORY_SUFFIX,
    SessionOnDisk,
    Stored,
    TextBuilder,
    Version,
    append_lines,
    check_folder,
    file_stem,
    history_line,
    last_history_version,
    paths,
    read,
    stem_of,
    stored_as,
    whole,
    write_markdown,
)

GRAPH_SHAPE = "graph_shape"  # sidecar state key: whether graph.jsonl starts with a BOM, ends with a newline
SYNCED = "canonical_files"  # sidecar state key: set once sidecar-only data was written out to files


def has_files(folder: Path) -> bool:
    """True when the token folder holds session or graph files (a clone, a restore)."""
    return (folder / GRAPH_FILE).is_file() or (folder / SESSIONS_DIR).is_dir()


def scan(folder: Path) -> dict[str, str]:
    """Each session or graph file (path relative to the token folder) and its stat signature."""
    found: dict[str, str] = {}
    graph = scan_one(folder, GRAPH_FILE)
    if graph is not None:
        found[GRAPH_FILE] = graph
    sessions = os.path.join(folder, SESSIONS_DIR)
    if os.path.isdir(sessions) and not os.path.islink(sessions):
        try:
            entries = list(os.scandir(sessions))
        except OSError:
            entries = []
        for entry in entries:  # os.scandir: a thousand sessions are a few milliseconds
            if stem_of(entry.name) is None:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                found[f"{SESSIONS_DIR}/{entry.name}"] = _signature(st)
    return found


def _signature(st: os.stat_result) -> str:
    return f"{st.st_size}:{st.st_mtime_ns}:{file_change(st)}"


def _mtime_ts(path: Path) -> str:
    try:
        return format_time(datetime.fromtimestamp(path.stat().st_mtime, UTC))
    except OSError:
        return format_time(datetime.now(UTC))


# ---------------------------------------------------------------------------- files -> sidecar


def sync(sidecar: Sidecar, folder: Path) -> None:
    """Bring the sidecar's sessions and graph in line with the files (cheap when nothing changed)."""
    current = scan(folder)
    # The signatures last found in line (Sidecar.files_in_line, kept with the open sidecar: a
    # module-level map by sidecar path kept an entry for every token ever served). A write or a
    # change by another process changes some file's signature, so a stale entry only costs one
    # look at SQLite.
    if sidecar.files_in_line == current:
        return  # as this process last saw them in line: no need to ask SQLite
    with sidecar.snapshot() as conn:
        stored = dict(conn.execute("SELECT path, sig FROM canonical_files").fetchall())
        done = conn.execute("SELECT 1 FROM state WHERE key = ?", (SYNCED,)).fetchone() is not None
    if done and stored == current:
        sidecar.files_in_line = current
        return
    sidecar.files_in_line = None
    with sidecar.transaction() as conn:
        done = conn.execute("SELECT 1 FROM state WHERE key = ?", (SYNCED,)).fetchone() is not None
        if not done:
            _write_out(conn, folder)
            conn.execute("INSERT OR REPLACE INTO state (key, value) VALUES (?, '1')", (SYNCED,))
        current = scan(folder)
        rows = conn.execute("SELECT path, sig, session_id FROM canonical_files").fetchall()
        stored = {path: sig for path, sig, _ in rows}
        owners = {path: sid for path, _, sid in rows}
        changed = {p for p in set(current) | set(stored) if current.get(p) != stored.get(p)}
        if not changed:
            return
        if GRAPH_FILE in changed:
            conflicted = _load_graph(conn, folder)
            _record(conn, folder, GRAPH_FILE, None, conflicted)
        stems = {stem_of(p.split("/", 1)[1]) for p in changed if p.startswith(f"{SESSIONS_DIR}/")}
        for stem in sorted(s for s in stems if s is not None):
            _load_session(conn, folder, stem, owners)


def _record(
    conn: sqlite3.Connection, folder: Path, rel: str, session_id: str | None, conflicted: bool
) -> None:
    sig = scan_one(folder, rel)
    if sig is None:
        conn.execute("DELETE FROM canonical_files WHERE path = ?", (rel,))
    else:
        conn.execute(
            "INSERT OR REPLACE INTO canonical_files (path, sig, session_id, conflicted) VALUES (?, ?, ?, ?)",
            (rel, sig, session_id, int(conflicted)),
        )


def scan_one(folder: Path, rel: str) -> str | None:
    """A regular file's stat signature (size, mtime, ctime and inode); None for anything else."""
    try:
        st = (folder / rel).lstat()
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return _signature(st)


def _load_session(conn: sqlite3.Connection, folder: Path, stem: str, owners: dict[str, str | None]) -> None:
    """Replace a session's rows with what its files hold. A version only the markdown file shows (a
    person's edit) goes into the history at once, and a markdown file older than the history is
    written again, so that a clone taken now holds what the server serves."""
    md_rel, history_rel = f"{SESSIONS_DIR}/{stem}.md", f"{SESSIONS_DIR}/{stem}{HISTORY_SUFFIX}"
    md, history = folder / md_rel, folder / history_rel
    files = read(md, history, mtime_ts=_mtime_ts(md), stem=stem)
    for sid in {owners.get(md_rel), owners.get(history_rel), files.session_id} - {None}:
        if sid is not None and file_stem(sid) == stem:  # never another session's rows
            conn.execute("DELETE FROM session_versions WHERE session_id = ?", (sid,))
    insert_stored(conn, files.versions, replace=True)
    if files.session_id is not None and not files.conflicted:
        _catch_up(folder, files, md, history)
    for rel in (md_rel, history_rel):
        _record(conn, folder, rel, files.session_id, files.conflicted)


def _catch_up(folder: Path, files: SessionOnDisk, md: Path, history: Path) -> None:
    lines = [history_line(row) for row in files.unrecorded]
    if files.retitled:
        lines.append(history_line(files.versions[-1], meta=True))
    if (not lines and not files.stale) or files.latest is None:
        return
    try:
        check_folder(folder)
        append_lines(history, lines)
        if files.unrecorded or files.stale:
            write_markdown(md, files.latest, files.versions[0].ts)
    except (OSError, InvalidArgument):
        pass  # served as the files read; the next write of this session tries again


def _load_graph(conn: sqlite3.Connection, folder: Path) -> bool:
    """Replace the graph tables with graph.jsonl (memvault.records.graphfile); returns whether git
    left conflict markers in it. Entities whose line did not change keep their times; new or
    changed ones take the file's."""
    path = folder / GRAPH_FILE
    when = _mtime_ts(path)
    text = parse(read_graph_text(path))
    before = {
        name: (line, created, updated)
        for name, line, created, updated in conn.execute("SELECT name, line, created, updated FROM entities")
    }
    conn.execute("DELETE FROM observations")
    conn.execute("DELETE FROM relations")
    conn.execute("DELETE FROM entities")
    conn.execute("DELETE FROM graph_kept")
    entity_ids: list[int] = []
    for entity, line in text.entities:
        old_line, created, updated = before.get(entity.name, (None, when, when))
        if old_line != line:
            updated = max(when, updated) if entity.name in before else when
        cur = conn.execute(
            "INSERT INTO entities (name, entity_type, created, updated, line) VALUES (?, ?, ?, ?, ?)",
            (entity.name, entity.entity_type, created, updated, line),
        )
        entity_ids.append(int(cur.lastrowid or 0))
        conn.executemany(
            "INSERT INTO observations (entity, position, text) VALUES (?, ?, ?)",
            [(entity.name, i, o) for i, o in enumerate(entity.observations)],
        )
    relation_ids: list[int] = []
    for relation, line in text.relations:
        cur = conn.execute(
            "INSERT INTO relations (from_entity, to_entity, relation_type, line) VALUES (?, ?, ?, ?)",
            (relation.source, relation.target, relation.relation_type, line),
        )
        relation_ids.append(int(cur.lastrowid or 0))
    ids = {"entity": entity_ids, "relation": relation_ids}
    conn.executemany(
        "INSERT INTO graph_kept (after_kind, after_id, line, why) VALUES (?, ?, ?, ?)",
        [
            (k.after[0], ids[k.after[0]][k.after[1]] if k.after[0] in ids else 0, _storable(k.line), k.why)
            for k in text.kept
        ],
    )
    shape = json.dumps({"bom": text.bom, "final_newline": text.final_newline})
    conn.execute("INSERT OR REPLACE INTO state (key, value) VALUES (?, ?)", (GRAPH_SHAPE, shape))
    return text.conflicted


def read_graph_text(path: Path) -> str:
    """graph.jsonl's text, its bytes that are not UTF-8 kept as they are (surrogate escapes), so a
    line holding them is kept and written back byte for byte; "" when it is missing or a link."""
    try:
        raw, _ = safe.read_file(path, path.parent)  # nor through a linked token folder
    except (OSError, NotRegularFile):
        return ""
    return raw.decode("utf-8", "surrogateescape")


def _storable(line: str) -> str | bytes:
    """A kept line as SQLite can hold it: its bytes when it holds some that are not UTF-8."""
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        return line.encode("utf-8", "surrogateescape")
    return line


def problems(folder: Path) -> Iterator[tuple[str, str]]:
    """(path, problem) of each session or graph file a person has to fix (memvault check)."""
    graph = parse(read_graph_text(folder / GRAPH_FILE))
    if graph.conflicted:
        yield GRAPH_FILE, "holds git conflict markers; resolve them, then commit"
    for kept in graph.kept:
        yield (
            GRAPH_FILE,
            (
                f"line {kept.number} is {kept.why}: memvault serves no entity or relation from it and "
                "keeps it as it is; fix or remove it by hand"
            ),
        )
    stems = sorted({s for rel in scan(folder) if (s := stem_of(rel.split("/", 1)[-1])) and "/" in rel})
    for stem in stems:
        md = folder / SESSIONS_DIR / f"{stem}.md"
        history = folder / SESSIONS_DIR / f"{stem}{HISTORY_SUFFIX}"
        files = read(md, history, mtime_ts=_mtime_ts(md), stem=stem)
        rel = f"{SESSIONS_DIR}/{stem}{HISTORY_SUFFIX}" if history.exists() else f"{SESSIONS_DIR}/{stem}.md"
        if files.foreign is not None:
            yield (
                rel,
                (
                    f"names session {files.foreign!r}, whose files have another name: a copy? memvault "
                    "takes it for no session; delete it, or give it a sessionId of its own"
                ),
            )
        elif files.conflicted:
            yield rel, "holds git conflict markers or damaged lines; resolve them, then commit"
        elif files.session_id is None:
            yield rel, f"is not a session summary; '{SESSIONS_DIR}/' is reserved for them, move it out"


def graph_text(conn: sqlite3.Connection) -> str:
    """graph.jsonl's text from the tables: each entry's line, in creation order, and the kept lines."""
    row = conn.execute("SELECT value FROM state WHERE key = ?", (GRAPH_SHAPE,)).fetchone()
    shape = json.loads(row[0]) if row is not None else {}
    kept = [
        (kind, after, line if isinstance(line, str) else bytes(line).decode("utf-8", "surrogateescape"))
        for kind, after, line in conn.execute(
            "SELECT after_kind, after_id, line FROM graph_kept ORDER BY seq"
        )
    ]
    whole = conn.execute(
        "SELECT NOT EXISTS (SELECT 1 FROM entities WHERE line IS NULL) "
        "AND NOT EXISTS (SELECT 1 FROM relations WHERE line IS NULL)"
    ).fetchone()[0]
    if not kept and whole:  # every entry has its line, nothing kept between them: the lines alone
        first = itemgetter(0)
        lines = list(map(first, conn.execute("SELECT line FROM entities ORDER BY rowid").fetchall()))
        lines += map(first, conn.execute("SELECT line FROM relations ORDER BY rowid").fetchall())
        return compose(
            [],
            [],
            [],
            lines=lines,
            bom=bool(shape.get("bom")),
            final_newline=shape.get("final_newline", True),
        )
    entities = conn.execute("SELECT rowid, line, name, entity_type FROM entities ORDER BY rowid").fetchall()
    relations = conn.execute(
        "SELECT rowid, line, from_entity, to_entity, relation_type FROM relations ORDER BY rowid"
    ).fetchall()
    return compose(
        [
            (rowid, line if line is not None else _render(conn, name, kind))
            for rowid, line, name, kind in entities
        ],
        [
            (rowid, line if line is not None else relation_line(Relation(a, b, kind)))
            for rowid, line, a, b, kind in relations
        ],
        kept,
        bom=bool(shape.get("bom")),
        final_newline=bool(shape.get("final_newline", True)),
    )


def _render(conn: sqlite3.Connection, name: str, kind: str) -> str:
    """The line of an entity an older sidecar holds without one."""
    rows = conn.execute("SELECT text FROM observations WHERE entity = ? ORDER BY position", (name,))
    return entity_line(Entity(name, kind, tuple(text for (text,) in rows)))


def _conflicted(conn: sqlite3.Connection, rels: Iterable[str]) -> str | None:
    for rel in rels:
        row = conn.execute("SELECT conflicted FROM canonical_files WHERE path = ?", (rel,)).fetchone()
        if row is not None and row[0]:
            return rel
    return None


def conflicted_file(sidecar: Sidecar, folder: Path, session_id: str) -> str | None:
    """The session's file that holds conflict markers or damage, if one does (for read replies)."""
    md, history = paths(folder, session_id)
    with sidecar.snapshot() as conn:
        return _conflicted(conn, [_rel(folder, history), _rel(folder, md)])


class GraphFile:
    """Keeps a token's graph.jsonl in step with the graph tables (KnowledgeGraph's ``files``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def check(self, conn: sqlite3.Connection) -> None:
        bad = _conflicted(conn, [GRAPH_FILE])
        if bad is not None:
            raise FileConflict(bad)

    def written(self, conn: sqlite3.Connection, appended: Sequence[tuple[str, str]] = ()) -> None:
        """After the tables changed: the file again. ``appended``: the change was only these new
        (kind, line) entries, each the last of its kind; when that is also their place in the
        file (no relation follows a new entity, no kept line is placed after the last entry),
        they are appended (one fsync, the rest of the file untouched), else the file is rewritten."""
        path = self.folder / GRAPH_FILE
        if not (appended and _append_graph(conn, path, appended)):
            atomic_write(path, graph_text(conn).encode("utf-8", "surrogateescape"))
        _record(conn, self.folder, GRAPH_FILE, None, False)


def _append_graph(conn: sqlite3.Connection, path: Path, appended: Sequence[tuple[str, str]]) -> bool:
    if conn.execute("SELECT 1 FROM graph_kept LIMIT 1").fetchone() is not None:
        return False
    if any(kind == "entity" for kind, _ in appended) and (
        conn.execute("SELECT 1 FROM relations LIMIT 1").fetchone() is not None
    ):
        return False  # a new entity goes before the relations, as the official server puts it
    row = conn.execute("SELECT value FROM state WHERE key = ?", (GRAPH_SHAPE,)).fetchone()
    final_newline = bool(json.loads(row[0]).get("final_newline", True)) if row is not None else True
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW)
    except OSError:
        return False  # no file yet (or not one to append to): written whole
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return False
        lines = "\n".join(line for _, line in appended)
        ends_open = os.pread(fd, 1, size - 1) != b"\n"
        text = ("\n" if ends_open else "") + lines + ("\n" if final_newline else "")
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return True


class SessionFiles:
    """Keeps a token's session files in step with the session tables (SessionSummaries' ``files``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def linked(self, session_id: str) -> MemvaultError | None:
        """LinkedFile (LinkedFolder) when a file of the session, sessions/ or the token folder is a
        link, which is never read through: a session missing for that reason is not "unknown"."""
        for path in (*paths(self.folder, session_id), self.folder / SESSIONS_DIR, self.folder):
            if os.path.islink(path):
                return LinkedFolder() if path == self.folder else LinkedFile(_rel(self.folder, path))
        return None

    def check(self, conn: sqlite3.Connection, session_id: str) -> None:
        md, history = paths(self.folder, session_id)
        bad = _conflicted(conn, [_rel(self.folder, history), _rel(self.folder, md)])
        if bad is not None:
            raise FileConflict(bad)

    def written(self, conn: sqlite3.Connection, new: Stored, latest: Version, *, meta: bool = False) -> None:
        """After ``new`` went into the tables: its history line (and any version the history
        lacks, such as one an older sidecar holds alone), then the markdown file."""
        check_folder(self.folder)
        md, history = paths(self.folder, new.session_id)
        last = last_history_version(history)
        lines = [
            history_line(row)
            for row in stored_rows(conn, new.session_id, last + 1, new.version - (0 if meta else 1))
        ]
        if not meta:
            lines.append(history_line(new))
        elif last >= new.version:
            lines.append(history_line(new, meta=True))
        append_lines(history, lines)
        write_markdown(md, latest, _created(conn, new.session_id) or latest.ts)
        for path in (md, history):
            _record(conn, self.folder, _rel(self.folder, path), new.session_id, False)

    def rewrite(self, conn: sqlite3.Connection, session_id: str) -> None:
        """Write a session's files whole from the tables (an import, or an older sidecar's sessions)."""
        rows = stored_rows(conn, session_id)
        if not rows:
            return
        check_folder(self.folder)
        md, history = paths(self.folder, session_id)
        lines: list[str] = []
        builder, previous = TextBuilder(), None
        for row in rows:
            builder.apply(row)
            text = builder.text()
            if not row.delta:  # stored whole: written as an append when it is one
                row = stored_as(whole(row, text), previous)
            lines.append(history_line(row))
            previous = text
        atomic_write(history, "".join(line + "\n" for line in lines).encode("utf-8"))
        write_markdown(md, whole(rows[-1], previous or ""), rows[0].ts)
        for path in (md, history):
            _record(conn, self.folder, _rel(self.folder, path), session_id, False)


def _created(conn: sqlite3.Connection, session_id: str) -> str | None:
    row = conn.execute(
        "SELECT ts FROM session_versions WHERE session_id = ? ORDER BY version LIMIT 1", (session_id,)
    ).fetchone()
    return None if row is None else str(row[0])


def _rel(folder: Path, path: Path) -> str:
    return path.relative_to(folder).as_posix()


def _write_out(conn: sqlite3.Connection, folder: Path) -> None:
    """Once per sidecar: sessions and a graph an older memvault kept only in the sidecar go to files
    (files already there win: they are what a clone or a pull brought)."""
    writer = SessionFiles(folder)
    for (sid,) in conn.execute("SELECT DISTINCT session_id FROM session_versions").fetchall():
        md, history = paths(folder, sid)
        if not history.exists() and not md.exists():
            writer.rewrite(conn, sid)
    has_graph = conn.execute("SELECT 1 FROM entities LIMIT 1").fetchone() is not None
    if has_graph and not (folder / GRAPH_FILE).exists():
        GraphFile(folder).written(conn)
