"""memvault import-from: other tools' memories into a vault, idempotently, all checked before any write.

Claude Code's auto-memory files and CLAUDE.md files, and a folder of markdown notes (an Obsidian
vault, a Basic Memory project), become memories: memvault's copies, frontmatter and links kept,
with where each came from (see memvault.ops.imports); importing again brings in changed sources
with --refresh and never overwrites a copy changed since. Past Claude Code transcripts become
session summaries; the official memory server's memory.jsonl is merged into the token's graph.
Ctrl-C during an import of markdown files takes back what it wrote; during transcripts, the
sessions done stay (importing again adds only what is missing).
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import re
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memvault.cli.progress import Progress
from memvault.config import Settings
from memvault.disk.names import valid_token

KINDS = ("claude-memory", "claude-md", "transcripts", "notes", "memory-jsonl")
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
INDEX_FILES = ("MEMORY.md",)  # Claude Code's index of its memory folder: links, not a memory


class _Intermixed(argparse.ArgumentParser):
    """A parser whose options may come before, between or after its positionals
    (`import-from notes --token t --dry-run DIR`): argparse's intermixed parsing, also when it is
    reached as a subcommand."""

    _inner = False

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        if self._inner:
            return super().parse_known_args(args, namespace)
        self._inner = True
        try:
            return self.parse_known_intermixed_args(args, namespace)
        finally:
            self._inner = False


def add_parser(sub: Any, vault: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "import-from",
        parents=[vault],
        help="import Claude Code memories, CLAUDE.md files, transcripts, markdown notes or memory.jsonl",
        description="Import what other tools kept into a token's vault. claude-memory: Claude Code's "
        "auto-memory files (PATH: its projects folder, default ~/.claude/projects); claude-md: CLAUDE.md "
        "and CLAUDE.local.md files (or project folders holding them); notes: a folder of markdown notes "
        "(Obsidian, Basic Memory), frontmatter and links kept; transcripts: Claude Code session "
        "transcripts (*.jsonl) as session summaries; memory-jsonl: the official memory server's file, "
        "merged into the graph. Every source is checked before anything is written; running it twice "
        "adds nothing; --refresh brings in sources changed since, never over a copy changed since.",
    )
    parser.__class__ = _Intermixed
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("paths", nargs="*", type=Path, help="the files or folders to import")
    parser.add_argument(
        "--dry-run", action="store_true", help="list each file and what it would do; write nothing"
    )
    parser.add_argument(
        "--refresh",
        action="store_true",
        help="bring in sources changed since their import (a copy changed since is kept)",
    )
    parser.add_argument(
        "--priority",
        choices=("P0", "P1", "P2"),
        help="the priority of the memories it writes (P0: never archived by capacity or age)",
    )
    parser.add_argument(
        "--into", help="notes: the folder in the vault they go to (default: the folder's name)"
    )


def command(settings: Settings, args: argparse.Namespace) -> int:
    from memvault.ops.imports import ImportRefused

    if args.token is None or not valid_token(args.token):
        print("memvault: say which vault to import into: --token NAME.", file=sys.stderr)
        return 2
    if settings.token_dir(args.token).is_symlink():
        print(
            "memvault: the token's folder is a symbolic link; memvault never writes through one.",
            file=sys.stderr,
        )
        return 2
    try:
        with _interrupt_once():
            if args.kind in ("claude-memory", "claude-md", "notes"):
                return _notes(settings, args)
            if args.kind == "transcripts":
                return _transcripts(settings, args)
            return _graph(settings, args)
    except ImportRefused as exc:
        print(f"memvault: {exc}. Nothing was imported.", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        if args.kind == "transcripts":
            said = "the sessions imported so far stay; importing again adds the rest"
        else:
            said = "nothing was imported (what it had written was taken back)"
        print(f"memvault: interrupted; {said}.", file=sys.stderr)
        return 130


@contextlib.contextmanager
def _interrupt_once() -> Iterator[None]:
    """Ctrl-C stops the import once; a second one does not cut short the taking back of the first."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupted(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        raise KeyboardInterrupt

    before = signal.signal(signal.SIGINT, interrupted)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, before)


def _default_projects(paths: list[Path]) -> list[Path]:
    return paths or [Path.home() / ".claude" / "projects"]


