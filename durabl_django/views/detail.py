"""A job's page: what matters first (status, type, attempts, the failure), then the
attempts, the orchestration's steps, the logs, the payload and the return value; every
other field folded away below, and the fields that are not set named in one line."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils import timezone

from durabl import Job
from durabl_django.admin_support import (
    CANCEL_PERMISSION,
    DELETE_PERMISSION,
    RETRY_PERMISSION,
    format_payload,
    get_job_queue,
    has_perm,
    humanize_seconds,
    kind_label,
    require,
)
from durabl_django.views.common import (
    LOG_AT,
    LOG_TEXT,
    NOWRAP,
    SECTION_MODELS,
    SIGNAL_PREFIX,
    TITLES,
    Cell,
    admin_url,
    base_context,
    detail_table,
    due_time_text,
    finished_at,
    format_time,
    has_job_field,
    job_value,
    missing_job,
    render,
    short_id,
    waiting_since,
)
from durabl_django.views.family import family
from durabl_django.views.messages import events_sent, signals_empty, signals_received

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

FINISHED = ("completed", "failed", "superseded", "cancelled")


@dataclass(frozen=True)
class Field:
    """A labelled value of the job; ``first``: shown at the top of the page rather than
    among the folded details. An empty ``value`` is not shown, only named as not set."""

    label: str
    value: str
    first: bool = False


def _duration(start: datetime | None, end: datetime | None) -> str:
    if start is None or end is None:
        return ""
    return humanize_seconds(max((end - start).total_seconds(), 0.0))


def _attempt_of(history: tuple[Any, ...], at: datetime) -> int | None:
    """The number of the recorded attempt whose run covers ``at``."""
    for attempt in history:
        started = attempt.started_at
        if started is not None and started <= at <= attempt.ended_at:
            return int(attempt.number)
    return None


def _timeline(job: Job[Any], empty: str) -> dict[str, Any]:
    """The attempt history, oldest first: number, worker, start, duration, outcome, error."""
    rows = [
        {
            "css": f"durabl-attempt durabl-outcome-{a.outcome}",
            "cells": [
                Cell(str(a.number), css=NOWRAP),
                Cell(a.worker or empty, css=NOWRAP),
                Cell(
                    format_time(a.started_at) or empty,
                    title=f"ended {format_time(a.ended_at)} UTC",
                    css=LOG_AT,
                ),
                Cell(_duration(a.started_at, a.ended_at) or empty, css=NOWRAP),
                Cell(str(a.outcome), css=NOWRAP),
                Cell(a.error or "", css=LOG_TEXT),
            ],
        }
        for a in job_value(job, "attempt_history") or ()
    ]
    columns = ["Attempt", "Worker", "Started (UTC)", "Took", "Outcome", "Error"]
    return detail_table(columns, rows)


def _steps(job: Job[Any], empty: str) -> dict[str, Any]:
    """The orchestration's journaled steps and sleeps: name, the attempt that ran it, how
    long it took (from the previous entry of that attempt, or the attempt's start), and
    whether a later attempt was served it from the journal ("replayed")."""
    if not job.journal:
        return detail_table([], [])
    from durabl.orchestrator.journal import decode

    records, _ = decode(job.journal)
    history = job_value(job, "attempt_history") or ()
    starts = {int(a.number): a.started_at for a in history if a.started_at is not None}
    last_attempt = max([job.attempts, *starts], default=0)
    steps: list[dict[str, Any]] = []
    previous: dict[int, datetime] = {}
    for record in records:
        attempt = record.attempt
        start = None
        if attempt is not None:
            start = previous.get(attempt, starts.get(attempt))
            if record.at is not None:
                previous[attempt] = record.at
        replayed = attempt is not None and attempt < last_attempt
        name = record.name if record.kind == "step" else f"{record.name} ({record.kind})"
        cells = [
            Cell(str(record.seq), css=NOWRAP),
            Cell(name, css=LOG_TEXT),
            Cell(str(attempt) if attempt is not None else empty, css=NOWRAP),
            Cell(format_time(record.at) or empty, css=LOG_AT),
            Cell(_duration(start, record.at) or empty, css=NOWRAP),
            Cell(f"replayed in attempt {last_attempt}" if replayed else "", css=NOWRAP),
        ]
        steps.append({"css": "durabl-step", "cells": cells})
    return detail_table(["#", "Step", "Attempt", "Journaled (UTC)", "Took", "Replayed"], steps)


def _logs(job: Job[Any], empty: str) -> dict[str, Any]:
    history = job_value(job, "attempt_history") or ()
    rows = [
        {
            "cells": [
                Cell(format_time(entry.at), css=LOG_AT),
                Cell(str(_attempt_of(history, entry.at) or empty), css=NOWRAP),
                Cell(entry.message, css=LOG_TEXT),
            ]
        }
        for entry in job.logs
    ]
    return detail_table(["At (UTC)", "Attempt", "Message"], rows)


def _run_fields(job: Job[Any]) -> list[Field]:
    """How long it ran and, for an active job, who runs it and until when its lease holds."""
    fields: list[Field] = []
    history = job_value(job, "attempt_history") or ()
    if history:
        last = history[-1]
        fields.append(Field("Runs recorded", str(len(history))))
        if job.status != "active":
            took = _duration(last.started_at, last.ended_at)
            fields.append(Field("Last run took", took, first=True))
    if job.status in FINISHED:
        fields.append(Field("Created to finished", _duration(job.created_at, finished_at(job))))
    if job.status == "active":
        for label, name in (("Worker", "worker"), ("Last heartbeat", "heartbeat_at")):
            if has_job_field(name):
                value = job_value(job, name)
                text = format_time(value, zone=True) if isinstance(value, datetime) else value
                fields.append(Field(label, text or "", first=True))
        if has_job_field("lease_expires_at"):
            expires = job_value(job, "lease_expires_at")
            text = format_time(expires, zone=True)
            if expires is not None and expires < timezone.now():
                text += " (expired: the reaper will recover it)"
            fields.append(Field("Lease expires", text, first=True))
    return fields


def _waiting_fields(job: Job[Any]) -> list[Field]:
    """What a suspended job waits for, and since when (none for a job that does not)."""
    if not job.waiting_for:
        return []
    since = waiting_since(job)
    return [
        Field("Waiting for", job.waiting_for, first=True),
        *([Field("Waiting since", format_time(since, zone=True), first=True)] if since else []),
    ]


def _fields(job: Job[Any]) -> list[Field]:
    failed = job.status == "failed"
    delayed = job.status == "pending" and job.run_at > timezone.now()
    ended = "Failed at" if failed else "Finished at" if job.status in FINISHED else "Updated at"
    return [
        Field("Status", job.status, first=True),
        Field("Type", job.type, first=True),
        Field("Attempts", f"{job.attempts} of {job.max_attempts}", first=True),
        Field("Failure kind", kind_label(job.failure_kind), first=True),
        Field("ID", job.id),
        Field("Dedupe key", job.dedupe_key or "", first=job.dedupe_key is not None),
        Field("Dedupe scope", job.dedupe_scope or ""),
        Field("Priority", str(job.priority), first=job.status == "pending"),
        Field(
            "Run at",
            due_time_text(job.run_at) or format_time(job.run_at, zone=True),
            first=delayed,
        ),
        *_waiting_fields(job),
        Field("Created at", format_time(job.created_at, zone=True)),
        Field(
            ended,
            format_time(finished_at(job) if job.status in FINISHED else job.updated_at, zone=True),
            first=job.status in FINISHED,
        ),
        Field(
            "Backoff",
            f"{job.backoff}, {job.backoff_delay:g} s base, at most {job.backoff_max_delay:g} s",
        ),
        *_run_fields(job),
    ]


def _job_actions(request: HttpRequest, job: Job[Any], section: str | None) -> list[dict[str, str]]:
    """The buttons of a job's page: each action its status allows and the user may run."""
    if section is None:
        return []
    delayed = job.status == "pending" and job.run_at > timezone.now()
    offered = [
        ("Retry", "retry", job.status == "failed", RETRY_PERMISSION, "button"),
        ("Run now", "run_now", delayed, RETRY_PERMISSION, "button"),
        ("Cancel", "cancel", job.status in ("pending", "active"), CANCEL_PERMISSION, "button"),
        ("Delete", "delete", job.status != "active", DELETE_PERMISSION, "deletelink"),
    ]
    return [
        {"label": label, "url": admin_url(f"{section}_{name}_one", job.id), "css": css}
        for label, name, allowed, permission, css in offered
        if allowed and has_perm(request, permission)
    ]


def signal_form(request: HttpRequest, job: Job[Any]) -> dict[str, str] | None:
    """The "Send signal" form's context on ``job``'s page (``durabl_django.admin_signal``
    answers it): the URL it posts to and the signal the job waits for; None when the job
    waits for no signal or the user may not send one."""
    waiting = job.waiting_for or ""
    if not waiting.startswith(SIGNAL_PREFIX) or not has_perm(request, RETRY_PERMISSION):
        return None
    name = waiting[len(SIGNAL_PREFIX) :]
    return {"url": admin_url("pendingjob_signal_one", job.id), "name": name}


def job_detail(model_admin: ModelAdmin[Any], request: HttpRequest, job_id: str) -> HttpResponse:
    """Everything a job carries, what matters first; the actions the user may run on it."""
    require(request)
    job = get_job_queue().get_job(job_id)
    if job is None:
        return missing_job(request, job_id)
    section = SECTION_MODELS.get(job.status)
    if section is not None and section != model_admin.opts.model_name:
        # Shown under its status's entry, so the sidebar and breadcrumbs say where it is.
        return HttpResponseRedirect(admin_url(f"{section}_detail", job.id))
    empty = model_admin.get_empty_value_display()
    fields = _fields(job)
    has_result = has_job_field("result") and job.status == "completed"
    context = {
        **base_context(model_admin, request, f"Job {job.id}"),
        "job": job,
        "short_id": short_id(job.id),
        "first_fields": [f for f in fields if f.first and f.value],
        "more_fields": [f for f in fields if not f.first and f.value],
        "unset_fields": [f.label.lower() for f in fields if not f.value],
        "payload": format_payload(job.data),
        "logs": _logs(job, empty),
        "timeline": _timeline(job, empty),
        "steps": _steps(job, empty),
        "signals": signals_received(job, empty),
        "signals_empty": signals_empty(job),
        "events": events_sent(job, empty),
        "has_result": has_result,
        "result": format_payload(job_value(job, "result")) if has_result else "",
        "section_title": TITLES[job.status] if section else "",
        "section_url": admin_url(f"{section}_changelist") if section else "",
        "job_actions": _job_actions(request, job, section),
        "signal_form": signal_form(request, job),
        "family": family(job),
        # A job that ran again after a failure keeps that failure's reason: say so.
        "reason_heading": "Failure reason"
        if job.status in ("failed", "superseded", "cancelled")
        else "An earlier attempt's failure",
    }
    return render(model_admin, request, "job_detail.html", context)
