"""Time: the Clock seam, now in UTC, and the one text form of a time (format_time/parse_time)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from typing import Any, Protocol


class Clock(Protocol):
    """What time it is (UTC, aware); tests pass a fixed or stepping clock instead of sleeping."""

    def __call__(self) -> datetime: ...


def utcnow() -> datetime:
    return datetime.now(UTC)


def format_time(at: datetime) -> str:
    """An aware time as UTC ISO-8601 with milliseconds and ``Z``, as mem-mcp writes them; such
    texts sort in time order. A naive time is refused: its zone would be a guess."""
    text = _formatted.get(at)  # a listing shows a time per memory, the same ones call after call
    if text is not None:
        return text
    if at.tzinfo is None or at.utcoffset() is None:
        raise ValueError("times must be timezone-aware")
    text = at.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"
    if len(_formatted) >= _FORMATTED_MAX:
        _formatted.clear()
    _formatted[at] = text
    return text


_FORMATTED_MAX = 1 << 16
_formatted: dict[datetime, str] = {}


def parse_time(value: Any) -> datetime | None:
    """A time from a frontmatter value or a stored text, as an aware UTC datetime; None if it is
    not one (tolerant: hand-written files hold all sorts). Inverse of :func:`format_time`."""
    if isinstance(value, datetime):
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    if isinstance(value, str) and value.strip():
        text = value.strip()
        if text.endswith(("Z", "z")):
            text = text[:-1] + "+00:00"
        try:
            parsed = datetime.fromisoformat(text)
        except ValueError:
            return None
        return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)
    if isinstance(value, date):  # a hand-written `createdAt: 2026-01-15` (YAML date): midnight UTC
        return datetime(value.year, value.month, value.day, tzinfo=UTC)
    return None


def require_time(value: Any) -> datetime:
    """:func:`parse_time` for values that must be times (stored ones, imports); ValueError if not."""
    parsed = parse_time(value)
    if parsed is None:
        raise ValueError(f"not a time: {str(value)[:40]!r}")
    return parsed
