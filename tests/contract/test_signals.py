"""Signals on every store: a signal sent before the wait is kept, several come in the order
sent, an unknown or terminal job refuses one, a waiting job holds no worker thread, a
signal wakes its waiting job at once (by push across processes where the store has it),
the timeout returns None, a received signal is replayed after a crash (a retried run, and
a worker killed before or after journaling it, then reaped), a signal sent while the job
was still running toward its wait is not missed, and racing senders lose none."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from durabl import Job, JobEvent, JobQueue, Orchestrator, Signal
from durabl.model.signals import WAIT_FOREVER, StoredSignal
from durabl.orchestrator import OrchestrationContext
from durabl.runtime.run import ManagedRun
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import second_view

VT = 30.0


@pytest.fixture
def events() -> list[JobEvent]:
    return []


@pytest.fixture
def q(backend: Backend, clock: FakeClock, events: list[JobEvent]) -> Iterator[JobQueue]:
    queue = JobQueue(backend, visibility_timeout=VT, clock=clock, on_job_event=events.append)
    yield queue
    queue.shutdown(timeout=2)


def declare(q: JobQueue, type: str, body: Any) -> Any:
    """An orchestration run by ``q.run_pending()`` (no threads); its handler."""
    orch = Orchestrator(q)
    orch.define(type, body, start=False)
    handler = orch.definitions[type].handler
    q.register(type, handler)
    return handler


def get(q: JobQueue, job_id: str) -> Job[Any]:
    job = q.get_job(job_id)
    assert job is not None
    return job


def approval(received: list[Signal | None], timeout: float | None = None) -> Any:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        received.append(octx.wait_for_signal("approval", "approve", timeout=timeout))

    return body


def test_a_waiting_job_is_pending_not_due_and_the_signal_wakes_it(
    q: JobQueue, clock: FakeClock, events: list[JobEvent]
) -> None:
    received: list[Signal | None] = []
    declare(q, "approve-order", approval(received))
    job_id = q.enqueue("approve-order", {}) or ""
    assert q.run_pending() == 1
    job = get(q, job_id)
    assert (job.status, job.attempts, job.waiting_for) == ("pending", 0, "signal:approve")
    assert job.run_at == WAIT_FOREVER
    assert q.run_pending() == 0  # not due: nothing runs it
    clock.advance(1)
    assert q.signal(job_id, "approve", {"by": "ana"}) is True
    job = get(q, job_id)
    assert (job.status, job.waiting_for, job.run_at) == ("pending", None, clock.now())
    assert q.run_pending() == 1
    assert get(q, job_id).status == "completed"
    assert received == [Signal("approve", {"by": "ana"}, clock.now())]
    kinds = [(e.kind, e.job_id, e.extra.get("signal")) for e in events]
    assert ("signalled", job_id, "approve") in kinds
    assert ("woken", job_id, "approve") in kinds


def test_a_signal_sent_before_the_wait_is_kept_and_received_when_it_gets_there(
    q: JobQueue, events: list[JobEvent]
) -> None:
    received: list[Signal | None] = []
    declare(q, "approve-order", approval(received))
    job_id = q.enqueue("approve-order", {}) or ""
    assert q.signal(job_id, "approve", {"by": "bo"}) is True
    assert [e.kind for e in events if e.job_id == job_id] == ["signalled"]  # not waiting yet
    assert q.run_pending() == 1
    assert get(q, job_id).status == "completed"
    assert [s.data if s else None for s in received] == [{"by": "bo"}]


def test_several_signals_of_one_name_come_one_per_wait_in_the_order_sent(q: JobQueue) -> None:
    got: list[Any] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        for i in range(3):
            sig = octx.wait_for_signal(f"line-{i}", "line")
            got.append(None if sig is None else sig.data)

    declare(q, "collect", body)
    job_id = q.enqueue("collect", {}) or ""
    for data in ("a", {"b": [1, 2]}, None):
        assert q.signal(job_id, "line", data)
    assert q.signal(job_id, "other", "ignored")
    assert q.run_pending() == 1
    assert get(q, job_id).status == "completed"
    assert got == ["a", {"b": [1, 2]}, None]


def test_an_unknown_or_terminal_job_refuses_a_signal(q: JobQueue, backend: Backend) -> None:
    q.register("plain", lambda job, ctx: None)
    job_id = q.enqueue("plain", {}) or ""
    assert q.run_pending() == 1
    assert q.signal(job_id, "approve") is False
    assert q.signal("not-a-job", "approve") is False
    missing = "0" * 24 if job_id.isalnum() and len(job_id) == 24 else "f" * len(job_id)
    assert q.signal(missing, "approve") is False
    assert backend.next_signal(job_id, "approve", -1) is None


@pytest.mark.parametrize(
    ("name", "data", "error"),
    [
        ("", None, ValueError),
        ("  ", None, ValueError),
        (None, None, TypeError),
        ("approve", {1: "not a str key"}, TypeError),
        ("approve", object(), TypeError),
        ("approve", "x" * (300 * 1024), ValueError),
    ],
)
def test_a_bad_signal_is_refused_and_nothing_is_stored(
    q: JobQueue, backend: Backend, name: Any, data: Any, error: type[Exception]
) -> None:
    job_id = q.enqueue("plain", {}) or ""
    with pytest.raises(error):
        q.signal(job_id, name, data)
    assert backend.next_signal(job_id, "approve", -1) is None


def test_the_timeout_passing_returns_none(q: JobQueue, clock: FakeClock) -> None:
    received: list[Signal | None] = []
    declare(q, "approve-order", approval(received, timeout=3600))
    job_id = q.enqueue("approve-order", {}) or ""
    start = clock.now()
    assert q.run_pending() == 1
    job = get(q, job_id)
    assert (job.run_at, job.waiting_for) == (start + timedelta(hours=1), "signal:approve")
    clock.advance(3599)
    assert q.run_pending() == 0
    clock.advance(1)
    assert q.run_pending() == 1
    assert (get(q, job_id).status, received) == ("completed", [None])
    assert q.signal(job_id, "approve", {"by": "late"}) is False  # terminal now


def test_a_received_signal_is_replayed_after_a_crash(q: JobQueue, clock: FakeClock) -> None:
    crashes: list[int] = []
    got: list[Any] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        sig = octx.wait_for_signal("approval", "approve")
        if not crashes:
            crashes.append(1)
            raise RuntimeError("the worker died after the signal was journaled")
        got.append(None if sig is None else sig.data)

    declare(q, "approve-order", body)
    job_id = q.enqueue("approve-order", {}, backoff="fixed", backoff_delay=1) or ""
    q.signal(job_id, "approve", "first")
    assert q.run_pending() == 1
    assert get(q, job_id).status == "pending"  # retried
    q.signal(job_id, "approve", "second")
    clock.advance(2)
    assert q.run_pending() == 1
    assert get(q, job_id).status == "completed"
    assert got == ["first"]  # the journaled one, not the next


def test_a_signal_sent_while_the_job_runs_toward_its_wait_wakes_it_once_released(
    q: JobQueue, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sender finds the job running (not waiting) and wakes nothing; the run had
    already looked for the signal. Its release looks again and makes the job due."""
    received: list[Signal | None] = []
    declare(q, "approve-order", approval(received))
    job_id = q.enqueue("approve-order", {}) or ""
    look = backend.next_signal
    sent: list[bool] = []

    def look_then_signal(job: str, name: str, after: int) -> StoredSignal | None:
        found = look(job, name, after)
        if not sent:
            sent.append(q.signal(job_id, "approve", {"by": "racer"}))
        return found

    monkeypatch.setattr(backend, "next_signal", look_then_signal)
    # Suspended, made due by the release's look, and run again at once.
    assert q.run_pending() == 2
    assert sent == [True]
    assert get(q, job_id).status == "completed"
    assert [s.data if s else None for s in received] == [{"by": "racer"}]


