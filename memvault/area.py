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

    def put(self, memory: Memory) -> None:
        old = self.memories.get(memory.id)
        self.memories[memory.id] = memory
        if old is not None and (old.title, old.tags, old.content) == (
            memory.title,
            memory.tags,
            memory.content,
        ):
            return  # the same words (only an access time or a priority changed): so is the index
        self.index.upsert(memory.id, title=memory.title, body=memory.content, tags=memory.tags)

    def drop(self, id: str) -> Memory | None:
        self.index.remove(id)
        return self.memories.pop(id, None)
