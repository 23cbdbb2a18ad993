"""queue.add_run_hook: one hook wraps every managed run, whatever starts it."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from durabl import Job, JobContext, JobQueue, MemoryBackend
from durabl.orchestrator import OrchestrationContext, Orchestrator
from durabl.runtime.hooks import HookNotProceededError, Proceed
from durabl.stores.memory.doubles import ImmediateBackend
from durabl.testing import FakeClock


@pytest.fixture
def q(clock: FakeClock) -> JobQueue:
    return JobQueue(MemoryBackend(clock=clock), visibility_timeout=30)


def recorder(seen: list[str], name: str) -> Any:
    def hook(job: Job[Any], proceed: Proceed) -> object:
        seen.append(f"{name}:before:{job.type}")
        try:
            return proceed()
        finally:
            seen.append(f"{name}:after")

    return hook


def only(q: JobQueue) -> Job[Any]:
    (job,) = q.list_jobs()
    return job


def test_hooks_nest_in_the_order_added_around_the_handler(q: JobQueue) -> None:
    seen: list[str] = []
    q.add_run_hook(recorder(seen, "outer"))
    q.add_run_hook(recorder(seen, "inner"))
    q.register("t", lambda job, ctx: seen.append("handler"))
    q.enqueue("t", {})
    assert q.run_pending() == 1
    assert seen == ["outer:before:t", "inner:before:t", "handler", "inner:after", "outer:after"]
    assert only(q).status == "completed"


def test_proceed_returns_what_the_handler_returned(q: JobQueue) -> None:
    got: list[object] = []

    def hook(job: Job[Any], proceed: Proceed) -> object:
        value = proceed()
        got.append(value)
        return value

    q.add_run_hook(hook)
    q.register("t", lambda job, ctx: 42)
    q.enqueue("t", {})
    q.run_pending()
    assert got == [42]


def test_the_remover_takes_the_hook_off_later_runs(q: JobQueue) -> None:
    seen: list[str] = []
    remove = q.add_run_hook(recorder(seen, "h"))
    q.register("t", lambda job, ctx: None)
    q.enqueue("t", {})
    q.run_pending()
    remove()
    remove()  # twice is harmless
    q.enqueue("t", {})
    q.run_pending()
    assert seen == ["h:before:t", "h:after"]


def test_a_hook_that_raises_before_proceeding_fails_the_attempt(q: JobQueue) -> None:
    ran: list[str] = []

    def broken(job: Job[Any], proceed: Proceed) -> object:
        raise ConnectionError("no database")

    q.add_run_hook(broken)
    q.register("t", lambda job, ctx: ran.append("handler"))
    q.enqueue("t", {}, max_attempts=1)
    q.run_pending()
    job = only(q)
    assert ran == [] and job.status == "failed"
    assert "ConnectionError: no database" in (job.fail_reason or "")


def test_a_hook_that_never_proceeds_fails_the_attempt(q: JobQueue) -> None:
    q.add_run_hook(lambda job, proceed: None)
    q.register("t", lambda job, ctx: None)
    q.enqueue("t", {}, max_attempts=1)
    q.run_pending()
    job = only(q)
    assert job.status == "failed"
    assert HookNotProceededError.__name__ in (job.fail_reason or "")


def test_an_inner_hook_that_never_proceeds_is_named_and_the_outer_sees_its_error(
    q: JobQueue,
) -> None:
    seen: list[str] = []

    def outer(job: Job[Any], proceed: Proceed) -> object:
        try:
            return proceed()
        except HookNotProceededError as exc:
            seen.append(type(exc).__name__)
            raise

    def forgetful_inner(job: Job[Any], proceed: Proceed) -> object:
        return None

    q.add_run_hook(outer)
    q.add_run_hook(forgetful_inner)
    q.register("t", lambda job, ctx: seen.append("handler"))
    q.enqueue("t", {}, max_attempts=1)
    q.run_pending()
    job = only(q)
    assert seen == ["HookNotProceededError"]  # the handler never ran
    assert job.status == "failed" and "forgetful_inner" in (job.fail_reason or "")


def test_a_middle_hook_cannot_proceed_twice_and_the_handler_runs_once(q: JobQueue) -> None:
    ran: list[str] = []

    def twice(job: Job[Any], proceed: Proceed) -> object:
        proceed()
        return proceed()

    q.add_run_hook(recorder(ran, "outer"))
    q.add_run_hook(twice)
    q.add_run_hook(recorder(ran, "inner"))
    q.register("t", lambda job, ctx: ran.append("handler"))
    q.enqueue("t", {}, max_attempts=1)
    q.run_pending()
    assert ran == ["outer:before:t", "inner:before:t", "handler", "inner:after", "outer:after"]
    reason = only(q).fail_reason or ""
    assert "more than once" in reason and "twice" in reason


def test_a_hook_cannot_proceed_twice(q: JobQueue) -> None:
    ran: list[str] = []

    def twice(job: Job[Any], proceed: Proceed) -> object:
        proceed()
        return proceed()

    q.add_run_hook(twice)
    q.register("t", lambda job, ctx: ran.append("handler"))
    q.enqueue("t", {}, max_attempts=1)
    q.run_pending()
    assert ran == ["handler"]
    assert "more than once" in (only(q).fail_reason or "")


def test_a_hook_that_swallows_the_handlers_error_does_not_make_it_a_success(
    q: JobQueue,
) -> None:
    def swallow(job: Job[Any], proceed: Proceed) -> object:
        try:
            return proceed()
        except ValueError:
            return None

    def handler(job: Job[Any], ctx: JobContext) -> None:
        raise ValueError("bad input")

    q.add_run_hook(swallow)
    q.register("t", handler)
    q.enqueue("t", {}, max_attempts=1)
    q.run_pending()
    job = only(q)
    assert job.status == "failed" and "ValueError: bad input" in (job.fail_reason or "")


def test_hooks_wrap_inline_runs(q: JobQueue) -> None:
    seen: list[str] = []
    q.add_run_hook(recorder(seen, "h"))
    handle = q.claim_or_enqueue("t", {}, dedupe_key="k")
    assert handle is not None
    q.run_claimed(handle, lambda job, ctx: seen.append("handler"))
    assert seen == ["h:before:t", "handler", "h:after"]


@pytest.mark.parametrize("immediate", ["store", "queue"])
def test_hooks_wrap_immediate_runs(immediate: str) -> None:
    if immediate == "store":
        q = JobQueue(ImmediateBackend())
    else:
        q = JobQueue(MemoryBackend(), immediate=True)
    assert q.immediate
    seen: list[str] = []
    q.add_run_hook(recorder(seen, "h"))
    q.process("t", lambda job, ctx: seen.append("handler"))
    q.enqueue("t", {})
    assert seen == ["h:before:t", "handler", "h:after"]  # ran inside enqueue()
    q.shutdown(1)


def test_hooks_wrap_orchestration_runs(q: JobQueue) -> None:
    seen: list[str] = []
    q.add_run_hook(recorder(seen, "h"))
    orch = Orchestrator(q)

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        octx.step("one", lambda keys, signal: seen.append("step"))

    orch.define("flow", body, start=False)
    q.register("flow", orch.definitions["flow"].handler)
    q.enqueue("flow", {})
    assert q.run_pending() == 1
    assert seen == ["h:before:flow", "step", "h:after"]
    assert only(q).status == "completed"


def test_hooks_wrap_runs_on_worker_threads() -> None:
    q = JobQueue(MemoryBackend(), visibility_timeout=30)
    threads: list[str] = []
    done = threading.Event()

    def hook(job: Job[Any], proceed: Proceed) -> object:
        threads.append(threading.current_thread().name)
        return proceed()

    q.add_run_hook(hook)
    q.process("t", lambda job, ctx: done.set(), poll_interval=0.05)
    try:
        q.enqueue("t", {})
        assert done.wait(5)
        assert q.wait_idle(5)
    finally:
        q.shutdown(2)
    assert threads == ["durabl-worker-t-0"]
    assert only(q).status == "completed"


def test_wait_idle_is_true_once_no_run_is_left(q: JobQueue) -> None:
    assert q.wait_idle(0)
    q.enqueue("t", {})
    (handle,) = q.backend.claim("t")
    from durabl.runtime.run import ManagedRun

    run = ManagedRun(handle, lambda job, ctx: None, q)
    assert not q.wait_idle(0) and q.active_runs() == [run]
    run.execute()
    assert q.wait_idle(0)
