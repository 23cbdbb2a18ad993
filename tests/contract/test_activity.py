"""The admin overview's reads: ``stats_by_type`` (every type's ``get_stats`` at once) and
``read_activity`` (an hour's completions, failures and the oldest-pending lag per 5-minute
bucket), charted by :func:`durabl.model.activity.type_activity`."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from durabl.model.activity import ActivityRead, ActivityWindow, total_stats, type_activity
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import claim_one, enqueue_id

MIN = 60.0


def _at(clock: FakeClock, start: datetime, minutes: float) -> None:
    """Move the clock to ``minutes`` after ``start``."""
    clock.advance((start + timedelta(minutes=minutes) - clock.now()).total_seconds())


def test_read_activity_charts_counts_and_the_oldest_pending_lag(
    backend: Backend, clock: FakeClock
) -> None:
    """The window runs from 10 to 70 min after the start; its bucket ends are at 15, 20,
    ..., 70 min."""
    start = clock.now()
    window = ActivityWindow(start + timedelta(minutes=70), buckets=12)
    assert window.since == start + timedelta(minutes=10)
    # Before the window: finished, never counted.
    enqueue_id(backend, "old")
    assert claim_one(backend, "old").complete() == "completed"
    _at(clock, start, 10)
    enqueue_id(backend, "b")
    _at(clock, start, 11)
    assert claim_one(backend, "b").complete() == "completed"  # in the first bucket
    _at(clock, start, 13)
    enqueue_id(backend, "a")  # due at 13, claimed at 32, completed at 33
    _at(clock, start, 32)
    waited = claim_one(backend, "a")
    _at(clock, start, 33)
    assert waited.complete() == "completed"
    _at(clock, start, 34)
    enqueue_id(backend, "a", data={"n": 2})  # due at 34, still waiting
    _at(clock, start, 49)
    enqueue_id(backend, "a", data={"n": 3}, priority=-1000)  # claimed at once, fails
    assert claim_one(backend, "a").fail_fatal("broken") == "failed-terminal"
    _at(clock, start, 50)
    # Enqueued at 50 but due since 20: it waits from its creation on, since 20.
    enqueue_id(backend, "d", run_at=start + timedelta(minutes=20))
    _at(clock, start, 54)
    enqueue_id(backend, "b", data={"n": 2})  # due at 54, claimed at 62: active
    _at(clock, start, 62)
    claim_one(backend, "b")
    _at(clock, start, 70)

    types = ["a", "b", "d", "old", "none"]
    charts = type_activity(window, backend.read_activity(window, types), types)

    a, b, d = charts["a"], charts["b"], charts["d"]
    assert a.completed == (0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0)  # 33 min: [30, 35)
    assert a.failed == (0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0)  # 49 min: [45, 50)
    assert b.completed == (1,) + (0,) * 11
    assert b.failed == (0,) * 12
    assert [lag / MIN for lag in a.lag] == [2, 7, 12, 17, 1, 6, 11, 16, 21, 26, 31, 36]
    assert [lag / MIN for lag in b.lag] == [0] * 8 + [1, 6, 0, 0]
    assert [lag / MIN for lag in d.lag] == [0] * 8 + [35, 40, 45, 50]
    assert charts["old"].completed == (0,) * 12 and charts["old"].lag == (0.0,) * 12
    assert charts["none"].completed == (0,) * 12 and charts["none"].lag == (0.0,) * 12


def test_read_activity_of_no_types_reads_nothing(backend: Backend) -> None:
    enqueue_id(backend, "a")
    window = ActivityWindow(backend.now() + timedelta(minutes=1))
    assert backend.read_activity(window, []) == ActivityRead()
    with pytest.raises(ValueError, match="job type"):
        backend.read_activity(window, [""])
    with pytest.raises(TypeError):
        backend.read_activity(window, "a")


def test_stats_by_type_is_get_stats_of_each_type(backend: Backend, clock: FakeClock) -> None:
    assert backend.stats_by_type() == {}
    enqueue_id(backend, "a")
    enqueue_id(backend, "a", data={"n": 2})
    enqueue_id(backend, "b", max_attempts=1, priority=-1)
    enqueue_id(backend, "b", data={"n": 2}, delay=3600)
    assert claim_one(backend, "b").fail_fatal("no") == "failed-terminal"
    assert claim_one(backend, "a").complete() == "completed"
    enqueue_id(backend, "c", priority=-1)
    claim_one(backend, "c")
    clock.advance(90)
    by_type = backend.stats_by_type()
    assert sorted(by_type) == ["a", "b", "c"]
    for job_type, stats in by_type.items():
        assert stats == backend.get_stats(job_type), job_type
    assert total_stats(by_type.values()) == backend.get_stats(None)
    assert by_type["a"].oldest_pending_lag == 90.0
    assert by_type["b"].failed_by_kind == {"fatal": 1}


def test_both_reads_cover_many_types(backend: Backend, clock: FakeClock) -> None:
    """More types than one SQL statement of the SQLite store takes (50)."""
    types = [f"type-{n:02}" for n in range(55)]
    for job_type in types:
        enqueue_id(backend, job_type)
    clock.advance(10 * MIN)
    by_type = backend.stats_by_type()
    assert sorted(by_type) == types
    assert {stats.pending for stats in by_type.values()} == {1}
    assert {stats.oldest_pending_lag for stats in by_type.values()} == {10 * MIN}
    window = ActivityWindow(clock.now(), buckets=2)
    charts = type_activity(window, backend.read_activity(window, types), types)
    assert {chart.lag for chart in charts.values()} == {(5 * MIN, 10 * MIN)}