def _name(text: str) -> str:
    """A path segment safe as a memory folder's name."""
    cleaned = re.sub(r"[^\w.-]+", "-", text).strip(".-")
    return cleaned[:100] or "home"


# ---------------------------------------------------------------------------- where sources come from


def _cwd_of(transcript: Path) -> str | None:
    """The working folder a Claude Code transcript names in its first lines (each read with a bound)."""
    try:
        with open(transcript, "rb") as handle:
            for _ in range(50):
                raw = handle.readline(1 << 20)
                if not raw:
                    return None
                with contextlib.suppress(ValueError, RecursionError):
                    entry = json.loads(raw)
                    if isinstance(entry, dict) and isinstance(entry.get("cwd"), str) and entry["cwd"]:
                        return str(entry["cwd"])
    except OSError:
        return None
    return None


def _decoded(encoded: str) -> str:
    """The project's folder name from Claude Code's encoding of its path (every character but
    letters and digits made "-"): the folder found on this machine by trying the dashes as "/",
    "-" or "."; else the part after the last dash."""
    parts = [part for part in encoded.split("-") if part]
    if not parts:
        return _name(encoded)

    def walk(at: Path, rest: list[str], depth: int) -> str | None:
        if not rest:
            return at.name
        if depth > 64:
            return None
        for end in range(len(rest), 0, -1):  # the longest name first: `acme-api` before `acme`
            for joiner in ("-", ".", "_"):
                name = joiner.join(rest[:end])
                candidate = at / name
                with contextlib.suppress(OSError):
                    if candidate.is_dir():
                        found = walk(candidate, rest[end:], depth + 1)
                        if found is not None:
                            return found
                if end == 1:
                    break
        return None

    with contextlib.suppress(OSError, RecursionError):
        found = walk(Path("/"), parts, 0)
        if found:
            return found
    return parts[-1]


def _project_name(project: Path) -> str:
    """The real name of a Claude Code project folder (`-tmp-nu-work-acme-api` -> `acme-api`): the
    working folder a transcript there names, else the decoded folder name."""
    with contextlib.suppress(OSError):
        for transcript in sorted(project.glob("*.jsonl"))[:5]:
            if transcript.is_file() and not transcript.is_symlink():
                cwd = _cwd_of(transcript)
                if cwd:
                    return _name(Path(cwd).name)
    return _name(_decoded(project.name))


def _project_folders(projects: Path, vault: Path) -> dict[Path, str]:
    """Each project folder with auto-memory, and the vault folder it goes to (claude-code/<name>).
    A project imported before under its encoded name stays there; two projects of one name keep
    their encoded names, so neither takes the other's place."""
    found = [
        p
        for p in sorted(projects.iterdir())
        if p.is_dir() and not p.is_symlink() and (p / "memory").is_dir() and not (p / "memory").is_symlink()
    ]
    names = {p: _project_name(p) for p in found}
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name] = counts.get(name, 0) + 1
    out: dict[Path, str] = {}
    for project, name in names.items():
        encoded = _name(project.name)
        if counts[name] > 1 or (vault / "claude-code" / encoded).is_dir():
            name = encoded
        out[project] = name
    return out


def _sources(args: argparse.Namespace, vault: Path) -> Iterator[tuple[Path, str, str]]:
    """(file, its memory name, where it came from) of each markdown source."""
    from memvault.ops.imports import ImportRefused
    from memvault.ops.transcripts import files_under

    if args.kind == "claude-memory":
        for projects in _default_projects(args.paths):
            if not projects.is_dir():
                raise ImportRefused(f"{projects} is not a folder (Claude Code's projects folder)")
            for project, name in _project_folders(projects, vault).items():
                memory = project / "memory"
                for path in files_under(memory, ".md"):
                    if path.name in INDEX_FILES:
                        continue
                    rel = path.relative_to(memory).as_posix()
                    yield path, f"claude-code/{name}/{rel}", f"claude-memory:{name}/{rel}"
    elif args.kind == "claude-md":
        if not args.paths:
            raise ImportRefused("name the CLAUDE.md files (or the project folders holding them) to import")
        for given in args.paths:
            if given.is_dir() and not given.is_symlink():
                files = [given / n for n in ("CLAUDE.md", "CLAUDE.local.md") if (given / n).is_file()]
                if not files:
                    raise ImportRefused(f"{given} holds no CLAUDE.md or CLAUDE.local.md")
            else:
                files = [given]
            for path in files:
                where = path.resolve().parent
                digest = hashlib.sha256(str(where).encode("utf-8")).hexdigest()[:8]
                kind = path.name.lower()
                suffix = {"claude.md": "", "claude.local.md": "-local"}.get(kind)
                if suffix is None:
                    suffix = "-" + _name(kind.removesuffix(".md"))
                yield (
                    path,
                    f"claude-code/claude-md/{_name(where.name)}-{digest}{suffix}.md",
                    f"claude-md:{where.name}/{path.name}",
                )
    else:
        if len(args.paths) != 1 or not args.paths[0].is_dir():
            raise ImportRefused("name one folder of markdown notes")
        folder = args.paths[0]
        into = args.into or _name(folder.resolve().name)
        for path in files_under(folder, ".md"):
            rel = path.relative_to(folder).as_posix()
            yield path, f"{into.strip('/')}/{rel}", f"notes:{folder.resolve().name}/{rel}"


