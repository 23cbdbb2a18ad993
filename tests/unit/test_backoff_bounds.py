"""BackoffPolicy never produces a wait past MAX_BACKOFF_DELAY nor an instant past the last
datetime, whatever a stored job holds."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

import pytest

from durabl.model.options import LATEST_INSTANT, MAX_BACKOFF_DELAY, BackoffPolicy

NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)


def no_jitter() -> float:
    return 0.0


def full_jitter() -> float:
    return 1.0


@pytest.mark.parametrize(
    ("kind", "delay", "max_delay"),
    [
        ("fixed", 1e15, 1e16),
        ("exponential", 1e15, 1e16),
        ("exponential", 1e300, 1e300),
        ("exponential", 1.0, math.inf),
        ("fixed", math.nan, 1.0),
        ("exponential", math.nan, math.nan),
        ("fixed", math.inf, math.inf),
    ],
)
def test_a_stored_absurd_backoff_waits_at_most_the_bound(
    kind: str, delay: float, max_delay: float
) -> None:
    policy = BackoffPolicy(kind, delay, max_delay)  # type: ignore[arg-type]
    for attempt in (1, 2, 61, 62, 10_000):
        wait = policy.delay_for(attempt, full_jitter)
        assert 0 <= wait <= MAX_BACKOFF_DELAY
        assert policy.next_run_at(attempt, NOW, full_jitter) <= NOW + timedelta(
            seconds=MAX_BACKOFF_DELAY
        )
    assert BackoffPolicy(kind, delay, max_delay).delay_for(80) == MAX_BACKOFF_DELAY  # type: ignore[arg-type]


def test_a_stored_negative_backoff_retries_at_once() -> None:
    assert BackoffPolicy("fixed", -5.0, 1.0).next_run_at(1, NOW) == NOW
    assert BackoffPolicy("exponential", -5.0, -1.0).delay_for(3) == 0.0


def test_a_retry_time_past_the_last_datetime_is_the_last_datetime() -> None:
    late = datetime(9999, 12, 1, tzinfo=timezone.utc)
    policy = BackoffPolicy("fixed", MAX_BACKOFF_DELAY, MAX_BACKOFF_DELAY)
    assert policy.next_run_at(1, late) == LATEST_INSTANT


def test_ordinary_policies_are_unchanged() -> None:
    policy = BackoffPolicy("exponential", 1.0, 300.0)
    assert [policy.delay_for(n, no_jitter) for n in (1, 2, 3, 9, 10)] == [1, 2, 4, 256, 300]
    assert policy.delay_for(1, full_jitter) == pytest.approx(1.1)
    assert policy.delay_for(9, full_jitter) == 281.6 and policy.delay_for(10, full_jitter) == 300
    assert BackoffPolicy("fixed", 7.0, 1.0).next_run_at(4, NOW) == NOW + timedelta(seconds=7)
