"""memvault import-from: other tools' memories into a vault, idempotently, all checked before any write.

Claude Code's auto-memory files and CLAUDE.md files, and a folder of markdown notes (an Obsidian
vault, a Basic Memory project), become memories, byte for byte (frontmatter and links kept); past
Claude Code transcripts become session summaries; the official memory server's memory.jsonl is
merged into the token's graph.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memvault.cli.progress import Progress
from memvault.config import Settings
from memvault.disk.names import valid_token

KINDS = ("claude-memory", "claude-md", "transcripts", "notes", "memory-jsonl")
_SESSION_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def add_parser(sub: Any, vault: argparse.ArgumentParser) -> None:
    parser = sub.add_parser(
        "import-from",
        parents=[vault],
        help="import Claude Code memories, CLAUDE.md files, transcripts, markdown notes or memory.jsonl",
        description="Import what other tools kept into a token's vault. claude-memory: Claude Code's "
        "auto-memory files (PATH: its projects folder, default ~/.claude/projects); claude-md: CLAUDE.md "
        "files; notes: a folder of markdown notes (Obsidian, Basic Memory), frontmatter and links kept; "
        "transcripts: Claude Code session transcripts (*.jsonl) as session summaries; memory-jsonl: the "
        "official memory server's file, merged into the graph. Every source is checked before anything "
        "is written; running it twice adds nothing.",
    )
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("paths", nargs="*", type=Path, help="the files or folders to import")
    parser.add_argument("--dry-run", action="store_true", help="say what would be imported; write nothing")
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
        if args.kind in ("claude-memory", "claude-md", "notes"):
            return _notes(settings, args)
        if args.kind == "transcripts":
            return _transcripts(settings, args)
        return _graph(settings, args)
    except ImportRefused as exc:
        print(f"memvault: {exc}. Nothing was imported.", file=sys.stderr)
        return 1


def _default_projects(paths: list[Path]) -> list[Path]:
    return paths or [Path.home() / ".claude" / "projects"]


def _name(text: str) -> str:
    """A path segment safe as a memory folder's name."""
    cleaned = re.sub(r"[^\w.-]+", "-", text).strip(".-")
    return cleaned[:100] or "home"


def _sources(args: argparse.Namespace) -> Iterator[tuple[Path, str]]:
    """(file, its memory name) of each markdown source."""
    from memvault.ops.imports import ImportRefused
    from memvault.ops.transcripts import files_under

    if args.kind == "claude-memory":
        for projects in _default_projects(args.paths):
            if not projects.is_dir():
                raise ImportRefused(f"{projects} is not a folder (Claude Code's projects folder)")
            for project in sorted(p for p in projects.iterdir() if p.is_dir() and not p.is_symlink()):
                memory = project / "memory"
                if memory.is_dir() and not memory.is_symlink():
                    for path in files_under(memory, ".md"):
                        rel = path.relative_to(memory).as_posix()
                        yield path, f"claude-code/{_name(project.name)}/{rel}"
    elif args.kind == "claude-md":
        if not args.paths:
            raise ImportRefused("name the CLAUDE.md files to import")
        for path in args.paths:
            where = path.resolve().parent
            digest = hashlib.sha256(str(where).encode("utf-8")).hexdigest()[:8]
            yield path, f"claude-code/claude-md/{_name(where.name)}-{digest}.md"
    else:
        if len(args.paths) != 1 or not args.paths[0].is_dir():
            raise ImportRefused("name one folder of markdown notes")
        folder = args.paths[0]
        into = args.into or _name(folder.resolve().name)
        for path in files_under(folder, ".md"):
            yield path, f"{into.strip('/')}/{path.relative_to(folder).as_posix()}"


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


def _notes(settings: Settings, args: argparse.Namespace) -> int:
    from memvault.ops.imports import Note, plan_notes, read_note, write_notes

    notes: list[Note] = []
    with Progress("import (reading)") as progress:
        for path, id in _sources(args):
            note = read_note(path, id, str(path))
            if args.kind == "claude-memory":
                note = Note(note.id, titled(note.data), note.source)
            notes.append(note)
            progress(1)
    folder = settings.token_dir(args.token)
    if args.dry_run:
        done = plan_notes(folder, notes)
        verb = "would add"
    else:
        with Progress("import (writing)") as progress:
            try:
                done = write_notes(folder, notes, progress)
            except OSError as exc:
                print(
                    f"memvault: writing the memories failed ({exc.strerror or type(exc).__name__}); "
                    "the vault is as it was.",
                    file=sys.stderr,
                )
                return 1
        verb = "added"
    line = f"{args.token}: {verb} {len(done.added)} memories ({len(done.unchanged)} already there"
    if done.kept:
        line += f"; kept {len(done.kept)} that differ from their source: {', '.join(done.kept[:5])}"
        line += ", ..." if len(done.kept) > 5 else ""
    print(line + ")")
    return 0


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
    read: list[tuple[str, transcripts.Transcript]] = []
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
            read.append((session_id, transcript))
            progress(1)
    vault = LocalVault(settings, args.token)
    sessions = added = 0
    budget = settings.max_content_chars // 2
    with Progress("import (writing)", unit=" sessions") as progress:
        for session_id, transcript in read:
            project = Path(transcript.cwd).name if transcript.cwd else None
            if args.dry_run:
                latest = vault.latest_summary(session_id)
                new = transcripts.turns(transcripts.after(transcript.entries, transcripts.marker_in(latest)))
                done = capture.Captured(len(new), 0)
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
            part = read_memory_jsonl(path, str(path), settings.max_content_chars)
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
