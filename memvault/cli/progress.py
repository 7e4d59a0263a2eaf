"""Progress bars of the long CLI commands: count and rate on a terminal, silent otherwise."""

from __future__ import annotations

import sys
from types import TracebackType


class Progress:
    """A progress bar with count and rate (tqdm) when stderr is a terminal; silent otherwise, so
    scripts and CI logs get only the summary lines. Called with a number of steps done; the bar
    goes when the ``with`` block ends."""

    def __init__(self, label: str, unit: str = " files") -> None:
        from tqdm import tqdm  # type: ignore[import-untyped]

        self.bar = tqdm(desc=label, unit=unit, file=sys.stderr, disable=not sys.stderr.isatty(), leave=False)

    def __call__(self, step: int) -> None:
        self.bar.update(step)

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.bar.close()
