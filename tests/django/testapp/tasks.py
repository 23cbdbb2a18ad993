"""django.tasks tasks run through durabl_django.tasks.DurablBackend."""

from __future__ import annotations

from typing import Any

from django_tasks import TaskContext, task

CALLS: list[Any] = []


@task()
def add(a: int, b: int) -> int:
    CALLS.append(("add", a, b))
    return a + b


@task(queue_name="emails", priority=10)
def send_email(to: str) -> None:
    CALLS.append(("send_email", to))


@task(takes_context=True)
def attempt_number(context: TaskContext, label: str) -> None:
    CALLS.append(("attempt", label, context.attempt))


@task()
def explode(message: str) -> None:
    raise ValueError(message)


@task()
def touch_file(path: str) -> None:
    with open(path, "w") as f:
        f.write("task ran")
