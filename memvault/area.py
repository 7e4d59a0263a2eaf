"""An area: the memories of one folder (hot or archive) and their search index, kept in step."""

from __future__ import annotations

from dataclasses import dataclass, field

from memvault.index import Index
from memvault.markdown import Memory


@dataclass
class Area:
    """The memories of one folder (hot or archive) and their search index."""

    memories: dict[str, Memory] = field(default_factory=dict)
    index: Index = field(default_factory=Index)
    _sorted: list[str] | None = field(default=None, repr=False)  # the ids in order, until one comes or goes

    def put(self, memory: Memory) -> None:
        old = self.memories.get(memory.id)
        self.memories[memory.id] = memory
        if old is None:
            self._sorted = None
        if old is not None and (old.title, old.tags, old.content) == (
            memory.title,
            memory.tags,
            memory.content,
        ):
            return  # the same words (only an access time or a priority changed): so is the index
        self.index.upsert(memory.id, title=memory.title, body=memory.content, tags=memory.tags)

    def drop(self, id: str) -> Memory | None:
        self.index.remove(id)
        self._sorted = None
        return self.memories.pop(id, None)

    def in_order(self) -> list[Memory]:
        """The memories sorted by id. The order is kept between calls (a listing asks for it on
        every call; sorting a large area each time was a share of list_memory_titles under load)."""
        if self._sorted is None:
            self._sorted = sorted(self.memories)
        memories = self.memories
        return [memories[id] for id in self._sorted]