def test_a_waiting_job_holds_no_worker_thread(q: JobQueue) -> None:
    """A pool of one thread runs other jobs of the type while one waits, then the signal
    finishes the waiting one."""
    done: dict[str, threading.Event] = {}
    got: list[Any] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        if job.data["wait"]:
            sig = octx.wait_for_signal("approval", "approve")
            got.append(None if sig is None else sig.data)
        done[job.data["name"]].set()

    orch = Orchestrator(q)
    orch.define("approve-order", body, concurrency=1, poll_interval=0.05)
    done.update(waiting=threading.Event(), second=threading.Event())
    waiting = q.enqueue("approve-order", {"wait": True, "name": "waiting"}) or ""
    assert _wait_for(lambda: get(q, waiting).waiting_for == "signal:approve")
    q.enqueue("approve-order", {"wait": False, "name": "second"})
    assert done["second"].wait(10), "the one thread is held by the waiting job"
    assert q.signal(waiting, "approve", "ok")
    assert done["waiting"].wait(10)
    assert _wait_for(lambda: get(q, waiting).status == "completed")
    assert got == ["ok"]


def test_a_signal_from_another_process_wakes_the_waiting_job_by_push(
    q: JobQueue, backend: Backend, clock: FakeClock
) -> None:
    """The worker polls once a minute: only push (or this process's own wake-up) can
    explain a pickup within seconds."""
    if not backend.supports_push:
        pytest.skip(f"{type(backend).__name__} has no push pickup")
    finished = threading.Event()

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.wait_for_signal("approval", "approve")
        finished.set()

    orch = Orchestrator(q)
    orch.define("approve-order", body, concurrency=1, poll_interval=60)
    job_id = q.enqueue("approve-order", {}) or ""
    assert _wait_for(lambda: get(q, job_id).waiting_for == "signal:approve")
    web = JobQueue(second_view(backend, clock), visibility_timeout=VT, clock=clock)
    try:
        assert web.signal(job_id, "approve", {"from": "webhook"})
        assert finished.wait(10), "the signal did not wake the waiting job"
    finally:
        web.shutdown(timeout=2)


