"""Retry backoff: the policy a job carries and the wait it gives after a failed attempt.
Pure: no I/O. (Re-exported by :mod:`durabl.model.options`, which holds the other defaults;
here so that :mod:`durabl.model.job` can compute a retry time without importing the
options, which import the job records.)"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal, Protocol

BackoffKind = Literal["exponential", "fixed"]
BACKOFF_KINDS: tuple[BackoffKind, ...] = ("exponential", "fixed")

DEFAULT_BACKOFF: BackoffKind = "exponential"
DEFAULT_BACKOFF_DELAY = 1.0
DEFAULT_BACKOFF_MAX_DELAY = 300.0
MAX_BACKOFF_DELAY = 365 * 24 * 3600.0
"""The longest ``backoff_delay`` or ``backoff_max_delay`` accepted (one year, in seconds):
a wait longer than that is a mistake, not a policy. Jobs stored with more are retried as if
they had asked for this much."""
LATEST_INSTANT = datetime.max.replace(tzinfo=timezone.utc)
"""The last instant a datetime can hold: a ``delay`` that lands later is refused, and a
retry time that would is put here."""
BACKOFF_JITTER = 0.1  # up to +10 % of the computed delay, never past the cap


class HasBackoff(Protocol):
    """What :meth:`BackoffPolicy.for_job` reads: the backoff fields of a stored job."""

    @property
    def backoff(self) -> BackoffKind: ...

    @property
    def backoff_delay(self) -> float: ...

    @property
    def backoff_max_delay(self) -> float: ...


@dataclass(frozen=True)
class BackoffPolicy:
    kind: BackoffKind = DEFAULT_BACKOFF
    delay: float = DEFAULT_BACKOFF_DELAY
    max_delay: float = DEFAULT_BACKOFF_MAX_DELAY

    @classmethod
    def for_job(cls, job: HasBackoff) -> BackoffPolicy:
        """The policy a stored job (a :class:`~durabl.model.job.Job`) carries."""
        return cls(job.backoff, job.backoff_delay, job.backoff_max_delay)

    def delay_for(self, attempt: int, rand: Callable[[], float] = random.random) -> float:
        """Seconds to wait before the next try after ``attempt`` (1-based) failed.

        Never more than :data:`MAX_BACKOFF_DELAY`, whatever the job holds: a job stored
        before enqueue refused such values must still fail and retry cleanly."""
        delay = _clamp_backoff(self.delay)
        max_delay = _clamp_backoff(self.max_delay)
        if self.kind == "fixed":
            base = delay
        else:
            exponent = max(attempt - 1, 0)
            # Avoid float overflow for absurd attempt counts: the cap wins long before.
            base = max_delay if exponent > 60 else delay * 2**exponent
            base = min(base, max_delay)
            base = min(base + base * BACKOFF_JITTER * rand(), max_delay)
        return base

    def next_run_at(
        self, attempt: int, now: datetime, rand: Callable[[], float] = random.random
    ) -> datetime:
        try:
            return now + timedelta(seconds=self.delay_for(attempt, rand))
        except OverflowError:  # only a clock within a year of the year 9999 gets here
            return LATEST_INSTANT


def _clamp_backoff(seconds: float) -> float:
    """A stored backoff duration within ``[0, MAX_BACKOFF_DELAY]`` (NaN counts as the most)."""
    if math.isnan(seconds):
        return MAX_BACKOFF_DELAY
    return min(max(seconds, 0.0), MAX_BACKOFF_DELAY)
