"""durabl.model.activity: the overview's buckets, when a job stopped waiting, the lag line
and the totals, from what a store read (no store here)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from durabl import QueueStats
from durabl.model.activity import (
    ActivityRead,
    ActivityWindow,
    WaitCandidate,
    lag_series,
    spans_an_end,
    total_stats,
    type_activity,
    wait_end,
)

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def job(
    status: str, run_at: float, *, created: float | None = None, **times: float
) -> WaitCandidate:
    """A candidate of type ``t``; ``updated``, ``beat`` and ``starts`` in minutes."""
    starts = times.pop("starts", ())
    return WaitCandidate(
        type="t",
        status=status,
        run_at=at(run_at),
        created_at=at(run_at if created is None else created),
        updated_at=at(times.get("updated", run_at)),
        heartbeat_at=at(times["beat"]) if "beat" in times else None,
        starts=tuple(at(s) for s in (starts if isinstance(starts, tuple) else (starts,))),
    )


def test_a_window_has_evenly_spaced_edges_ending_at_until() -> None:
    window = ActivityWindow(at(60), buckets=12, width=timedelta(minutes=5))
    assert window.since == at(0)
    assert window.edges[0] == at(0) and window.edges[-1] == at(60) and len(window.edges) == 13
    assert window.ends == window.edges[1:]
    assert window.width_ms == 300_000


@pytest.mark.parametrize(
    ("minutes", "bucket"),
    [(-0.001, None), (0, 0), (4.999, 0), (5, 1), (59.999, 11), (60, None)],
)
def test_an_instant_falls_in_the_bucket_that_starts_at_or_before_it(
    minutes: float, bucket: int | None
) -> None:
    assert ActivityWindow(at(60)).bucket(at(minutes)) == bucket


def test_a_window_needs_a_bucket_of_at_least_a_millisecond() -> None:
    with pytest.raises(ValueError, match="at least one bucket"):
        ActivityWindow(at(0), buckets=0)
    with pytest.raises(ValueError, match="at least 1 ms"):
        ActivityWindow(at(0), width=timedelta(microseconds=10))


def test_a_pending_job_is_still_waiting() -> None:
    assert wait_end(job("pending", 3)) is None


def test_an_active_job_stopped_waiting_at_its_claim() -> None:
    assert wait_end(job("active", 3, updated=9)) == at(9)
    assert wait_end(job("active", 3, updated=9, beat=8)) == at(8)


def test_a_finished_job_stopped_waiting_at_its_first_start_since_run_at() -> None:
    # A retried job: its first attempt started before its current run_at.
    assert wait_end(job("completed", 10, starts=(2, 12, 15))) == at(12)
    # No history kept: no wait at all.
    assert wait_end(job("cancelled", 10)) == at(10)


def test_the_lag_is_the_oldest_waiting_jobs_wait_at_each_end() -> None:
    ends = [at(5), at(10), at(15), at(20)]
    jobs = [
        job("completed", 2, starts=11),  # waits 2 -> 11
        job("completed", 1, starts=4),  # done waiting before the first end
        job("pending", 12),  # waits from 12 on
        job("pending", 0, created=17),  # due at 0, but only exists from 17
    ]
    assert [lag / 60 for lag in lag_series(ends, jobs)] == [3, 8, 3, 20]
    assert lag_series(ends, []) == (0.0, 0.0, 0.0, 0.0)


def test_a_job_claimed_at_an_end_no_longer_waits_there() -> None:
    assert lag_series([at(5)], [job("active", 1, updated=5)]) == (0.0,)
    assert lag_series([at(5)], [job("active", 1, updated=5.001)]) == (240.0,)


def test_type_activity_charts_each_type_from_the_counts_and_candidates() -> None:
    window = ActivityWindow(at(15), buckets=3)
    read = ActivityRead(
        counts={("t", "completed", 0): 4, ("t", "failed", 2): 1, ("u", "completed", 1): 2},
        candidates=(job("pending", 6),),
    )
    charts = type_activity(window, read, ["t", "u", "v"])
    assert charts["t"].completed == (4, 0, 0) and charts["t"].failed == (0, 0, 1)
    assert charts["t"].lag == (0.0, 240.0, 540.0)
    assert charts["u"].completed == (0, 2, 0) and charts["u"].lag == (0.0, 0.0, 0.0)
    assert charts["v"].completed == (0, 0, 0)


def test_a_finished_job_spans_an_end_when_due_by_it_and_finished_after_it() -> None:
    window = ActivityWindow(at(15), buckets=3)  # ends at 5, 10, 15
    assert spans_an_end(window, at(4), at(6))
    assert spans_an_end(window, at(5), at(5.001))
    assert not spans_an_end(window, at(5.001), at(9))
    assert not spans_an_end(window, at(4), at(5))


def test_total_stats_adds_the_types_up() -> None:
    one = QueueStats(
        pending=2,
        completed=5,
        failed=2,
        oldest_pending_run_at=at(1),
        oldest_pending_lag=600.0,
        failed_by_kind={"fatal": 1, "stalled": 1},
    )
    two = QueueStats(active=1, cancelled=3, superseded=1, failed=1, failed_by_kind={"fatal": 1})
    three = QueueStats(pending=1, oldest_pending_run_at=at(5), oldest_pending_lag=360.0)
    total = total_stats([three, one, two])
    assert total == QueueStats(
        pending=3,
        active=1,
        completed=5,
        failed=3,
        superseded=1,
        cancelled=3,
        oldest_pending_run_at=at(1),
        oldest_pending_lag=600.0,
        failed_by_kind={"fatal": 2, "stalled": 1},
    )
    assert list(total.failed_by_kind) == ["fatal", "stalled"]  # FAILURE_KINDS order
    assert total_stats([]) == QueueStats()