def _wait_for(predicate: Any) -> bool:
    from durabl.testing import wait_until

    return wait_until(predicate, timeout=10)


def test_racing_senders_lose_no_signal_and_double_none(
    q: JobQueue, backend: Backend, clock: FakeClock
) -> None:
    """Four senders (another process's queue each, where the store allows) send ten
    signals each while the orchestration takes them one wait at a time: it receives every
    one once, and each sender's in the order it sent them."""
    senders, each = 4, 10
    total = senders * each
    got: list[Any] = []
    finished = threading.Event()

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        del got[:]  # the body runs again from the top after every wait: replays refill it
        for i in range(total):
            sig = octx.wait_for_signal(f"take-{i}", "item")
            got.append(None if sig is None else sig.data)
        finished.set()

    orch = Orchestrator(q)
    orch.define("collect", body, concurrency=1, poll_interval=0.05)
    job_id = q.enqueue("collect", {}) or ""
    assert _wait_for(lambda: get(q, job_id).waiting_for == "signal:item")

    def send(sender: int) -> None:
        other = JobQueue(second_view(backend, clock), visibility_timeout=VT, clock=clock)
        try:
            for n in range(each):
                assert other.signal(job_id, "item", [sender, n])
        finally:
            if other.backend is not backend:
                other.shutdown(timeout=2)

    threads = [threading.Thread(target=send, args=(s,)) for s in range(senders)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert finished.wait(30), f"received {len(got)} of {total}"
    assert sorted(map(tuple, got)) == [(s, n) for s in range(senders) for n in range(each)]
    for s in range(senders):
        assert [n for sender, n in got if sender == s] == list(range(each))


class WorkerKilled(Exception):
    """Stands for the worker's process dying where it is raised."""


def killed_then_reaped(q: JobQueue, backend: Backend, clock: FakeClock, handler: Any) -> None:
    """Claim the job of ``handler``'s type and run it in a worker that dies
    (:class:`WorkerKilled`); then its lease expires and the reaper hands it back."""
    (handle,) = backend.claim("approve-order", limit=1, lease_owner="doomed")
    with pytest.raises(WorkerKilled):
        handler.run_managed(ManagedRun(handle, handler, q))
    clock.advance(VT + getattr(backend, "clock_skew_allowance", 0) + 1)
    assert backend.reap(VT).recovered == 1


def test_a_worker_killed_after_reading_a_signal_before_journaling_it_reads_it_again(
    q: JobQueue, backend: Backend, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    got: list[Any] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        sig = octx.wait_for_signal("approval", "approve")
        got.append(None if sig is None else sig.data)

    handler = declare(q, "approve-order", body)
    job_id = q.enqueue("approve-order", {}, max_attempts=3) or ""
    q.signal(job_id, "approve", "first")
    q.signal(job_id, "approve", "second")
    look = backend.next_signal

    def read_then_die(job: str, name: str, after: int) -> StoredSignal | None:
        look(job, name, after)
        raise WorkerKilled("killed with the signal read, not journaled")

    monkeypatch.setattr(backend, "next_signal", read_then_die)
    killed_then_reaped(q, backend, clock, handler)
    monkeypatch.setattr(backend, "next_signal", look)
    assert [e["kind"] for e in get(q, job_id).journal] == []  # nothing journaled
    assert q.run_pending() == 1
    assert got == ["first"]  # not lost, and not skipped for the next one


def test_a_worker_killed_after_journaling_a_signal_replays_it_on_resume(
    q: JobQueue, backend: Backend, clock: FakeClock
) -> None:
    got: list[Any] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        sig = octx.wait_for_signal("approval", "approve")
        if job.attempts == 1:
            raise WorkerKilled("killed right after the signal was journaled")
        got.append(None if sig is None else sig.data)

    handler = declare(q, "approve-order", body)
    job_id = q.enqueue("approve-order", {}, max_attempts=3) or ""
    q.signal(job_id, "approve", "first")
    killed_then_reaped(q, backend, clock, handler)
    q.signal(job_id, "approve", "second")
    assert q.run_pending() == 1
    assert got == ["first"]
    assert [e["kind"] for e in get(q, job_id).journal] == ["bootstrap", "signal"]


def test_signals_go_with_their_job(q: JobQueue, backend: Backend) -> None:
    """Kept with the job, so deleting it (or pruning it once finished) deletes them: a new
    job never inherits them."""
    job_id = q.enqueue("approve-order", {}) or ""
    assert q.signal(job_id, "approve", "kept")
    stored = backend.next_signal(job_id, "approve", -1)
    assert stored is not None and stored.signal.data == "kept"
    assert q.delete(job_id)
    assert backend.next_signal(job_id, "approve", -1) is None
    assert q.signal(job_id, "approve") is False
