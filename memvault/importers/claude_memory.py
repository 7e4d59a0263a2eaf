"""Claude Code's auto-memory files (``~/.claude/projects/<project>/memory/*.md``) as memories.

Each project's files go under ``claude-code/<name>/``, the name being the project's real one (the
working folder its transcripts name, else Claude Code's encoded folder name decoded); the folder's
index (MEMORY.md, links to the others) is no memory and is left out.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

from memvault.importers.base import ImportOptions, ImportRefused
from memvault.importers.copies import Note
from memvault.importers.markdown import MarkdownImporter, folder_name
from memvault.ops.transcripts import files_under

INDEX_FILES = ("MEMORY.md",)  # Claude Code's index of its memory folder: links, not a memory


def default_projects(paths: list[Path]) -> list[Path]:
    return paths or [Path.home() / ".claude" / "projects"]


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


_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")
MAX_LISTED = 10_000  # entries of one folder looked at while decoding; a larger folder is passed over


def decoded(encoded: str) -> str:
    """The project's folder name from Claude Code's encoding of its path (every character but
    letters and digits made "-"): the folder found on this machine whose path encodes the same,
    walked from "/" one folder at a time (the longest matching name first); else the part after
    the last dash."""

    def walk(at: Path, rest: str, depth: int) -> str | None:
        if depth > 64:
            return None
        matches: list[tuple[int, Path]] = []
        with contextlib.suppress(OSError):
            for i, child in enumerate(at.iterdir()):
                if i >= MAX_LISTED:
                    return None
                code = _NOT_ALNUM.sub("-", child.name)
                if (rest == code or rest.startswith(code + "-")) and child.is_dir():
                    matches.append((len(code), child))
        for length, child in sorted(matches, key=lambda m: (-m[0], m[1].name)):
            if length == len(rest):
                return child.name
            found = walk(child, rest[length + 1 :], depth + 1)
            if found is not None:
                return found
        return None

    if encoded.startswith("-"):
        with contextlib.suppress(OSError, RecursionError):
            found = walk(Path("/"), encoded[1:], 0)
            if found:
                return found
    parts = [part for part in encoded.split("-") if part]
    return parts[-1] if parts else folder_name(encoded)


def project_name(project: Path) -> str:
    """The real name of a Claude Code project folder (`-tmp-nu-work-acme-api` -> `acme-api`): the
    working folder a transcript there names, else the decoded folder name."""
    with contextlib.suppress(OSError):
        for transcript in sorted(project.glob("*.jsonl"))[:5]:
            if transcript.is_file() and not transcript.is_symlink():
                cwd = _cwd_of(transcript)
                if cwd:
                    return folder_name(Path(cwd).name)
    return folder_name(decoded(project.name))


def project_folders(projects: Path, vault: Path) -> dict[Path, str]:
    """Each project folder with auto-memory, and the vault folder it goes to (claude-code/<name>).
    A project imported before under its encoded name stays there; two projects of one name keep
    their encoded names, so neither takes the other's place."""
    found = [
        p
        for p in sorted(projects.iterdir())
        if p.is_dir() and not p.is_symlink() and (p / "memory").is_dir() and not (p / "memory").is_symlink()
    ]
    names = {p: project_name(p) for p in found}
    counts: dict[str, int] = {}
    for name in names.values():
        counts[name] = counts.get(name, 0) + 1
    out: dict[Path, str] = {}
    for project, name in names.items():
        encoded = folder_name(project.name)
        if counts[name] > 1 or (vault / "claude-code" / encoded).is_dir():
            name = encoded
        out[project] = name
    return out


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


class ClaudeMemoryImporter(MarkdownImporter):
    name = "claude-memory"

    def sources(self, options: ImportOptions, vault: Path) -> Iterator[tuple[Path, str, str]]:
        for projects in default_projects(options.paths):
            if not projects.is_dir():
                raise ImportRefused(f"{projects} is not a folder (Claude Code's projects folder)")
            for project, name in project_folders(projects, vault).items():
                memory = project / "memory"
                for path in files_under(memory, ".md"):
                    if path.name in INDEX_FILES:
                        continue
                    rel = path.relative_to(memory).as_posix()
                    yield path, f"claude-code/{name}/{rel}", f"claude-memory:{name}/{rel}"

    def prepare(self, note: Note) -> Note:
        return Note(note.id, titled(note.data), note.source, note.origin, note.source_hash)


IMPORTER = ClaudeMemoryImporter
