"""Orchestrations on a real JobQueue over every store: journaling on the job, resume after a
killed run, durable sleep, fencing, fatal outcomes, timeouts and worker threads."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

import durabl
from durabl import (
    DurablError,
    Job,
    JobEvent,
    JobQueue,
    MemoryBackend,
    NonRetryable,
    Orchestrator,
)
from durabl.model.abort import AbortSignal
from durabl.orchestrator import OrchestrationContext, StepKeys
from durabl.runtime.handler import SuspendRun
from durabl.runtime.run import ManagedRun
from durabl.stores.base import Backend
from durabl.testing import FakeClock, wait_until
from tests.contract.support import expire_leases

VT = 30.0


@pytest.fixture
def events() -> list[JobEvent]:
    return []


@pytest.fixture
def q(backend: Backend, clock: FakeClock, events: list[JobEvent]) -> Any:
    queue = JobQueue(backend, visibility_timeout=VT, clock=clock, on_job_event=events.append)
    yield queue
    queue.shutdown(timeout=2)


@pytest.fixture
def orch(q: JobQueue) -> Orchestrator:
    return Orchestrator(q)


def declare(orch: Orchestrator, type: str, body: Any, **options: Any) -> Any:
    """Define without threads and register for run_pending()."""
    orch.define(type, body, start=False, **options)
    handler = orch.definitions[type].handler
    orch.queue.register(type, handler)
    return handler


def three_steps(ran: Counter[str], crash_in: str | None = None) -> Any:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        for name in ("create-customer", "create-sub", "sync"):

            def fn(keys: StepKeys, signal: AbortSignal, name: str = name) -> str:
                ran[name] += 1
                if name == crash_in and ran[name] == 1:
                    raise KeyboardInterruptLike(f"worker killed in {name}")
                return f"{name}:{keys.idempotency_key}"

            octx.step(name, fn)
        octx.log("done")

    return body


class KeyboardInterruptLike(Exception):
    """Stands for the process dying: the test stops the run where it is raised."""


def get(q: JobQueue, job_id: str) -> Job[Any]:
    job = q.get_job(job_id)
    assert job is not None
    return job


def step_names(job: Job[Any]) -> list[str]:
    return [e["name"] for e in job.journal if e["kind"] != "bootstrap"]


def test_a_run_journals_its_steps_on_the_job(q: JobQueue, orch: Orchestrator) -> None:
    ran: Counter[str] = Counter()
    declare(orch, "trial", three_steps(ran))
    job_id = q.enqueue("trial", {"user": "u1"}) or ""
    assert q.run_pending() == 1
    job = get(q, job_id)
    assert job.status == "completed" and job.attempts == 1
    assert step_names(job) == ["create-customer", "create-sub", "sync"]
    assert job.journal[0]["kind"] == "bootstrap"
    assert job.journal[2]["result"] == f"create-sub:{job_id}:create-sub:1"
    assert [e.message for e in job.logs] == ["done"]
    assert ran == Counter({"create-customer": 1, "create-sub": 1, "sync": 1})


def test_a_run_killed_between_steps_resumes_without_rerunning_completed_ones(
    q: JobQueue, orch: Orchestrator, backend: Backend, clock: FakeClock
) -> None:
    ran: Counter[str] = Counter()
    handler = declare(orch, "trial", three_steps(ran, crash_in="sync"))
    job_id = q.enqueue("trial", {"user": "u1"}, max_attempts=3) or ""
    (handle,) = backend.claim("trial", lease_owner="doomed")
    with pytest.raises(KeyboardInterruptLike):
        handler.run_managed(ManagedRun(handle, handler, q))  # the worker dies in "sync"
    job = get(q, job_id)
    assert job.status == "active"
    assert step_names(job) == ["create-customer", "create-sub"]
    expire_leases(clock, backend)
    assert backend.reap(VT).recovered == 1
    assert q.run_pending() == 1
    job = get(q, job_id)
    assert job.status == "completed" and job.attempts == 2
    assert ran == Counter({"create-customer": 1, "create-sub": 1, "sync": 2})
    assert step_names(job) == ["create-customer", "create-sub", "sync"]


def test_sleep_releases_the_job_until_its_wake_time_without_using_an_attempt(
    q: JobQueue, orch: Orchestrator, clock: FakeClock, events: list[JobEvent]
) -> None:
    ran: list[str] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("welcome", lambda keys, signal: ran.append("welcome"))
        octx.sleep("wait-a-day", 86400)
        octx.step("follow-up", lambda keys, signal: ran.append("follow-up"))

    declare(orch, "drip", body)
    job_id = q.enqueue("drip", {}) or ""
    start = clock.now()
    assert q.run_pending() == 1
    job = get(q, job_id)
    assert job.status == "pending"
    assert job.attempts == 0
    assert (job.run_at - start).total_seconds() == 86400
    assert ran == ["welcome"]
    assert [e.kind for e in events][-1] == "suspended"
    assert q.run_pending() == 0  # not due yet
    clock.advance(86400)
    assert q.run_pending() == 1
    job = get(q, job_id)
    assert job.status == "completed" and job.attempts == 1
    assert ran == ["welcome", "follow-up"]
    assert step_names(job) == ["welcome", "wait-a-day", "follow-up"]


def test_sleep_until_suspends_the_job_to_the_instant_and_says_what_it_waits_for(
    q: JobQueue, orch: Orchestrator, clock: FakeClock
) -> None:
    ran: list[str] = []
    wake = (clock.now() + timedelta(days=3)).replace(hour=0, minute=0, second=0, microsecond=0)

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.sleep_until("until-midnight", wake)
        octx.step("after", lambda keys, signal: ran.append("after"))

    declare(orch, "midnight", body)
    job_id = q.enqueue("midnight", {}) or ""
    assert get(q, job_id).waiting_for is None
    assert q.run_pending() == 1
    job = get(q, job_id)
    assert (job.status, job.run_at, job.attempts) == ("pending", wake, 0)
    assert job.waiting_for == "until " + wake.strftime("%Y-%m-%dT%H:%M:%SZ")
    assert ran == []
    clock.advance((wake - clock.now()).total_seconds())
    assert q.run_pending() == 1
    job = get(q, job_id)
    assert (job.status, job.waiting_for, ran) == ("completed", None, ["after"])


def test_waiting_for_names_the_wake_time_of_a_plain_sleep(
    q: JobQueue, orch: Orchestrator, clock: FakeClock
) -> None:
    declare(orch, "nap", lambda job, octx: octx.sleep("nap", 90.5))
    job_id = q.enqueue("nap", {}) or ""
    q.run_pending()
    wake = get(q, job_id).run_at
    assert wake == clock.now() + timedelta(seconds=90.5)
    assert get(q, job_id).waiting_for == "until " + wake.strftime("%Y-%m-%dT%H:%M:%S.500Z")


def test_send_event_starts_the_subscribed_jobs_once_even_when_the_journal_write_is_lost(
    q: JobQueue, orch: Orchestrator, backend: Backend, clock: FakeClock
) -> None:
    """A run that sent and died before its journal write: the next run finds the jobs the
    first started (here already completed, so no dedupe slot holds them) and starts none."""
    q.register("sync-invoice", lambda job, ctx: None, on_event="billing/invoice.sync")
    sent: list[list[str]] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        sent.append(octx.send_event("sync", "billing/invoice.sync", {"invoice_id": 7}))

    handler = declare(orch, "invoicing", body)
    job_id = q.enqueue("invoicing", {}) or ""
    (handle,) = backend.claim("invoicing", lease_owner="doomed")
    run = ManagedRun(handle, handler, q)
    lost = JournalLost()
    run.append_journal = lost  # type: ignore[method-assign]
    with pytest.raises(Exception, match="lease"):
        handler.run_managed(run)
    assert sent == []  # the journal write failed: the step never returned
    (first,) = [j.id for j in q.list_jobs(type="sync-invoice")]
    assert q.run_pending() == 1  # the started job runs to completion
    assert get(q, first).status == "completed"
    expire_leases(clock, backend)
    backend.reap(VT)
    assert q.run_pending() == 1
    assert get(q, job_id).status == "completed"
    assert sent == [[first]]
    assert [j.id for j in q.list_jobs(type="sync-invoice")] == [first]


class JournalLost:
    """Stands for the journal write failing (the process died before it): no append."""

    def __call__(self, entries: list[dict[str, Any]], position: int) -> str:
        return "lease-lost"


def test_a_worker_that_dies_before_releasing_a_sleep_sleeps_again_after_the_reap(
    q: JobQueue, orch: Orchestrator, backend: Backend, clock: FakeClock
) -> None:
    ran: list[str] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.sleep("nap", 3600)
        octx.step("after", lambda keys, signal: ran.append("after"))

    handler = declare(orch, "nap", body)
    job_id = q.enqueue("nap", {}, max_attempts=3) or ""
    wake = clock.now() + timedelta(seconds=3600)
    (handle,) = backend.claim("nap", lease_owner="doomed")
    with pytest.raises(SuspendRun):  # the sleep is journaled; the release never happens
        handler.run_managed(ManagedRun(handle, handler, q))
    expire_leases(clock, backend)
    assert backend.reap(VT).recovered == 1
    assert q.run_pending() == 1  # due at once after the reap, and back to sleep
    job = get(q, job_id)
    assert (job.status, job.run_at, job.attempts) == ("pending", wake, 1)
    assert ran == []
    clock.advance(3600)
    assert q.run_pending() == 1
    assert get(q, job_id).status == "completed" and ran == ["after"]


def test_a_stale_run_cannot_journal_once_its_job_was_reclaimed(
    q: JobQueue, orch: Orchestrator, backend: Backend, clock: FakeClock, events: list[JobEvent]
) -> None:
    ran: Counter[str] = Counter()
    taken: list[Any] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("a", lambda keys, signal: ran.update(["a"]))

        def b(keys: StepKeys, signal: AbortSignal) -> None:
            ran["b"] += 1
            if not taken:  # meanwhile the lease expires and another worker takes the job
                expire_leases(clock, backend)
                assert backend.reap(VT).recovered == 1
                taken.extend(backend.claim("trial", lease_owner="other"))

        octx.step("b", b)
        octx.step("c", lambda keys, signal: ran.update(["c"]))

    handler = declare(orch, "trial", body)
    job_id = q.enqueue("trial", {}) or ""
    assert q.run_pending() == 1
    assert "lease-lost" in [e.kind for e in events]
    job = get(q, job_id)
    assert job.status == "active"  # the other worker's claim, untouched
    assert step_names(job) == ["a"]  # the stale run's "b" was fenced off
    q.run_claimed(taken[0], handler)
    job = get(q, job_id)
    assert job.status == "completed"
    assert ran == Counter({"a": 1, "b": 2, "c": 1})


def test_the_body_return_value_is_the_job_result_after_a_resume(
    q: JobQueue, orch: Orchestrator, clock: FakeClock
) -> None:
    """As a handler's: what the body returns is stored as ``Job.result``, also when the
    run that returns it is a resume after a sleep; a value no store can keep fails the job
    fatally, naming its type."""

    def body(job: Job[Any], octx: OrchestrationContext) -> dict[str, Any]:
        total = octx.step("price", lambda keys, signal: 40)
        octx.sleep("settle", 1)
        return {"total": total + 2}

    declare(orch, "invoice", body)
    declare(orch, "odd", lambda job, octx: {1, 2})
    job_id = q.enqueue("invoice", {}) or ""
    odd_id = q.enqueue("odd", {}, max_attempts=3) or ""
    q.run_pending()
    assert get(q, job_id).status == "pending"
    clock.advance(2)
    q.run_pending()
    assert get(q, job_id).status == "completed"
    assert get(q, job_id).result == {"total": 42}
    odd = get(q, odd_id)
    assert odd.status == "failed" and odd.failure_kind == "fatal"
    assert "set" in (odd.fail_reason or "")


def test_non_retryable_fails_the_job_fatally(q: JobQueue, orch: Orchestrator) -> None:
    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        state = octx.step("load", lambda keys, signal: "active")
        raise NonRetryable(f"bad state: {state}")

    declare(orch, "trial", body)
    job_id = q.enqueue("trial", {}, max_attempts=5) or ""
    q.run_pending()
    job = get(q, job_id)
    assert job.status == "failed" and job.failure_kind == "fatal"
    assert (job.fail_reason or "").startswith("NonRetryable: bad state: active")


def test_nondeterminism_after_a_deploy_fails_the_job_fatally(
    q: JobQueue, orch: Orchestrator, backend: Backend, clock: FakeClock
) -> None:
    version = {"n": 1}

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("a" if version["n"] == 1 else "a-renamed", lambda keys, signal: 1)
        if version["n"] == 1:
            raise ConnectionError("flaky")

    declare(orch, "trial", body)
    job_id = q.enqueue("trial", {}, max_attempts=5, backoff="fixed", backoff_delay=1) or ""
    q.run_pending()
    assert get(q, job_id).status == "pending"
    version["n"] = 2
    clock.advance(2)
    q.run_pending()
    job = get(q, job_id)
    assert job.status == "failed" and job.failure_kind == "fatal"
    assert (job.fail_reason or "").startswith("NondeterminismError: position 0")


def test_journal_too_large_fails_the_job_fatally_naming_the_step(q: JobQueue) -> None:
    orch = Orchestrator(q, max_journal_bytes=4096)
    declare(orch, "big", lambda job, octx: octx.step("blob", lambda k, s: "x" * 10_000))
    job_id = q.enqueue("big", {}) or ""
    q.run_pending()
    job = get(q, job_id)
    assert job.status == "failed" and job.failure_kind == "fatal"
    assert "JournalTooLarge" in (job.fail_reason or "")
    assert "'blob'" in (job.fail_reason or "")
    assert job.journal == ()


def test_an_unstorable_step_result_fails_the_job_fatally(q: JobQueue, orch: Orchestrator) -> None:
    declare(orch, "t", lambda job, octx: octx.step("set", lambda k, s: {1, 2}))
    job_id = q.enqueue("t", {}) or ""
    q.run_pending()
    job = get(q, job_id)
    assert job.failure_kind == "fatal"
    assert "StepResultError: result of step 'set': set is not storable" in (job.fail_reason or "")


def test_a_manual_retry_resumes_from_the_journal(q: JobQueue, orch: Orchestrator) -> None:
    ran: Counter[str] = Counter()

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("charge", lambda keys, signal: ran.update(["charge"]))
        if ran["notify"] == 0:
            ran["notify"] += 1
            raise NonRetryable("mail server refused")
        octx.step("notify", lambda keys, signal: ran.update(["notified"]))

    declare(orch, "t", body)
    job_id = q.enqueue("t", {}) or ""
    q.run_pending()
    assert get(q, job_id).status == "failed"
    assert q.retry(job_id)
    q.run_pending()
    assert get(q, job_id).status == "completed"
    assert ran["charge"] == 1 and ran["notified"] == 1


def test_a_step_past_its_timeout_is_retried_and_its_late_result_kept(
    q: JobQueue, orch: Orchestrator, clock: FakeClock
) -> None:
    ran: Counter[str] = Counter()

    def slow(keys: StepKeys, signal: AbortSignal) -> str:
        ran["slow"] += 1
        clock.advance(6)
        return "done late"

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("slow", slow, timeout=5)
        octx.step("next", lambda keys, signal: ran.update(["next"]))

    declare(orch, "t", body)
    job_id = q.enqueue("t", {}, backoff="fixed", backoff_delay=1) or ""
    q.run_pending()
    job = get(q, job_id)
    assert job.status == "pending" and job.attempts == 1
    assert "step-timeout: step 'slow' ran longer than 5 s" in (job.fail_reason or "")
    clock.advance(2)
    q.run_pending()
    assert get(q, job_id).status == "completed"
    assert ran == Counter({"slow": 1, "next": 1})


def test_define_starts_worker_threads_like_process(backend: Backend) -> None:
    if not isinstance(backend, MemoryBackend):
        pytest.skip("one real-thread run is enough; the stores are covered above")
    queue = JobQueue(MemoryBackend(), visibility_timeout=5)
    try:
        orch = Orchestrator(queue)
        ran: list[str] = []

        @orch.define("threaded", concurrency=2, poll_interval=0.05)
        def body(job: Job[Any], octx: OrchestrationContext) -> None:
            ran.append(octx.step("only", lambda keys, signal: job.data["n"]))

        assert orch.started == {"threaded"}
        ids = [queue.enqueue("threaded", {"n": n}) or "" for n in range(4)]
        assert wait_until(lambda: all(get(queue, i).status == "completed" for i in ids))
        assert sorted(ran) == [0, 1, 2, 3]
    finally:
        queue.shutdown(timeout=2)


def test_orchestrator_refuses_a_backend_that_cannot_journal(clock: FakeClock) -> None:
    class NoJournal(MemoryBackend):
        supports_journal = False

    with pytest.raises(DurablError, match="cannot hold an orchestration journal"):
        Orchestrator(JobQueue(NoJournal(clock=clock)))


def test_snooze_in_a_body_hands_the_job_back_and_the_journal_replays(
    q: JobQueue, orch: Orchestrator, clock: FakeClock, events: list[JobEvent]
) -> None:
    ran: list[str] = []
    ready: list[bool] = [False]

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("reserve", lambda keys, signal: ran.append("reserve"))
        if not ready[0]:
            raise durabl.Snooze(120)
        octx.step("ship", lambda keys, signal: ran.append("ship"))

    declare(orch, "ship-order", body)
    job_id = q.enqueue("ship-order", {}, max_attempts=1) or ""
    start = clock.now()
    assert q.run_pending() == 1
    job = get(q, job_id)
    assert (job.status, job.attempts) == ("pending", 0)
    assert (job.run_at - start).total_seconds() == pytest.approx(120, abs=1)
    assert [a.outcome for a in job.attempt_history] == ["snoozed"]
    assert [e.kind for e in events][-1] == "snoozed"
    ready[0] = True
    clock.advance(121)
    assert q.run_pending() == 1
    job = get(q, job_id)
    assert (job.status, job.attempts) == ("completed", 1)
    assert ran == ["reserve", "ship"]  # the journaled step replayed, not run again
