"""The completer: a processor's successful runs are handed to one named thread that writes
their completions in batches (``Backend.complete_many``) and then reports each run.

A handed-over run stays tracked (its ``done`` event unset) until its completion is written;
a failed write is logged and left to the reaper; a lost lease is reported, never written
over; shutdown waits for what was handed over.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from durabl import Job, JobContext, JobEvent, JobQueue, MemoryBackend, SqliteJobQueue
from durabl.model.job import JobResult
from durabl.runtime.completer import Completer
from durabl.runtime.run import Handler, ManagedRun
from durabl.stores.base import Backend, Completion
from durabl.stores.engine import StoreBase
from durabl.testing import FakeClock, wait_until

VT = 30


class Gate:
    """Stands in for a store's ``complete_many``: records each batch (its size and the
    thread that wrote it) and holds the first call until :attr:`release` is set, so a test
    can submit more while a write is in flight. ``fail`` makes the first call raise."""

    def __init__(self, backend: Backend, *, hold: bool = True, fail: bool = False) -> None:
        self.real = backend.complete_many
        self.hold = hold
        self.fail = fail
        self.entered = threading.Event()
        self.release = threading.Event()
        self.sizes: list[int] = []
        self.threads: list[str] = []
        self._lock = threading.Lock()

    def install(self, backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Gate:
        monkeypatch.setattr(backend, "complete_many", self.complete_many)
        return self

    def complete_many(self, completions: Sequence[Completion]) -> list[JobResult]:
        with self._lock:
            self.sizes.append(len(completions))
            self.threads.append(threading.current_thread().name)
            first = len(self.sizes) == 1
        if first:
            self.entered.set()
            if self.hold:
                assert self.release.wait(10), "the test never released the gate"
            if self.fail:
                raise ConnectionError("store down")
        return self.real(completions)


@pytest.fixture
def events() -> list[JobEvent]:
    return []


@pytest.fixture
def q(clock: FakeClock, events: list[JobEvent]) -> Iterator[JobQueue]:
    """A queue on the in-memory store and a fake clock (runs are driven by hand)."""
    queue = JobQueue(MemoryBackend(clock=clock), visibility_timeout=VT, on_job_event=events.append)
    yield queue
    queue.shutdown(2)


@pytest.fixture
def completer(q: JobQueue) -> Iterator[Completer]:
    writer = Completer(q.backend, "durabl-completer-t")
    yield writer
    writer.close(5)


def noop(job: Job[Any], ctx: JobContext) -> None:
    return None


def claim_run(q: JobQueue, handler: Handler = noop, data: Any = None) -> ManagedRun:
    q.enqueue("t", {} if data is None else data)
    (handle,) = q.backend.claim("t")
    return ManagedRun(handle, handler, q, heartbeat_interval=10)


def hand_over(run: ManagedRun, completer: Completer) -> None:
    outcome = run.execute(None, completer)
    assert outcome.disposition == "handed-over"
    assert (outcome.error, outcome.result) == (None, None)


def of_kind(events: list[JobEvent], kind: str) -> list[JobEvent]:
    return [e for e in list(events) if e.kind == kind]


def status(q: JobQueue, job_id: str) -> str:
    job = q.get_job(job_id)
    assert job is not None
    return job.status


def completer_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("durabl-completer-")]


# -- writing and reporting -------------------------------------------------------------------


def test_a_handed_over_run_stays_tracked_until_its_completion_is_written(
    q: JobQueue, completer: Completer, events: list[JobEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(q.backend).install(q.backend, monkeypatch)

    def chatty(job: Job[Any], ctx: JobContext) -> None:
        ctx.log("hello")

    run = claim_run(q, chatty)
    hand_over(run, completer)
    assert gate.entered.wait(5)
    # The write is in flight: nothing is reported and shutdown would still wait for it.
    assert not run.done.is_set()
    assert q.active_runs() == [run]
    assert status(q, run.job_id) == "active"
    assert of_kind(events, "completed") == []
    gate.release.set()
    assert run.done.wait(5)
    assert q.active_runs() == []
    job = q.get_job(run.job_id)
    assert job is not None and job.status == "completed" and job.attempts == 1
    assert [e.message for e in job.logs] == ["hello"]  # the run's logs go with the completion
    (done,) = of_kind(events, "completed")
    assert (done.type, done.job_id, done.attempt) == ("t", run.job_id, 1)
    assert done.duration is not None
    assert gate.threads == ["durabl-completer-t"]


def test_every_handed_over_run_gets_one_completed_event_in_order(
    q: JobQueue, completer: Completer, events: list[JobEvent]
) -> None:
    runs = [claim_run(q, data={"n": n}) for n in range(4)]
    for run in runs:
        hand_over(run, completer)
    assert completer.close(5)
    assert all(run.done.is_set() for run in runs)
    assert [e.job_id for e in of_kind(events, "completed")] == [r.job_id for r in runs]
    assert [status(q, r.job_id) for r in runs] == ["completed"] * 4
    assert completer.written == 4
    assert q.active_runs() == []


def test_completions_submitted_during_a_write_go_in_the_next_batch_together(
    q: JobQueue, completer: Completer, events: list[JobEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(q.backend).install(q.backend, monkeypatch)
    first = claim_run(q)
    hand_over(first, completer)
    assert gate.entered.wait(5)
    waiting = [claim_run(q, data={"n": n}) for n in range(5)]
    for run in waiting:
        hand_over(run, completer)
    gate.release.set()
    assert all(run.done.wait(5) for run in [first, *waiting])
    assert gate.sizes == [1, 5]
    assert (completer.batches, completer.written) == (2, 6)
    assert len(of_kind(events, "completed")) == 6
    assert q.count_jobs(status="completed") == 6


def test_a_start_written_in_the_batch_that_ends_its_claim_is_not_written_apart(
    q: JobQueue, completer: Completer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read-ahead run's start and its completion reaching the thread together: the
    completion ends the claim, so no start is written for it (one row version less per
    job); a run still going when the batch is written gets its start written."""
    gate = Gate(q.backend).install(q.backend, monkeypatch)
    starts: list[list[tuple[str, str]]] = []
    real_mark_started = q.backend.mark_started

    def mark_started(claims: Sequence[tuple[str, str]]) -> None:
        starts.append(list(claims))
        real_mark_started(claims)

    monkeypatch.setattr(q.backend, "mark_started", mark_started)
    first = claim_run(q)
    hand_over(first, completer)
    assert gate.entered.wait(5)
    q.enqueue("t", {"n": 1})
    (quick_handle,) = q.backend.claim("t")
    quick = ManagedRun(quick_handle, noop, q, heartbeat_interval=10, reserved=True)
    hand_over(quick, completer)
    began, finish = threading.Event(), threading.Event()

    def slow_handler(job: Job[Any], ctx: JobContext) -> None:
        began.set()
        assert finish.wait(10)

    q.enqueue("t", {"n": 2})
    (slow_handle,) = q.backend.claim("t")
    slow = ManagedRun(slow_handle, slow_handler, q, heartbeat_interval=10, reserved=True)
    running = threading.Thread(target=slow.execute, args=(None, completer))
    running.start()
    assert began.wait(5)
    gate.release.set()
    assert quick.done.wait(5)
    finish.set()
    running.join(5)
    assert slow.done.wait(5)
    assert starts == [[(slow_handle.id, slow_handle.claim_token)]]
    assert q.count_jobs(status="completed") == 3


