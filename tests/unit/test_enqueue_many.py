"""``enqueue_many`` in the runtime: ``durabl.Child`` checks its options when made, a
declared type's defaults apply, an immediate queue runs each job, and the enqueue hooks
see every job (in the caller's context, not the previous job's) however long the batch."""

from __future__ import annotations

import contextvars
import dataclasses
import inspect
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from durabl import Child, DummyBackend, ImmediateBackend, JobQueue, MemoryBackend, NewJob
from durabl.model.bulk import BULK_OPTIONS
from durabl.runtime.enqueuing import EnqueueOptions

Proceed = Callable[[NewJob], "str | None"]


@pytest.fixture
def queue() -> Iterator[JobQueue]:
    q = JobQueue(MemoryBackend())
    yield q
    q.shutdown()


def test_a_child_checks_its_options_when_made() -> None:
    with pytest.raises(ValueError, match="priority"):
        Child("t", {}, priority="high")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="coalesce"):
        Child("t", {}, coalesce="latest")
    with pytest.raises(ValueError, match="job type"):
        Child("", {})
    with pytest.raises(TypeError):
        Child("t", {}, connection=object())  # type: ignore[call-arg]
    child = Child("t", {"n": 1}, priority=2, dedupe_key="k")
    with pytest.raises(dataclasses.FrozenInstanceError):
        child.priority = 3  # type: ignore[misc]
    assert child.options()["priority"] == 2 and child.options()["max_attempts"] is None


def test_a_declared_types_defaults_apply_under_each_jobs_own_options(queue: JobQueue) -> None:
    queue.register("t", lambda job, ctx: None, priority=4, max_attempts=9)
    first, second = queue.enqueue_many([("t", 1), Child("t", 2, priority=1)])
    one, two = queue.get_job(first or ""), queue.get_job(second or "")
    assert one is not None and two is not None
    assert (one.priority, one.max_attempts) == (4, 9)
    assert (two.priority, two.max_attempts) == (1, 9)


def test_an_immediate_queue_runs_every_job_of_the_batch() -> None:
    queue = JobQueue(ImmediateBackend())
    ran: list[int] = []
    queue.register("t", lambda job, ctx: ran.append(job.data))
    ids = queue.enqueue_many([("t", n) for n in range(5)])
    assert sorted(ran) == [0, 1, 2, 3, 4]
    assert all(getattr(queue.get_job(i or ""), "status", None) == "completed" for i in ids)
    queue.shutdown()


def test_a_dummy_backend_records_the_batch_and_its_jobs() -> None:
    backend = DummyBackend()
    JobQueue(backend).enqueue_many(
        [("t", 1), ("t", 2, {"dedupe_key": "k"}), ("t", 3, {"dedupe_key": "k"})]
    )
    assert [job.data for job in backend.jobs] == [1, 2]
    assert [name for name, _, _ in backend.calls] == ["startup", "enqueue_many"]


def test_a_long_batch_passes_many_hooks_without_exhausting_the_stack(queue: JobQueue) -> None:
    counts = [0] * 6

    def counting(n: int) -> Callable[[NewJob, Proceed], str | None]:
        def hook(job: NewJob, proceed: Proceed) -> str | None:
            counts[n] += 1
            return proceed(job)

        return hook

    for n in range(6):
        queue.add_enqueue_hook(counting(n))
    ids = queue.enqueue_many([("t", n) for n in range(2500)])
    assert counts == [2500] * 6 and all(ids) and queue.count_jobs() == 2500


def test_each_jobs_hooks_run_in_the_callers_context(queue: JobQueue) -> None:
    current: contextvars.ContextVar[Any] = contextvars.ContextVar("current", default="caller")
    seen: list[Any] = []

    def hook(job: NewJob, proceed: Proceed) -> str | None:
        seen.append(current.get())
        current.set(job.data)  # as a tracer makes its span current around the store
        return proceed(job)

    queue.add_enqueue_hook(hook)
    queue.enqueue_many([("t", n) for n in range(3)])
    assert seen == ["caller"] * 3 and current.get() == "caller"


def test_a_hook_that_raises_before_storing_a_job_stores_none_of_its_nest(
    queue: JobQueue,
) -> None:
    def refuse_two(job: NewJob, proceed: Proceed) -> str | None:
        if job.data == 2:
            raise RuntimeError("no")
        return proceed(job)

    queue.add_enqueue_hook(refuse_two)
    with pytest.raises(RuntimeError):
        queue.enqueue_many([("t", n) for n in range(4)])
    assert queue.count_jobs() == 0


def test_a_child_and_a_jobs_options_take_exactly_enqueues_keywords_but_connection() -> None:
    enqueue = inspect.signature(JobQueue.enqueue).parameters.values()
    keywords = [p.name for p in enqueue if p.kind is p.KEYWORD_ONLY and p.name != "connection"]
    assert list(BULK_OPTIONS) == keywords
    assert [f.name for f in dataclasses.fields(Child)] == ["type", "data", *keywords]
    assert list(EnqueueOptions.__annotations__) == keywords


def test_a_childs_options_are_given_by_name() -> None:
    with pytest.raises(TypeError):
        Child("t", {}, 5)  # type: ignore[misc]
