"""Faults injected by the MongoDB server itself (``configureFailPoint: failCommand``) while
real worker threads run jobs: a claim (``findAndModify``), a heartbeat and a completion
(``update``), an enqueue (``insert``), and the change stream (``getMore``, ``aggregate``)
meet a dropped connection, the errors of a failover or a shutdown (91, 10107, 11600), a
command held on the server, and a write that is applied but answered with an error.

Whatever the fault, nothing is lost and nothing is done twice: every job ends completed,
its handler ran once (counted here, outside the queue), its record shows one attempt per
claim and one completion. The scripted conversations of ``tests/wire`` check each write's
retry on the wire; these check the whole engine against a server that fails on cue.

Each fault is first probed (:func:`tests.integration.mongo_faults.not_honoured`): a server
that does not honour it skips the tests that use it, naming it. On the MongoDB server of
``tests.conftest.require_mongo`` (``MONGO_URL``, else the session's SecantusDB wire server).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from pymongo import MongoClient

from durabl import Job, JobContext, JobEvent, JobQueue, MongoJobQueue
from durabl.model.exceptions import BackendUnavailableError
from tests.integration.fault_runs import (
    DONE_WITHIN,
    JOBS,
    Held,
    Worker,
    completed_once,
    enqueue,
    until,
)
from tests.integration.mongo_faults import (
    FailPoint,
    Fault,
    Wire,
    applied_then_failed,
    blocked,
    client_url,
    dropped,
    error,
    not_honoured,
    worker_client,
)

pytestmark = pytest.mark.slow


@pytest.fixture
def view(server: str, database: str) -> Iterator[JobQueue]:
    """The test's own queue on a client of its own: enqueues and reads that no fail point
    touches, as another process's would be."""
    client: MongoClient[dict[str, Any]] = MongoClient(client_url(server), tz_aware=True)
    queue = JobQueue(MongoJobQueue(client[database], owns_client=True))
    queue.startup()
    yield queue
    queue.shutdown(timeout=5)
    queue.backend.close()


@pytest.fixture
def make_worker(server: str, database: str) -> Iterator[Callable[..., Worker]]:
    """Build the worker queue: a client with the worker's ``appName`` (the one the fail
    points catch); keyword arguments go to :class:`MongoJobQueue`, ``visibility_timeout``
    to the queue."""
    made: list[Worker] = []

    def make(visibility_timeout: float = 30.0, **store: Any) -> Worker:
        wire = Wire()
        events: list[JobEvent] = []
        backend = MongoJobQueue(worker_client(server, wire)[database], owns_client=True, **store)
        queue = JobQueue(backend, visibility_timeout=visibility_timeout, on_job_event=events.append)
        worker = Worker(queue, wire, events)
        made.append(worker)
        return worker

    yield make
    for worker in made:
        worker.queue.shutdown(timeout=5)
        worker.queue.backend.close()


def require(server: str, fail_point: FailPoint, command: str, fault: Fault) -> None:
    reason = not_honoured(server, fail_point, command, fault)
    if reason is not None:
        pytest.skip(f"the server does not honour the fail point: {reason}")


# -- the probe ------------------------------------------------------------------------------
# Every fail point the tests below use, on the command they use it on: applied to the
# worker's client only (its appName), and doing what it says. SecantusDB honours them all;
# unlike mongod it does not add the RetryableWriteError label to a write concern error by
# itself, so the faults here that should carry it carry it explicitly.
PROBED = [
    ("findAndModify", error(91, 1)),
    ("findAndModify", error(10107, 1)),
    ("findAndModify", error(11600, 1)),
    ("findAndModify", dropped(1)),
    ("findAndModify", blocked(500, 1)),
    ("findAndModify", applied_then_failed(64, retryable=False)),
    ("update", error(91, 1)),
    ("update", error(10107, 1)),
    ("update", error(11600, 1)),
    ("update", dropped(1)),
    ("update", blocked(500, 1)),
    ("update", applied_then_failed(91, retryable=True)),
    ("update", applied_then_failed(64, retryable=False)),
    ("insert", error(91, 1)),
    ("insert", dropped(1)),
    ("insert", applied_then_failed(91, retryable=True)),
    ("insert", applied_then_failed(64, retryable=False)),
    ("aggregate", error(91, 1)),
    ("getMore", error(91, 1)),
    ("getMore", dropped(1)),
]


@pytest.mark.parametrize(("command", "fault"), PROBED, ids=[f"{c}-{f}" for c, f in PROBED])
def test_the_server_honours_the_fail_points_used_here(
    server: str, fail_point: FailPoint, command: str, fault: Fault
) -> None:
    assert not_honoured(server, fail_point, command, fault) is None


