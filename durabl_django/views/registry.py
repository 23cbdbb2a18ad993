"""The pages of what the store keeps besides jobs: the workers registry, the schedules
and the event subscriptions. Each is one table (``_table_page.html``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse

from durabl import Schedule
from durabl_django.admin_support import (
    CANCEL_PERMISSION,
    RETRY_PERMISSION,
    get_job_queue,
    has_perm,
    humanize_seconds,
    require,
)
from durabl_django.views.common import (
    NOWRAP,
    Cell,
    admin_url,
    base_context,
    id_cell,
    live_workers,
    render,
    time_cell,
)

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin


def _every_text(schedule: Schedule) -> str:
    if schedule.cron is not None:
        return f"cron {schedule.cron} ({schedule.timezone})"
    if schedule.every is not None:
        return f"every {humanize_seconds(schedule.every)}"
    return ""


def schedule_list(model_admin: ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """Every stored schedule: its job type, when it fires, its next and last tick, the job
    its last tick enqueued (linked), whether it is paused, and its Pause / Resume / Run now
    buttons (:mod:`durabl_django.admin_controls`) for those who may use them."""
    require(request)
    queue = get_job_queue()
    empty = model_admin.get_empty_value_display()
    supported = queue.backend.supports_schedules
    schedules = queue.list_schedules() if supported else []
    empty_cell = Cell(empty)
    may_pause = has_perm(request, CANCEL_PERMISSION)
    may_run = has_perm(request, RETRY_PERMISSION)
    rows = []
    for schedule in schedules:
        last_job = schedule.last_job_id
        controls = []
        if may_pause:
            action = "resume" if schedule.paused else "pause"
            label = "Resume" if schedule.paused else "Pause"
            controls.append((label, admin_url(f"jobschedule_{action}"), "name", schedule.name))
        if may_run:
            controls.append(("Run now", admin_url("jobschedule_run"), "name", schedule.name))
        rows.append(
            {
                "name": schedule.name,
                "controls": controls,
                "css": "durabl-paused-row" if schedule.paused else "",
                "cells": [
                    Cell(schedule.type, title=schedule.type, css="durabl-type"),
                    Cell(_every_text(schedule)),
                    time_cell(schedule.next_run_at, empty),
                    time_cell(schedule.last_run_at, empty),
                    id_cell(last_job, admin_url("job_detail", last_job))
                    if last_job
                    else empty_cell,
                ],
                # The state heads the last cell, above the buttons that change it.
                "state": "paused" if schedule.paused else "running",
            }
        )
    context = {
        **base_context(model_admin, request, "Schedules"),
        "rows": rows,
        "supported": supported,
        "columns": [
            ("Name", ""),
            ("Job type", ""),
            ("Fires", ""),
            ("Next run", NOWRAP),
            ("Last run", NOWRAP),
            ("Last job", NOWRAP),
            ("State", "durabl-control"),
        ],
        "table_css": "durabl-schedules",
    }
    return render(model_admin, request, "schedule_list.html", context)


def worker_list(model_admin: ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """Every worker process the store knows, live ones first: host, pid, the types it runs
    (with their threads), runs in progress, when it started and was last seen."""
    require(request)
    queue = get_job_queue()
    workers = live_workers(queue)
    empty = model_admin.get_empty_value_display()
    rows = []
    for worker in sorted(workers or [], key=lambda w: (bool(w.gone), w.host, w.pid)):
        types = tuple(f"{t} \u00d7 {n}" for t, n in sorted(dict(worker.concurrency).items()))
        rows.append(
            {
                "css": "durabl-worker durabl-worker-gone" if worker.gone else "durabl-worker",
                "cells": [
                    Cell(str(worker.host)),
                    Cell(str(worker.pid), css=NOWRAP),
                    Cell("", items=types),
                    Cell(str(worker.active), css=NOWRAP),
                    time_cell(worker.started_at, empty),
                    time_cell(worker.last_seen, empty),
                    Cell("gone" if worker.gone else "alive", css="durabl-state"),
                ],
            }
        )
    context = {
        **base_context(model_admin, request, "Workers"),
        "rows": rows,
        "supported": workers is not None,
        "columns": [
            ("Host", ""),
            ("PID", NOWRAP),
            ("Types (threads)", ""),
            ("Running", NOWRAP),
            ("Started", NOWRAP),
            ("Last seen", NOWRAP),
            ("State", NOWRAP),
        ],
        "table_css": "durabl-workers",
    }
    return render(model_admin, request, "worker_list.html", context)


def event_list(model_admin: ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """Every stored event subscription, by event: the job type each event starts."""
    require(request)
    queue = get_job_queue()
    supported = queue.backend.supports_subscriptions
    subscriptions = queue.list_subscriptions() if supported else []
    rows = [
        {
            "css": "durabl-subscription",
            "cells": [
                Cell(s.event, title=s.event),
                Cell(s.type, title=s.type, css="durabl-type"),
            ],
        }
        for s in subscriptions
    ]
    context = {
        **base_context(model_admin, request, "Events"),
        "rows": rows,
        "supported": supported,
        "columns": [("Event", ""), ("Starts a job of type", "")],
        "table_css": "durabl-events",
    }
    return render(model_admin, request, "event_list.html", context)
