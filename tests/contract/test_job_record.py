"""The job record: every claim's outcome in ``attempt_history``, written by the write that
records the outcome, and the worker holding an active job."""

from __future__ import annotations

from datetime import timedelta

from durabl.model.attempts import ATTEMPTS_KEPT, Attempt
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import VT, enqueue_id, expire_leases, get


def claim(backend: Backend, owner: str = "w1") -> object:
    (handle,) = backend.claim("t", lease_owner=owner)
    return handle


def test_new_job_has_empty_history_and_no_worker(backend: Backend) -> None:
    job = get(backend, enqueue_id(backend))
    assert (job.attempt_history, job.worker, job.lease_expires_at) == ((), None, None)


def test_active_job_shows_its_worker_and_last_heartbeat(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend)
    start = clock.now()
    (handle,) = backend.claim("t", lease_owner="host:42")
    job = get(backend, job_id)
    assert (job.status, job.worker, job.heartbeat_at) == ("active", "host:42", start)
    assert job.attempt_history == ()
    clock.advance(3)
    assert handle.heartbeat() == "applied"
    assert get(backend, job_id).heartbeat_at == clock.now()
    assert handle.complete() == "completed"
    done = get(backend, job_id)
    assert (done.worker, done.heartbeat_at) == (None, None)


def test_completion_records_one_attempt(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend)
    start = clock.now()
    (handle,) = backend.claim("t", lease_owner="w1")
    clock.advance(2)
    assert handle.complete() == "completed"
    assert get(backend, job_id).attempt_history == (
        Attempt(1, "w1", start, clock.now(), "completed", None),
    )


def test_complete_many_records_each_attempt(backend: Backend, clock: FakeClock) -> None:
    from durabl.stores.base import Completion

    ids = [enqueue_id(backend) for _ in range(3)]
    handles = backend.claim("t", limit=3, lease_owner="w2")
    clock.advance(1)
    results = backend.complete_many([Completion(h.id, h.claim_token) for h in handles])
    assert results == ["completed"] * 3
    for job_id in ids:
        (attempt,) = get(backend, job_id).attempt_history
        assert (attempt.outcome, attempt.worker, attempt.ended_at) == (
            "completed",
            "w2",
            clock.now(),
        )


def test_failures_then_success_keep_every_attempt_in_order(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend, max_attempts=3)
    (h1,) = backend.claim("t", lease_owner="a")
    assert h1.fail("ValueError: boom\n\nTraceback ...", retry_at=clock.now()) == "retry-scheduled"
    clock.advance(1)
    (h2,) = backend.claim("t", lease_owner="b")
    assert h2.release() == "released"
    clock.advance(1)
    (h3,) = backend.claim("t", lease_owner="c")
    assert h3.complete() == "completed"
    history = get(backend, job_id).attempt_history
    assert [(a.number, a.worker, a.outcome, a.error) for a in history] == [
        (1, "a", "retry-scheduled", "ValueError: boom"),
        (2, "b", "released", None),
        (2, "c", "completed", None),
    ]
    assert [a.started_at for a in history] == [
        clock.now() - timedelta(seconds=2),
        clock.now() - timedelta(seconds=1),
        clock.now(),
    ]
    assert get(backend, job_id).fail_reason == "ValueError: boom\n\nTraceback ..."


def test_terminal_failures_are_failed_attempts(backend: Backend, clock: FakeClock) -> None:
    fatal = enqueue_id(backend)
    (handle,) = backend.claim("t", lease_owner="w")
    assert handle.fail_fatal("FatalJobError: bad input") == "failed-terminal"
    (attempt,) = get(backend, fatal).attempt_history
    assert (attempt.outcome, attempt.error) == ("failed", "FatalJobError: bad input")

    exhausted = enqueue_id(backend, max_attempts=1)
    (handle,) = backend.claim("t", lease_owner="w")
    assert handle.fail("RuntimeError: again", retry_at=clock.now()) == "failed-terminal"
    (attempt,) = get(backend, exhausted).attempt_history
    assert (attempt.outcome, attempt.error) == ("failed", "RuntimeError: again")


def test_error_is_one_clipped_line(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend)
    (handle,) = backend.claim("t", lease_owner="w")
    handle.fail_fatal("\n  " + "x" * 5000 + "\nsecond line")
    (attempt,) = get(backend, job_id).attempt_history
    assert attempt.error is not None
    assert "\n" not in attempt.error and 0 < len(attempt.error) <= 200


def test_reaper_records_lease_lost_then_stalled(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend, max_attempts=2)
    backend.claim("t", lease_owner="dead-1")
    expire_leases(clock, backend)
    assert backend.recover_stuck_jobs(VT) == 1
    backend.claim("t", lease_owner="dead-2")
    expire_leases(clock, backend)
    assert backend.recover_stuck_jobs(VT) == 1
    job = get(backend, job_id)
    assert job.status == "failed"
    assert [(a.number, a.worker, a.outcome) for a in job.attempt_history] == [
        (1, "dead-1", "lease-lost"),
        (2, "dead-2", "stalled"),
    ]
    assert all(a.started_at and a.ended_at > a.started_at for a in job.attempt_history)


def test_superseded_run_records_superseded(backend: Backend, clock: FakeClock) -> None:
    first = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    (handle,) = backend.claim("t", lease_owner="w")
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert handle.release() == "superseded"
    (attempt,) = get(backend, first).attempt_history
    assert attempt.outcome == "superseded"


def test_history_keeps_only_the_newest_attempts(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend, max_attempts=ATTEMPTS_KEPT + 10)
    for n in range(ATTEMPTS_KEPT + 5):
        (handle,) = backend.claim("t", lease_owner=f"w{n}")
        assert handle.fail(f"E: {n}", retry_at=clock.now()) == "retry-scheduled"
    history = get(backend, job_id).attempt_history
    assert len(history) == ATTEMPTS_KEPT
    assert [a.number for a in history] == list(range(6, ATTEMPTS_KEPT + 6))
    assert history[-1].error == f"E: {ATTEMPTS_KEPT + 4}"


def test_queue_reads_show_when_an_active_lease_expires(backend: Backend, clock: FakeClock) -> None:
    from durabl import JobQueue

    queue = JobQueue(backend, visibility_timeout=60)
    job_id = enqueue_id(backend)
    backend.claim("t", lease_owner="w")
    expected = clock.now() + timedelta(seconds=60)
    job = queue.get_job(job_id)
    assert job is not None and job.lease_expires_at == expected
    (listed,) = queue.list_jobs(status="active")
    assert (listed.worker, listed.lease_expires_at) == ("w", expected)


def test_a_job_records_when_it_finished_and_a_retry_clears_it(
    backend: Backend, clock: FakeClock
) -> None:
    failing = enqueue_id(backend, data={"n": 1})
    cancelled = enqueue_id(backend, data={"n": 2})
    assert get(backend, failing).finished_at is None
    clock.advance(5)
    [handle] = backend.claim("t", limit=1, lease_owner="w")
    assert handle.id == failing and get(backend, failing).finished_at is None
    clock.advance(5)
    assert handle.fail_fatal("no") == "failed-terminal"
    failed = get(backend, failing)
    assert failed.finished_at is not None and failed.finished_at == failed.updated_at
    assert backend.cancel(cancelled) == "cancelled"
    assert get(backend, cancelled).finished_at == get(backend, cancelled).updated_at
    assert backend.retry(failing)
    assert get(backend, failing).finished_at is None
    # A sort by finish time reads the same field: the retried job is unfinished again.
    assert [j.id for j in backend.list_jobs(order="-finished_at")] == [cancelled, failing]
