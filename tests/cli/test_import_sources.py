"""memvault import-from and the sources it copies: each copy says where it came from, a re-import
tells a changed source from a copy changed since, options go anywhere, Claude Code's files land
under their project's name, and an interrupted or large import leaves the vault usable."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tracemalloc
from pathlib import Path

import anyio.to_thread
import pytest
from conftest import wait_for
from transcripts import Transcript

from memvault.cli.main import main
from memvault.config import Settings
from memvault.ops.service import Service

MEMVAULT = Path(sys.executable).parent / "memvault"


def run(root: Path, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = main(["import-from", *args, "--root", str(root), "--token", "alice"])
    out = capsys.readouterr()
    return code, out.out, out.err


def memory_files(folder: Path) -> list[str]:
    if not folder.exists():
        return []
    return sorted(
        p.relative_to(folder).as_posix()
        for p in folder.rglob("*.md")
        if ".memvault" not in p.parts and not p.name.startswith(".")
    )


def frontmatter(data: bytes) -> dict[str, str]:
    head = data.decode().split("---\n")[1]
    return dict(line.split(": ", 1) for line in head.splitlines() if ": " in line)


def settings(root: Path) -> Settings:
    return Settings(
        root=root,
        watch=False,
        load_processes=0,
        tools=("memories",),
        capacity=1000,
        access_writeback="always",
    )


async def read_everything(root: Path, times: int) -> None:
    """Reads as an agent's: each one writes the access time back into the files it found."""
    service = Service(settings(root))
    store = service.store
    try:
        for _ in range(times):
            found = await store.find("alice")
            await store.touch("alice", found.memories)
            await service.idle()
    finally:
        await service.close()


def notes_folder(tmp_path: Path, count: int) -> Path:
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(count):
        (notes / f"n{i}.md").write_text(f"---\ntags: [run]\n---\n# Run {i}\n\nLong run number {i}.\n")
    return notes


# ---------------------------------------------------------------------------- where a copy came from


