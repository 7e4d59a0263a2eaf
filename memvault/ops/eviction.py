"""The eviction policy: which hot memories go to the archive, and when a sweep is due (pure, no I/O)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

__all__ = ["Candidate", "Eviction", "Limits", "Prefilter", "plan", "sweep_due"]

_DAY = timedelta(days=1)


@dataclass(frozen=True, slots=True)
class Limits:
    """Knobs of the policy; TTLs may be ``math.inf`` to switch that TTL off."""

    ttl_p1_days: float = 90
    ttl_p2_days: float = 30
    capacity: int = 50  # max hot memories after the sweep
    protect_importance: float = 0.9  # importance >= this is never evicted
    grace_hours: float = 24  # a memory written or imported this recently is never evicted

    def __post_init__(self) -> None:
        for name in ("ttl_p1_days", "ttl_p2_days", "grace_hours"):
            value = getattr(self, name)
            if math.isnan(value) or value < 0:
                raise ValueError(f"{name} must be >= 0 (or math.inf), got {value!r}")
        if self.capacity < 0:
            raise ValueError(f"capacity must be >= 0, got {self.capacity!r}")
        if math.isnan(self.protect_importance):
            raise ValueError("protect_importance must be a number, got nan")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One hot memory as the policy sees it; the caller gathers these from the vault and sidecar."""

    id: str
    priority: str  # "P0" | "P1" | "P2" (anything else treated as P2)
    last_access: datetime  # aware: the later of sidecar record and file's lastAccessedAt (caller computes)
    importance: float | None = None
    pinned: bool = False  # e.g. file with conflict markers: never moved by the server
    written: datetime | None = None  # aware: when it was last written or imported (None: unknown)


@dataclass(frozen=True, slots=True)
class Eviction:
    """A decision to archive one memory, with a reason a person can read."""

    id: str
    reason: str


def _rank(priority: str) -> str:
    # Case and whitespace are forgiven: a hand-edited "p0" must stay protected, not fall to P2.
    normalized = priority.strip().upper()
    return normalized if normalized in ("P0", "P1") else "P2"


def _protected(candidate: Candidate, limits: Limits) -> bool:
    """True if the candidate may never be evicted, neither by TTL nor by capacity."""
    if candidate.pinned or _rank(candidate.priority) == "P0":
        return True
    importance = candidate.importance
    # NaN compares False, so an unparseable importance simply does not protect.
    return importance is not None and importance >= limits.protect_importance


def _fresh(candidate: Candidate, now: datetime, limits: Limits) -> bool:
    """Written or imported within the grace period: an agent that wrote 200 memories, or a person
    who imported a folder, must not see most of them archived by the next read."""
    written = candidate.written
    return written is not None and (now - written) / timedelta(hours=1) < limits.grace_hours


def _require_aware(value: datetime, what: str) -> None:
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"{what} must be timezone-aware, got naive {value.isoformat()}")


def _date(value: datetime) -> str:
    return value.astimezone(UTC).date().isoformat()


def _days(value: float) -> str:
    return f"{value:g}"


def _lru_key(candidate: Candidate) -> tuple[datetime, str]:
    return candidate.last_access, candidate.id


def plan(
    candidates: Sequence[Candidate], now: datetime, limits: Limits, *, unlisted: int = 0
) -> list[Eviction]:
    """Decide which candidates to archive: TTL evictions (oldest first), then capacity evictions.

    P0, pinned and important (``importance >= limits.protect_importance``) memories are never
    evicted, nor those written or imported within ``limits.grace_hours``; they all count toward
    capacity, so capacity may stay exceeded when only they remain. ``unlisted`` counts hot
    memories left out of ``candidates`` because :class:`Prefilter` found neither rule can touch
    them: they count toward capacity too.
    Raises ``ValueError`` for naive datetimes or duplicate ids (both are caller bugs).
    """
    _require_aware(now, "now")
    seen: set[str] = set()
    for candidate in candidates:
        _require_aware(candidate.last_access, f"last_access of {candidate.id!r}")
        if candidate.written is not None:
            _require_aware(candidate.written, f"written of {candidate.id!r}")
        if candidate.id in seen:
            raise ValueError(f"duplicate candidate id {candidate.id!r}")
        seen.add(candidate.id)

    ttl_days = {"P1": limits.ttl_p1_days, "P2": limits.ttl_p2_days}
    evictable = sorted(
        (c for c in candidates if not _protected(c, limits) and not _fresh(c, now, limits)), key=_lru_key
    )

    evictions: list[Eviction] = []
    kept: list[Candidate] = []
    for candidate in evictable:
        rank = _rank(candidate.priority)
        ttl = ttl_days[rank]
        # A last_access in the future (clock skew) gives a negative age: treated as fresh.
        age = now - candidate.last_access
        if age / _DAY > ttl:
            evictions.append(
                Eviction(
                    candidate.id,
                    f"{rank}, not accessed for {age // _DAY} days since {_date(candidate.last_access)} "
                    f"(TTL {_days(ttl)} days)",
                )
            )
        else:
            kept.append(candidate)

    hot = len(candidates) + unlisted - len(evictions)
    if hot <= limits.capacity:
        return evictions
    # P2 before P1; within a priority the least recently accessed first (ids break ties).
    queue = sorted(kept, key=lambda c: (_rank(c.priority) != "P2", *_lru_key(c)))
    for candidate in queue:
        if hot <= limits.capacity:
            break
        evictions.append(
            Eviction(
                candidate.id,
                f"over capacity ({hot} hot > {limits.capacity}): least recently accessed "
                f"{_rank(candidate.priority)}, last accessed {_date(candidate.last_access)}",
            )
        )
        hot -= 1
    return evictions


