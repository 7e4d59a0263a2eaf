"""An area's memories and index kept in step, and its kept order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memvault.disk.markdown import Memory, parse_memory
from memvault.search.area import Area, Memories


def _memory(id: str, body: str = "some words") -> Memory:
    return parse_memory(f"# {id}\n\n{body}".encode(), id)


def test_in_order_lists_by_id_and_follows_every_put_and_drop() -> None:
    area = Area()
    for id in ("b.md", "a.md", "c.md"):
        area.put(_memory(id))
    assert [m.id for m in area.in_order()] == ["a.md", "b.md", "c.md"]
    area.drop("b.md")
    assert [m.id for m in area.in_order()] == ["a.md", "c.md"]
    area.put(_memory("0.md"))
    assert [m.id for m in area.in_order()] == ["0.md", "a.md", "c.md"]
    changed = _memory("a.md", "other words")
    area.put(changed)
    assert area.in_order()[1] is changed  # the memory as it is now, not the one first sorted
    assert area.index.search("other")[0][0].id == "a.md"


def test_in_order_is_the_area_as_it_was_when_asked_whatever_happens_next() -> None:
    # A listing renders from it after the lock is let go: later puts and drops must not show.
    area = Area()
    for id in ("b.md", "a.md", "c.md"):
        area.put(_memory(id))
    listed = area.in_order()
    first = listed[0]
    area.put(_memory("a.md", "changed words"))
    area.drop("c.md")
    area.put(_memory("0.md"))
    assert len(listed) == 3
    assert [m.id for m in listed] == ["a.md", "b.md", "c.md"]
    assert listed[0] is first and [m.id for m in listed[1:]] == ["b.md", "c.md"]


class _Rows:
    """A stored form that says which rows were built."""

    def __init__(self, memories: list[Memory]) -> None:
        self.memories = memories
        self.built: list[int] = []

    def build(self, rows):
        self.built.extend(rows)
        return [self.memories[i] for i in rows]


def _stored(n: int) -> tuple[Memories, _Rows]:
    source = _Rows([_memory(f"m{i}.md", f"words {i}") for i in range(n)])
    return Memories.stored([m.id for m in source.memories], source), source


def test_stored_memories_are_built_one_at_a_time_when_asked_for() -> None:
    memories, source = _stored(5)
    assert len(memories) == 5 and memories.unbuilt == 5
    assert "m3.md" in memories and "m9.md" not in memories
    assert source.built == []  # looking at ids builds nothing
    assert memories["m3.md"] is source.memories[3]
    assert memories.get("m1.md") is source.memories[1]
    assert memories.get("m3.md") is source.memories[3]  # built once, kept
    assert memories.get("m9.md") is None
    with pytest.raises(KeyError):
        memories["m9.md"]
    assert source.built == [3, 1] and memories.unbuilt == 3


def test_whatever_needs_every_memory_builds_the_rest_first() -> None:
    for look in (list, lambda m: list(m.values()), lambda m: list(m.items()), lambda m: set(m.keys()), dict):
        memories, source = _stored(4)
        memories.get("m2.md")
        assert len(look(memories)) == 4
        assert sorted(source.built) == [0, 1, 2, 3] and memories.unbuilt == 0


def test_fill_builds_in_batches_until_none_is_left() -> None:
    memories, source = _stored(5)
    assert memories.fill(2) is False and memories.unbuilt == 3
    assert memories.fill(2) is False and memories.unbuilt == 1
    assert memories.fill(2) is True and memories.unbuilt == 0
    assert memories.fill(2) is True
    assert sorted(source.built) == [0, 1, 2, 3, 4]
    assert Memories().fill() is True


def test_a_stored_memory_replaced_or_removed_is_never_built() -> None:
    memories, source = _stored(4)
    newer = _memory("m1.md", "newer words")
    memories["m1.md"] = newer
    assert memories["m1.md"] is newer
    del memories["m2.md"]
    assert "m2.md" not in memories and len(memories) == 3
    with pytest.raises(KeyError):
        del memories["m2.md"]
    assert memories.pop("m0.md") is source.memories[0]  # popped: the caller gets it, so it is built
    assert memories.pop("m0.md", None) is None
    assert source.built == [0]
    assert sorted(memories) == ["m1.md", "m3.md"]
    assert memories["m1.md"] is newer and source.built == [0, 3]


def test_the_same_id_twice_is_refused() -> None:
    with pytest.raises(ValueError, match="twice"):
        Memories.stored(["a.md", "a.md"], _Rows([]))


def test_an_area_of_stored_memories_edits_and_lists_like_any_other() -> None:
    memories, source = _stored(3)
    area = Area(memories)
    for m in source.memories:
        area.index.upsert(m.id, title=m.title, body=m.content, tags=m.tags)
    area.put(_memory("m1.md", "words 1"))  # the same words: the index stays as it is
    area.put(_memory("m2.md", "zebra"))
    assert area.index.search("zebra")[0][0].id == "m2.md"
    assert area.drop("m0.md") is source.memories[0]
    assert [m.id for m in area.in_order()] == ["m1.md", "m2.md"]


_IDS = [f"m{i}.md" for i in range(6)]
_OPS = st.lists(
    st.tuples(
        st.sampled_from(["get", "item", "in", "set", "del", "pop", "fill", "len", "values"]),
        st.sampled_from([*_IDS, "other.md"]),
        st.integers(0, 3),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(_OPS)
def test_stored_memories_behave_as_a_dict_of_the_same_memories(ops) -> None:
    memories, source = _stored(6)
    model = {m.id: m for m in source.memories}
    for op, id, n in ops:
        if op == "get":
            assert memories.get(id) is model.get(id)
        elif op == "item":
            if id in model:
                assert memories[id] is model[id]
            else:
                with pytest.raises(KeyError):
                    memories[id]
        elif op == "in":
            assert (id in memories) == (id in model)
        elif op == "set":
            model[id] = memories[id] = _memory(id, f"new words {n}")
        elif op == "del":
            if id in model:
                del memories[id], model[id]
            else:
                with pytest.raises(KeyError):
                    del memories[id]
        elif op == "pop":
            assert memories.pop(id, None) is model.pop(id, None)
        elif op == "fill":
            assert memories.fill(n) == (memories.unbuilt == 0)
        elif op == "len":
            assert len(memories) == len(model)
        else:
            assert sorted(memories.values(), key=lambda m: m.id) == sorted(model.values(), key=lambda m: m.id)
        assert len(memories) == len(model)
    assert dict(memories) == model
    assert len(source.built) == len(set(source.built))  # no row built twice
