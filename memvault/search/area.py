"""An area: the memories of one folder (hot or archive) and their search index, kept in step."""

from __future__ import annotations

from collections.abc import (
    ItemsView,
    Iterable,
    Iterator,
    KeysView,
    Mapping,
    MutableMapping,
    Sequence,
    ValuesView,
)
from dataclasses import dataclass, field
from itertools import islice
from typing import Protocol, overload

from memvault.disk.markdown import Memory
from memvault.search.index import Index

__all__ = ["Area", "Memories", "Rows"]


class Rows(Protocol):
    """Stored memories not yet built into Memory objects (a snapshot's decoded columns)."""

    def build(self, rows: Sequence[int]) -> list[Memory]:
        """The memories at these row numbers. Never fails: the rows were checked when decoded."""
        ...


class Memories(MutableMapping[str, Memory]):
    """An area's memories by id. Restored from a snapshot, a memory is built from its row when
    first asked for, or when ``fill`` builds the rest in batches: a restart at 100,000 memories
    answers without first building them all (0.5-0.8 s of a 3 s restart on a slow machine).

    Whatever needs them all (iteration, ``values()``, ``items()``) builds what is left first, so
    callers see a plain mapping. Not thread-safe: callers hold the token's ``mem_lock``, as for
    a dict, since a lookup may build (and store) a memory.
    """

    __slots__ = ("_built", "_rows", "_source")

    def __init__(self, memories: Iterable[Memory] = ()) -> None:
        self._built: dict[str, Memory] = {m.id: m for m in memories}
        self._rows: dict[str, int] = {}  # ids not built yet -> their row in _source
        self._source: Rows | None = None

    @classmethod
    def stored(cls, ids: Sequence[str], source: Rows) -> Memories:
        """Memories still in their stored form: ``ids[i]`` is built by ``source.build([i])``.
        Raises ValueError if an id comes twice."""
        memories = cls()
        memories._rows = dict(zip(ids, range(len(ids)), strict=True))
        if len(memories._rows) != len(ids):
            raise ValueError("the same memory twice")
        memories._source = source if ids else None
        return memories

    # --- building ------------------------------------------------------------------------------

    @property
    def unbuilt(self) -> int:
        """Memories still in their stored form."""
        return len(self._rows)

    def fill(self, most: int | None = None) -> bool:
        """Build up to ``most`` of the memories not built yet (all of them by default); True once
        none is left."""
        rows = self._rows
        if rows:
            ids = list(rows) if most is None or most >= len(rows) else list(islice(rows, most))
            numbers = [rows.pop(id) for id in ids]
            assert self._source is not None
            self._built.update(zip(ids, self._source.build(numbers), strict=True))
            self._drop_source_when_done()
        return not self._rows

    def filled(self) -> Mapping[str, Memory]:
        """All of them, built (a read-only view, valid while the caller holds the lock)."""
        self.fill()
        return self._built

    def _drop_source_when_done(self) -> None:
        """Once every row is built or gone, the stored form goes, and so does the emptied dict's
        table (a dict never shrinks, and at 100,000 ids its table is large)."""
        if not self._rows:
            self._source = None
            self._rows = {}

    def _build(self, id: str) -> Memory:
        row = self._rows.pop(id)
        assert self._source is not None
        memory = self._built[id] = self._source.build([row])[0]
        self._drop_source_when_done()
        return memory

    # --- the mapping ---------------------------------------------------------------------------

    def __getitem__(self, id: str) -> Memory:
        memory = self._built.get(id)
        return memory if memory is not None else self._build(id)

    def get(self, id: str, default: Memory | None = None) -> Memory | None:  # type: ignore[override]
        memory = self._built.get(id)
        if memory is not None:
            return memory
        return self._build(id) if id in self._rows else default

    def __contains__(self, id: object) -> bool:
        return id in self._built or id in self._rows

    def __len__(self) -> int:
        return len(self._built) + len(self._rows)

    def __iter__(self) -> Iterator[str]:
        return iter(self.filled())

    def keys(self) -> KeysView[str]:
        return self.filled().keys()

    def values(self) -> ValuesView[Memory]:
        return self.filled().values()

    def items(self) -> ItemsView[str, Memory]:
        return self.filled().items()

    def __setitem__(self, id: str, memory: Memory) -> None:
        if self._rows.pop(id, None) is not None:
            self._drop_source_when_done()
        self._built[id] = memory

    def __delitem__(self, id: str) -> None:
        if self._rows.pop(id, None) is None:
            del self._built[id]
        else:
            self._drop_source_when_done()

    def pop(self, id: str, default: object = None) -> object:  # type: ignore[override]
        if id in self._rows:
            self._build(id)
        return self._built.pop(id, default)

    def __repr__(self) -> str:
        return f"<Memories: {len(self._built)} built, {len(self._rows)} stored>"


@dataclass(eq=False)
class Area:
    """The memories of one folder (hot or archive) and their search index (compared by identity)."""

    memories: Memories = field(default_factory=Memories)
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
        return self.memories.pop(id, None)  # type: ignore[return-value]

    def in_order(self) -> InOrder:
        """The memories sorted by id, as they are now. The order is kept between calls (a listing
        asks for it on every call; sorting a large area each time was a share of
        list_memory_titles under load)."""
        memories = self.memories.filled()
        if self._sorted is None:
            self._sorted = sorted(memories)
        return InOrder(self._sorted, dict(memories))


class InOrder(Sequence[Memory]):
    """Memories in the order of ``ids`` (a list never changed in place), taken from a copy of the
    area's dict: a listing shows the first few hundred of them, and copying the dict cost a tenth
    of building the list of all of them."""

    def __init__(self, ids: list[str], memories: dict[str, Memory]) -> None:
        self._ids = ids
        self._memories = memories

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[Memory]:
        return map(self._memories.__getitem__, self._ids)

    @overload
    def __getitem__(self, i: int) -> Memory: ...

    @overload
    def __getitem__(self, i: slice) -> list[Memory]: ...

    def __getitem__(self, i: int | slice) -> Memory | list[Memory]:
        if isinstance(i, slice):
            return [self._memories[id] for id in self._ids[i]]
        return self._memories[self._ids[i]]
