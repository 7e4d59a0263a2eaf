"""memvault import-from: each importer round-trips a sample it builds, adds nothing the second time,
refuses a bad file naming it, and then writes nothing."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from transcripts import SESSION, Transcript

from memvault.cli.main import main
from memvault.config import Settings
from memvault.ops.service import Service
from memvault.records import sync
from memvault.records.graph import Entity, KnowledgeGraph, Relation
from memvault.records.sidecar import Sidecar
from memvault.records.summaries import SessionSummaries

MEMVAULT = Path(sys.executable).parent / "memvault"


def run(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["import-from", *args, "--root", str(root), "--token", "alice"])
    out = capsys.readouterr()
    return code, out.out, out.err


def files(folder: Path) -> dict[str, bytes]:
    """Every file under a folder but memvault's own state, by relative path."""
    if not folder.exists():
        return {}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and ".memvault" not in p.parts
    }


def titles(root: Path) -> dict[str, str]:
    """The memories as the server sees them: id -> title."""

    async def find() -> dict[str, str]:
        service = Service(Settings(root=root, watch=False, load_processes=0, tools=("memories",)))
        store = service.store
        try:
            found = await store.find("alice")
            return {m.id: m.title for m in found.memories}
        finally:
            await service.close()

    return asyncio.run(find())


# ---------------------------------------------------------------------------- markdown files


def body(data: bytes) -> bytes:
    """A copy without the lines the import adds to its frontmatter (where it came from)."""
    keys = (b"source: ", b"sourceHash: ", b"importedAt: ", b"copyHash: ")
    return b"".join(line for line in data.splitlines(keepends=True) if not line.startswith(keys))


def test_claude_code_auto_memory_files_become_memories_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    projects = tmp_path / ".claude" / "projects"
    memory = projects / "-home-ann-work-shop" / "memory"
    memory.mkdir(parents=True)
    (memory / "MEMORY.md").write_text("- [Prefers pnpm](user_prefs.md)\n")  # the index: not a memory
    (memory / "user_prefs.md").write_text(
        "---\nname: Prefers pnpm\ndescription: package manager\ntype: user\n---\n\nUse pnpm, never npm.\n"
    )
    (projects / "-home-ann-work-shop" / "s1.jsonl").write_text("{}\n")  # a transcript: not a memory
    root = tmp_path / "memories"

    code, out, _ = run(root, capsys, "claude-memory", str(projects), "--dry-run")
    assert (code, out.splitlines()[-1]) == (0, "alice: would add 1 memories (0 already there)")
    assert not root.exists()

    code, out, _ = run(root, capsys, "claude-memory", str(projects))
    assert (code, out.strip()) == (0, "alice: added 1 memories (0 already there)")
    vault = files(root / "alice")
    # Grouped by the project's name, not Claude Code's encoding of its path.
    assert list(vault) == ["claude-code/shop/user_prefs.md"]
    # Claude Code's "name" is the title memvault reads; the rest of the file is kept as it is.
    assert body(vault["claude-code/shop/user_prefs.md"]) == (memory / "user_prefs.md").read_bytes().replace(
        b"name: Prefers pnpm\n", b"name: Prefers pnpm\ntitle: Prefers pnpm\n"
    )
    assert titles(root)["claude-code/shop/user_prefs.md"] == "Prefers pnpm"

    code, out, _ = run(root, capsys, "claude-memory", str(projects))
    assert (code, out.strip()) == (0, "alice: added 0 memories (1 already there)")
    assert files(root / "alice") == vault


def test_claude_md_files_become_memories_once_even_from_folders_of_one_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = []
    for team in ("web", "api"):
        folder = tmp_path / team / "app"
        folder.mkdir(parents=True)
        (folder / "CLAUDE.md").write_text(f"# {team} app\n\nRun `make test` before every commit.\n")
        sources.append(str(folder / "CLAUDE.md"))
    root = tmp_path / "memories"
    assert run(root, capsys, "claude-md", *sources)[:2] == (0, "alice: added 2 memories (0 already there)\n")
    assert sorted(titles(root).values()) == ["api app", "web app"]
    assert run(root, capsys, "claude-md", *sources)[1] == "alice: added 0 memories (2 already there)\n"


