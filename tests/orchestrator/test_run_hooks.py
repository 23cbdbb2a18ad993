"""What the orchestrator adds to managed runs: a run signal with a limit, suspension to a
wake time, handlers that drive their run and declare their own fatal errors."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from durabl import Job, JobContext, JobEvent, JobQueue, MemoryBackend, Orchestrator
from durabl.model.abort import LEASE_UNCONFIRMED, AbortSignal
from durabl.orchestrator import OrchestrationContext, StepKeys
from durabl.runtime.handler import RunSignal, SuspendRun
from durabl.runtime.run import ManagedHandler, ManagedRun
from durabl.testing import FakeClock


def test_a_run_signal_aborts_with_the_limit_reason_once_past_it(clock: FakeClock) -> None:
    signal = RunSignal(clock, deadline=clock.monotonic() + 30)
    signal.set_limit(clock.monotonic() + 5, "step-timeout: x")
    clock.advance(4)
    assert not signal.aborted
    signal.set_limit(None)
    clock.advance(2)
    assert not signal.aborted  # a cleared limit no longer applies
    signal.set_limit(clock.monotonic() + 1, "max-duration")
    clock.advance(1)
    assert signal.aborted and signal.reason == "max-duration"


def test_the_lease_deadline_still_applies_under_a_limit(clock: FakeClock) -> None:
    signal = RunSignal(clock, deadline=clock.monotonic() + 3)
    signal.set_limit(clock.monotonic() + 10, "later")
    clock.advance(3)
    assert signal.reason == LEASE_UNCONFIRMED


def test_a_plain_handler_may_suspend_its_job_until_a_wake_time(clock: FakeClock) -> None:
    events: list[JobEvent] = []
    queue = JobQueue(MemoryBackend(clock=clock), clock=clock, on_job_event=events.append)
    wake = clock.now() + timedelta(minutes=5)

    def handler(job: Job[Any], ctx: JobContext) -> None:
        if job.attempts == 1 and not job.logs:
            ctx.log("see you later")
            raise SuspendRun(wake)

    queue.register("t", handler)
    job_id = queue.enqueue("t", {}, max_attempts=1) or ""
    assert queue.run_pending() == 1
    job = queue.get_job(job_id)
    assert job is not None and (job.status, job.run_at, job.attempts) == ("pending", wake, 0)
    assert events[-1].kind == "suspended" and events[-1].extra["run_at"] == wake
    handle = queue.backend.claim("t")
    assert handle == []
    clock.advance(300)
    assert queue.run_pending() == 1
    job = queue.get_job(job_id)
    assert job is not None and job.status == "completed"


def test_run_claimed_does_not_raise_for_a_suspension(clock: FakeClock) -> None:
    queue = JobQueue(MemoryBackend(clock=clock), clock=clock)
    handle = queue.claim_or_enqueue("t", {})
    assert handle is not None

    def handler(job: Job[Any], ctx: JobContext) -> None:
        raise SuspendRun(clock.now() + timedelta(seconds=1))

    queue.run_claimed(handle, handler)
    job = queue.get_job(handle.id)
    assert job is not None and job.status == "pending"


def test_a_managed_handler_gets_the_run_and_its_fatal_errors_fail_at_once(
    clock: FakeClock,
) -> None:
    class Doomed(Exception):
        pass

    seen: list[ManagedRun] = []

    class Driver(ManagedHandler):
        fatal_errors = (Doomed,)

        def run_managed(self, run: ManagedRun) -> None:
            seen.append(run)
            raise Doomed("no point retrying")

    queue = JobQueue(MemoryBackend(clock=clock), clock=clock)
    queue.register("t", Driver())
    job_id = queue.enqueue("t", {}, max_attempts=5) or ""
    queue.run_pending()
    job = queue.get_job(job_id)
    assert job is not None and (job.status, job.failure_kind) == ("failed", "fatal")
    assert seen[0].handle.id == job_id


@pytest.mark.slow
def test_a_step_past_its_timeout_stops_the_heartbeat_without_a_lease_lost_event() -> None:
    events: list[JobEvent] = []
    queue = JobQueue(MemoryBackend(), visibility_timeout=5, on_job_event=events.append)
    orch = Orchestrator(queue)
    reasons: list[str | None] = []

    def hang(keys: StepKeys, signal: AbortSignal) -> str:
        signal.wait(3)  # a call that does not return by itself, but honours the signal
        reasons.append(signal.reason)
        return "late"

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("hang", hang, timeout=0.2)
        octx.step("next", lambda keys, signal: "never")

    orch.define("t", body, start=False, heartbeat_interval=0.05)
    queue.register("t", orch.definitions["t"].handler, heartbeat_interval=0.05)
    job_id = queue.enqueue("t", {}) or ""
    started = time.monotonic()
    queue.run_pending()
    assert time.monotonic() - started < 2
    assert reasons == ["step-timeout: step 'hang' ran longer than 0.2 s"]
    job = queue.get_job(job_id)
    assert job is not None and job.status == "pending" and job.attempts == 1
    assert [e["name"] for e in job.journal if e["kind"] == "step"] == ["hang"]
    assert "lease-lost" not in [e.kind for e in events]
