"""An area's memories and index kept in step, and its kept order."""

from __future__ import annotations

from memvault.area import Area
from memvault.markdown import Memory, parse_memory


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
