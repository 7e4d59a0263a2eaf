"""The importer seam: what every kind of import is handed, how it speaks, and what it refuses.

An importer reads and checks all of its sources before it writes anything, says what it did (or,
on a dry run, would do) through its Output, and returns the exit status. A source it cannot take
raises ImportRefused, whose message names the source and says why; nothing is written then.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar, Protocol

from memvault.config import Settings


class ImportRefused(Exception):
    """A source that cannot be imported; the message names it and says why. Nothing was written."""


@dataclass(frozen=True, slots=True)
class ImportOptions:
    """What the person asked for: the vault, the sources and the import's options."""

    token: str | None
    paths: list[Path] = field(default_factory=list)
    dry_run: bool = False
    refresh: bool = False  # bring in sources changed since their import
    priority: str | None = None  # P0, P1 or P2 for the memories written
    into: str | None = None  # notes: the folder in the vault they go to


class Output(Protocol):
    """Where an importer speaks: progress while it works, lines for the person, warnings."""

    def progress(self, label: str, unit: str = " files") -> AbstractContextManager[Callable[[int], None]]: ...

    def say(self, line: str) -> None: ...

    def warn(self, line: str) -> None: ...


class Importer:
    """One kind of source. Subclasses set ``name`` and implement ``run``."""

    name: ClassVar[str]
    # What an interrupted run leaves, as the person is told.
    on_interrupt: ClassVar[str] = "nothing was imported (what it had written was taken back)"

    def __init__(self, settings: Settings, out: Output) -> None:
        self.settings = settings
        self.out = out

    def run(self, options: ImportOptions) -> int:
        """Import ``options.paths`` into ``options.token``'s vault; the exit status (0 done)."""
        raise NotImplementedError