def test_a_copy_says_where_it_came_from_without_the_users_paths(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes"
    (notes / "daily").mkdir(parents=True)
    (notes / "daily" / "run.md").write_text("# Marathon\n\nLong run on Sunday.\n")
    root = tmp_path / "memories"
    assert run(root, capsys, "notes", str(notes))[0] == 0
    copy = (root / "alice" / "notes" / "daily" / "run.md").read_bytes()
    meta = frontmatter(copy)
    assert meta["source"] == "notes:notes/daily/run.md"
    assert meta["sourceHash"] == hashlib.sha256((notes / "daily" / "run.md").read_bytes()).hexdigest()
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", meta["importedAt"])
    assert str(tmp_path).encode() not in copy
    assert copy.endswith(b"# Marathon\n\nLong run on Sunday.\n")


def test_a_source_with_a_source_key_of_its_own_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "clips"
    notes.mkdir()
    (notes / "clip.md").write_text("---\nsource: https://example.org/a\n---\n# Clip\n\ntext\n")
    root = tmp_path / "memories"
    run(root, capsys, "notes", str(notes))
    copy = (root / "alice" / "clips" / "clip.md").read_bytes()
    assert copy.count(b"source: ") == 1 and b"source: https://example.org/a\n" in copy
    assert "sourceHash" in frontmatter(copy)
    assert run(root, capsys, "notes", str(notes))[1] == "alice: added 0 memories (1 already there)\n"


def test_a_reimport_refreshes_changed_sources_keeps_edited_copies_and_ignores_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = notes_folder(tmp_path, 60)
    root = tmp_path / "memories"
    assert run(root, capsys, "notes", str(notes))[1] == "alice: added 60 memories (0 already there)\n"
    asyncio.run(read_everything(root, 3))
    copies = root / "alice" / "notes"
    assert all(b"lastAccessedAt: " in p.read_bytes() for p in copies.glob("*.md"))  # reads wrote back

    (notes / "n1.md").write_text("---\ntags: [run]\n---\n# Run 1\n\nA new route by the river.\n")
    edited = (copies / "n2.md").read_text().replace("Long run number 2.", "Edited by hand.")
    (copies / "n2.md").write_text(edited)

    code, out, _ = run(root, capsys, "notes", str(notes))
    assert code == 0
    assert out == (
        "alice: added 0 memories (58 already there; kept 1 changed since their import: notes/n2.md)\n"
        "alice: 1 sources changed since their import; --refresh brings them in: notes/n1.md\n"
    )
    assert b"A new route" not in (copies / "n1.md").read_bytes()

    code, out, _ = run(root, capsys, "notes", "--refresh", str(notes))
    assert (code, out) == (
        0,
        "alice: added 0 memories (58 already there; refreshed 1; "
        "kept 1 changed since their import: notes/n2.md)\n",
    )
    assert b"A new route by the river." in (copies / "n1.md").read_bytes()
    assert (copies / "n2.md").read_text() == edited
    assert run(root, capsys, "notes", "--refresh", str(notes))[1] == (
        "alice: added 0 memories (59 already there; kept 1 changed since their import: notes/n2.md)\n"
    )


def test_a_dry_run_lists_each_file_and_what_it_would_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = notes_folder(tmp_path, 3)
    root = tmp_path / "memories"
    run(root, capsys, "notes", str(notes))
    (notes / "n0.md").write_text("# Run 0\n\nchanged\n")
    (notes / "n3.md").write_text("# Run 3\n")
    (root / "alice" / "notes" / "n2.md").write_text("mine now\n")
    before = sorted((p.name, p.read_bytes()) for p in (root / "alice" / "notes").iterdir())

    code, out, _ = run(root, capsys, "notes", str(notes), "--dry-run", "--refresh")
    assert code == 0
    assert out.splitlines() == [
        f"  {notes / 'n0.md'} -> notes/n0.md: refresh (the source changed)",
        f"  {notes / 'n1.md'} -> notes/n1.md: skip (already there)",
        f"  {notes / 'n2.md'} -> notes/n2.md: kept (the copy changed since its import)",
        f"  {notes / 'n3.md'} -> notes/n3.md: new",
        "alice: would add 1 memories (1 already there; would refresh 1; "
        "kept 1 changed since their import: notes/n2.md)",
    ]
    assert sorted((p.name, p.read_bytes()) for p in (root / "alice" / "notes").iterdir()) == before


def test_an_import_past_the_capacity_warns_naming_priority_and_the_setting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMVAULT_CAPACITY", "5")
    notes = notes_folder(tmp_path, 8)
    root = tmp_path / "memories"
    code, _, err = run(root, capsys, "notes", str(notes), "--dry-run")
    assert code == 0 and "--priority P0" in err and "MEMVAULT_CAPACITY" in err and "8" in err
    code, _, err = run(root, capsys, "notes", "--priority", "P0", str(notes))
    assert code == 0 and "MEMVAULT_CAPACITY" in err
    assert all(b"priority: P0\n" in p.read_bytes() for p in (root / "alice" / "notes").glob("*.md"))
    # Asked again for another priority: the copies as imported take it; one edited since is kept.
    (root / "alice" / "notes" / "n0.md").write_text("# Mine\n")
    code, out, _ = run(root, capsys, "notes", str(notes), "--priority", "P1")
    assert out == (
        "alice: added 0 memories (0 already there; refreshed 7; "
        "kept 1 changed since their import: notes/n0.md)\n"
    )
    assert all(b"priority: P1\n" in p.read_bytes() for p in (root / "alice" / "notes").glob("n[1-7].md"))
    assert run(root, capsys, "notes", str(notes), "--priority", "P1")[1].startswith(
        "alice: added 0 memories (7 already"
    )
    small = tmp_path / "small"
    small.mkdir()
    (small / "one.md").write_text("# One\n")
    monkeypatch.setenv("MEMVAULT_CAPACITY", "50")
    assert run(root, capsys, "notes", str(small))[2] == ""


# ---------------------------------------------------------------------------- the command line


@pytest.mark.parametrize("kind", ["notes", "claude-memory", "claude-md", "transcripts", "memory-jsonl"])
def test_options_may_come_before_the_paths_for_every_kind(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    source = tmp_path / "source"
    if kind == "notes":
        notes_folder(tmp_path, 1)
        source = tmp_path / "notes"
    elif kind == "claude-memory":
        (source / "-work-shop" / "memory").mkdir(parents=True)
        (source / "-work-shop" / "memory" / "a.md").write_text("# A\n")
    elif kind == "claude-md":
        source.mkdir()
        (source / "CLAUDE.md").write_text("# Rules\n")
    elif kind == "transcripts":
        Transcript(source / "p" / "s.jsonl", tmp_path).turn("Hello", "Hi.")
    else:
        source.write_text(json.dumps({"type": "entity", "name": "A", "entityType": "x", "observations": []}))
    root = tmp_path / "memories"
    capsys.readouterr()
    code = main(["import-from", kind, "--token", "alice", "--dry-run", "--root", str(root), str(source)])
    out = capsys.readouterr().out
    assert code == 0 and "alice: would add 1 " in out
    assert not root.exists()


def test_claude_md_and_claude_local_md_of_one_project_both_come_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    project = tmp_path / "acme-api"
    project.mkdir()
    (project / "CLAUDE.md").write_text("# Team rules\n\nRun the linters.\n")
    (project / "CLAUDE.local.md").write_text("# My rules\n\nUse the staging database.\n")
    root = tmp_path / "memories"
    code, out, _ = run(
        root, capsys, "claude-md", str(project / "CLAUDE.md"), str(project / "CLAUDE.local.md")
    )
    assert (code, out) == (0, "alice: added 2 memories (0 already there)\n")
    names = memory_files(root / "alice")
    assert len(names) == 2 and all(n.startswith("claude-code/claude-md/acme-api-") for n in names)
    assert any(n.endswith("-local.md") for n in names)
    # The project's folder names both; they are there already.
    assert run(root, capsys, "claude-md", str(project))[1] == "alice: added 0 memories (2 already there)\n"


def test_auto_memory_is_grouped_by_the_projects_real_name_and_its_index_skipped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    projects = tmp_path / "projects"
    encoded = projects / "-tmp-nu-work-acme-api"
    (encoded / "memory").mkdir(parents=True)
    (encoded / "memory" / "MEMORY.md").write_text("- [pnpm](pnpm.md)\n")
    (encoded / "memory" / "pnpm.md").write_text("---\nname: Uses pnpm\n---\n\nUse pnpm.\n")
    Transcript(encoded / "s.jsonl", Path("/tmp/nu/work/acme-api")).turn("Hello", "Hi.")
    bare = projects / "-srv-old-billing-svc"  # no transcript, and not on this machine
    (bare / "memory").mkdir(parents=True)
    (bare / "memory" / "db.md").write_text("# Database\n\nPostgres 16.\n")
    root = tmp_path / "memories"
    assert run(root, capsys, "claude-memory", str(projects))[0] == 0
    assert memory_files(root / "alice") == ["claude-code/acme-api/pnpm.md", "claude-code/svc/db.md"]
    meta = frontmatter((root / "alice" / "claude-code" / "acme-api" / "pnpm.md").read_bytes())
    assert meta["source"] == "claude-memory:acme-api/pnpm.md"


def test_auto_memory_imported_under_its_encoded_name_before_stays_there(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    projects = tmp_path / "projects"
    (projects / "-work-shop" / "memory").mkdir(parents=True)
    (projects / "-work-shop" / "memory" / "a.md").write_text("# A\n")
    root = tmp_path / "memories"
    earlier = root / "alice" / "claude-code" / "work-shop" / "a.md"
    earlier.parent.mkdir(parents=True)
    earlier.write_text("# A\n")  # what an import wrote before copies said where they came from
    assert (
        run(root, capsys, "claude-memory", str(projects))[1] == "alice: added 0 memories (1 already there)\n"
    )
    assert memory_files(root / "alice") == ["claude-code/work-shop/a.md"]


# ---------------------------------------------------------------------------- memory.jsonl


def test_an_over_long_memory_jsonl_line_is_refused_without_reading_it_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMVAULT_MAX_IMPORT_LINE_BYTES", "100000")
    source = tmp_path / "memory.jsonl"
    with source.open("w") as handle:
        handle.write(
            json.dumps({"type": "entity", "name": "A", "entityType": "x", "observations": []}) + "\n"
        )
        handle.write('{"type": "entity", "name": "' + "x" * 30_000_000 + '"}\n')
    root = tmp_path / "memories"
    tracemalloc.start()
    try:
        code, _, err = run(root, capsys, "memory-jsonl", str(source))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 1 and "line 2" in err and "MEMVAULT_MAX_IMPORT_LINE_BYTES" in err
    assert peak < 10_000_000
    assert not root.exists()


# ---------------------------------------------------------------------------- interrupted and large imports


def _start_import(tmp_path: Path, notes: Path, *extra: str) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMVAULT_")}
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
    return subprocess.Popen(
        [*argv, *extra], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def first_file(vault: Path) -> bool:
    return (vault / "notes").is_dir() and any((vault / "notes").glob("n*.md"))


@pytest.mark.slow
@pytest.mark.anyio
async def test_ctrl_c_during_an_import_takes_back_what_it_wrote(tmp_path: Path) -> None:
    notes = notes_folder(tmp_path, 1000)
    vault = tmp_path / "m" / "alice"
    mine = vault / "mine.md"
    mine.parent.mkdir(parents=True)
    mine.write_text("# Mine\n\nkept\n")
    process = _start_import(tmp_path, notes)
    try:
        await wait_for(
            lambda: (vault / "notes").is_dir() and any((vault / "notes").glob("n*.md")), timeout=60
        )
        process.send_signal(signal.SIGINT)
        _, err = await anyio.to_thread.run_sync(lambda: process.communicate(timeout=60))
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert memory_files(vault) == ["mine.md"]
    left = [str(p.relative_to(vault)) for p in vault.rglob("*") if p.name.endswith(".tmp")]
    assert not left, left


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_agents_write_during_a_large_import_waits_for_one_batch_only(tmp_path: Path) -> None:
    total = 1000
    notes = notes_folder(tmp_path, total)
    vault = tmp_path / "m" / "alice"
    process = _start_import(tmp_path, notes)
    service = Service(settings(tmp_path / "m"))
    store = service.store
    try:
        await wait_for(
            lambda: (vault / "notes").is_dir() and any((vault / "notes").glob("n*.md")), timeout=60
        )
        written = await store.write("alice", title="Deploy notes", content="Deploy on Fridays.")
        imported = len(list((vault / "notes").glob("n*.md")))
        running = process.poll() is None
        await anyio.to_thread.run_sync(lambda: process.communicate(timeout=120))
    finally:
        await service.close()
        if process.poll() is None:
            process.kill()
    assert running and imported < total
    assert process.returncode == 0
    assert (vault / written.memory.id).is_file()
    assert len(list((vault / "notes").glob("n*.md"))) == total
