"""An importer run as the command line runs it, but speaking into lists a test reads."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from memvault import importers
from memvault.config import Settings


@dataclass
class Heard:
    """What an importer said: lines, warnings, and how many steps its progress counted."""

    said: list[str] = field(default_factory=list)
    warned: list[str] = field(default_factory=list)
    steps: int = 0

    @contextlib.contextmanager
    def progress(self, label: str, unit: str = " files") -> Iterator[Callable[[int], None]]:
        def step(n: int) -> None:
            self.steps += n

        yield step

    def say(self, line: str) -> None:
        self.said.append(line)

    def warn(self, line: str) -> None:
        self.warned.append(line)


@dataclass
class Runner:
    root: Path

    def settings(self, **extra: Any) -> Settings:
        return Settings(root=self.root, watch=False, load_processes=0, **extra)

    def __call__(
        self, kind: str, *paths: Path, token: str | None = "alice", **options: Any
    ) -> tuple[int, Heard]:
        heard = Heard()
        importer = importers.find(kind)(self.settings(), heard)
        code = importer.run(importers.ImportOptions(token, list(paths), **options))
        return code, heard


@pytest.fixture
def heard() -> Heard:
    return Heard()


@pytest.fixture
def run_kind(tmp_path: Path) -> Runner:
    return Runner(tmp_path / "memories")
