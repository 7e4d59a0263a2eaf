"""stub"""

from typing import Any


def add_parser(sub: Any, vault: Any) -> None:
    pass


def command(settings: Any, args: Any) -> int:
    return 2
