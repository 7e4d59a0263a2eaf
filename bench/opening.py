"""How a benchmark opens memvault's store and recall, in this version or in one from before the
composition root (memvault.ops.service), for the benchmarks that run two versions side by side."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any


@dataclass
class Opened:
    """The store, its embeddings and loaded token states, a Recaller over it, and its life."""

    store: Any
    embeddings: Any
    states: dict[str, Any]  # token -> TokenState
    registry: Any
    recaller: Callable[..., Any]  # recaller(reranking=..., weights=...) -> Recaller
    close: Callable[[], Awaitable[None]]
    idle: Callable[[], Awaitable[None]]


def open_store(settings: Any, **options: Any) -> Opened:
    """Build the store for ``settings`` (``options``: clock=...) as this memvault builds it."""
    try:
        from memvault.ops.recall import Recaller
        from memvault.ops.store import Store
    except ImportError:  # a version from before the package had folders
        from memvault.recall import Recaller  # type: ignore[no-redef]
        from memvault.store import Store  # type: ignore[no-redef]
    try:
        from memvault.ops.service import Service
    except ImportError:  # before the composition root: the store built its parts
        store = Store(settings, **options)
        return Opened(
            store,
            store.embeddings,
            store.tokens,
            getattr(store, "registry", None),
            lambda **kw: Recaller(store, **kw),
            store.close,
            store.idle,
        )
    service = Service(settings, **options)
    return Opened(
        service.store,
        service.embeddings,
        service.registry.states,
        service.registry,
        lambda **kw: Recaller(service.store, service.registry, service.embeddings, **kw),
        service.close,
        service.idle,
    )
