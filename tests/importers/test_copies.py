"""memvault.importers.copies: a copy's hash of itself holds through what the server writes on a read, and
moves with any edit a person makes."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memvault.disk.markdown import parse_memory, rewrite
from memvault.importers import copies as imports
from memvault.importers.copies import Note, copy_digest, copy_of, plan_notes, provenance, write_notes

SOURCES = {
    "frontmatter": b"---\ntags: [run]\n---\n# Run\n\nLong run on Sunday.\n",
    "blank line after the fence": b"---\ntype: person\n---\n\n- [role] Designer\n",
    "no frontmatter": b"# Storefront\n\nSee [[Alice]].\n",
    "no heading, leading blank lines": b"\n\nplain text\n",
    "crlf": b"---\r\ntags: [a]\r\n---\r\n# T\r\n\r\nbody\r\n",
    "bom": "\ufeff---\ntitle: B\n---\nbody\n".encode(),
    "broken yaml": b"---\ntags: [a\n---\n# Broken\n\nstill text\n",
    "no closing fence": b"---\ntitle: open\n\nbody\n",
    "own times": b"---\nupdatedAt: 2026-01-01T00:00:00.000Z\n"
    b"lastAccessedAt: 2026-01-02T00:00:00.000Z\n---\nx\n",
}
AT = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)


def note(data: bytes) -> Note:
    return Note("notes/a.md", data, "a.md", "notes:notes/a.md", hashlib.sha256(data).hexdigest())


def read_back(data: bytes, when: datetime) -> bytes:
    """The file after the server wrote a read's access time into it."""
    text = data.decode("utf-8")
    return rewrite(text, {"lastAccessedAt": when}, title=None, content=None).encode("utf-8")


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_reads_written_back_leave_the_copy_as_the_import_wrote_it(kind: str) -> None:
    copy = copy_of(note(SOURCES[kind]), AT)
    stored = provenance(copy)
    assert stored.source_hash == hashlib.sha256(SOURCES[kind]).hexdigest()
    assert stored.copy_hash == copy_digest(copy)
    once = read_back(copy, datetime(2026, 11, 29, tzinfo=UTC))
    twice = read_back(once, datetime(2026, 12, 1, tzinfo=UTC))
    assert once != copy and copy_digest(twice) == stored.copy_hash


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_an_edit_of_the_body_or_title_changes_the_copys_hash(kind: str) -> None:
    copy = copy_of(note(SOURCES[kind]), AT)
    text = copy.decode("utf-8")
    assert copy_digest((text + "one more line\n").encode()) != provenance(copy).copy_hash
    retitled = rewrite(text, {}, title="Another title", content=None).encode("utf-8")
    assert copy_digest(retitled) != provenance(copy).copy_hash


@pytest.mark.parametrize("kind", sorted(SOURCES))
def test_a_copy_reads_as_its_source_does(kind: str) -> None:
    source = parse_memory(SOURCES[kind], "notes/a.md")
    copy = parse_memory(copy_of(note(SOURCES[kind]), AT), "notes/a.md")
    if source.problem is None:
        assert (copy.title, copy.content, copy.tags, copy.problem) == (
            source.title,
            source.content,
            source.tags,
            None,
        )
        assert copy.meta["importedAt"] == AT
    else:  # what a person must fix stays visible; where it came from is still read from its lines
        assert copy.problem is not None or kind == "no closing fence"
        assert provenance(copy_of(note(SOURCES[kind]), AT)).source_hash is not None


# ---------------------------------------------------------------------------- links in the vault


def test_a_link_at_a_copys_name_is_never_read_through(tmp_path: Path) -> None:
    """A link to another memory of the vault stands where the copy goes: it is left alone, not
    read (were it read, the linked memory's text would pass for the copy)."""
    vault = tmp_path / "alice"
    source = SOURCES["frontmatter"]
    (vault / "notes").mkdir(parents=True)
    (vault / "other.md").write_bytes(source)
    (vault / "notes" / "a.md").symlink_to("../other.md")
    planned = plan_notes(vault, [note(source)], now=AT)
    assert planned.named(imports.LINKED) == ["notes/a.md"]
    write_notes(vault, planned, lambda _: None)
    assert (vault / "notes" / "a.md").is_symlink()
    assert (vault / "other.md").read_bytes() == source


def test_a_link_put_in_a_copys_place_after_the_plan_is_left_alone(tmp_path: Path) -> None:
    vault = tmp_path / "alice"
    old, new = SOURCES["frontmatter"], SOURCES["no frontmatter"]
    first = plan_notes(vault, [note(old)], now=AT)
    write_notes(vault, first, lambda _: None)
    copy = vault / "notes" / "a.md"
    planned = plan_notes(vault, [note(new)], refresh=True, now=AT)
    assert planned.named(imports.REFRESH) == ["notes/a.md"]
    (vault / "other.md").write_bytes(copy.read_bytes())  # the same bytes, behind a link
    copy.unlink()
    copy.symlink_to("../other.md")
    done = write_notes(vault, planned, lambda _: None)
    assert done.named(imports.LINKED) == ["notes/a.md"]
    assert copy.is_symlink() and copy_digest((vault / "other.md").read_bytes()) == copy_digest(
        first.steps[0].copy
    )
