"""Time, injectable. Library code reads time only through a :class:`Clock`."""

from __future__ import annotations

import math
import time
from datetime import datetime, timedelta, timezone
from typing import Protocol

Seconds = int | float | timedelta


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes backwards (for local deadlines)."""


class SystemClock:
    """The real clock."""

    def now(self) -> datetime:
        return datetime.now(timezone.utc)

    def monotonic(self) -> float:
        return time.monotonic()


SYSTEM_CLOCK: Clock = SystemClock()


def to_seconds(value: Seconds, name: str = "duration") -> float:
    """Seconds from an int, float or timedelta; a ValueError for anything negative or odd."""
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number of seconds or a timedelta, got {value!r}")
    else:
        seconds = float(value)
    if not math.isfinite(seconds):
        raise ValueError(f"{name} must be finite, got {value!r}")
    if seconds < 0:
        raise ValueError(f"{name} must not be negative, got {value!r}")
    return seconds


def as_utc(value: datetime) -> datetime:
    """An aware UTC datetime from a stored one (stores may hand back naive UTC)."""
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)
