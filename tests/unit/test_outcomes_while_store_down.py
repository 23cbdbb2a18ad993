"""A handler that finishes while the store is unavailable keeps its outcome: the completer
tries the write again (a short jittered wait between tries, never a busy loop) until the
store takes it, the lease is known lost, or the shutdown's deadline passes; and the lease
of a run whose outcome waits is renewed meanwhile, so the reaper does not re-run it.

It used to wait for one batch write and one write on its own, then give up ("could not
record the outcome ...; the reaper will recover it"): the job stayed active until the
reaper handed it back, and its handler ran again."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from durabl import Job, JobContext, JobEvent, JobQueue, MemoryBackend
from durabl.model.exceptions import BackendUnavailableError
from durabl.model.job import JobResult, LogEntry
from durabl.runtime.completer import Completer
from durabl.runtime.retrying import RETRY_MAX_WAIT
from durabl.runtime.run import ManagedRun
from durabl.runtime.shutdown import DRAIN_GRACE
from durabl.stores.base import Completion
from durabl.testing import wait_until

DOWN = "PostgreSQL unavailable during complete_many: no connection within 10 s"
#: Scheduling on a busy two-core machine.
SLACK = 0.5


class FlakyStore(MemoryBackend):
    """A memory store whose outcome writes (and, on request, renewals) raise
    ``BackendUnavailableError`` at once: the next ``failures[op]`` calls of ``op``, or
    every call while :attr:`down` is set. Counts the calls, and the renewals per job.
    A job in :attr:`stolen` has its renewals answered ``lease-lost``."""

    WRITES = ("complete_many", "complete", "fail", "fail_fatal", "release")

    def __init__(self, **failures: int) -> None:
        super().__init__()
        self.failures = {op: failures.get(op, 0) for op in (*self.WRITES, "heartbeat")}
        self.calls = dict.fromkeys(self.failures, 0)
        self.renewals: dict[str, int] = {}
        self.down = threading.Event()
        self.renewals_fail = False
        self.stolen: set[str] = set()
        self._lock = threading.Lock()

    def _maybe_fail(self, op: str) -> None:
        with self._lock:
            self.calls[op] += 1
            if self.failures[op] > 0:
                self.failures[op] -= 1
                raise BackendUnavailableError(DOWN)
        if self.down.is_set() and (op != "heartbeat" or self.renewals_fail):
            raise BackendUnavailableError(DOWN)

    def complete_many(self, completions: Sequence[Completion]) -> list[JobResult]:
        self._maybe_fail("complete_many")
        return super().complete_many(completions)

    def complete(self, job_id: str, token: str, **options: Any) -> JobResult:
        self._maybe_fail("complete")
        return super().complete(job_id, token, **options)

    def fail(self, job_id: str, token: str, reason: str, **options: Any) -> JobResult:
        self._maybe_fail("fail")
        return super().fail(job_id, token, reason, **options)

    def heartbeat(self, job_id: str, token: str, *, logs: Sequence[LogEntry] = ()) -> Any:
        with self._lock:
            self.renewals[job_id] = self.renewals.get(job_id, 0) + 1
        self._maybe_fail("heartbeat")
        if job_id in self.stolen:
            return "lease-lost"
        return super().heartbeat(job_id, token, logs=logs)


class Runs:
    """Each job's handler runs, counted; a job with ``"fail"`` in its data raises."""

    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self.ended: dict[str, float] = {}
        self.lock = threading.Lock()

    def handler(self, job: Job[Any], ctx: JobContext) -> dict[str, str]:
        with self.lock:
            self.count[job.id] = self.count.get(job.id, 0) + 1
            self.ended[job.id] = time.monotonic()
        if job.data.get("fail"):
            raise RuntimeError("boom")
        return {"ran": job.id}


@pytest.fixture
def events() -> list[JobEvent]:
    return []


def queue_on(store: FlakyStore, events: list[JobEvent], **options: Any) -> JobQueue:
    return JobQueue(store, on_job_event=events.append, **options)


