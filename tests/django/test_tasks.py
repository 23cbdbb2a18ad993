"""durabl_django.tasks.DurablBackend: django.tasks' @task functions as durabl jobs."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from django.core import checks
from django.test import override_settings
from django_tasks import TaskResultStatus, default_task_backend, task_backends
from django_tasks.exceptions import InvalidTaskError, TaskResultDoesNotExist
from django_tasks.signals import task_enqueued, task_finished, task_started

from durabl import JobQueue
from durabl_django.tasks import DurablBackend, job_type
from durabl_django.workers import declared_jobs
from tests.django.testapp import tasks

pytestmark = pytest.mark.on_real_mongo


@pytest.fixture(autouse=True)
def calls() -> list[Any]:
    tasks.CALLS.clear()
    return tasks.CALLS


def test_the_default_backend_is_durabl() -> None:
    backend = task_backends["default"]
    assert isinstance(backend, DurablBackend)
    assert backend.supports_defer and backend.supports_get_result
    assert backend.supports_priority and backend.supports_async_task


def test_enqueue_stores_a_job_per_queue_name(queue: JobQueue) -> None:
    result = tasks.add.enqueue(2, b=3)
    assert result.status == TaskResultStatus.READY
    job = queue.get_job(result.id)
    assert job is not None
    assert job.type == "django-task:default" == job_type("default")
    assert job.data == {
        "path": "tests.django.testapp.tasks.add",
        "args": [2],
        "kwargs": {"b": 3},
        "backend": "default",
        "queue_name": "default",
        "priority": 0,
        "run_after": None,
    }
    assert job.max_attempts == 1


def test_priority_is_negated_and_queue_names_are_job_types(queue: JobQueue) -> None:
    result = tasks.send_email.enqueue("a@example.com")
    job = queue.get_job(result.id)
    assert job is not None
    assert job.type == "django-task:emails"
    assert job.priority == -10  # django: higher runs first; durabl: lower runs first
    low = tasks.add.using(priority=-50).enqueue(1, 1)
    low_job = queue.get_job(low.id)
    assert low_job is not None and low_job.priority == 50


def test_higher_django_priority_runs_first(queue: JobQueue, calls: list[Any]) -> None:
    tasks.add.using(priority=-5).enqueue(0, 0)
    tasks.add.using(priority=90).enqueue(9, 9)
    tasks.add.enqueue(5, 5)
    queue.run_pending("django-task:default")
    assert calls == [("add", 9, 9), ("add", 5, 5), ("add", 0, 0)]


def test_run_after_becomes_run_at(queue: JobQueue, calls: list[Any]) -> None:
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    result = tasks.add.using(run_after=later).enqueue(1, 2)
    job = queue.get_job(result.id)
    assert job is not None
    assert abs(job.run_at - later) < timedelta(milliseconds=2)
    assert queue.run_pending() == 0  # not due yet
    assert calls == []


def test_unknown_queue_name_is_rejected() -> None:
    with pytest.raises(InvalidTaskError):
        tasks.add.using(queue_name="nowhere")


def test_arguments_must_be_json(queue: JobQueue) -> None:
    with pytest.raises(TypeError, match="JSON"):
        tasks.add.enqueue(object(), 1)


def test_a_task_runs_and_its_result_is_successful(queue: JobQueue, calls: list[Any]) -> None:
    result = tasks.add.enqueue(2, 3)
    assert queue.run_pending() == 1
    assert calls == [("add", 2, 3)]
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.is_finished and result.errors == []
    assert result.finished_at is not None and result.enqueued_at is not None
    assert result.started_at is not None and result.started_at <= result.finished_at
    assert result.attempts == 1
    assert result.return_value == 5  # the job kept what the task returned
    fetched = tasks.add.get_result(result.id)
    assert fetched.args == [2, 3] and fetched.kwargs == {}


def test_a_failing_task_is_failed_with_its_error(queue: JobQueue) -> None:
    result = tasks.explode.enqueue("kaboom")
    queue.run_pending()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class is ValueError
    assert "kaboom" in error.traceback and "Traceback" in error.traceback


def test_retries_follow_max_attempts(queue: JobQueue) -> None:
    with override_settings(
        TASKS={
            "default": {
                "BACKEND": "durabl_django.tasks.DurablBackend",
                "OPTIONS": {"MAX_ATTEMPTS": 2},
            }
        }
    ):
        result = tasks.explode.enqueue("again")
        job = queue.get_job(result.id)
        assert job is not None and job.max_attempts == 2
        queue.run_pending()
        result.refresh()
        assert result.status == TaskResultStatus.READY  # retry scheduled
        assert len(result.errors) == 1


def test_a_task_with_context_sees_its_attempt(queue: JobQueue, calls: list[Any]) -> None:
    tasks.attempt_number.enqueue("ctx")
    queue.run_pending()
    assert calls == [("attempt", "ctx", 1)]


def test_results_track_the_job_status(queue: JobQueue) -> None:
    result = tasks.add.enqueue(1, 1)
    assert tasks.add.get_result(result.id).status == TaskResultStatus.READY
    [handle] = queue.backend.claim("django-task:default", lease_owner="w")
    running = tasks.add.get_result(result.id)
    assert running.status == TaskResultStatus.RUNNING and running.started_at is not None
    handle.complete()
    assert tasks.add.get_result(result.id).status == TaskResultStatus.SUCCESSFUL


def test_a_task_return_value_is_its_result(queue: JobQueue) -> None:
    result = tasks.add.enqueue(2, 3)
    [handle] = queue.backend.claim("django-task:default", lease_owner="w")
    assert handle.complete(5) == "completed"
    done = tasks.add.get_result(result.id)
    assert done.status == TaskResultStatus.SUCCESSFUL and done.return_value == 5
    assert queue.wait(result.id, timeout=1).result == 5


def test_a_cancelled_task_is_failed_and_finished(queue: JobQueue) -> None:
    result = tasks.add.enqueue(1, 1)
    assert queue.cancel(result.id) is True
    cancelled = tasks.add.get_result(result.id)
    assert cancelled.status == TaskResultStatus.FAILED
    assert cancelled.finished_at is not None


def test_unknown_result_id_does_not_exist(queue: JobQueue) -> None:
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result("0123456789abcdef01234567")
    other = queue.enqueue("touch", {"path": "x"})
    assert other is not None
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(other)  # a job, but not a task


def test_signals_are_sent(queue: JobQueue) -> None:
    seen: list[tuple[str, str]] = []

    def receiver(name: str) -> Any:
        def receive(sender: Any, task_result: Any, **kwargs: Any) -> None:
            seen.append((name, str(task_result.status)))

        return receive

    receivers = [(s, receiver(n)) for s, n in [(task_enqueued, "enqueued"),
                 (task_started, "started"), (task_finished, "finished")]]  # fmt: skip
    for sig, fn in receivers:
        sig.connect(fn)
    try:
        tasks.add.enqueue(1, 2)
        queue.run_pending()
    finally:
        for sig, fn in receivers:
            sig.disconnect(fn)
    assert seen == [("enqueued", "READY"), ("started", "RUNNING"), ("finished", "SUCCESSFUL")]


def test_runworkers_processes_every_queue_of_the_backend() -> None:
    specs = declared_jobs()
    assert specs["django-task:default"].concurrency == 1
    assert "django-task:emails" in specs
    with override_settings(
        TASKS={
            "default": {
                "BACKEND": "durabl_django.tasks.DurablBackend",
                "QUEUES": ["bulk"],
                "OPTIONS": {"CONCURRENCY": 3},
            },
            "other": {"BACKEND": "django_tasks.backends.immediate.ImmediateBackend"},
        }
    ):
        specs = declared_jobs()
        assert specs["django-task:bulk"].concurrency == 3
        assert "django-task:default" not in specs


def test_misconfigured_task_backends_are_e007() -> None:
    with override_settings(
        TASKS={
            "default": {
                "BACKEND": "durabl_django.tasks.DurablBackend",
                "QUEUES": [],
                "OPTIONS": {"CONCURRENCY": 0, "SPEED": "fast"},
            }
        }
    ):
        found = [m for m in checks.run_checks() if (m.id or "").startswith("durabl.")]
    assert [m.id for m in found] == ["durabl.E007"] * 3
