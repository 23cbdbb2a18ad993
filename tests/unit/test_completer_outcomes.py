"""Every outcome of a worker-pool run goes through its processor's completer: completions
in batches, and failures, fatal failures, suspensions and lost leases one at a time on the
same thread, in the order handed over. Runs without a completer (``run_pending``,
``run_claimed``) write in the calling thread."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import Any

import pytest

from durabl import FatalJobError, Job, JobContext, JobEvent, JobQueue, MemoryBackend
from durabl.model.job import JobResult
from durabl.runtime.completer import Completer
from durabl.runtime.handler import SuspendRun
from durabl.runtime.run import Handler, ManagedRun
from durabl.stores.base import Backend, Completion
from durabl.testing import FakeClock

VT = 30
COMPLETER = "durabl-completer-t"


class Writes:
    """Records each terminal write (its kind, job ids and thread); ``hold`` keeps the
    first write of that kind waiting until :attr:`release` is set."""

    def __init__(self, backend: Backend, monkeypatch: pytest.MonkeyPatch, hold: str = "") -> None:
        self.log: list[tuple[str, tuple[str, ...], str]] = []
        self.entered = threading.Event()
        self.release = threading.Event()
        self._held = False
        for kind in ("complete_many", "fail", "fail_fatal", "release"):
            monkeypatch.setattr(backend, kind, self._wrap(kind, getattr(backend, kind), hold))

    def _wrap(self, kind: str, real: Callable[..., Any], hold: str) -> Callable[..., Any]:
        def write(*args: Any, **kwargs: Any) -> Any:
            if kind == "complete_many":
                completions: Sequence[Completion] = args[0]
                ids = tuple(c.job_id for c in completions)
            else:
                ids = (args[0],)
            self.log.append((kind, ids, threading.current_thread().name))
            if kind == hold and not self._held:
                self._held = True
                self.entered.set()
                assert self.release.wait(10), "the test never released the write"
            return real(*args, **kwargs)

        return write

    def threads(self) -> set[str]:
        return {thread for _, _, thread in self.log}


@pytest.fixture
def events() -> list[JobEvent]:
    return []


@pytest.fixture
def q(clock: FakeClock, events: list[JobEvent]) -> Iterator[JobQueue]:
    queue = JobQueue(MemoryBackend(clock=clock), visibility_timeout=VT, on_job_event=events.append)
    yield queue
    queue.shutdown(2)


@pytest.fixture
def completer(q: JobQueue) -> Iterator[Completer[ManagedRun]]:
    writer: Completer[ManagedRun] = Completer(q.backend, COMPLETER)
    yield writer
    writer.close(5)


def claim_run(q: JobQueue, handler: Handler, data: Any = None, **options: Any) -> ManagedRun:
    q.enqueue("t", {} if data is None else data, **options)
    (handle,) = q.backend.claim("t")
    return ManagedRun(handle, handler, q, heartbeat_interval=10)


def hand_over(run: ManagedRun, completer: Completer[ManagedRun]) -> None:
    assert run.execute(None, completer).disposition == "handed-over"


def status(q: JobQueue, job_id: str) -> str:
    job = q.get_job(job_id)
    assert job is not None
    return job.status


def ok(job: Job[Any], ctx: JobContext) -> None:
    return None


def boom(job: Job[Any], ctx: JobContext) -> None:
    raise ValueError("boom")


def fatal(job: Job[Any], ctx: JobContext) -> None:
    raise FatalJobError("no point retrying")


def test_every_outcome_is_written_on_the_completer_thread(
    q: JobQueue,
    completer: Completer[ManagedRun],
    clock: FakeClock,
    events: list[JobEvent],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes = Writes(q.backend, monkeypatch)
    later = q.backend.now() + timedelta(hours=1)

    def suspend(job: Job[Any], ctx: JobContext) -> None:
        raise SuspendRun(later)

    runs = [
        claim_run(q, handler, data={"n": n}) for n, handler in enumerate([ok, boom, fatal, suspend])
    ]
    for run in runs:
        hand_over(run, completer)
    assert completer.close(5)
    assert writes.threads() == {COMPLETER}
    assert [kind for kind, _, _ in writes.log] == ["complete_many", "fail", "fail_fatal", "release"]
    assert [status(q, run.job_id) for run in runs] == ["completed", "pending", "failed", "pending"]
    kinds = [e.kind for e in events if e.kind not in ("claimed", "started")]
    assert kinds == ["completed", "failed", "fail-fatal", "dead-lettered", "suspended"]
    assert all(run.done.is_set() for run in runs) and q.active_runs() == []


def test_a_handed_over_failure_stays_tracked_until_it_is_written(
    q: JobQueue,
    completer: Completer[ManagedRun],
    events: list[JobEvent],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes = Writes(q.backend, monkeypatch, hold="fail")
    run = claim_run(q, boom)
    outcome = run.execute(None, completer)
    assert outcome.disposition == "handed-over" and isinstance(outcome.error, ValueError)
    assert writes.entered.wait(5)
    assert not run.done.is_set() and q.active_runs() == [run]
    assert [e.kind for e in events if e.kind == "failed"] == []
    writes.release.set()
    assert run.done.wait(5)
    assert status(q, run.job_id) == "pending"  # retried later
    assert q.active_runs() == []


def test_outcomes_are_written_in_the_order_they_were_handed_over(
    q: JobQueue,
    completer: Completer[ManagedRun],
    events: list[JobEvent],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes = Writes(q.backend, monkeypatch, hold="complete_many")
    first = claim_run(q, ok, data={"n": 0})
    hand_over(first, completer)
    assert writes.entered.wait(5)
    # While the first write is held, a completion, a failure and a completion gather.
    rest = [claim_run(q, h, data={"n": n}) for n, h in enumerate([ok, boom, ok], start=1)]
    for run in rest:
        hand_over(run, completer)
    writes.release.set()
    assert completer.close(5)
    ids = [run.job_id for run in (first, *rest)]
    assert [(kind, jobs) for kind, jobs, _ in writes.log] == [
        ("complete_many", (ids[0],)),
        ("complete_many", (ids[1],)),
        ("fail", (ids[2],)),
        ("complete_many", (ids[3],)),
    ]
    finished = [(e.kind, e.job_id) for e in events if e.kind in ("completed", "failed")]
    assert finished == [
        ("completed", ids[0]),
        ("completed", ids[1]),
        ("failed", ids[2]),
        ("completed", ids[3]),
    ]


def test_a_lost_lease_is_reported_from_the_completer_and_nothing_is_written(
    q: JobQueue,
    completer: Completer[ManagedRun],
    clock: FakeClock,
    events: list[JobEvent],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    writes = Writes(q.backend, monkeypatch)
    reported: list[str] = []

    def sink(event: JobEvent) -> None:
        if event.kind != "started":  # sent by the run's own thread, before the handler
            reported.append(threading.current_thread().name)
        events.append(event)

    q.on_job_event = sink

    def too_slow(job: Job[Any], ctx: JobContext) -> None:
        clock.advance(VT + 1)  # the deadline passes unconfirmed
        raise ValueError("would have been recorded as a retry")

    run = claim_run(q, too_slow)
    reported.clear()
    hand_over(run, completer)
    assert run.done.wait(5)
    assert writes.log == []
    assert status(q, run.job_id) == "active"  # the reaper owns it now
    (lost,) = [e for e in events if e.kind == "lease-lost"]
    assert (lost.job_id, lost.op) == (run.job_id, "deadline")
    assert reported == [COMPLETER]


def test_a_failure_that_cannot_be_written_is_logged_and_left_to_the_reaper(
    q: JobQueue,
    completer: Completer[ManagedRun],
    events: list[JobEvent],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def down(*args: Any, **kwargs: Any) -> JobResult:
        raise ConnectionError("store down")

    monkeypatch.setattr(q.backend, "fail", down)
    bad, good = claim_run(q, boom), claim_run(q, ok, data={"n": "good"})
    with caplog.at_level(logging.ERROR, logger="durabl.runtime.run"):
        hand_over(bad, completer)
        hand_over(good, completer)
        assert completer.close(5)
    assert bad.done.is_set() and q.active_runs() == []
    assert status(q, bad.job_id) == "active"
    assert status(q, good.job_id) == "completed"  # the completer went on
    assert "could not record the outcome" in caplog.text
    assert [e.job_id for e in events if e.kind == "failed"] == []


def test_a_store_raising_a_base_exception_on_a_failure_does_not_stop_the_completer(
    q: JobQueue, completer: Completer[ManagedRun], monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(*args: Any, **kwargs: Any) -> JobResult:
        raise KeyboardInterrupt

    monkeypatch.setattr(q.backend, "fail", interrupted)
    bad, good = claim_run(q, boom), claim_run(q, ok, data={"n": "good"})
    hand_over(bad, completer)
    hand_over(good, completer)
    assert good.done.wait(5) and bad.done.is_set()
    assert status(q, good.job_id) == "completed"
    assert q.active_runs() == []


def test_a_worker_pool_writes_its_failures_on_its_completer_thread(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failed = threading.Event()
    q = JobQueue(
        MemoryBackend(),
        visibility_timeout=VT,
        on_job_event=lambda e: failed.set() if e.kind == "failed" else None,
    )
    writes = Writes(q.backend, monkeypatch)
    job_id = q.enqueue("t", {}, max_attempts=1)
    try:
        q.process("t", boom, concurrency=2, poll_interval=0.05)
        assert failed.wait(10)
    finally:
        q.shutdown(2)
    assert [(kind, thread) for kind, _, thread in writes.log] == [("fail", COMPLETER)]
    assert status(q, job_id or "") == "failed"


def test_shutdown_waits_for_a_failure_handed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    q = JobQueue(MemoryBackend(), visibility_timeout=VT)
    writes = Writes(q.backend, monkeypatch, hold="fail")
    job_id = q.enqueue("t", {}, max_attempts=1)
    q.process("t", boom, poll_interval=0.05)
    assert writes.entered.wait(10)
    drain = threading.Thread(target=q.shutdown, args=(5,), name="test-shutdown")
    drain.start()
    drain.join(0.3)
    assert drain.is_alive()  # the failure is still being written
    writes.release.set()
    drain.join(10)
    assert not drain.is_alive()
    assert status(q, job_id or "") == "failed"


def test_run_pending_writes_a_failure_in_the_calling_thread(
    q: JobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes = Writes(q.backend, monkeypatch)
    q.enqueue("t", {})
    q.register("t", boom)
    assert q.run_pending("t") == 1
    assert [(kind, thread) for kind, _, thread in writes.log] == [
        ("fail", threading.current_thread().name)
    ]
