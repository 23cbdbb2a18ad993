"""A backend for Django's task framework that stores tasks as durabl jobs.

::

    TASKS = {
        "default": {
            "BACKEND": "durabl_django.tasks.DurablBackend",
            "QUEUES": ["default", "emails"],          # the default is ["default"]
            "OPTIONS": {"CONCURRENCY": 4, "MAX_ATTEMPTS": 1},
        }
    }

Works with Django 6's ``django.tasks`` and with the ``django-tasks`` package on older
Django. Each queue name is one durabl job type, ``django-task:<queue_name>``, whose payload
is ``{"path", "args", "kwargs", "backend", "queue_name", "priority", "run_after"}``;
``manage.py runworkers`` processes every queue of every ``DurablBackend`` (``OPTIONS``
``CONCURRENCY`` worker threads per queue), importing each task by its path and calling it.

- Priority: Django's higher number runs first; durabl's lower number does, so the job's
  priority is the task's, negated. ``run_after`` becomes the job's ``run_at``.
- ``MAX_ATTEMPTS`` (default 1: a task that raises is ``FAILED``, as Django expects) is the
  job's ``max_attempts``; with more, a failed attempt is retried with durabl's backoff.
- ``get_result(id)`` maps the job: pending -> READY, active -> RUNNING, completed ->
  SUCCESSFUL, failed (or superseded, or cancelled) -> FAILED, with one ``TaskError`` per
  failed attempt (from the job's log). A task's return value (JSON-like, as Django
  normalises it) is kept as the job's ``result``: ``return_value`` of a SUCCESSFUL result.
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import traceback
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from django.core import checks
from django.utils import timezone
from django.utils.module_loading import import_string

from durabl import FatalJobError, Job, JobContext
from durabl_django.registry import JobSpec
from durabl_django.runtime import get_queue

if TYPE_CHECKING:
    from django_tasks import DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import Task, TaskError
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json
else:
    try:  # Django >= 6.0
        from django.tasks import DEFAULT_TASK_QUEUE_NAME, TaskContext, TaskResult, TaskResultStatus
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskError
        from django.tasks.exceptions import TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
    except ImportError:  # the django-tasks package
        from django_tasks import (
            DEFAULT_TASK_QUEUE_NAME,
            TaskContext,
            TaskResult,
            TaskResultStatus,
        )
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
    try:  # how Django turns a return value into JSON-like data (tuples to lists, ...)
        from django.utils.json import normalize_json
    except ImportError:
        from django_tasks.utils import normalize_json

T = TypeVar("T")

TYPE_PREFIX = "django-task:"
STARTED = "django-task started by "
RAISED = "django-task raised "
OPTION_DEFAULTS: Mapping[str, int] = {"CONCURRENCY": 1, "MAX_ATTEMPTS": 1}

# By value: mypy reads these TextChoices members as their (value, label) tuples.
READY = TaskResultStatus("READY")
RUNNING = TaskResultStatus("RUNNING")
SUCCESSFUL = TaskResultStatus("SUCCESSFUL")
FAILED = TaskResultStatus("FAILED")

STATUSES: Mapping[str, TaskResultStatus] = {
    "pending": READY,
    "active": RUNNING,
    "completed": SUCCESSFUL,
    "failed": FAILED,
    "superseded": FAILED,
    "cancelled": FAILED,  # django.tasks has no cancelled status: the task did not run to the end
}


def job_type(queue_name: str) -> str:
    """The durabl job type that holds the tasks of ``queue_name``."""
    return f"{TYPE_PREFIX}{queue_name}"


def worker_id() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _json_ready(value: Any, what: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"task {what} must be JSON-serializable: {exc}") from exc


class DurablBackend(BaseTaskBackend):
    """Django task backend storing each task as a durabl job (see the module docstring)."""

    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        self.options = {**OPTION_DEFAULTS, **self.options}

    def enqueue(self, task: Task[Any, T], args: Any, kwargs: Any) -> TaskResult[T]:
        self.validate_task(task)
        run_after = task.run_after
        run_at = None
        if run_after is not None:
            run_at = run_after if timezone.is_aware(run_after) else timezone.make_aware(run_after)
        payload = {
            "path": task.module_path,
            "args": _json_ready(list(args), "args"),
            "kwargs": _json_ready(dict(kwargs), "kwargs"),
            "backend": self.alias,
            "queue_name": task.queue_name,
            "priority": task.priority,
            "run_after": run_at.isoformat() if run_at is not None else None,
        }
        job_id = get_queue().enqueue(
            job_type(task.queue_name),
            payload,
            priority=-task.priority,
            run_at=run_at,
            max_attempts=self.options["MAX_ATTEMPTS"],
        )
        assert job_id is not None  # no dedupe key: every enqueue stores a job
        result: TaskResult[T] = TaskResult(
            task=task,
            id=job_id,
            status=READY,
            enqueued_at=timezone.now(),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=payload["args"],
            kwargs=payload["kwargs"],
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult[Any]:
        job = get_queue().get_job(result_id)
        if job is None or not job.type.startswith(TYPE_PREFIX):
            raise TaskResultDoesNotExist(result_id)
        try:
            task = load_task(job.data)
        except FatalJobError as exc:
            raise TaskResultDoesNotExist(f"{result_id}: {exc}") from exc
        return task_result(job, task)

    def check(self, **kwargs: Any) -> Iterable[checks.CheckMessage]:
        errors: list[checks.CheckMessage] = []
        if not self.queues:
            errors.append(
                checks.Error(
                    f"TASKS[{self.alias!r}]['QUEUES'] must name at least one queue: each "
                    "queue is a durabl job type that runworkers processes.",
                    id="durabl.E007",
                )
            )
        for name, value in self.options.items():
            if name not in OPTION_DEFAULTS:
                errors.append(
                    checks.Error(
                        f"TASKS[{self.alias!r}]['OPTIONS'] has an unknown key {name!r}.",
                        hint=f"Known keys: {', '.join(OPTION_DEFAULTS)}.",
                        id="durabl.E007",
                    )
                )
            elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
                errors.append(
                    checks.Error(
                        f"TASKS[{self.alias!r}]['OPTIONS'][{name!r}] must be an int >= 1, "
                        f"got {value!r}.",
                        id="durabl.E007",
                    )
                )
        return errors


# -- the worker side ------------------------------------------------------------------------------
def load_task(data: Mapping[str, Any]) -> Task[Any, Any]:
    """The ``Task`` a job's payload names, with the options it was enqueued with."""
    path = data.get("path") if isinstance(data, Mapping) else None
    try:
        task = import_string(str(path))
    except ImportError as exc:
        raise FatalJobError(f"task {path!r} does not import: {exc}") from exc
    if not isinstance(task, Task):
        raise FatalJobError(f"{path!r} is not a task (decorate it with @task)")
    try:
        return task.using(
            priority=data.get("priority"),
            queue_name=data.get("queue_name"),
            backend=data.get("backend"),
        )
    except Exception:  # the backend or queue has gone from TASKS since: keep the defaults
        return task


