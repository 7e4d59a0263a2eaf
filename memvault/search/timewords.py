"""Time words in a query: the span of creation times they point at, and the query without them.

"What did I buy 10 days ago?" asks about memories written about ten days before now; its "10" is
not a word to look for (it would match a date such as ``2023/03/10`` or a time such as ``10:06``).
:func:`read_time` finds one such phrase ("N days/weeks/months/years ago", "yesterday", "last
week/month/year/weekend", "last Saturday", "in May"), turns it into a span of POSIX seconds around
the moment it names, generous because people round ("a week ago" may be nine days), and returns the
query with the phrase taken out. Pure functions of the query and ``now``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = ["TimeWords", "read_time"]

_DAY = 86400.0
_NUMBERS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "a couple of": 2,
    "a few": 3,
}
_UNITS = {"day": 1, "week": 7, "month": 30, "year": 365}
_MONTHS = "january february march april may june july august september october november december".split()
_WEEKDAYS = "monday tuesday wednesday thursday friday saturday sunday".split()
_AGO = re.compile(
    r"\b(\d{1,3}|a couple of|a few|an?|one|two|three|four|five|six|seven|eight|nine|ten)\s+"
    r"(day|week|month|year)s?\s+ago\b",
    re.IGNORECASE,
)
_LAST = re.compile(
    r"\b(yesterday|last\s+(?:night|week|weekend|month|year|" + "|".join(_WEEKDAYS) + r"))\b", re.IGNORECASE
)
_IN_MONTH = re.compile(r"\b(?:in|during)\s+(" + "|".join(_MONTHS) + r")\b", re.IGNORECASE)
# How far back "last ..." reaches, in days: a span ending now.
_LAST_SPANS = {
    "yesterday": 2,
    "last night": 2,
    "last week": 14,
    "last weekend": 10,
    "last month": 62,
    "last year": 730,
}


@dataclass(frozen=True, slots=True)
class TimeWords:
    start: float  # POSIX seconds, inclusive
    end: float
    rest: str  # the query without the phrase


def read_time(query: str, now: datetime) -> TimeWords | None:
    """The span the first time phrase of ``query`` names, relative to ``now``, or None."""
    found = _AGO.search(query)
    if found:
        amount = found.group(1).lower()
        count = int(amount) if amount.isdigit() else _NUMBERS[" ".join(amount.split())]
        days = count * _UNITS[found.group(2).lower()]
        slack = max(1.5, 0.25 * days)
        at = now.timestamp() - days * _DAY
        return _words(query, found, at - slack * _DAY, at + slack * _DAY)
    found = _LAST.search(query)
    if found:
        phrase = " ".join(found.group(1).lower().split())
        if phrase in _LAST_SPANS:
            return _words(query, found, now.timestamp() - _LAST_SPANS[phrase] * _DAY, now.timestamp())
        back = (now.weekday() - _WEEKDAYS.index(phrase.split()[1])) % 7 or 7
        day = now.timestamp() - back * _DAY
        return _words(query, found, day - _DAY, day + _DAY)
    found = _IN_MONTH.search(query)
    if found:
        month = _MONTHS.index(found.group(1).lower()) + 1
        year = now.year if month <= now.month else now.year - 1
        start = datetime(year, month, 1, tzinfo=UTC).timestamp()
        end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC).timestamp()
        return _words(query, found, start - 3 * _DAY, end + 3 * _DAY)
    return None


def _words(query: str, found: re.Match[str], start: float, end: float) -> TimeWords:
    rest = " ".join((query[: found.start()] + " " + query[found.end() :]).split())
    return TimeWords(start, end, rest)