_FRONTMATTER_NAME = re.compile(rb"\A---[ \t]*\r?\n(?:(?!---).*\n)*?(name:[ \t]*(.+?)[ \t]*\r?\n)", re.M)


def titled(data: bytes) -> bytes:
    """A Claude Code memory file with a title memvault reads: its frontmatter's ``name`` is the
    memory's name there, so a ``title`` line with the same value goes right after it (the rest of
    the file kept byte for byte). A file with a title, or without a name, is left as it is."""
    match = _FRONTMATTER_NAME.match(data)
    if match is None:
        return data
    head = data[: data.find(b"\n---", 3) + 1] if b"\n---" in data[3:] else b""
    if re.search(rb"^title:", head, re.M):
        return data
    return data[: match.end(1)] + b"title: " + match.group(2) + b"\n" + data[match.end(1) :]


# ---------------------------------------------------------------------------- markdown files


def _notes(settings: Settings, args: argparse.Namespace) -> int:
    from memvault.errors import MemvaultError
    from memvault.ops import imports
    from memvault.ops.imports import Note, plan_notes, read_note, write_notes

    folder = settings.token_dir(args.token)
    notes: list[Note] = []
    with Progress("import (reading)") as progress:
        for path, id, origin in _sources(args, folder):
            note = read_note(path, id, str(path), origin)
            if args.kind == "claude-memory":
                note = Note(note.id, titled(note.data), note.source, note.origin, note.source_hash)
            notes.append(note)
            progress(1)
    planned = plan_notes(folder, notes, refresh=args.refresh, priority=args.priority)
    hot = imports.hot_count(folder)
    if args.dry_run:
        for step in planned.steps:
            print(f"  {step.note.source} -> {step.note.id}: {_SAID[step.action]}")
        done = planned
    else:
        with Progress("import (writing)") as progress:
            try:
                done = write_notes(folder, planned, progress)
            except (OSError, MemvaultError) as exc:
                why = exc.strerror if isinstance(exc, OSError) else str(exc)
                print(
                    f"memvault: writing the memories failed ({why or type(exc).__name__}); "
                    "what this import wrote was taken back.",
                    file=sys.stderr,
                )
                return 1
    _report(settings, args, done, hot)
    return 0


# What --dry-run says of each file.
_SAID = {
    "new": "new",
    "refresh": "refresh (the source changed)",
    "priority": "refresh (to the priority asked for)",
    "skip": "skip (already there)",
    "kept": "kept (the copy changed since its import)",
    "changed": "skip (the source changed; --refresh brings it in)",
    "archived": "skip (archived; restore_memory brings it back)",
    "linked": "skip (a symbolic link stands there; memvault never writes through one)",
}


def _listed(names: list[str]) -> str:
    return ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")