def obsidian(folder: Path) -> None:
    (folder / ".obsidian").mkdir(parents=True)
    (folder / ".obsidian" / "app.json").write_text("{}")
    (folder / "daily").mkdir()
    (folder / "daily" / "2026-11-01.md").write_text(
        "---\ntags: [daily]\naliases: [Kickoff]\n---\n# Kickoff\n\n"
        "Met [[Alice]] about [[projects/Storefront|the shop]].\n"
    )
    (folder / "projects").mkdir()
    (folder / "projects" / "Storefront.md").write_text(
        "# Storefront\n\nSee ![[diagram.png]] and [[Alice]].\n"
    )
    (folder / "projects" / "diagram.png").write_bytes(b"\x89PNG\r\n")
    (folder / "Alice.md").write_text("---\ntype: person\npermalink: alice\n---\n\n- [role] Designer\n")


def test_a_notes_folder_keeps_frontmatter_links_and_layout(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "My Vault"
    obsidian(notes)
    root = tmp_path / "memories"
    code, out, _ = run(root, capsys, "notes", str(notes))
    assert (code, out) == (0, "alice: added 3 memories (0 already there)\n")
    vault = files(root / "alice")
    assert {name: body(data) for name, data in vault.items()} == {
        f"My-Vault/{rel}": (b"" if (notes / rel).read_bytes().startswith(b"---") else b"---\n---\n")
        + (notes / rel).read_bytes()
        for rel in ("Alice.md", "daily/2026-11-01.md", "projects/Storefront.md")
    }
    assert titles(root)["My-Vault/daily/2026-11-01.md"] == "Kickoff"
    assert (
        run(root, capsys, "notes", str(notes), "--into", "brain")[1]
        == "alice: added 3 memories (0 already there)\n"
    )
    assert (
        run(root, capsys, "notes", str(notes), "--into", "brain")[1]
        == "alice: added 0 memories (3 already there)\n"
    )


def test_a_changed_memory_is_kept_and_reported_never_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes"
    obsidian(notes)
    root = tmp_path / "memories"
    run(root, capsys, "notes", str(notes))
    mine = root / "alice" / "notes" / "Alice.md"
    mine.write_text("edited by hand\n")
    code, out, _ = run(root, capsys, "notes", str(notes))
    assert code == 0 and "kept 1 changed since their import: notes/Alice.md" in out
    assert mine.read_text() == "edited by hand\n"


@pytest.mark.parametrize(
    "name, data, why",
    [("bad.md", b"caf\xe9\n", "not UTF-8"), ("nul.md", b"a\x00b", "NUL"), ("..md", b"x", None)],
)
def test_a_bad_note_stops_the_import_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, data: bytes, why: str | None
) -> None:
    notes = tmp_path / "notes"
    obsidian(notes)
    (notes / "projects" / name).write_bytes(data)
    root = tmp_path / "memories"
    code, _, err = run(root, capsys, "notes", str(notes))
    if why is None:  # a dot-file is not a note: passed over, as memvault passes over its own
        assert code == 0
        return
    assert code == 1 and why in err and name in err and "Nothing was imported" in err
    assert files(root / "alice") == {}


