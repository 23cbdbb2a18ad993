"""Enqueue hooks (per queue and process-wide), process-wide run hooks, the checks on a
job's trace context, and what ``durabl.tracing`` keeps of a large carrier."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import durabl
from durabl import JobQueue, MemoryBackend, NewJob, tracing
from durabl.model.options import MAX_TRACE_CONTEXT_BYTES, build_new_job
from durabl.runtime.hooks import HookNotProceededError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def queue() -> Iterator[JobQueue]:
    q = JobQueue(MemoryBackend())
    yield q
    q.shutdown()


def test_hooks_nest_in_the_order_added_and_may_set_the_trace_context(queue: JobQueue) -> None:
    order: list[str] = []

    def hook(name: str) -> Any:
        def wrap(job: NewJob, proceed: Any) -> str | None:
            order.append(f"{name} sees {job.trace_context}")
            context = {**(job.trace_context or {}), name: "1"}
            job_id: str | None = proceed(dataclasses.replace(job, trace_context=context))
            order.append(f"{name} got an id" if job_id else f"{name} got None")
            return job_id

        return wrap

    queue.add_enqueue_hook(hook("outer"))
    queue.add_enqueue_hook(hook("inner"))
    job_id = queue.enqueue("t", {}, priority=0)
    assert job_id is not None
    assert order == [
        "outer sees None",
        "inner sees {'outer': '1'}",
        "inner got an id",
        "outer got an id",
    ]
    job = queue.get_job(job_id)
    assert job is not None and job.trace_context == {"outer": "1", "inner": "1"}


def test_a_hook_may_not_change_anything_but_the_trace_context(queue: JobQueue) -> None:
    queue.add_enqueue_hook(lambda job, proceed: proceed(dataclasses.replace(job, priority=9)))
    with pytest.raises(ValueError, match="may set only its trace_context"):
        queue.enqueue("t", {})
    assert queue.count_jobs() == 0


def test_the_enqueue_returns_what_was_stored_whatever_the_hook_returns(queue: JobQueue) -> None:
    queue.add_enqueue_hook(lambda job, proceed: (proceed(job), "made-up")[1])
    job_id = queue.enqueue("t", {})
    assert job_id is not None and job_id != "made-up" and queue.get_job(job_id) is not None


def test_claim_or_enqueue_tells_the_hooks_of_a_follower_it_stored(queue: JobQueue) -> None:
    seen: list[str | None] = []

    def hook(job: NewJob, proceed: Any) -> str | None:
        job_id: str | None = proceed(job)
        seen.append(job_id)
        return job_id

    queue.add_enqueue_hook(hook)
    first = queue.claim_or_enqueue("t", {}, dedupe_key="k", dedupe_scope="pending")
    assert first is not None
    assert queue.claim_or_enqueue("t", {}, dedupe_key="k", dedupe_scope="pending") is None
    followers = queue.list_jobs(status="pending")
    assert [j.id for j in followers] == [seen[1]] and seen[0] == first.id


def test_a_hook_raising_after_an_inline_claim_hands_the_claim_back(queue: JobQueue) -> None:
    def late(job: NewJob, proceed: Any) -> str | None:
        proceed(job)
        raise RuntimeError("after the store")

    queue.add_enqueue_hook(late)
    with pytest.raises(RuntimeError, match="after the store"):
        queue.claim_or_enqueue("t", {})
    (job,) = queue.list_jobs()
    assert (job.status, job.attempts) == ("pending", 0)


def test_a_hook_that_does_not_proceed_stores_nothing_and_raises(queue: JobQueue) -> None:
    queue.add_enqueue_hook(lambda job, proceed: None)
    with pytest.raises(HookNotProceededError, match="nothing was stored"):
        queue.enqueue("t", {})
    assert queue.count_jobs() == 0


def test_a_hook_that_raises_stores_nothing(queue: JobQueue) -> None:
    def refuse(job: NewJob, proceed: Any) -> str | None:
        raise PermissionError("not today")

    queue.add_enqueue_hook(refuse)
    with pytest.raises(PermissionError):
        queue.enqueue("t", {})
    assert queue.count_jobs() == 0


def test_proceeding_twice_or_with_something_else_is_refused(queue: JobQueue) -> None:
    remove = queue.add_enqueue_hook(lambda job, proceed: [proceed(job), proceed(job)])
    with pytest.raises(RuntimeError, match="more than once"):
        queue.enqueue("t", {})
    assert queue.count_jobs() == 1  # the first proceed stored it
    remove()
    queue.add_enqueue_hook(lambda job, proceed: proceed({"type": "t"}))
    with pytest.raises(TypeError, match="must pass a NewJob"):
        queue.enqueue("t", {})


def test_claim_or_enqueue_goes_through_the_hooks(queue: JobQueue) -> None:
    seen: list[str | None] = []

    def hook(job: NewJob, proceed: Any) -> str | None:
        job_id: str | None = proceed(dataclasses.replace(job, trace_context={"a": "b"}))
        seen.append(job_id)
        return job_id

    queue.add_enqueue_hook(hook)
    handle = queue.claim_or_enqueue("t", {})
    assert handle is not None and seen == [handle.id]
    assert handle.trace_context == {"a": "b"}


def test_process_wide_hooks_wrap_queues_made_before_and_after(queue: JobQueue) -> None:
    enqueued: list[str] = []
    ran: list[str] = []

    def count(job: NewJob, proceed: Any) -> str | None:
        enqueued.append(job.type)
        return proceed(job)  # type: ignore[no-any-return]

    def around(job: Any, proceed: Any) -> object:
        ran.append(job.type)
        return proceed()

    remove_enqueue = durabl.add_enqueue_hook(count)
    remove_run = durabl.add_run_hook(around)
    later = JobQueue(MemoryBackend())
    try:
        queue.enqueue("before", {})
        later.enqueue("after", {})
        for q, type in ((queue, "before"), (later, "after")):
            q.register(type, lambda job, ctx: None)
            assert q.run_pending(type) == 1
    finally:
        remove_enqueue()
        remove_run()
        later.shutdown()
    assert enqueued == ["before", "after"] and ran == ["before", "after"]
    queue.enqueue("gone", {})
    assert enqueued == ["before", "after"]


def test_a_trace_context_must_map_strings_to_strings() -> None:
    job = build_new_job("t", {})
    with pytest.raises(TypeError, match="str"):
        dataclasses.replace(job, trace_context={"traceparent": 1})
    with pytest.raises(TypeError, match="mapping"):
        dataclasses.replace(job, trace_context=["traceparent"])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most"):
        dataclasses.replace(job, trace_context={"baggage": "x" * MAX_TRACE_CONTEXT_BYTES})
    assert dataclasses.replace(job, trace_context={}).trace_context is None


def test_with_trace_context_is_replace_without_rebuilding_the_job() -> None:
    job = build_new_job("t", {"a": [1]}, dedupe_key="k", priority=3)
    headers = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
    fast = job.with_trace_context(headers)
    assert fast == dataclasses.replace(job, trace_context=headers)
    assert fast.trace_context == headers and job.trace_context is None  # the original kept
    assert all(  # the very objects, as the enqueue-hook check requires
        getattr(fast, f.name) is getattr(job, f.name)
        for f in dataclasses.fields(NewJob)
        if f.name != "trace_context"
    )
    assert job.with_trace_context({}).trace_context is None
    assert job.with_trace_context(None).trace_context is None
    with pytest.raises(TypeError, match="str"):
        job.with_trace_context({"traceparent": 1})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="at most"):
        job.with_trace_context({"baggage": "x" * MAX_TRACE_CONTEXT_BYTES})
    with pytest.raises(dataclasses.FrozenInstanceError):
        fast.trace_context = None  # type: ignore[misc]


def test_tracing_keeps_the_trace_headers_first_and_baggage_only_as_room_allows() -> None:
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    big = {"baggage": "k=" + "v" * MAX_TRACE_CONTEXT_BYTES, "traceparent": parent}
    assert tracing.fitted(big) == {"traceparent": parent}
    small = {"traceparent": parent, "baggage": "user=1"}
    assert tracing.fitted(small) == small
    assert tracing.fitted({}) is None


def test_the_process_wide_instrumentation_is_made_once_and_undone() -> None:
    first = tracing.instrument()
    try:
        assert tracing.instrument() is first and tracing.is_instrumented()
    finally:
        tracing.uninstrument()
    assert not tracing.is_instrumented()
    queue = JobQueue(MemoryBackend())
    job_id = queue.enqueue("t", {})
    job = queue.get_job(job_id or "")
    assert job is not None and job.trace_context is None


def test_importing_durabl_and_its_tracing_module_loads_no_opentelemetry() -> None:
    probe = (
        "import durabl, durabl.tracing, sys\n"
        "print(' '.join(m for m in sys.modules if m.startswith('opentelemetry')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert done.stdout.split() == []


def test_instrumenting_the_process_twice_with_another_provider_is_refused() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    first = tracing.instrument(tracer_provider=TracerProvider())
    try:
        with pytest.raises(ValueError, match="another tracer provider"):
            tracing.instrument(tracer_provider=TracerProvider())
        assert tracing.instrument(tracer_provider=first.provider) is first
    finally:
        first.uninstrument()
    assert not tracing.is_instrumented()
