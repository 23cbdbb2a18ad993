"""The "Send signal" form of a job's page: for staff who approve or reject an
orchestration that waits for a signal (``octx.wait_for_signal``), ``queue.signal`` from the
admin. Shown on the page of a pending job that waits for a signal, to users who may retry
jobs (``durabl_django.views.detail``); posted to ``<id>/signal/`` under the pending list."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect

from durabl_django.admin_controls import log_admin_change
from durabl_django.admin_support import RETRY_PERMISSION, get_job_queue, require
from durabl_django.views.common import detail_url

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

#: The largest ``data`` text the form takes (the store checks the stored size again).
MAX_DATA_CHARS = 64 * 1024


def send_signal(model_admin: ModelAdmin[Any], request: HttpRequest, job_id: str) -> HttpResponse:
    """POST: send the form's signal (``name``, ``data`` as JSON, empty for null) to the
    job, then back to its page with a message saying what happened."""
    require(request, RETRY_PERMISSION)
    back = HttpResponseRedirect(detail_url(job_id))
    if request.method != "POST":
        return back
    name = request.POST.get("name", "")
    text = request.POST.get("data", "").strip()
    if len(text) > MAX_DATA_CHARS:
        messages.error(request, f"Signal not sent: data longer than {MAX_DATA_CHARS} characters.")
        return back
    try:
        data = json.loads(text) if text else None
        sent = get_job_queue().signal(job_id, name, data)
    except json.JSONDecodeError as exc:
        messages.error(request, f"Signal not sent: data is not JSON ({exc.msg}).")
        return back
    except (TypeError, ValueError) as exc:
        messages.error(request, f"Signal not sent: {exc}.")
        return back
    if not sent:
        messages.warning(request, f"Signal not sent: job {job_id} is unknown or finished.")
        return HttpResponseRedirect(detail_url(job_id))
    messages.success(request, f"Signal “{name}” sent to job {job_id}.")
    log_admin_change(request, job_id, f"Sent signal “{name[:100]}” from the admin.")
    return HttpResponseRedirect(detail_url(job_id))