def _report(settings: Settings, args: argparse.Namespace, done: Any, hot: int) -> None:
    from memvault.ops import imports

    dry = args.dry_run
    added, refreshed = done.added, done.named(imports.REFRESH) + done.named(imports.PRIORITY)
    line = f"{args.token}: {'would add' if dry else 'added'} {len(added)} memories "
    line += f"({len(done.unchanged)} already there"
    if refreshed:
        line += f"; {'would refresh' if dry else 'refreshed'} {len(refreshed)}"
    if done.kept:
        line += f"; kept {len(done.kept)} changed since their import: {_listed(done.kept)}"
    archived = done.named(imports.ARCHIVED)
    if archived:
        line += f"; {len(archived)} archived, left there"
    linked = done.named(imports.LINKED)
    if linked:
        line += f"; left {len(linked)} symbolic links alone: {_listed(linked)}"
    print(line + ")")
    changed = done.named(imports.CHANGED)
    if changed:
        print(
            f"{args.token}: {len(changed)} sources changed since their import; --refresh brings them "
            f"in: {_listed(changed)}"
        )
    left = max(0, settings.capacity - hot)
    if len(added) > left:
        print(
            f"memvault: warning: {args.token} holds {hot} hot memories and this import "
            f"{'would add' if dry else 'added'} {len(added)}, more than the {left} left under its "
            f"capacity (MEMVAULT_CAPACITY={settings.capacity}): sweeps archive the least recently "
            "used beyond it. Import with --priority P0 to keep them out of capacity eviction, or "
            "raise MEMVAULT_CAPACITY.",
            file=sys.stderr,
        )


def _transcripts(settings: Settings, args: argparse.Namespace) -> int:
    from memvault.ops import capture, transcripts
    from memvault.ops.imports import ImportRefused
    from memvault.ops.localvault import LocalVault

    files: list[Path] = []
    for path in _default_projects(args.paths):
        if path.is_dir() and not path.is_symlink():
            files += list(transcripts.files_under(path, ".jsonl"))
        elif path.is_file() and not path.is_symlink():
            files.append(path)
        else:
            raise ImportRefused(f"{path} is neither a transcript file nor a folder of them")
    read: list[tuple[Path, str, transcripts.Transcript]] = []
    with Progress("import (reading)") as progress:
        for path in files:
            try:
                transcript = transcripts.read(path, limit_bytes=1 << 62, strict=True)
            except transcripts.BadTranscript as exc:
                raise ImportRefused(f"{path}: {exc}") from None
            except OSError as exc:
                raise ImportRefused(f"cannot read {path} ({exc.strerror or type(exc).__name__})") from None
            session_id = transcript.session_id or path.stem
            if not _SESSION_ID.fullmatch(session_id):
                raise ImportRefused(f"{path}: its session id is not a plain name")
            read.append((path, session_id, transcript))
            progress(1)
    vault = LocalVault(settings, args.token)
    sessions = added = 0
    budget = settings.max_content_chars // 2
    with Progress("import (writing)", unit=" sessions") as progress:
        for path, session_id, transcript in read:
            project = Path(transcript.cwd).name if transcript.cwd else None
            if args.dry_run:
                latest = vault.latest_summary(session_id)
                new = transcripts.turns(transcripts.after(transcript.entries, transcripts.marker_in(latest)))
                done = capture.Captured(len(new), 0)
                said = f"{len(new)} new requests" if new else "skip (nothing new)"
                print(f"  {path} -> session {session_id}: {said}")
            else:
                try:
                    done = capture.capture(vault, session_id, transcript, budget=budget, project=project)
                except capture.Refused as exc:
                    print(f"memvault: session {session_id} was not imported: {exc}", file=sys.stderr)
                    return 1
            sessions += bool(done.turns)
            added += done.turns
            progress(1)
    verb = "would add" if args.dry_run else "added"
    unchanged = len(read) - sessions
    print(f"{args.token}: {verb} {added} requests to {sessions} sessions ({unchanged} had nothing new)")
    return 0


def _graph(settings: Settings, args: argparse.Namespace) -> int:
    from memvault.ops.imports import ImportRefused, merge_graph, read_memory_jsonl
    from memvault.records.graph import GraphRows

    if not args.paths:
        raise ImportRefused("name the memory.jsonl file to merge")
    rows = GraphRows([], [])
    with Progress("import (reading)") as progress:
        for path in args.paths:
            part = read_memory_jsonl(
                path, str(path), settings.max_content_chars, settings.max_import_line_bytes
            )
            rows.entities.extend(part.entities)
            rows.relations.extend(part.relations)
            progress(1)
    folder = settings.token_dir(args.token)
    done = merge_graph(folder, rows, dry_run=args.dry_run)
    verb = "would add" if args.dry_run else "added"
    line = f"{args.token}: {verb} {done.entities} entities, {done.observations} observations, "
    line += f"{done.relations} relations"
    if done.skipped_relations:
        line += f"; skipped {done.skipped_relations} relations to missing entities"
    print(line)
    return 0
