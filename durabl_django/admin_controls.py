"""The operator's controls in the admin: Pause / Resume buttons per job type on the queue
overview, and Pause / Resume / Run now per schedule on the Schedules page. Each is a POST
(``type`` or ``name``) to ``pause/``, ``resume/`` or ``run/`` under its page, needs the
``cancel_job`` permission (``retry_job`` for Run now: it creates a job), and is logged in
Django's admin log ("Recent actions") like the job actions."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from durabl import ScheduleError
from durabl_django.admin_support import CANCEL_PERMISSION, RETRY_PERMISSION, get_job_queue, require
from durabl_django.models import Job as JobModel
from durabl_django.views.common import admin_url

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

#: Who may use each control.
CONTROL_PERMISSIONS = {"pause": CANCEL_PERMISSION, "resume": CANCEL_PERMISSION}
SCHEDULE_PERMISSIONS = {**CONTROL_PERMISSIONS, "run": RETRY_PERMISSION}


def type_control(model_admin: ModelAdmin[Any], request: HttpRequest, action: str) -> HttpResponse:
    """POST ``type``: pause or resume it, then back to the overview."""
    require(request, CONTROL_PERMISSIONS[action])
    back = HttpResponseRedirect(admin_url("queueoverview_changelist"))
    job_type = request.POST.get("type", "")
    if request.method != "POST":
        return back
    queue = get_job_queue()
    try:
        (queue.pause if action == "pause" else queue.resume)(job_type)
    except (TypeError, ValueError) as exc:
        messages.error(request, f"Not {action}d: {exc}.")
        return back
    done = "Paused" if action == "pause" else "Resumed"
    messages.success(request, f"{done} job type “{job_type}”.")
    log_admin_change(request, job_type, f"{done} job type “{job_type[:100]}” from the admin.")
    return back


def schedule_control(
    model_admin: ModelAdmin[Any], request: HttpRequest, action: str
) -> HttpResponse:
    """POST ``name``: pause, resume or run the schedule now, then back to the schedules."""
    require(request, SCHEDULE_PERMISSIONS[action])
    back = HttpResponseRedirect(admin_url("jobschedule_changelist"))
    name = request.POST.get("name", "")
    if request.method != "POST":
        return back
    queue = get_job_queue()
    try:
        if action == "pause":
            queue.pause_schedule(name)
            text = f"Paused schedule “{name}”."
        elif action == "resume":
            queue.resume_schedule(name)
            text = f"Resumed schedule “{name}” (the ticks missed while paused are skipped)."
        else:
            job_id = queue.run_schedule_now(name)
            text = (
                f"Schedule “{name}” enqueued job {job_id}."
                if job_id
                else f"Schedule “{name}” enqueued nothing: its dedupe slot is taken."
            )
    except ScheduleError as exc:
        messages.error(request, f"Schedule not changed: {exc}.")
        return back
    messages.success(request, text)
    log_admin_change(request, name, f"{text[:-1]} (from the admin).")
    return back


def log_admin_change(request: HttpRequest, subject: str, message: str) -> None:
    """One "Recent actions" entry of the user's change to ``subject`` (a job id, a type,
    a schedule's name), saying ``message``; nothing for an anonymous request."""
    user_id = request.user.pk
    if user_id is None:
        return
    LogEntry.objects.create(
        user_id=user_id,
        content_type=ContentType.objects.get_for_model(JobModel),
        object_id=subject[:255],
        object_repr=subject[:200],
        action_flag=CHANGE,
        change_message=message,
    )