def test_max_batch_caps_the_completions_written_in_one_call(
    q: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(q.backend).install(q.backend, monkeypatch)
    completer = Completer(q.backend, "durabl-completer-t", max_batch=2, max_waiting=10)
    try:
        first = claim_run(q)
        hand_over(first, completer)
        assert gate.entered.wait(5)
        for n in range(5):
            hand_over(claim_run(q, data={"n": n}), completer)
        gate.release.set()
        assert completer.close(5)
    finally:
        completer.close(5)
    assert gate.sizes == [1, 2, 2, 1]
    assert q.count_jobs(status="completed") == 6


def test_a_worker_waits_while_too_many_completions_are_unwritten(
    q: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Writes that fall behind slow the workers down instead of piling up finished runs
    # whose leases nobody renews.
    gate = Gate(q.backend).install(q.backend, monkeypatch)
    completer = Completer(q.backend, "durabl-completer-t", max_waiting=2)
    try:
        hand_over(claim_run(q), completer)
        assert gate.entered.wait(5)
        hand_over(claim_run(q, data={"n": 1}), completer)  # the second may wait its turn
        third = claim_run(q, data={"n": 2})
        handed = threading.Event()
        worker = threading.Thread(
            target=lambda: (hand_over(third, completer), handed.set()), name="worker"
        )
        worker.start()
        assert not handed.wait(0.2), "a third unwritten completion must wait for room"
        gate.release.set()
        assert handed.wait(5)
        worker.join(5)
        assert completer.close(5)
    finally:
        gate.release.set()
        completer.close(5)
    assert q.count_jobs(status="completed") == 3


def test_on_written_is_called_for_each_run_after_it_is_reported(q: JobQueue) -> None:
    seen: list[tuple[str, bool]] = []
    completer = Completer(
        q.backend,
        "durabl-completer-t",
        on_written=lambda run: seen.append((run.job_id, run.done.is_set())),
    )
    try:
        runs = [claim_run(q, data={"n": n}) for n in range(3)]
        for run in runs:
            hand_over(run, completer)
    finally:
        assert completer.close(5)
    assert seen == [(run.job_id, True) for run in runs]


def test_a_failing_event_sink_or_hook_does_not_stop_the_completer(clock: FakeClock) -> None:
    def broken(event: JobEvent) -> None:
        raise RuntimeError("metrics are down")

    def broken_hook(run: ManagedRun) -> None:
        raise RuntimeError("hook is broken")

    q = JobQueue(MemoryBackend(clock=clock), visibility_timeout=VT, on_job_event=broken)
    completer = Completer(q.backend, "durabl-completer-t", on_written=broken_hook)
    try:
        runs = [claim_run(q, data={"n": n}) for n in range(2)]
        for run in runs:
            hand_over(run, completer)
        assert all(run.done.wait(5) for run in runs)
        later = claim_run(q, data={"n": "later"})
        hand_over(later, completer)
        assert later.done.wait(5)
    finally:
        assert completer.close(5)
    assert q.count_jobs(status="completed") == 3


# -- a failed write --------------------------------------------------------------------------


def test_a_failed_batch_is_written_one_completion_at_a_time(
    q: JobQueue, completer: Completer, events: list[JobEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(q.backend, fail=True).install(q.backend, monkeypatch)
    first = claim_run(q)
    hand_over(first, completer)
    assert gate.entered.wait(5)
    gate.release.set()
    assert first.done.wait(5)
    assert status(q, first.job_id) == "completed"  # the batch failed; the single write did not
    assert [e.job_id for e in of_kind(events, "completed")] == [first.job_id]


def test_one_completion_that_cannot_be_written_does_not_cost_the_others(
    q: JobQueue, completer: Completer, events: list[JobEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = [claim_run(q, data={"n": n}) for n in range(4)]
    poison = runs[1].job_id
    real_complete = q.backend.complete

    def complete(job_id: str, token: str, **kwargs: Any) -> JobResult:
        if job_id == poison:
            raise ValueError("this one cannot be stored")
        return real_complete(job_id, token, **kwargs)

    def complete_many(completions: Sequence[Completion]) -> list[JobResult]:
        if any(c.job_id == poison for c in completions):  # one transaction: all or nothing
            raise ValueError("this one cannot be stored")
        return [real_complete(c.job_id, c.token, logs=c.logs) for c in completions]

    monkeypatch.setattr(q.backend, "complete", complete)
    monkeypatch.setattr(q.backend, "complete_many", complete_many)
    for run in runs:
        hand_over(run, completer)
    assert completer.close(5)
    assert [status(q, run.job_id) for run in runs] == [
        "completed",
        "active",
        "completed",
        "completed",
    ]
    assert len(of_kind(events, "completed")) == 3


def test_every_completion_reaches_the_store_through_write_completions(
    q: JobQueue, completer: Completer, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = q.backend
    assert isinstance(backend, StoreBase)
    write = backend.write_completions
    batches: list[int] = []

    def recording(op: str, completions: Sequence[Completion]) -> list[JobResult]:
        batches.append(len(completions))
        return write(op, completions)

    monkeypatch.setattr(backend, "write_completions", recording)
    runs = [claim_run(q, data={"n": n}) for n in range(3)]
    for run in runs:
        hand_over(run, completer)
    assert completer.close(5)
    assert all(status(q, run.job_id) == "completed" for run in runs)
    assert sum(batches) == 3 and all(batches)


def test_a_sink_raising_system_exit_does_not_stop_later_completions(
    q: JobQueue, completer: Completer
) -> None:
    def sink(event: JobEvent) -> None:
        if event.kind == "completed":
            raise SystemExit("a sink that exits")

    q.on_job_event = sink
    first, second = claim_run(q), claim_run(q, data={"n": 2})
    hand_over(first, completer)
    assert first.done.wait(5)
    hand_over(second, completer)
    assert second.done.wait(5)
    assert status(q, second.job_id) == "completed"
    assert q.active_runs() == []


def test_a_completion_that_cannot_be_written_is_logged_and_left_to_the_reaper(
    q: JobQueue,
    completer: Completer,
    clock: FakeClock,
    events: list[JobEvent],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = Gate(q.backend, fail=True).install(q.backend, monkeypatch)
    real_complete = q.backend.complete
    first = claim_run(q)

    def complete(job_id: str, token: str, **kwargs: Any) -> JobResult:
        if job_id == first.job_id:
            raise ConnectionError("store down")
        return real_complete(job_id, token, **kwargs)

    monkeypatch.setattr(q.backend, "complete", complete)
    hand_over(first, completer)
    assert gate.entered.wait(5)
    second = claim_run(q, data={"n": 2})
    hand_over(second, completer)
    with caplog.at_level(logging.ERROR, logger="durabl.runtime.run"):
        gate.release.set()
        assert first.done.wait(5) and second.done.wait(5)
    assert gate.sizes == [1, 1]  # the failed batch, then the second run's on its own
    (failed,) = [r for r in caplog.records if "could not record the outcome" in r.getMessage()]
    assert f"of job {first.job_id};" in failed.getMessage()
    assert failed.exc_info is not None and isinstance(failed.exc_info[1], ConnectionError)
    assert q.active_runs() == []
    # The failed run's job is still active (nobody owns it now); the next batch went through.
    assert status(q, first.job_id) == "active"
    assert status(q, second.job_id) == "completed"
    assert [e.job_id for e in of_kind(events, "completed")] == [second.job_id]
    clock.advance(VT + 1)
    assert q.reap_once().recovered == 1
    assert status(q, first.job_id) == "pending"


def test_every_run_of_a_failed_batch_is_logged_and_released_to_waiters(
    q: JobQueue,
    completer: Completer,
    events: list[JobEvent],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def down(completions: Sequence[Completion]) -> list[JobResult]:
        raise ConnectionError("store down")

    monkeypatch.setattr(q.backend, "complete_many", down)
    monkeypatch.setattr(q.backend, "complete", lambda *args, **kwargs: down([]))
    runs = [claim_run(q, data={"n": n}) for n in range(3)]
    with caplog.at_level(logging.ERROR, logger="durabl.runtime.run"):
        for run in runs:
            hand_over(run, completer)
        assert completer.close(5)
    assert all(run.done.is_set() for run in runs)
    assert q.active_runs() == []
    logged = [r.getMessage() for r in caplog.records if r.name == "durabl.runtime.run"]
    for run in runs:
        assert f"could not record the outcome of job {run.job_id};" in "\n".join(logged)
        assert status(q, run.job_id) == "active"
    assert of_kind(events, "completed") == []
    assert completer.written == 0


# -- lost leases -----------------------------------------------------------------------------


def test_a_lease_lost_before_the_write_is_reported_and_not_written(
    q: JobQueue,
    completer: Completer,
    clock: FakeClock,
    events: list[JobEvent],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gate = Gate(q.backend).install(q.backend, monkeypatch)
    run = claim_run(q)
    hand_over(run, completer)
    assert gate.entered.wait(5)
    # While the completion waits, the lease expires and another worker takes the job.
    clock.advance(VT + 1)
    assert q.reap_once().recovered == 1
    (other,) = q.backend.claim("t")
    assert other.id == run.job_id
    gate.release.set()
    assert run.done.wait(5)
    assert q.active_runs() == []
    job = q.get_job(run.job_id)
    assert job is not None and (job.status, job.attempts) == ("active", 2)
    assert of_kind(events, "completed") == []
    (lost,) = of_kind(events, "lease-lost")
    assert (lost.job_id, lost.op) == (run.job_id, "complete")
    assert other.complete() == "completed"  # the new owner's write still lands


def test_a_stale_token_is_reported_as_lease_lost(
    q: JobQueue, completer: Completer, events: list[JobEvent]
) -> None:
    run = claim_run(q)
    good = claim_run(q, data={"n": "good"})
    completer.submit(run, Completion(run.job_id, "not-the-token"), 0.5)
    hand_over(good, completer)
    assert run.done.wait(5) and good.done.wait(5)
    assert status(q, run.job_id) == "active"
    assert status(q, good.job_id) == "completed"
    assert [e.job_id for e in of_kind(events, "lease-lost")] == [run.job_id]
    assert [e.job_id for e in of_kind(events, "completed")] == [good.job_id]
    assert q.active_runs() == []


# -- lifecycle -------------------------------------------------------------------------------


def test_close_writes_what_was_submitted_then_joins_its_named_thread(q: JobQueue) -> None:
    before = set(completer_threads())
    completer = Completer(q.backend, "durabl-completer-mail")
    assert completer.close() is True  # never started: nothing to join, no thread made
    assert set(completer_threads()) == before
    completer = Completer(q.backend, "durabl-completer-mail")
    run = claim_run(q)
    hand_over(run, completer)
    (thread,) = set(completer_threads()) - before
    assert thread.name == "durabl-completer-mail" and thread.daemon
    assert completer.close(5) is True
    assert run.done.is_set() and status(q, run.job_id) == "completed"
    assert not thread.is_alive()
    assert completer.close(5) is True  # idempotent
    assert completer.close(0) is True
    assert not thread.is_alive()


@pytest.mark.parametrize("max_batch", [0, -1])
def test_max_batch_below_one_is_refused(q: JobQueue, max_batch: int) -> None:
    with pytest.raises(ValueError, match="max_batch"):
        Completer(q.backend, "durabl-completer-t", max_batch=max_batch)
    assert Completer(q.backend, "durabl-completer-t", max_batch=1).max_batch == 1


# -- the processor path ----------------------------------------------------------------------


@pytest.fixture
def live(events: list[JobEvent]) -> Iterator[JobQueue]:
    """A queue with real threads on the real clock, over the in-memory store."""
    queue = JobQueue(MemoryBackend(), visibility_timeout=VT, on_job_event=events.append)
    yield queue
    queue.shutdown(5)


def test_worker_threads_hand_completions_to_their_processors_completer(
    live: JobQueue, events: list[JobEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(live.backend, hold=False).install(live.backend, monkeypatch)
    ids = [live.enqueue("t", {"n": n}) for n in range(10)]
    live.process("t", noop, concurrency=3, poll_interval=0.02)
    completer = live.processors["t"].completer
    assert completer.name == "durabl-completer-t"
    assert wait_until(lambda: len(of_kind(events, "completed")) == 10, timeout=5)
    assert sorted(str(e.job_id) for e in of_kind(events, "completed")) == sorted(map(str, ids))
    assert sum(gate.sizes) == 10 == completer.written
    assert set(gate.threads) == {"durabl-completer-t"}
    assert live.count_jobs(status="completed") == 10
    live.shutdown(5)
    assert [t for t in completer_threads() if t.name == "durabl-completer-t"] == []


def test_a_pending_scope_follower_runs_once_the_handed_over_run_is_written(
    live: JobQueue, events: list[JobEvent]
) -> None:
    leader_started = threading.Event()
    finish_leader = threading.Event()
    ran: list[Any] = []

    def handler(job: Job[Any], ctx: JobContext) -> None:
        ran.append(job.data)
        if job.data == "leader":
            leader_started.set()
            assert finish_leader.wait(5)

    # An hour between polls: only the completer's wake-up can start the follower in time.
    live.process("t", handler, poll_interval=3600)
    assert wait_until(lambda: live.processors["t"].polls >= 1, timeout=5)
    live.enqueue("t", "leader", dedupe_key="k", dedupe_scope="pending")
    assert leader_started.wait(5)
    assert live.enqueue("t", "follower", dedupe_key="k", dedupe_scope="pending") is not None
    finish_leader.set()
    assert wait_until(lambda: len(of_kind(events, "completed")) == 2, timeout=5)
    assert ran == ["leader", "follower"]


def test_shutdown_waits_for_a_completion_being_written(
    live: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = Gate(live.backend).install(live.backend, monkeypatch)
    job_id = live.enqueue("t", {})
    assert job_id is not None
    live.process("t", noop, poll_interval=0.02)
    assert gate.entered.wait(5)
    stopper = threading.Thread(target=live.shutdown, args=(10,), name="test-shutdown")
    stopper.start()
    try:
        stopper.join(0.3)
        assert stopper.is_alive(), "shutdown returned while a completion was still unwritten"
        assert live.draining is not None and not live.draining.done()
    finally:
        gate.release.set()
        stopper.join(10)
    assert not stopper.is_alive()
    assert status(live, job_id) == "completed"
    assert live.active_runs() == []
    assert [t for t in completer_threads() if t.name == "durabl-completer-t"] == []


def test_after_shutdown_every_processed_job_is_completed_in_the_store(
    tmp_path: Path, events: list[JobEvent], monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SqliteJobQueue(str(tmp_path / "jobs.sqlite3"))
    queue = JobQueue(store, visibility_timeout=VT, on_job_event=events.append)
    processed: list[str] = []
    lock = threading.Lock()
    real = store.complete_many

    def held_until_shutdown(completions: Sequence[Completion]) -> list[JobResult]:
        # No completion is written before shutdown starts: it has all of them to wait for.
        assert wait_until(lambda: queue.draining is not None, timeout=10)
        return real(completions)

    def handler(job: Job[Any], ctx: JobContext) -> None:
        with lock:
            processed.append(job.id)

    monkeypatch.setattr(store, "complete_many", held_until_shutdown)
    try:
        count = 200
        for n in range(count):
            queue.enqueue("t", {"n": n})
        queue.process("t", handler, concurrency=4, poll_interval=0.02)
        assert wait_until(lambda: len(processed) >= count // 2, timeout=10)
        assert queue.count_jobs(status="completed") == 0
        queue.shutdown(10)
        with lock:
            ran = list(processed)
        assert len(ran) == len(set(ran)) >= count // 2
        statuses = {job.id: job.status for job in queue.list_jobs(limit=count)}
        assert {statuses[job_id] for job_id in ran} == {"completed"}
        assert queue.count_jobs(status="completed") == len(ran)
        assert len(of_kind(events, "completed")) == len(ran)
        released = {e.job_id for e in of_kind(events, "shutdown-released")}
        assert released.isdisjoint(ran)  # a handed-over run is never taken back
        assert queue.processors["t"].completer.batches <= len(ran) // 2  # written in batches
        assert queue.active_runs() == []
        assert completer_threads() == []
    finally:
        queue.shutdown(5)
        store.close()


# -- a store that answers wrongly ------------------------------------------------------------


def test_a_store_returning_too_few_results_is_treated_as_a_failed_write(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = JobQueue(MemoryBackend(clock=clock), visibility_timeout=VT)
    real = q.backend.complete_many
    monkeypatch.setattr(q.backend, "complete_many", lambda cs: real(cs)[:-1])
    completer = Completer(q.backend, "durabl-completer-t")
    try:
        runs = [claim_run(q, data={"n": n}) for n in range(2)]
        for run in runs:
            hand_over(run, completer)
        assert all(run.done.wait(0.5) for run in runs)  # reported as write-failed
        assert q.active_runs() == []
    finally:
        completer.close(0)


def test_a_completion_submitted_after_close_is_written_by_its_caller(clock: FakeClock) -> None:
    q = JobQueue(MemoryBackend(clock=clock), visibility_timeout=VT)
    completer = Completer(q.backend, "durabl-completer-t")
    assert completer.close(1)
    run = claim_run(q)
    hand_over(run, completer)
    assert run.done.is_set()
    assert q.backend.get_job(run.job_id).status == "completed"  # type: ignore[union-attr]
    assert not any(t.name == "durabl-completer-t" for t in threading.enumerate())
