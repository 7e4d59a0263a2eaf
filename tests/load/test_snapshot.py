"""Derived state's codecs (memvault.load.snapshot): parse-cache rows and snapshot columns."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from strategies import MEM_MCP, PROPS, contents, fm_ish, tags_st, times, titles

from memvault.disk.markdown import PRIORITIES, Memory, memory_fields, parse_memory, render_new
from memvault.load.loader import fields_of
from memvault.load.snapshot import (
    READABLE,
    VERSION,
    StoredRows,
    areas_from,
    encode_areas,
    fields_to_columns,
    from_cache,
    load,
    memories_from_columns,
    memories_to_columns,
    save,
    to_cache,
)
from memvault.load.snapshot import path as snapshot_path
from memvault.search.index import Index


def parse(text: str, id: str = "note.md", **kwargs: object) -> object:
    return parse_memory(text.encode("utf-8"), id, **kwargs)  # type: ignore[arg-type]


# ============================================================================ parse cache


def without_meta(m: Memory) -> dict[str, object]:
    return {f: getattr(m, f) for f in Memory.__slots__ if f != "meta"}  # type: ignore[attr-defined]


@PROPS
@given(
    st.one_of(
        st.builds(
            lambda title, content, tags, p: render_new(
                title, content, {"priority": p, "createdAt": datetime(2026, 1, 1, tzinfo=UTC), "tags": tags}
            ),
            titles,
            contents,
            tags_st,
            st.sampled_from(PRIORITIES),
        ),
        fm_ish.map(lambda t: "---\n" + t),
        st.text(max_size=200),
    ),
    st.integers(0, 2**62),
)
@example(MEM_MCP, 0)
@example("---\ncreatedAt: 2026-01-15T12:00:00.123456Z\n---\nx", 0)
@example("# T\n\n<<<<<<< a\n=======\n>>>>>>> b\n", 1_700_000_000_123_456_789)
def test_the_parse_cache_gives_back_what_parsing_gave(text: str, mtime_ns: int) -> None:
    raw = text.encode("utf-8")
    parsed = parse_memory(raw, "dir/x.md", archived=True, mtime_ns=mtime_ns)
    cached = from_cache(
        to_cache(parsed), "dir/x.md", archived=True, mtime_ns=mtime_ns, size=len(raw), hash=parsed.hash
    )
    assert cached is not None
    assert without_meta(cached) == without_meta(parsed)
    # The index snapshot's columns give back the same, next to a memory with every optional field set.
    other = parse_memory(
        b"---\nimportance: 0.7\ntags: [a, b]\nlastAccessedAt: 2026-03-01\n---\n# O\n\nx", "o.md"
    )
    columns = memories_to_columns([parsed, other])
    back = memories_from_columns(columns, archived=True)
    assert [without_meta(m) for m in back] == [
        without_meta(parsed),
        without_meta(dataclasses.replace(other, archived=True)),
    ]


def test_snapshot_columns_share_repeated_tag_sets_and_priorities() -> None:
    texts = [b"---\ntags: [a, b]\n---\n# One\n", b"---\ntags: [a, b]\n---\n# Two\n", b"# Three\n"]
    memories = [parse_memory(text, f"{i}.md") for i, text in enumerate(texts)]
    back = memories_from_columns(memories_to_columns(memories), archived=False)
    assert [without_meta(m) for m in back] == [without_meta(m) for m in memories]
    assert back[0].tags == ("a", "b") and back[0].tags is back[1].tags and back[2].tags == ()
    assert back[0].priority is back[1].priority is back[2].priority  # one "P2" for all


def test_a_snapshot_keeps_memories_in_index_order_and_restores_one_id_string_for_both() -> None:
    memories = [parse_memory(f"# Note {i}\n\nbody {i}".encode(), f"n{i}.md") for i in range(6)]
    index = Index()
    for m in reversed(memories):  # the index's order is not the memories' order
        index.upsert(m.id, title=m.title, body=m.content)
    index.remove("n4.md")
    index.upsert("n4.md", title=memories[4].title, body=memories[4].content)  # a freed number again
    empty = Index().snapshot()
    data = encode_areas([("hot", index.snapshot(), memories), ("archive", empty, [])])
    want = {m.id: without_meta(m) for m in memories}
    hot, archive = areas_from(data)
    assert {id: without_meta(m) for id, m in hot.memories.items()} == want
    assert all(a is b for a, b in zip(sorted(hot.memories), sorted(hot.index.ids()), strict=True))
    assert archive.memories == {}
    # Memories in another order than the index (as an older server wrote them) load as well.
    data.update({f"hot.memories.{key}": value for key, value in memories_to_columns(memories).items()})
    hot, _ = areas_from(data)
    assert {id: without_meta(m) for id, m in hot.memories.items()} == want
    assert sorted(hot.index.ids()) == sorted(hot.memories)


def test_snapshot_columns_from_another_parser_version_are_refused() -> None:
    columns = memories_to_columns([parse_memory(b"# T\n\nbody", "t.md")])
    columns["version"] = columns["version"] + 1
    with pytest.raises(ValueError, match="parser version"):
        memories_from_columns(columns, archived=False)
    columns = memories_to_columns([parse_memory(b"# T\n\nbody", "t.md")])
    columns["size"] = columns["size"][:0]
    with pytest.raises(ValueError, match="length"):
        memories_from_columns(columns, archived=False)
    columns = memories_to_columns([parse_memory(b"# T\n\nbody", "t.md")])
    columns["priority"] = columns["priority"] + len(PRIORITIES)
    with pytest.raises(ValueError, match="unknown priority"):
        memories_from_columns(columns, archived=False)
    for name in ("priority", "flags"):  # a build would fail on them
        columns = memories_to_columns([parse_memory(b"# T\n\nbody", "t.md")])
        columns[name] = columns[name].astype(np.float64)
        with pytest.raises(ValueError, match="not integers"):
            StoredRows(columns, archived=False)
    # Memories are built from their rows when first asked for (memvault.search.area.Memories), so what
    # would fail a build is refused when the columns are decoded, while a restart can still fall
    # back to the files.
    for bad in (1e300, -1e300, np.inf):
        columns = memories_to_columns([parse_memory(b"# T\n\nbody", "t.md")] * 2)
        columns["updated"] = np.array([columns["updated"][0], bad])
        with pytest.raises(ValueError, match="time out of range"):
            StoredRows(columns, archived=False)


def test_the_store_does_not_keep_the_frontmatter_mapping() -> None:
    raw = b"---\nsource: web\n---\n# T\n\nbody"
    assert parse_memory(raw, "t.md").meta == {"source": "web"}
    assert parse_memory(raw, "t.md", keep_meta=False).meta == {}


@pytest.mark.parametrize("junk", ["", "[]", "not json", "[1, 2, 3]", '{"a": 1}', "null"])
def test_an_unusable_cache_entry_means_parse_again(junk: str) -> None:
    assert from_cache(junk, "x.md", archived=False, mtime_ns=0, size=0, hash="") is None


def _hot_and_archive(memories: list[Memory]) -> dict[str, np.ndarray]:
    index = Index()
    for m in memories:
        index.upsert(m.id, title=m.title, body=m.content, tags=m.tags)
    return encode_areas([("hot", index.snapshot(), memories), ("archive", Index().snapshot(), [])])


def test_a_version_5_snapshot_still_loads_and_the_next_save_adds_the_postings(tmp_path: Path) -> None:
    memories = [parse_memory(f"# Note {i}\n\nbody word{i % 4}".encode(), f"n{i}.md") for i in range(12)]
    data = _hot_and_archive(memories)
    (tmp_path / ".memvault").mkdir()
    old = {k: v for k, v in data.items() if not k.endswith(("postings", "term_postings"))}
    with open(snapshot_path(tmp_path), "wb") as handle:  # as memvault wrote it before version 6
        np.savez(handle, version=np.array([5]), **old)
    loaded = load(tmp_path)
    assert loaded is not None
    hot, archive = loaded
    assert {id: without_meta(m) for id, m in hot.memories.items()} == {
        m.id: without_meta(m) for m in memories
    }
    assert [h.id for h in hot.index.search("word3")[0]] == ["n3.md", "n7.md", "n11.md"]
    assert len(archive.memories) == 0
    save(tmp_path, old)  # a loader's parts have no postings either: the file gets them
    with np.load(snapshot_path(tmp_path)) as saved:
        assert saved["version"].tolist() == [VERSION]
        assert np.array_equal(saved["hot.index.postings"], data["hot.index.postings"])
    again = load(tmp_path)
    assert again is not None
    assert [h.id for h in again[0].index.search("word3")[0]] == ["n3.md", "n7.md", "n11.md"]


def test_a_snapshot_of_an_unknown_version_is_not_used(tmp_path: Path) -> None:
    data = _hot_and_archive([parse_memory(b"# T\n\nbody", "t.md")])
    (tmp_path / ".memvault").mkdir()
    for version in (min(READABLE) - 1, VERSION + 1):
        with open(snapshot_path(tmp_path), "wb") as handle:
            np.savez(handle, version=np.array([version]), **data)
        assert load(tmp_path) is None


def test_restored_memories_share_equal_times_and_sizes() -> None:
    body = "x" * 400  # a size beyond the ints Python keeps one object of anyway
    texts = [
        f"---\ncreatedAt: 2026-01-0{i}T10:00:00Z\nupdatedAt: 2026-01-0{i}T10:00:00Z\n---\n# N{i}\n\n{body}"
        for i in (1, 2)
    ]
    memories = [parse_memory(text.encode(), f"n{i}.md") for i, text in enumerate(texts)]
    edited = parse_memory(
        b"---\ncreatedAt: 2026-01-01T10:00:00Z\nupdatedAt: 2026-02-01T10:00:00Z\n---\n# E", "e.md"
    )
    back = memories_from_columns(memories_to_columns([*memories, edited]), archived=False)
    assert [without_meta(m) for m in back] == [without_meta(m) for m in [*memories, edited]]
    assert back[0].updated_at is back[0].created_at and back[1].updated_at is back[1].created_at
    assert back[2].updated_at is not None and back[2].updated_at > back[2].created_at  # type: ignore[operator]
    assert back[0].size == back[1].size > 256 and back[0].size is back[1].size


def test_a_snapshot_whose_bytes_changed_is_not_used(tmp_path: Path) -> None:
    """Each array is checked against its member's CRC-32: a changed byte means the files are read."""
    memories = [parse_memory(f"# Note {i}\n\nbody word{i}".encode(), f"n{i}.md") for i in range(12)]
    (tmp_path / ".memvault").mkdir()
    save(tmp_path, _hot_and_archive(memories))
    assert load(tmp_path) is not None
    raw = bytearray(snapshot_path(tmp_path).read_bytes())
    at = raw.index(b"body word11")  # inside the contents' member
    raw[at] ^= 0x20
    snapshot_path(tmp_path).write_bytes(bytes(raw))
    assert load(tmp_path) is None
    snapshot_path(tmp_path).write_bytes(bytes(raw[: len(raw) // 2]))  # cut short
    assert load(tmp_path) is None


# ============================================================================ a loader's columns

ODD_FILES = [
    MEM_MCP.encode(),
    b"",
    b"---\n---\n",
    b"no frontmatter, no heading",
    b"\xef\xbb\xbf---\r\npriority: P0\r\ntags: a, b\r\n---\r\n# Crlf\r\n\r\nbody\r\n",
    b"---\npriority: [\n---\n# Broken yaml\n\nbody",
    b"---\ncreatedAt: 2026-02-30T00:00:00Z\n---\n# Bad date",
    b"---\npriority: P1\n# no closing fence",
    b"<<<<<<< ours\na\n=======\nb\n>>>>>>> theirs\n",
    b"---\nimportedAt: 2026-03-01T00:00:00Z\nupdatedAt: 2025-01-01T00:00:00Z\nimportance: 7\n---\nx",
    b"---\ntitle: From meta\npriority: p0\nimportance: nope\n---\n# Heading\n\ntext",
    b"\xff\xfe not utf-8 \x80",
]
written = st.builds(
    lambda title, content, tags, created, accessed, priority: render_new(
        title,
        content,
        {"priority": priority, "createdAt": created, "updatedAt": accessed, "lastAccessedAt": accessed,
         "tags": tags, "importance": 0.25},
    ).encode("utf-8"),
    titles, contents, tags_st, times, times, st.sampled_from(PRIORITIES),
)  # fmt: skip
stamped_files = st.lists(
    st.tuples(
        st.sampled_from(ODD_FILES) | written | fm_ish.map(str.encode) | st.binary(max_size=120),
        st.booleans(),  # archived
        st.integers(0, 2**62),  # mtime_ns
        st.none() | st.integers(0, 2**40),  # size
        st.integers(0, 2**62),  # change
    ),
    max_size=6,
)


@PROPS
@given(stamped_files)
def test_a_loaders_fields_make_the_columns_its_memories_make(
    files: list[tuple[bytes, bool, int, int | None, int]],
):
    """A loader helper encodes parse results without making Memory objects: the same columns,
    byte for byte, and the same fields as parse_memory's Memory holds."""
    rows, memories = [], []
    for i, (raw, archived, mtime_ns, size, change) in enumerate(files):
        id = f"n{i}.md"
        rows.append(memory_fields(raw, id, archived, mtime_ns, size, change, False))
        memories.append(
            parse_memory(
                raw, id, archived=archived, mtime_ns=mtime_ns, size=size, change=change, keep_meta=False
            )
        )
    assert [fields_of(m) for m in memories] == rows
    got, want = fields_to_columns(rows), memories_to_columns(memories)
    assert list(got) == list(want)
    for key in want:
        assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape, key
        assert got[key].tobytes() == want[key].tobytes(), key