# -- mid-claim: findAndModify -----------------------------------------------------------------
CLAIM_FAULTS = [dropped(2), error(91, 2), error(10107, 2), error(11600, 3), blocked(1500, 2)]


@pytest.mark.parametrize("fault", CLAIM_FAULTS, ids=str)
def test_a_claim_meeting_a_fault_loses_and_doubles_nothing(
    server: str,
    fail_point: FailPoint,
    view: JobQueue,
    make_worker: Callable[..., Worker],
    fault: Fault,
) -> None:
    require(server, fail_point, "findAndModify", fault)
    ids = enqueue(view)
    worker = make_worker()
    # Twice or more: the driver's own retry of the claim fails too, so durabl sees it.
    fail_point.set(fault, ["findAndModify"])
    worker.queue.process("t", worker.echo(), concurrency=2, poll_interval=0.1)
    completed_once(view, worker, ids)
    if "blockConnection" in fault.data:
        assert worker.wire.longest["findAndModify"] >= 1.4
    else:
        assert worker.wire.failures("findAndModify") == fault.times


def test_a_claim_applied_but_answered_with_a_write_concern_error_still_runs_the_job(
    server: str, fail_point: FailPoint, view: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    """The claim took the job on the server; the reply says the write concern failed (a
    ``wtimeout``: not labelled retryable, so the driver does not send it again). The job
    must not be stranded for a lease and charged an attempt it never ran: with one attempt
    allowed, it would fail as stalled without its handler ever running."""
    fault = applied_then_failed(64, retryable=False)
    require(server, fail_point, "findAndModify", fault)
    (job_id,) = [view.enqueue("t", {"n": 0}, max_attempts=1) or ""]
    lease = 3.0
    worker = make_worker(visibility_timeout=lease)
    fail_point.set(fault, ["findAndModify"])
    worker.queue.process("t", worker.echo(), poll_interval=0.1)
    assert until(lambda: worker.wire.failures("findAndModify") == 1, timeout=30)

    def ended() -> bool:
        view.reap_once(lease)  # a reaper, as a deployment runs one
        return getattr(view.get_job(job_id), "status", None) in ("completed", "failed")

    assert until(ended, timeout=DONE_WITHIN, interval=0.5)
    job = view.get_job(job_id)
    assert job is not None
    assert (job.status, worker.runs[job_id]) == ("completed", 1), (
        job.status,
        job.failure_kind,
        job.attempt_history,
        dict(worker.runs),
    )
    completed_once(view, worker, [job_id])


def test_claims_refused_for_a_while_leave_the_jobs_pending_and_uncharged(
    server: str, fail_point: FailPoint, view: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    fault = error(91, 1)
    require(server, fail_point, "findAndModify", fault)
    ids = enqueue(view)
    worker = make_worker()
    fail_point.set(fault, ["findAndModify"], "alwaysOn")
    worker.queue.process("t", worker.echo(), concurrency=2, poll_interval=0.1)
    assert until(lambda: worker.wire.failures("findAndModify") >= 6, timeout=30)
    jobs = [view.get_job(job_id) for job_id in ids]
    assert [(j.status, j.attempts) for j in jobs if j] == [("pending", 0)] * JOBS
    fail_point.off()
    completed_once(view, worker, ids)


# -- mid-completion: update ---------------------------------------------------------------------
COMPLETION_FAULTS = [
    dropped(2),
    error(91, 2),
    error(10107, 3),
    error(11600, 3),
    blocked(1500, 1),
    applied_then_failed(91, retryable=True),
]


@pytest.mark.parametrize("fault", COMPLETION_FAULTS, ids=str)
def test_a_completion_meeting_a_fault_is_written_once(
    server: str,
    fail_point: FailPoint,
    view: JobQueue,
    make_worker: Callable[..., Worker],
    fault: Fault,
) -> None:
    require(server, fail_point, "update", fault)
    ids = enqueue(view)
    worker = make_worker()  # 30 s lease: no heartbeat (an update too) within the test
    held = Held(worker)
    worker.queue.process("t", held, concurrency=JOBS, poll_interval=0.1)
    held.wait_started(JOBS)
    fail_point.set(fault, ["update"])  # every handler is running: the next update ends one
    held.go.set()
    completed_once(view, worker, ids)
    assert "lease-lost" not in worker.kinds()
    assert worker.kinds().count("completed") == JOBS
    if "blockConnection" not in fault.data:
        assert worker.wire.failures("update") >= 1


def test_a_completion_applied_but_answered_with_a_write_concern_error_is_resolved_from_its_receipt(
    server: str, fail_point: FailPoint, view: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    fault = applied_then_failed(64, retryable=False)  # WriteConcernFailed: wtimeout
    require(server, fail_point, "update", fault)
    (job_id,) = enqueue(view, 1)
    worker = make_worker()
    held = Held(worker)
    worker.queue.process("t", held, poll_interval=0.1)
    held.wait_started()
    fail_point.set(fault, ["update"])
    held.go.set()
    completed_once(view, worker, [job_id])
    # The batch write raised; written again on its own it matched nothing, and the job's
    # receipt for this claim said the first had gone through: reported completed, once.
    assert until(lambda: "completed" in worker.kinds(), timeout=10), worker.kinds()
    assert worker.wire.failures("update") == 1
    assert "lease-lost" not in worker.kinds()


# -- mid-heartbeat: update ------------------------------------------------------------------------
def test_a_heartbeat_failing_briefly_keeps_the_lease(
    server: str, fail_point: FailPoint, view: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    fault = error(91, 2)  # the driver's retry fails too: durabl's own retry renews
    require(server, fail_point, "update", fault)
    (job_id,) = enqueue(view, 1)
    worker = make_worker(visibility_timeout=6.0)  # a renewal every 2 s
    held = Held(worker)
    worker.queue.process("t", held, poll_interval=0.1)
    held.wait_started()
    fail_point.set(fault, ["update"])
    assert until(lambda: worker.wire.failures("update") == 2, timeout=30)
    renewed = worker.wire.successes("update")
    # Two renewals after the fault, each confirmed (a lease of 6 s outlives the fault).
    assert until(lambda: worker.wire.successes("update") >= renewed + 2, timeout=30)
    held.go.set()
    completed_once(view, worker, [job_id])
    assert "lease-lost" not in worker.kinds()


def test_heartbeats_failing_past_the_lease_give_the_run_up_and_the_job_runs_again_once(
    server: str, fail_point: FailPoint, view: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    fault = error(91, 1)
    require(server, fail_point, "update", fault)
    (job_id,) = enqueue(view, 1)
    lease = 3.0
    worker = make_worker(visibility_timeout=lease)
    started = threading.Event()
    reasons: list[str | None] = []

    def handler(job: Job[Any], ctx: JobContext) -> dict[str, int]:
        if worker.ran(job.id) == 1:
            started.set()
            ctx.signal.wait(DONE_WITHIN)  # until the unconfirmed lease aborts it
            reasons.append(ctx.signal.reason)
        return {"n": 0}

    worker.queue.process("t", handler, poll_interval=0.1)
    assert started.wait(DONE_WITHIN)
    fail_point.set(fault, ["update"], "alwaysOn")  # no renewal, no write of any outcome
    assert until(lambda: "lease-lost" in worker.kinds(), timeout=30), worker.kinds()
    assert reasons == ["lease-unconfirmed"]
    assert view.get_job(job_id).status == "active"  # type: ignore[union-attr]
    fail_point.off()
    # Another process's reaper (the test's queue) gives the job back; the worker runs it.
    assert until(lambda: view.reap_once(lease).recovered == 1, timeout=30)
    completed_once(view, worker, [job_id], attempts=2)
    job = view.get_job(job_id)
    assert job is not None
    assert [a.outcome for a in job.attempt_history] == ["lease-lost", "completed"]
    (lost,) = [e for e in worker.events if e.kind == "lease-lost"]
    assert lost.op == "deadline"


# -- mid-enqueue: insert ------------------------------------------------------------------------
@pytest.mark.parametrize(
    "fault", [dropped(2), error(91, 2), applied_then_failed(91, retryable=True)], ids=str
)
def test_an_enqueue_meeting_a_fault_stores_the_job_once(
    server: str,
    fail_point: FailPoint,
    view: JobQueue,
    make_worker: Callable[..., Worker],
    fault: Fault,
) -> None:
    require(server, fail_point, "insert", fault)
    worker = make_worker()
    fail_point.set(fault, ["insert"])
    job_id = worker.queue.enqueue("t", {"n": 0}) or ""
    assert worker.wire.failures("insert") == fault.times
    assert [job.id for job in view.list_jobs(limit=0)] == [job_id]
    worker.queue.process("t", worker.echo(), poll_interval=0.1)
    completed_once(view, worker, [job_id])


def test_an_enqueue_refused_past_the_retry_budget_raises_and_stores_nothing(
    server: str, fail_point: FailPoint, view: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    fault = error(91, 1)
    require(server, fail_point, "insert", fault)
    worker = make_worker()
    fail_point.set(fault, ["insert"], "alwaysOn")
    with pytest.raises(BackendUnavailableError):
        worker.queue.enqueue("t", {"n": 0})
    fail_point.off()
    assert view.list_jobs(limit=0) == []


def test_an_enqueue_applied_but_unconfirmed_by_its_write_concern_is_one_unavailable_error(
    server: str, fail_point: FailPoint, view: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    """The primary applied the insert, but the write concern was not met: whether the job
    lasts is unknown, so the caller hears one ``BackendUnavailableError`` that says so (not
    a bare driver error), and the store did not insert it twice."""
    fault = applied_then_failed(64, retryable=False)
    require(server, fail_point, "insert", fault)
    worker = make_worker()
    fail_point.set(fault, ["insert"])
    with pytest.raises(BackendUnavailableError, match="write concern was not met") as info:
        worker.queue.enqueue("t", {"n": 0})
    assert "\n" not in str(info.value)
    assert len(view.list_jobs(limit=0)) == 1


# -- mid-stream: the change stream's getMore and aggregate --------------------------------------
def push_up(worker: Worker) -> None:
    assert until(lambda: worker.queue.is_healthy().pickup == "push", timeout=30), (
        worker.queue.is_healthy()
    )


@pytest.mark.parametrize("fault", [error(91, 1), dropped(1)], ids=str)
def test_a_stream_read_failing_once_is_resumed_by_the_driver(
    server: str,
    fail_point: FailPoint,
    view: JobQueue,
    make_worker: Callable[..., Worker],
    fault: Fault,
) -> None:
    require(server, fail_point, "getMore", fault)
    worker = make_worker(use_change_streams=True)
    worker.queue.process("t", worker.echo())  # the default poll: 60 s while pushed
    push_up(worker)
    fail_point.set(fault, ["getMore"])
    assert until(lambda: worker.wire.failures("getMore") == 1, timeout=30)
    ids = enqueue(view, 2)
    completed_once(view, worker, ids)
    # Resumed by pymongo with the last token: the watcher saw nothing go wrong.
    assert "changestream-error" not in worker.kinds()
    assert worker.queue.is_healthy().pickup == "push"


def test_a_stream_that_cannot_resume_for_a_while_polls_then_resumes_from_its_token(
    server: str, fail_point: FailPoint, view: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    fault = error(91, 1)
    require(server, fail_point, "getMore", fault)
    require(server, fail_point, "aggregate", fault)
    worker = make_worker(use_change_streams=True)
    store = worker.queue.backend
    assert isinstance(store, MongoJobQueue)
    store.push_settings = replace(store.push_settings, retry_backoff=0.2, open_timeout=2.0)
    worker.queue.process("t", worker.echo())
    push_up(worker)
    # The read fails, pymongo's resume (an aggregate) fails, and so does reopening, until
    # the fail point is off: meanwhile the processors poll, and jobs still run.
    fail_point.set(fault, ["getMore", "aggregate"], "alwaysOn")
    assert until(lambda: "changestream-error" in worker.kinds(), timeout=30)
    assert worker.queue.is_healthy().pickup == "poll"
    ids = enqueue(view, 2)
    fail_point.off()
    completed_once(view, worker, ids)
    push_up(worker)
    connected = [e for e in worker.events if e.kind == "changestream-connected"]
    assert connected[-1].extra["resumed"] is True
    assert "changestream-fallback" not in worker.kinds()


def test_a_stream_that_keeps_failing_falls_back_to_polling_and_loses_nothing(
    server: str, fail_point: FailPoint, view: JobQueue, make_worker: Callable[..., Worker]
) -> None:
    fault = error(91, 1)
    require(server, fail_point, "getMore", fault)
    require(server, fail_point, "aggregate", fault)
    worker = make_worker(use_change_streams=True)
    store = worker.queue.backend
    assert isinstance(store, MongoJobQueue)
    store.push_settings = replace(
        store.push_settings,
        max_retries=2,
        retry_backoff=0.1,
        retry_backoff_max=0.2,
        open_timeout=1.0,
    )
    worker.queue.process("t", worker.echo())
    push_up(worker)
    fail_point.set(fault, ["getMore", "aggregate"], "alwaysOn")
    assert until(lambda: "changestream-fallback" in worker.kinds(), timeout=60)
    assert worker.queue.is_healthy().pickup == "poll"
    ids = enqueue(view, 2)  # found by polling (5 s) with the stream still refused
    completed_once(view, worker, ids)
    assert worker.queue.processors["t"].poll_interval == 5.0