_MARGIN = timedelta(milliseconds=1)  # keeps the prefilter clear of rounding: near an edge, plan decides


_LAST = datetime.max.replace(tzinfo=UTC)


def _before(now: datetime, span_days: float) -> datetime | None:
    """``now`` less ``span_days`` days plus the margin, or None when that is before the calendar's
    first day."""
    try:
        start = now - timedelta(days=span_days)
    except OverflowError:
        return None
    return start + _MARGIN if start < _LAST - _MARGIN else _LAST


class Prefilter:
    """Which memories :func:`plan` needs to see, asked before their candidates are built.

    A token's first read plans over all its memories; building a candidate for each one was most of
    a sweep's cost (issue 49) while most memories can be touched by no rule: P0 and important ones
    never, those written within the grace period not yet, and, while the token is at or under
    capacity, those not yet past their priority's TTL. :meth:`needs` is False only for a memory
    :func:`plan` certainly keeps whatever the others are; leave those out and pass their count as
    ``unlisted``: the plan is the same as over every memory.
    """

    __slots__ = ("_capacity_bites", "_cutoff", "_grace", "_protect")

    def __init__(self, hot: int, now: datetime, limits: Limits) -> None:
        _require_aware(now, "now")
        self._capacity_bites = hot > limits.capacity
        self._protect = limits.protect_importance
        # TTL: age / day > ttl implies last_access <= now - ttl days, give or take timedelta's
        # rounding (the margin); None: no last_access is that old.
        self._cutoff = {
            rank: None if math.isinf(days) else _before(now, days)
            for rank, days in (("P1", limits.ttl_p1_days), ("P2", limits.ttl_p2_days))
        }
        # Grace: written after this is certainly fresh; None: any known write is.
        hours = limits.grace_hours
        self._grace = None if math.isinf(hours) else _before(now, hours / 24)

    def needs(
        self,
        priority: str,
        last_access: datetime,
        importance: float | None,
        pinned: bool,
        written: datetime | None,
    ) -> bool:
        """False only if :func:`plan` keeps this memory whatever the others are (``pinned`` as
        the plan will see it: a caller asking what pinning holds back passes False)."""
        if pinned or (importance is not None and importance >= self._protect):
            return False
        rank = _rank(priority)
        if rank == "P0":
            return False
        if written is not None and (self._grace is None or written > self._grace):
            return False
        if self._capacity_bites:
            return True
        cutoff = self._cutoff[rank]
        return cutoff is not None and last_access <= cutoff


def sweep_due(last_run: datetime | None, now: datetime, interval_hours: float) -> bool:
    """True if a sweep should run now: never run before, or at least ``interval_hours`` ago."""
    if math.isnan(interval_hours):
        raise ValueError("interval_hours must be a number, got nan")
    if last_run is None:
        return True
    _require_aware(now, "now")
    _require_aware(last_run, "last_run")
    if last_run > now:
        # A future last_run comes from clock skew or a hand-edited sidecar. Waiting for the clock
        # to catch up could suppress sweeps for an arbitrarily long time; one early sweep is
        # cheap, and it records a sane last_run.
        return True
    return (now - last_run) / timedelta(hours=1) >= interval_hours