@pytest.fixture
def caplog_info(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    with caplog.at_level(logging.INFO, logger="durabl"):
        yield caplog


def statuses(queue: JobQueue, ids: list[str]) -> list[str | None]:
    return [job.status if job else None for job in map(queue.get_job, ids)]


def lines(caplog: pytest.LogCaptureFixture, text: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if text in r.getMessage()]


def test_completions_the_store_refused_for_a_while_are_written_once_it_takes_them(
    events: list[JobEvent], caplog_info: pytest.LogCaptureFixture
) -> None:
    # Every batch and every single write fails, five times in a row.
    store = FlakyStore(complete_many=5, complete=5)
    queue = queue_on(store, events)
    runs = Runs()
    ids = [queue.enqueue("t", {"n": n}) or "" for n in range(4)]
    try:
        queue.process("t", runs.handler, concurrency=2, poll_interval=0.05)
        assert wait_until(lambda: statuses(queue, ids) == ["completed"] * 4, timeout=15)
    finally:
        queue.shutdown(timeout=5)
    jobs = [queue.get_job(i) for i in ids]
    assert [(j.status, j.attempts, j.result) for j in jobs if j] == [
        ("completed", 1, {"ran": i}) for i in ids
    ]
    assert runs.count == dict.fromkeys(ids, 1)  # none ran twice
    assert sorted(e.job_id or "" for e in events if e.kind == "completed") == sorted(ids)
    assert lines(caplog_info, "could not record the outcome") == []
    # The outage is one warning and one line when it is over, not one per try.
    (warned,) = lines(caplog_info, "writing job outcomes (durabl-completer-t) failed")
    assert warned.levelno == logging.WARNING and DOWN in warned.getMessage()
    (back,) = lines(caplog_info, "writing job outcomes (durabl-completer-t) works again")
    assert back.levelno == logging.INFO


def test_a_failure_the_store_refused_for_a_while_is_recorded_once(
    events: list[JobEvent], caplog_info: pytest.LogCaptureFixture
) -> None:
    store = FlakyStore(fail=4)
    queue = queue_on(store, events)
    runs = Runs()
    job_id = queue.enqueue("t", {"fail": True}, max_attempts=3) or ""
    try:
        queue.process("t", runs.handler, poll_interval=5)
        assert wait_until(lambda: store.calls["fail"] == 5, timeout=15)
        assert wait_until(lambda: not queue.active_runs(), timeout=5)
    finally:
        queue.shutdown(timeout=5)
    job = queue.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts) == ("pending", 1)  # retried later, once
    assert job.fail_reason is not None and "RuntimeError: boom" in job.fail_reason
    assert runs.count == {job_id: 1}
    assert [e.kind for e in events if e.kind in ("failed", "lease-lost")] == ["failed"]
    assert lines(caplog_info, "could not record the outcome") == []


def test_tries_are_spaced_and_the_outcome_lands_within_a_second_of_the_store(
    events: list[JobEvent],
) -> None:
    store = FlakyStore()
    store.down.set()  # a store that refuses at once: the completer's waits pace the tries
    queue = queue_on(store, events)
    runs = Runs()
    job_id = queue.enqueue("t", {}) or ""
    try:
        queue.process("t", runs.handler, poll_interval=5)
        assert wait_until(lambda: store.calls["complete_many"] >= 1, timeout=10)
        threading.Event().wait(2.0)  # the outage, not a synchronisation
        tries = store.calls["complete_many"] + store.calls["complete"]
        store.down.clear()
        up = time.monotonic()
        assert wait_until(lambda: statuses(queue, [job_id]) == ["completed"], timeout=10)
        written_after = time.monotonic() - up
    finally:
        queue.shutdown(timeout=5)
    # 0.1, 0.2, 0.4, 0.8 s ... (each shortened by up to a quarter), at most 1 s apart.
    assert 3 <= tries <= 8, f"{tries} tries in 2 s"
    assert written_after < RETRY_MAX_WAIT + SLACK, f"written {written_after:.2f} s after"
    assert runs.count == {job_id: 1}