def test_notes_show_a_progress_bar_on_a_terminal_only(tmp_path: Path) -> None:
    import fcntl
    import pty
    import struct
    import termios

    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(200):
        (notes / f"n{i}.md").write_text(f"# Note {i}\n")
    argv = [
        str(MEMVAULT),
        "import-from",
        "notes",
        str(notes),
        "--root",
        str(tmp_path / "m"),
        "--token",
        "alice",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
    quiet = subprocess.run([*argv, "--dry-run"], env=env, capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 0 and "files/s" not in quiet.stderr
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    try:
        shown = subprocess.run(argv, env=env, stderr=follower, stdout=subprocess.PIPE, timeout=60)
        os.close(follower)
        seen = b""
        with contextlib.suppress(OSError):
            while chunk := os.read(leader, 65536):
                seen += chunk
    finally:
        os.close(leader)
    assert shown.returncode == 0 and b"files/s" in seen


# ---------------------------------------------------------------------------- transcripts


def sessions_of(root: Path) -> dict[str, list[str]]:
    folder = root / "alice"
    with Sidecar.open(folder) as sidecar:
        sync.sync(sidecar, folder)
        found = SessionSummaries(sidecar, max_chars=100_000)
        return {i.session_id: [v.summary for v in found.history(i.session_id)] for i in found.infos()}


def test_past_transcripts_become_session_summaries_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    projects = tmp_path / "projects"
    first = Transcript(projects / "-work-shop" / f"{SESSION}.jsonl", tmp_path / "shop")
    first.turn("Set up CI", "Checking the workflow.", "CI runs on every push now.")
    first.turn("Cache the dependencies", "Cached ~/.cache/pip in the workflow.")
    root = tmp_path / "memories"

    assert run(root, capsys, "transcripts", str(projects), "--dry-run")[1] == (
        f"  {first.path} -> session {SESSION}: 2 new requests\n"
        "alice: would add 2 requests to 1 sessions (0 had nothing new)\n"
    )
    assert not root.exists()
    assert (
        run(root, capsys, "transcripts", str(projects))[1]
        == "alice: added 2 requests to 1 sessions (0 had nothing new)\n"
    )
    [summary] = sessions_of(root)[SESSION]
    assert "Set up CI" in summary and "CI runs on every push now." in summary and "Checking" not in summary
    assert "Cached ~/.cache/pip in the workflow." in summary

    assert (
        run(root, capsys, "transcripts", str(projects))[1]
        == "alice: added 0 requests to 0 sessions (1 had nothing new)\n"
    )
    first.turn("Add a badge", "Added the CI badge to README.md.")
    assert (
        run(root, capsys, "transcripts", str(projects))[1]
        == "alice: added 1 requests to 1 sessions (0 had nothing new)\n"
    )
    latest, older = sessions_of(root)[SESSION]
    assert latest.startswith(older) and "Add a badge" in latest[len(older) :]


def test_a_damaged_transcript_stops_the_import_naming_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    projects = tmp_path / "projects"
    good = Transcript(projects / "a" / "good.jsonl", tmp_path)
    good.turn("Hello", "Hi.")
    bad = projects / "b" / "bad.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"type": "user"}\nnot json\n')
    root = tmp_path / "memories"
    code, _, err = run(root, capsys, "transcripts", str(projects))
    assert code == 1 and "bad.jsonl: line 2" in err and "Nothing was imported" in err
    assert files(root / "alice") == {}


# ---------------------------------------------------------------------------- the memory server's graph


def test_memory_jsonl_merges_into_the_graph_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "memories"
    with Sidecar.open(root / "alice") as sidecar:
        KnowledgeGraph(sidecar, max_chars=10_000, files=sync.GraphFile(root / "alice")).create_entities(
            [Entity("Alice", "person", ("Speaks Dutch",))]
        )
    source = tmp_path / "memory.jsonl"
    lines = [
        {"type": "entity", "name": "Alice", "entityType": "person", "observations": ["Speaks Dutch", "Runs"]},
        {"type": "entity", "name": "Acme", "entityType": "company", "observations": ["Makes anvils"]},
        {"type": "relation", "from": "Alice", "to": "Acme", "relationType": "works_at"},
    ]
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))

    assert run(root, capsys, "memory-jsonl", str(source), "--dry-run")[1] == (
        "alice: would add 1 entities, 2 observations, 1 relations\n"
    )
    before = files(root / "alice")
    assert (
        run(root, capsys, "memory-jsonl", str(source))[1]
        == "alice: added 1 entities, 2 observations, 1 relations\n"
    )
    with Sidecar.open(root / "alice") as sidecar:
        sync.sync(sidecar, root / "alice")
        graph = KnowledgeGraph(sidecar, max_chars=10_000).read_graph()
    assert {e.name: e.observations for e in graph.entities} == {
        "Alice": ("Speaks Dutch", "Runs"),
        "Acme": ("Makes anvils",),
    }
    assert list(graph.relations) == [Relation("Alice", "Acme", "works_at")]
    assert files(root / "alice") != before  # graph.jsonl, the canonical file, holds it
    after = files(root / "alice")
    assert (
        run(root, capsys, "memory-jsonl", str(source))[1]
        == "alice: added 0 entities, 0 observations, 0 relations\n"
    )
    assert files(root / "alice") == after


def test_a_bad_memory_jsonl_line_changes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "memories"
    source = tmp_path / "memory.jsonl"
    source.write_text(
        json.dumps({"type": "entity", "name": "Alice", "entityType": "person", "observations": []})
        + "\n"
        + json.dumps({"type": "entity", "name": "", "entityType": "person"})
        + "\n"
    )
    code, _, err = run(root, capsys, "memory-jsonl", str(source))
    assert code == 1 and "line 2" in err and "Nothing was imported" in err
    assert not root.exists()


def test_a_refused_source_ends_the_command_with_one_line_and_status_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(tmp_path / "memories", capsys, "notes", str(tmp_path / "missing"))
    assert code == 1 and err == "memvault: name one folder of markdown notes. Nothing was imported.\n"
    assert not (tmp_path / "memories").exists()
