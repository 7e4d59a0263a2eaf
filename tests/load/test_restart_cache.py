"""Restarts use the sidecar's file-stat cache: only files whose bytes changed are parsed again."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest
from conftest import Running

pytestmark = pytest.mark.anyio

TOKEN = "alice"
NOW = datetime.now(UTC).replace(microsecond=0)
STAMP = NOW.strftime("%Y-%m-%dT%H:%M:%S.000Z")
# A fixed clock on the same day as the files' lastAccessedAt: reads write nothing back, and
# nothing is old enough (or numerous enough) to be archived by the lazy sweep.
SERVER = {"clock": lambda: NOW, "capacity": 100_000}

# Made-up words, far apart, so typo tolerance never links one to another.
WORDS = [
    "".join(parts)
    for parts in (
        (a, b, c)
        for a in ("zor", "quil", "brap", "fenn", "glim", "trov", "hask", "mudd")
        for b in ("ax", "ep", "ul", "oy", "ir")
        for c in ("tonk", "vish", "marl", "dreb", "sulp")
    )
][:200]


def note(i: int, body: str) -> str:
    return (
        f"---\npriority: P1\ncreatedAt: {STAMP}\nupdatedAt: {STAMP}\nlastAccessedAt: {STAMP}\n"
        f"custom: kept {i}\n---\n# Note {i}\n\n{body}\n"
    )


def hot_ids(srv: Running) -> set[str]:
    state = srv.app.state.service.registry.states[TOKEN]
    with state.mem_lock:
        return set(state.hot.memories)


def hits(srv: Running, query: str) -> set[str]:
    state = srv.app.state.service.registry.states[TOKEN]
    with state.mem_lock:
        found, _ = state.hot.index.search(query, limit=None)
    return {h.id for h in found}


async def load(srv: Running) -> None:
    """One call, which loads the token; then let any background sweep finish."""
    async with srv.session(TOKEN) as session:
        err, text = await srv.call(session, "list_memory_titles")
        assert not err, text
    await srv.app.state.service.idle()


@pytest.mark.slow
async def test_restart_reparses_only_changed_files(server_factory, vault_root: Path):
    folder = vault_root / TOKEN
    folder.mkdir()
    names = [f"note-{i:03d}.md" for i in range(200)]
    for i, name in enumerate(names):
        (folder / name).write_text(
            note(i, f"shared grebeviola and its own word {WORDS[i]}"), encoding="utf-8"
        )

    # 1. Cold start: everything is parsed once.
    async with server_factory(**SERVER) as srv:
        await load(srv)
        assert srv.app.state.service.registry.parses == 200
        assert hot_ids(srv) == set(names)
        assert len(hits(srv, "grebeviola")) == 200

    # 2. While it is down: 3 edited, 10 only touched (as git does), 2 deleted, 1 added.
    modified = names[10:13]
    for name in modified:
        i = names.index(name)
        (folder / name).write_text(note(i, f"rewritten: mongooseceleste and {WORDS[i]}"), encoding="utf-8")
    touched = names[20:30]
    for name in touched:
        st = (folder / name).stat()
        os.utime(folder / name, ns=(st.st_atime_ns, st.st_mtime_ns + 7_000_000_000))
    deleted = names[40:42]
    for name in deleted:
        (folder / name).unlink()
    (folder / "added.md").write_text(note(999, "brand new: pelicanhurdy"), encoding="utf-8")
    expected = (set(names) - set(deleted)) | {"added.md"}
    before = {name: (folder / name).read_bytes() for name in expected}

    async with server_factory(**SERVER) as srv:
        await load(srv)
        assert srv.app.state.service.registry.parses == 4, (
            "only the 3 edited files and the new one should be parsed"
        )
        assert hot_ids(srv) == expected
        assert hits(srv, "mongooseceleste") == set(modified)
        assert hits(srv, "pelicanhurdy") == {"added.md"}
        for name in deleted:
            assert name not in hits(srv, WORDS[names.index(name)])
        for name in touched:
            assert name in hits(srv, WORDS[names.index(name)])
        # The edited files no longer match their old text; the cache did not serve a stale parse.
        assert not hits(srv, "grebeviola") & set(modified)
        async with srv.session(TOKEN) as session:
            err, text = await srv.call(session, "list_memory_titles")
            assert not err, text
            listed = {line.split("|", 1)[0] for line in text.splitlines()}
            assert listed == expected
            err, text = await srv.call(session, "read_memory", query=WORDS[names.index(touched[0])])
            assert not err and touched[0] in text, text
            err, text = await srv.call(session, "read_memory", filenames=[deleted[0]])
            assert err, text

    # 3. Nothing changed: nothing is parsed.
    async with server_factory(**SERVER) as srv:
        await load(srv)
        assert srv.app.state.service.registry.parses == 0
        assert hot_ids(srv) == expected
        assert hits(srv, "mongooseceleste") == set(modified)

    # 4. The derived state deleted: everything is parsed again, and nothing is lost.
    shutil.rmtree(folder / ".memvault")
    async with server_factory(**SERVER) as srv:
        await load(srv)
        assert srv.app.state.service.registry.parses == len(expected)
        assert hot_ids(srv) == expected
        assert hits(srv, "grebeviola") == expected - set(modified) - {"added.md"}
        assert hits(srv, "mongooseceleste") == set(modified)
        for name in sorted(expected - {"added.md"}):
            assert name in hits(srv, WORDS[names.index(name)]), name
        assert (folder / ".memvault" / ".gitignore").read_text().strip() == "*"

    # Loading and reading never rewrote a file.
    assert {name: (folder / name).read_bytes() for name in expected} == before