def test_the_lease_of_an_outcome_waiting_for_the_store_is_renewed(
    events: list[JobEvent],
) -> None:
    store = FlakyStore()
    store.down.set()  # outcome writes fail; renewals work (the outcome waits, behind others)
    queue = queue_on(store, events, visibility_timeout=1.2)
    runs = Runs()
    job_id = queue.enqueue("t", {}) or ""
    try:
        queue.process("t", runs.handler, heartbeat_interval=0.1, poll_interval=5)
        assert wait_until(lambda: job_id in runs.ended, timeout=10)
        renewed_before = store.renewals.get(job_id, 0)
        # Longer than the lease: without renewals the reaper would take the job back.
        threading.Event().wait(2.0)
        renewed = store.renewals.get(job_id, 0) - renewed_before
        assert queue.reap_once().recovered == 0
        store.down.clear()
        assert wait_until(lambda: statuses(queue, [job_id]) == ["completed"], timeout=10)
        assert wait_until(lambda: not queue.active_runs(), timeout=5)
        after = store.renewals.get(job_id, 0)
        threading.Event().wait(0.5)
        assert store.renewals.get(job_id, 0) <= after + 1  # written: no longer renewed
    finally:
        queue.shutdown(timeout=5)
    assert renewed >= 10, f"renewed {renewed} times in 2 s at a 0.1 s interval"
    assert runs.count == {job_id: 1}


def test_a_renewal_answering_lease_lost_ends_the_tries_and_is_reported(
    events: list[JobEvent], caplog_info: pytest.LogCaptureFixture
) -> None:
    store = FlakyStore()
    store.down.set()
    queue = queue_on(store, events)
    runs = Runs()
    job_id = queue.enqueue("t", {}) or ""
    try:
        queue.process("t", runs.handler, heartbeat_interval=0.1, poll_interval=5)
        assert wait_until(lambda: store.calls["complete_many"] >= 2, timeout=10)
        store.stolen.add(job_id)  # the reaper handed the job on: someone else owns it
        assert wait_until(lambda: not queue.active_runs(), timeout=10)
        tries = store.calls["complete_many"] + store.calls["complete"]
        threading.Event().wait(1.5)
        assert store.calls["complete_many"] + store.calls["complete"] == tries  # no more
    finally:
        queue.shutdown(timeout=5)
    (lost,) = [e for e in events if e.kind == "lease-lost"]
    assert (lost.job_id, lost.op) == (job_id, "complete")
    assert [e for e in events if e.kind == "completed"] == []
    job = queue.get_job(job_id)
    assert job is not None and job.status == "active"  # the new owner's
    assert lines(caplog_info, f"job {job_id}: outcome not recorded (lease-lost)")


def test_a_shutdown_ends_the_tries_at_its_deadline(
    events: list[JobEvent], caplog_info: pytest.LogCaptureFixture
) -> None:
    store = FlakyStore()
    store.down.set()
    queue = queue_on(store, events)
    runs = Runs()
    job_id = queue.enqueue("t", {}) or ""
    queue.process("t", runs.handler, poll_interval=5)
    assert wait_until(lambda: store.calls["complete_many"] >= 1, timeout=10)
    timeout = 0.5
    started = time.monotonic()
    queue.shutdown(timeout=timeout)
    took = time.monotonic() - started
    assert took < timeout + DRAIN_GRACE + SLACK, f"shutdown took {took:.2f} s"
    job = queue.get_job(job_id)
    assert job is not None and job.status == "active"  # left to the reaper
    assert lines(caplog_info, f"could not record the outcome of job {job_id}")
    assert not queue.active_runs()


def test_back_pressure_holds_the_workers_while_outcomes_wait_for_the_store() -> None:
    store = FlakyStore()
    store.down.set()
    queue = JobQueue(store)
    completer: Completer[ManagedRun] = Completer(store, "durabl-completer-t", max_waiting=2)

    def run(n: int) -> ManagedRun:
        queue.enqueue("t", {"n": n})
        (handle,) = store.claim("t")
        return ManagedRun(handle, lambda job, ctx: n, queue, heartbeat_interval=10)

    runs = [run(n) for n in range(3)]
    try:
        for each in runs[:2]:
            assert each.execute(None, completer).disposition == "handed-over"
        handed = threading.Event()
        worker = threading.Thread(
            target=lambda: (runs[2].execute(None, completer), handed.set()), name="worker"
        )
        worker.start()
        assert not handed.wait(0.5), "a third outcome must wait while two wait for the store"
        assert completer.waiting() == 2
        store.down.clear()
        assert handed.wait(5)
        worker.join(5)
        assert all(each.done.wait(5) for each in runs)
    finally:
        store.down.clear()
        assert completer.close(5)
    assert statuses(queue, [each.job_id for each in runs]) == ["completed"] * 3
