"""Time words in a query: the span of creation times they point at, and the query without them.

"What did I buy 10 days ago?" asks about memories written about ten days before now; its "10" is
not a word to look for (it would match a date such as ``2023/03/10`` or a time such as ``10:06``).
:func:`read_time` finds one such phrase ("N days/weeks/months/years ago", "yesterday", "last
week/month/year/weekend", "last Saturday", "in May"), turns it into a span of POSIX seconds around
the moment it names, generous because people round ("a week ago" may be nine days), and returns the
query with the phrase taken out. A date said outright ("on 16 June, 2023", "October 13",
"2023-05-20", "in July 2023") comes first: it names the day or month itself, whatever relative
words go with it ("last Friday on 23 January" was said on the 23rd), and its words stay in the
query, since a note may name the same date ("Standup, 16 June 2023: ..."). Pure functions of the
query and ``now``.
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
_MONTH = r"(" + "|".join(m[:3] + (m[3:] and f"(?:{m[3:]})?") for m in _MONTHS) + r")\.?"
_DAY_OF_MONTH = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?:,?\s+(\d{4}))"
# "on 16 June, 2023", "13 Oct", "October 13, 2023", "May 16th 2023", "2023-05-20", "2023/05/20";
# "in July 2023" (a month and its year; a month alone is _IN_MONTH's).
_NOT_A_NUMBER_NEXT = r"?\b(?![-/:]?\d)"
_DATES = (
    (
        "dmy",
        re.compile(
            r"\b(?:on\s+)?" + _DAY_OF_MONTH + r"\s+(?:of\s+)?" + _MONTH + _YEAR + _NOT_A_NUMBER_NEXT, re.I
        ),
    ),
    ("mdy", re.compile(r"\b(?:on\s+)?" + _MONTH + r"\s+" + _DAY_OF_MONTH + _YEAR + _NOT_A_NUMBER_NEXT, re.I)),
    ("ymd", re.compile(r"\b(?:on\s+)?(\d{4})[-/](\d{1,2})[-/](\d{1,2})\b", re.I)),
    ("my", re.compile(r"\b(?:(?:in|during)\s+)?" + _MONTH + r",?\s+(\d{4})\b", re.I)),
)
_IN_MONTH = re.compile(r"\b(?:in|during)\s+(" + "|".join(_MONTHS) + r")\b", re.IGNORECASE)
# How far back "last ..." reaches, in days: a span ending now (and _AHEAD past it).
_LAST_SPANS = {
    "yesterday": 2,
    "last night": 2,
    "last week": 14,
    "last weekend": 10,
    "last month": 62,
    "last year": 730,
}
# A span that reaches now also takes in the day after it: a note's creation time may run ahead of
# this clock (a vault synced from a machine whose clock or zone runs ahead, a time a person typed
# in local time and read as UTC); this server writes nothing later than now, so that costs nothing.
_AHEAD = _DAY


@dataclass(frozen=True, slots=True)
class TimeWords:
    start: float  # POSIX seconds, inclusive
    end: float
    rest: str  # the words to search: the query without a relative phrase (an outright date stays)


def read_time(query: str, now: datetime) -> TimeWords | None:
    """The span the first time phrase of ``query`` names, relative to ``now``, or None."""
    said = _date(query, now)
    if said is not None:  # "16 June, 2023" is also words a note may hold: they stay searched
        return TimeWords(*said, query)
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
            at = now.timestamp()
            return _words(query, found, at - _LAST_SPANS[phrase] * _DAY, at + _AHEAD)
        back = (now.weekday() - _WEEKDAYS.index(phrase.split()[1])) % 7 or 7
        day = now.timestamp() - back * _DAY
        return _words(query, found, day - _DAY, day + _DAY)
    found = _IN_MONTH.search(query)
    if found:
        month = _MONTHS.index(found.group(1).lower()) + 1
        year = now.year if month <= now.month else now.year - 1
        span = _month_span(year, month)
        return None if span is None else _words(query, found, *span)
    return None


def _date(query: str, now: datetime) -> tuple[float, float] | None:
    """The span of a date said outright: its day (a day either side, as the day ends in another
    time zone and notes follow events) or its month (three days either side)."""
    for kind, pattern in _DATES:
        for found in pattern.finditer(query):
            groups = found.groups()
            if kind == "my":
                span = _month_span(int(groups[1]), _month(groups[0]))
                if span is None:
                    continue
                return span
            said = found.group(0).split()
            if kind != "ymd" and not groups[-1] and said[-1 if kind == "dmy" else 0] == "may":
                continue  # "I may 2 ...": a verb, not a month, unless it has a year or a capital
            if kind == "ymd":
                year, month, day = int(groups[0]), int(groups[1]), int(groups[2])
            elif kind == "dmy":
                day, month, year = int(groups[0]), _month(groups[1]), _year(groups[2])
            else:
                month, day, year = _month(groups[0]), int(groups[1]), _year(groups[2])
            at = _day(now.year if year is None else year, month, day)
            if at is None:
                continue
            if year is None and at > now.timestamp():  # "on 3 March" said before March: last year's
                at = _day(now.year - 1, month, day)
                if at is None:
                    continue
            return at - _DAY, at + 2 * _DAY
    return None


def _month_span(year: int, month: int) -> tuple[float, float] | None:
    """A month, three days either side (people round, and notes follow events); None if the
    calendar has no such month (year 0, or past 9999)."""
    start, after = _day(year, month, 1), _day(year + month // 12, month % 12 + 1, 1)
    if start is None or after is None:
        return None
    return start - 3 * _DAY, after + 3 * _DAY


def _year(said: str | None) -> int | None:
    return int(said) if said else None


def _month(name: str) -> int:
    return next(i for i, m in enumerate(_MONTHS, 1) if m.startswith(name.lower().rstrip(".")[:3]))


def _day(year: int, month: int, day: int) -> float | None:
    """The start of that day (UTC), None if there is no such day."""
    try:
        return datetime(year, month, day, tzinfo=UTC).timestamp()
    except ValueError:
        return None


def _words(query: str, found: re.Match[str], start: float, end: float) -> TimeWords:
    rest = " ".join((query[: found.start()] + " " + query[found.end() :]).split())
    return TimeWords(start, end, rest)
