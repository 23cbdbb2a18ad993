"""``complete_many``: ``complete`` for each completion of a batch, in order, one result each.
Each completion is fenced on its own token, so a stale one does not stop the others; logs,
receipts and freed dedupe slots behave exactly as with ``complete``."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pytest

from durabl import Job, JobContext, JobQueue
from durabl.model.job import JobHandle, JobResult, LogEntry
from durabl.stores.base import Backend, Completion
from durabl.testing import FakeClock
from tests.contract.support import VT, claim_one, enqueue, enqueue_id, expire_leases, get


def claim_all(backend: Backend, count: int, type: str = "t") -> list[JobHandle[Any]]:
    """Enqueue ``count`` jobs of ``type`` and claim them all."""
    ids = {enqueue_id(backend, type, data={"n": n}) for n in range(count)}
    handles = backend.claim(type, limit=count, lease_owner="contract")
    assert {h.id for h in handles} == ids
    return handles


def completions(handles: list[JobHandle[Any]]) -> list[Completion]:
    return [Completion(h.id, h.claim_token) for h in handles]


# -- the plain batch -------------------------------------------------------------------------


def test_a_batch_completes_every_job_with_one_result_each_in_order(backend: Backend) -> None:
    handles = claim_all(backend, 5)
    results = backend.complete_many(completions(handles))
    assert results == [JobResult("completed")] * 5
    for handle in handles:
        job = get(backend, handle.id)
        assert (job.status, job.attempts, job.fail_reason) == ("completed", 1, None)
    assert backend.count_jobs(status="completed") == 5
    assert backend.count_jobs(status="active") == 0


def test_a_batch_writes_what_complete_writes(backend: Backend, clock: FakeClock) -> None:
    one, other = claim_all(backend, 2)
    clock.advance(3)
    assert backend.complete(one.id, one.claim_token) == "completed"
    assert backend.complete_many([Completion(other.id, other.claim_token)]) == ["completed"]
    single, batched = get(backend, one.id), get(backend, other.id)
    assert batched.updated_at == clock.now()

    def written(job: Any) -> tuple[Any, ...]:
        return (job.status, job.attempts, job.updated_at, job.fail_reason, job.failure_kind)

    assert written(batched) == written(single)


def test_an_empty_batch_returns_an_empty_list_and_writes_nothing(backend: Backend) -> None:
    (handle,) = claim_all(backend, 1)
    assert backend.complete_many([]) == []
    assert get(backend, handle.id).status == "active"


def test_logs_of_each_completion_are_stored_on_its_job(backend: Backend, clock: FakeClock) -> None:
    first, second = claim_all(backend, 2)
    at = clock.now() - timedelta(seconds=2)
    batch = [
        Completion(first.id, first.claim_token, [LogEntry(at, "a1"), LogEntry(at, "a2")]),
        Completion(second.id, second.claim_token, (LogEntry(clock.now(), "b1"),)),
    ]
    assert backend.complete_many(batch) == ["completed", "completed"]
    assert [e.message for e in get(backend, first.id).logs] == ["a1", "a2"]
    assert [e.message for e in get(backend, second.id).logs] == ["b1"]
    assert get(backend, first.id).logs[0].at == at
    assert get(backend, second.id).logs[0].at == clock.now()


def test_a_failed_batch_written_again_one_by_one_keeps_each_result_and_logs(
    backend: Backend, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The worker's completer writes each completion of a batch that failed again on its
    # own; that write must keep all the batch would have: the handler's value, its logs.
    real = backend.complete_many
    failed: list[int] = []

    def fails_once(batch: Sequence[Completion]) -> list[JobResult]:
        if not failed:
            failed.append(len(batch))
            raise ConnectionError("the batch could not be written")
        return real(batch)

    monkeypatch.setattr(backend, "complete_many", fails_once)
    queue = JobQueue(backend, visibility_timeout=VT, clock=clock)
    job_id = queue.enqueue("t", {"n": 7})
    assert job_id is not None

    def handler(job: Job[Any], ctx: JobContext) -> object:
        ctx.log("done")
        return {"total": job.data["n"], "items": ["a", "b"]}

    queue.process("t", handler, concurrency=1, poll_interval=0.05)
    try:
        job = queue.wait(job_id, timeout=30)
    finally:
        queue.shutdown(timeout=5)
    assert failed == [1]  # the batch did fail, and the write on its own kept everything:
    assert (job.status, job.result) == ("completed", {"total": 7, "items": ["a", "b"]})
    assert "done" in [e.message for e in job.logs]
    assert get(backend, job_id).result == {"total": 7, "items": ["a", "b"]}


def test_logs_follow_those_sent_with_heartbeats(backend: Backend, clock: FakeClock) -> None:
    (handle,) = claim_all(backend, 1)
    hb = [LogEntry(clock.now(), "hb")]
    assert backend.heartbeat(handle.id, handle.claim_token, logs=hb) == "applied"
    clock.advance(1)
    batch = [Completion(handle.id, handle.claim_token, [LogEntry(clock.now(), "done")])]
    assert backend.complete_many(batch) == ["completed"]
    assert [e.message for e in get(backend, handle.id).logs] == ["hb", "done"]


# -- fences, one completion at a time --------------------------------------------------------


def test_a_reclaimed_job_in_a_batch_is_lease_lost_and_the_others_complete(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend, "doomed", max_attempts=5)
    stale = claim_one(backend, "doomed")
    expire_leases(clock, backend)
    assert backend.reap(VT).recovered == 1
    current = claim_one(backend, "doomed")
    assert current.id == stale.id
    before, after = claim_all(backend, 2)
    snapshot = get(backend, current.id)
    late = [LogEntry(clock.now(), "too late")]
    results = backend.complete_many(
        [
            Completion(before.id, before.claim_token),
            Completion(stale.id, stale.claim_token, late),
            Completion(after.id, after.claim_token),
        ]
    )
    assert results == [JobResult("completed"), JobResult("lease-lost"), JobResult("completed")]
    assert results[1].terminal_status is None
    assert get(backend, current.id) == snapshot  # the new owner's run is untouched
    assert get(backend, before.id).status == "completed"
    assert get(backend, after.id).status == "completed"
    assert current.complete() == "completed"  # and its own write still lands
    assert "too late" not in [e.message for e in get(backend, current.id).logs]


def test_a_made_up_token_in_a_batch_is_lease_lost_and_the_others_complete(
    backend: Backend,
) -> None:
    first, wrong, last = claim_all(backend, 3)
    snapshot = get(backend, wrong.id)
    results = backend.complete_many(
        [
            Completion(first.id, first.claim_token),
            Completion(wrong.id, "not-the-token"),
            Completion(last.id, last.claim_token),
        ]
    )
    assert results == [JobResult("completed"), JobResult("lease-lost"), JobResult("completed")]
    assert get(backend, wrong.id) == snapshot
    assert [get(backend, h.id).status for h in (first, wrong, last)] == [
        "completed",
        "active",
        "completed",
    ]


def test_an_unknown_job_in_a_batch_is_not_found_and_the_others_complete(
    backend: Backend,
) -> None:
    first, last = claim_all(backend, 2)
    gone = enqueue_id(backend, "gone")
    assert backend.delete(gone)
    results = backend.complete_many(
        [
            Completion(first.id, first.claim_token),
            Completion(gone, "token"),
            Completion("nope", "token"),
            Completion(last.id, last.claim_token),
        ]
    )
    assert results == ["completed", JobResult("not-found"), JobResult("not-found"), "completed"]
    assert results[1].terminal_status is None
    assert backend.get_job(gone) is None
    assert backend.count_jobs(status="completed") == 2


# -- receipts and terminal jobs --------------------------------------------------------------


def test_repeating_a_batch_answers_completed_from_the_receipts(
    backend: Backend, clock: FakeClock
) -> None:
    handles = claim_all(backend, 3)
    batch = completions(handles)
    assert backend.complete_many(batch) == ["completed"] * 3
    clock.advance(5)
    snapshots = [get(backend, h.id) for h in handles]
    assert backend.complete_many(batch) == [JobResult("completed")] * 3
    assert [get(backend, h.id) for h in handles] == snapshots  # nothing written again


def test_a_batch_and_complete_share_receipts(backend: Backend) -> None:
    by_batch, by_call = claim_all(backend, 2)
    assert backend.complete_many([Completion(by_batch.id, by_batch.claim_token)]) == ["completed"]
    assert backend.complete(by_batch.id, by_batch.claim_token) == JobResult("completed")
    assert backend.complete(by_call.id, by_call.claim_token) == "completed"
    assert backend.complete_many([Completion(by_call.id, by_call.claim_token)]) == [
        JobResult("completed")
    ]


def test_the_same_completion_twice_in_one_batch_is_completed_twice(backend: Backend) -> None:
    (handle,) = claim_all(backend, 1)
    once = Completion(handle.id, handle.claim_token)
    assert backend.complete_many([once, once]) == [JobResult("completed")] * 2
    assert get(backend, handle.id).status == "completed"


def test_a_completed_job_with_another_token_is_already_terminal(backend: Backend) -> None:
    done, live = claim_all(backend, 2)
    assert done.complete() == "completed"
    snapshot = get(backend, done.id)
    results = backend.complete_many(
        [Completion(done.id, "another-token"), Completion(live.id, live.claim_token)]
    )
    assert results == [JobResult("already-terminal", "completed"), JobResult("completed")]
    assert get(backend, done.id) == snapshot


def test_a_failed_job_in_a_batch_is_already_terminal_failed(backend: Backend) -> None:
    (handle,) = claim_all(backend, 1)
    assert handle.fail_fatal("poison") == "failed-terminal"
    results = backend.complete_many([Completion(handle.id, handle.claim_token)])
    assert results == [JobResult("already-terminal", "failed")]
    assert get(backend, handle.id).status == "failed"


# -- dedupe slots ----------------------------------------------------------------------------


def test_a_batch_frees_pending_active_dedupe_slots(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k1")
    enqueue_id(backend, dedupe_key="k2")
    handles = backend.claim("t", limit=2)
    assert len(handles) == 2
    assert enqueue(backend, dedupe_key="k1") is None  # taken while the run is active
    assert backend.complete_many(completions(handles)) == ["completed", "completed"]
    assert enqueue(backend, dedupe_key="k1") is not None
    assert enqueue(backend, dedupe_key="k2") is not None


def test_a_batch_lets_a_pending_scope_follower_be_claimed(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    running = claim_one(backend)
    follower = enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    assert backend.claim("t") == []
    assert backend.complete_many([Completion(running.id, running.claim_token)]) == ["completed"]
    (handle,) = backend.claim("t")
    assert handle.id == follower
    assert enqueue(backend, dedupe_key="k", dedupe_scope="pending") is not None
