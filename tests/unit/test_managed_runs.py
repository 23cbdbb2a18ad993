"""Managed execution: return completes, Exception retries, FatalJobError fails at once;
heartbeats renew the lease; a lost or unconfirmed lease aborts and suppresses the write."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from durabl import FatalJobError, Job, JobContext, JobEvent, JobQueue
from durabl.model.abort import LEASE_LOST, LEASE_UNCONFIRMED
from durabl.model.options import MAX_LOG_ENTRIES, MAX_LOG_MESSAGE_BYTES
from durabl.runtime.run import ManagedRun
from durabl.testing import FakeClock
from tests.conftest import make_mongomock_backend


@pytest.fixture
def events() -> list[JobEvent]:
    return []


@pytest.fixture
def q(clock: FakeClock, events: list[JobEvent]) -> JobQueue:
    return JobQueue(
        make_mongomock_backend(clock), visibility_timeout=30, on_job_event=events.append
    )


def kinds(events: list[JobEvent]) -> list[str]:
    return [e.kind for e in events]


def test_handler_return_completes_the_job(q: JobQueue, events: list[JobEvent]) -> None:
    seen: list[Any] = []
    q.register("t", lambda job, ctx: seen.append(job.data))
    job_id = q.enqueue("t", {"n": 1})
    assert q.run_pending() == 1
    assert seen == [{"n": 1}]
    job = q.get_job(job_id or "")
    assert job is not None and job.status == "completed" and job.attempts == 1
    assert kinds(events) == ["claimed", "started", "completed"]
    assert events[-1].duration is not None


def test_exception_schedules_a_retry_with_backoff(
    q: JobQueue, clock: FakeClock, events: list[JobEvent]
) -> None:
    def flaky(job: Job[Any], ctx: JobContext) -> None:
        raise ValueError("upstream said no")

    q.register("t", flaky)
    job_id = q.enqueue("t", {}, backoff_delay=10, max_attempts=3) or ""
    q.run_pending()
    job = q.get_job(job_id)
    assert job is not None and job.status == "pending" and job.attempts == 1
    assert job.fail_reason is not None and job.fail_reason.startswith(
        "ValueError: upstream said no"
    )
    delay = (job.run_at - clock.now()).total_seconds()
    assert 10 <= delay <= 11  # backoff_delay * 2**0 plus at most 10 % jitter
    assert events[-1].kind == "failed" and events[-1].terminal is False
    assert q.run_pending() == 0  # not due yet
    clock.advance(11)
    q.run_pending()
    job = q.get_job(job_id)
    assert job is not None and job.attempts == 2
    assert 20 <= (job.run_at - clock.now()).total_seconds() <= 22


def test_last_attempt_fails_retries_exhausted(
    q: JobQueue, clock: FakeClock, events: list[JobEvent]
) -> None:
    q.register("t", lambda job, ctx: 1 / 0)
    job_id = q.enqueue("t", {}, max_attempts=2, backoff="fixed", backoff_delay=1) or ""
    q.run_pending()
    clock.advance(2)
    q.run_pending()
    job = q.get_job(job_id)
    assert job is not None
    assert (job.status, job.failure_kind, job.attempts) == ("failed", "retries-exhausted", 2)
    assert events[-2].kind == "failed" and events[-2].terminal is True
    dead = events[-1]
    assert (dead.kind, dead.extra) == ("dead-lettered", {"failure_kind": "retries-exhausted"})
    assert q.run_pending() == 0


def test_fatal_error_fails_at_once_and_keeps_its_cause(q: JobQueue, events: list[JobEvent]) -> None:
    def poison(job: Job[Any], ctx: JobContext) -> None:
        try:
            int("not a number")
        except ValueError as exc:
            raise FatalJobError("payload is unusable") from exc

    q.register("t", poison)
    job_id = q.enqueue("t", {}, max_attempts=5) or ""
    q.run_pending()
    job = q.get_job(job_id)
    assert job is not None
    assert (job.status, job.failure_kind, job.attempts) == ("failed", "fatal", 1)
    assert job.fail_reason is not None
    assert "payload is unusable" in job.fail_reason
    assert "caused by ValueError: invalid literal" in job.fail_reason
    assert [e.kind for e in events[-2:]] == ["fail-fatal", "dead-lettered"]


def test_logs_are_stored_with_the_terminal_write_and_bounded(q: JobQueue) -> None:
    def chatty(job: Job[Any], ctx: JobContext) -> None:
        for n in range(MAX_LOG_ENTRIES + 5):
            ctx.log(f"line {n}")
        ctx.log("x" * (MAX_LOG_MESSAGE_BYTES * 2))

    q.register("t", chatty)
    job_id = q.enqueue("t", {}) or ""
    q.run_pending()
    job = q.get_job(job_id)
    assert job is not None
    assert len(job.logs) == MAX_LOG_ENTRIES
    assert job.logs[0].message == "line 6"  # the newest entries are kept
    assert len(job.logs[-1].message.encode()) <= MAX_LOG_MESSAGE_BYTES
    assert job.logs[-1].message.endswith("[truncated]")


def test_event_sink_errors_never_affect_the_job(clock: FakeClock) -> None:
    def broken_sink(event: JobEvent) -> None:
        raise RuntimeError("metrics are down")

    q = JobQueue(make_mongomock_backend(clock), on_job_event=broken_sink)
    q.register("t", lambda job, ctx: None)
    job_id = q.enqueue("t", {}) or ""
    q.run_pending()
    job = q.get_job(job_id)
    assert job is not None and job.status == "completed"


def claim_run(q: JobQueue, handler: Any) -> ManagedRun:
    q.enqueue("t", {})
    (handle,) = q.backend.claim("t")
    return ManagedRun(handle, handler, q, heartbeat_interval=10)


def test_heartbeat_renews_the_lease_and_moves_the_local_deadline(
    q: JobQueue, clock: FakeClock
) -> None:
    run = claim_run(q, lambda job, ctx: None)
    first = run.signal.deadline
    clock.advance(10)
    assert run.heartbeat.beat() == "applied"
    assert run.signal.deadline == pytest.approx((first or 0) + 10)
    clock.advance(25)  # 35 s after the claim, 25 s after the renewal
    assert not run.signal.aborted


def test_lost_lease_aborts_the_run_and_suppresses_its_write(
    q: JobQueue, clock: FakeClock, events: list[JobEvent]
) -> None:
    def handler(job: Job[Any], ctx: JobContext) -> None:
        # Another worker took the job over (the reaper re-queued it, then it was claimed).
        clock.advance(31 + q.backend.clock_skew_allowance)  # type: ignore[attr-defined]
        assert q.backend.reap(30).recovered == 1
        (other,) = q.backend.claim("t")
        assert run.heartbeat.beat() == "lease-lost"
        assert ctx.signal.aborted and ctx.signal.reason == LEASE_LOST
        other.complete()

    run = claim_run(q, handler)
    outcome = run.execute()
    assert outcome.disposition == "lease-lost"
    (job,) = q.list_jobs()
    assert job.status == "completed" and job.attempts == 2
    assert [e.op for e in events if e.kind == "lease-lost"] == ["heartbeat"]


def test_unconfirmed_renewal_past_the_deadline_aborts_and_suppresses(
    q: JobQueue, clock: FakeClock
) -> None:
    def handler(job: Job[Any], ctx: JobContext) -> None:
        clock.advance(29)
        assert not ctx.signal.aborted
        clock.advance(1)  # the lease deadline passes with no confirmed renewal
        assert ctx.signal.aborted and ctx.signal.reason == LEASE_UNCONFIRMED
        raise ValueError("would have been recorded as a retry")

    run = claim_run(q, handler)
    assert run.execute().disposition == "lease-lost"
    (job,) = q.list_jobs()
    assert job.status == "active"  # nothing written: the reaper owns it now


def test_heartbeat_failure_keeps_the_old_deadline(
    q: JobQueue, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = claim_run(q, lambda job, ctx: None)
    deadline = run.signal.deadline

    def down(*args: Any, **kwargs: Any) -> str:
        raise ConnectionError("network down")

    monkeypatch.setattr(q.backend, "heartbeat", down)
    clock.advance(10)
    assert run.heartbeat.beat() is None
    assert run.signal.deadline == deadline


def test_heartbeat_flushes_buffered_logs(q: JobQueue, clock: FakeClock) -> None:
    run = claim_run(q, lambda job, ctx: None)
    run.ctx.log("halfway")
    assert run.heartbeat.beat() == "applied"
    (job,) = q.list_jobs()
    assert [e.message for e in job.logs] == ["halfway"]


def test_short_runs_cost_no_heartbeat(q: JobQueue) -> None:
    run = claim_run(q, lambda job, ctx: None)
    run.execute()
    assert run.heartbeat.beats == 0


def test_abort_signal_wait_returns_when_aborted(q: JobQueue) -> None:
    run = claim_run(q, lambda job, ctx: None)
    assert run.signal.wait(0.01) is False
    run.signal.abort("shutdown")
    assert run.signal.wait(5) is True
    with pytest.raises(Exception, match="shutdown"):
        run.signal.raise_if_aborted()


def test_visibility_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError):
        JobQueue(make_mongomock_backend(), visibility_timeout=0)
    JobQueue(make_mongomock_backend(), visibility_timeout=timedelta(minutes=5))


def test_process_validates_its_arguments(q: JobQueue) -> None:
    with pytest.raises(ValueError, match="concurrency"):
        q.process("t", lambda job, ctx: None, concurrency=0)
    with pytest.raises(TypeError, match="callable"):
        q.process("t", "not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="heartbeat_interval"):
        q.process("t", lambda job, ctx: None, heartbeat_interval=60)
    q.process("t", lambda job, ctx: None, poll_interval=60)
    with pytest.raises(ValueError, match="already registered"):
        q.process("t", lambda job, ctx: None)
    q.shutdown(1)


def test_a_reused_heartbeat_thread_serves_one_claim_at_a_time() -> None:
    from durabl.runtime.heartbeat import HeartbeatThread
    from durabl.testing import wait_until

    q = JobQueue(make_mongomock_backend(), visibility_timeout=30)
    host = HeartbeatThread("durabl-heartbeat-test-0", 0.02)
    try:
        runs = []
        for n in range(2):
            q.enqueue("t", {"n": n})
            (handle,) = q.backend.claim("t")
            run = ManagedRun(handle, lambda job, ctx: None, q, heartbeat_interval=0.02)
            run.heartbeat.start(host)
            assert wait_until(lambda beat=run.heartbeat: beat.beats >= 2)  # type: ignore[misc]
            run.heartbeat.stop()
            stopped_at = run.heartbeat.beats
            runs.append((run, stopped_at))
        for run, stopped_at in runs:  # nothing renews a claim once its heartbeat stopped
            assert run.heartbeat.beats == stopped_at
    finally:
        host.close()
    assert not host.is_alive()


# -- claims that waited for a worker ----------------------------------------------------------


def test_a_claim_that_waited_renews_its_lease_before_the_handler_starts(
    q: JobQueue, clock: FakeClock
) -> None:
    ran: list[str] = []
    run = claim_run(q, lambda job, ctx: ran.append(job.id))
    clock.advance(25)  # read ahead, then kept waiting past the heartbeat interval (10 s)
    assert run.execute().disposition == "written"
    assert ran == [run.job_id]
    assert run.heartbeat.beats == 1  # renewed once, before the handler
    (job,) = q.list_jobs()
    assert job.status == "completed"


def test_a_claim_whose_lease_was_taken_while_it_waited_never_runs_here(
    q: JobQueue, clock: FakeClock, events: list[JobEvent]
) -> None:
    ran: list[str] = []
    run = claim_run(q, lambda job, ctx: ran.append("stale run"))
    clock.advance(31 + q.backend.clock_skew_allowance)  # type: ignore[attr-defined]
    assert q.backend.reap(30).recovered == 1
    (other,) = q.backend.claim("t")  # another worker owns the job now
    outcome = run.execute()
    assert outcome.disposition == "lease-lost"
    assert ran == []  # the handler never started: the job is someone else's
    assert run.signal.aborted and run.signal.reason in (LEASE_LOST, LEASE_UNCONFIRMED)
    assert run.done.is_set() and q.active_runs() == []
    assert "lease-lost" in kinds(events)
    assert other.complete() == "completed"