def _parse_logs(job: Job[Any]) -> tuple[list[str], list[datetime], list[TaskError]]:
    workers: list[str] = []
    starts: list[datetime] = []
    errors: list[TaskError] = []
    for entry in job.logs:
        if entry.message.startswith(STARTED):
            workers.append(entry.message[len(STARTED) :])
            starts.append(entry.at)
        elif entry.message.startswith(RAISED):
            path, _, text = entry.message[len(RAISED) :].partition("\n")
            errors.append(TaskError(exception_class_path=path, traceback=text))
    return workers, starts, errors


def task_result(
    job: Job[Any], task: Task[Any, T], status: TaskResultStatus | None = None
) -> TaskResult[T]:
    """The ``TaskResult`` view of a job."""
    workers, starts, errors = _parse_logs(job)
    if job.status == "failed" and not errors:  # stalled, or lost before it could log
        errors.append(
            TaskError(
                exception_class_path="durabl.model.exceptions.DurablError",
                traceback=job.fail_reason or f"job failed ({job.failure_kind})",
            )
        )
    terminal = job.status in ("completed", "failed", "superseded", "cancelled")
    claimed_at = job.updated_at if job.status == "active" else None
    data = job.data
    result: TaskResult[T] = TaskResult(
        task=task,
        id=job.id,
        status=status or STATUSES[job.status],
        enqueued_at=job.created_at,
        started_at=starts[0] if starts else claimed_at,
        finished_at=job.updated_at if terminal else None,
        last_attempted_at=starts[-1] if starts else claimed_at,
        args=list(data.get("args", [])),
        kwargs=dict(data.get("kwargs", {})),
        backend=str(data.get("backend", task.backend)),
        errors=errors,
        worker_ids=workers,
    )
    object.__setattr__(result, "_return_value", job.result)  # not an init field
    return result


def run_task_job(job: Job[Any], ctx: JobContext) -> object:
    """The durabl handler of every ``django-task:*`` type: import the task and call it."""
    task = load_task(job.data)
    me = worker_id()
    ctx.log(f"{STARTED}{me}")
    running = task_result(job, task, RUNNING)
    running.worker_ids.append(me)
    if running.started_at is None:
        now = timezone.now()
        running = dataclasses.replace(running, started_at=now, last_attempted_at=now)
    task_started.send(DurablBackend, task_result=running)
    args, kwargs = running.args, running.kwargs
    try:
        if task.takes_context:
            value = task.call(TaskContext(task_result=running), *args, **kwargs)
        else:
            value = task.call(*args, **kwargs)
    except Exception as exc:
        path = f"{type(exc).__module__}.{type(exc).__qualname__}"
        ctx.log(f"{RAISED}{path}\n{''.join(traceback.format_exception(exc))}")
        error = TaskError(exception_class_path=path, traceback=traceback.format_exc())
        last = job.attempts >= job.max_attempts or isinstance(exc, FatalJobError)
        finished = dataclasses.replace(
            running,
            status=FAILED if last else READY,
            finished_at=timezone.now() if last else None,
            errors=[*running.errors, error],
        )
        task_finished.send(DurablBackend, task_result=finished)
        raise
    returned = normalize_json(value)
    finished = dataclasses.replace(running, status=SUCCESSFUL, finished_at=timezone.now())
    object.__setattr__(finished, "_return_value", returned)
    task_finished.send(DurablBackend, task_result=finished)
    return returned  # kept as the job's result


def task_job_specs(alias: str, params: Mapping[str, Any]) -> list[JobSpec]:
    """The job types a ``TASKS`` entry using :class:`DurablBackend` needs processed."""
    options = {**OPTION_DEFAULTS, **params.get("OPTIONS", {})}
    queues = params.get("QUEUES", [DEFAULT_TASK_QUEUE_NAME])
    return [
        JobSpec(job_type(name), run_task_job, concurrency=int(options["CONCURRENCY"]))
        for name in sorted(set(queues))
    ]
