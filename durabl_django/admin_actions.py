"""The admin's actions: retry (failed jobs), cancel (pending or active), delete (any but
active) and run now (delayed pending jobs).

Every action is two steps: a confirmation page (a GET, or the changelist's action form,
which changes nothing) and a CSRF-protected POST carrying ``post=yes`` that acts, records
one admin log entry for the action (not one per job), and redirects with a message saying
what happened.

A selection is either explicit job ids (``_selected_action``) or every job of the list
that matches its filters (``select_across=1``); the latter is one store operation when the
POST arrives (``queue.retry_matching``, ``delete_matching``, ``cancel_matching``,
``run_now_matching``), so it covers every page, not just the one on screen, and does not
call the store once per job.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.contrib import messages
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.utils import timezone

from durabl import Job as DurablJob
from durabl import JobQueue
from durabl_django.admin_support import (
    CANCEL_PERMISSION,
    DELETE_PERMISSION,
    LISTED_STATUSES,
    RETRY_PERMISSION,
    SELECTED,
    JobFilters,
    JobListing,
    first_line,
    get_job_queue,
    kind_label,
    require,
)
from durabl_django.models import Job
from durabl_django.views.common import (
    SECTION_MODELS,
    TITLES,
    admin_url,
    base_context,
    missing_job,
    render,
    short_id,
)
from durabl_django.views.common import detail_url as current_detail_url

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin


def list_status(model_admin: ModelAdmin[Any]) -> str:
    """The status of the list a ModelAdmin shows (the placeholder's own: failed)."""
    return str(getattr(model_admin, "status", "") or "failed")


PREVIEW_SELECTED = 50  # selected jobs listed on a confirmation page (a list page's worth)
PREVIEW_MATCHING = 20  # jobs listed when acting on every match
_MAX_ID_LENGTH = 100

# reason -> (one job, several jobs, short form for a mixed summary)
REASONS: dict[str, tuple[str, str, str]] = {
    "gone": ("it no longer exists", "they no longer exist", "gone"),
    # A job that left the list's status ({status}) since the page was shown.
    "not-failed": ("it is no longer {status}", "they are no longer {status}", "no longer {status}"),
    "key-live": ("its dedupe key is live", "their dedupe keys are live", "dedupe key live"),
    "retry-refused": (
        "it is no longer failed or its dedupe key is live",
        "they are no longer failed or their dedupe keys are live",
        "no longer failed or key live",
    ),
    "cancel-refused": (
        "it has finished or its cancellation was already requested",
        "they have finished or their cancellation was already requested",
        "finished or already requested",
    ),
    "delete-refused": (
        "it is running or no longer exists",
        "they are running or no longer exist",
        "running or gone",
    ),
    "already-due": ("it is already due", "they are already due", "already due"),
    "run-now-refused": (
        "it is no longer pending",
        "they are no longer pending",
        "no longer pending",
    ),
}


def _retry(queue: JobQueue, job_id: str, status: str) -> str | None:
    if queue.retry(job_id):
        return None
    job = queue.get_job(job_id)  # retry() said no: find out why, as far as we can tell
    if job is None:
        return "gone"
    if job.status != "failed":
        return "not-failed"
    if job.dedupe_key is not None and queue.has_outstanding(job.type, job.dedupe_key):
        return "key-live"
    return "retry-refused"


def _if_still(
    act: Callable[[JobQueue, str], bool],
    refused: str,
    skip: Callable[[DurablJob[Any]], str | None] = lambda job: None,
) -> Callable[[JobQueue, str, str], str | None]:
    """An action's ``perform`` that acts only on a job still in the list's status (and
    that ``skip`` lets through): None when ``act`` did it, else why not (a REASONS key;
    ``refused`` when the store said no)."""

    def perform(queue: JobQueue, job_id: str, status: str) -> str | None:
        job = queue.get_job(job_id)
        if job is None:
            return "gone"
        if job.status != status:
            return "not-failed"
        reason = skip(job)
        if reason is not None:
            return reason
        return None if act(queue, job_id) else refused

    return perform


def _due(job: DurablJob[Any]) -> str | None:
    return "already-due" if job.run_at <= timezone.now() else None


#: Delete (never an active job: the store refuses); cancel (pending: at once; active:
#: requested, it ends at its next heartbeat); run now (a delayed pending job: due now).
_delete = _if_still(lambda queue, job_id: queue.delete(job_id), "delete-refused")
_cancel = _if_still(lambda queue, job_id: queue.cancel(job_id), "cancel-refused")
_run_now = _if_still(lambda queue, job_id: queue.run_now(job_id), "run-now-refused", _due)


@dataclass(frozen=True)
class Action:
    name: str
    permission: str
    past: str
    # Acts on one job: None when done, else why it was skipped (a REASONS key).
    perform: Callable[[JobQueue, str, str], str | None]

    @property
    def verb(self) -> str:
        return self.name.replace("_", " ")


ACTIONS = {
    "retry": Action("retry", RETRY_PERMISSION, "retried", _retry),
    "delete": Action("delete", DELETE_PERMISSION, "deleted", _delete),
    "cancel": Action("cancel", CANCEL_PERMISSION, "cancelled", _cancel),
    # Making a job run sooner is a retry's permission: no permission of its own.
    "run_now": Action("run_now", RETRY_PERMISSION, "set to run now", _run_now),
}
LIST_ACTIONS = {f"{name}_selected": name for name in ACTIONS}
#: The lists each action is offered on.
ACTION_STATUSES = {
    "retry": ("failed",),
    "cancel": ("pending", "active"),
    "delete": tuple(s for s in LISTED_STATUSES if s != "active"),
    "run_now": ("pending",),
}


@dataclass(frozen=True)
class Selection:
    """Which jobs of one list (``filters.status``) an action is about."""

    ids: tuple[str, ...] = ()
    across: bool = False
    filters: JobFilters = field(default_factory=lambda: JobFilters("failed"))

    @classmethod
    def from_request(cls, request: HttpRequest, status: str = "failed") -> Selection:
        data = request.POST if request.method == "POST" else request.GET
        ids: dict[str, None] = {}
        for raw in data.getlist(SELECTED):
            value = raw.strip()
            if value and len(value) <= _MAX_ID_LENGTH:
                ids[value] = None
        filters = JobFilters.from_query(status, {**request.GET.dict(), **data.dict()})
        return cls(tuple(ids), data.get("select_across") == "1", filters)

    @property
    def empty(self) -> bool:
        return not self.ids and not self.across

    def hidden_fields(self) -> list[tuple[str, str]]:
        fields = list(self.filters.params().items())
        if self.across:
            return [*fields, ("select_across", "1")]
        return fields + [(SELECTED, job_id) for job_id in self.ids]

    @property
    def section(self) -> str:
        return SECTION_MODELS[self.filters.status]

    def back_url(self) -> str:
        return self.filters.url(admin_url(f"{self.section}_changelist"))


@dataclass
class Outcome:
    done: list[str] = field(default_factory=list)
    skipped: Counter[str] = field(default_factory=Counter)
    #: Set when the store acted on every match at once: how many it acted on.
    matched: int | None = None

    @property
    def done_count(self) -> int:
        return len(self.done) if self.matched is None else self.matched


def summary(
    action: Action, outcome: Outcome, single_id: str | None = None, status: str = "failed"
) -> tuple[int, str]:
    """The message level and text, e.g. "2 retried, 1 skipped: its dedupe key is live."."""

    def why(reason: str, form: int) -> str:
        return REASONS[reason][form].format(status=status)

    skipped = sum(outcome.skipped.values())
    done = outcome.done_count
    if single_id is not None and done + skipped == 1:
        if done:
            extra = {
                "retry": ": it is pending again",
                "cancel": " (a running job stops at its next heartbeat)",
                "run_now": ": it is due",
            }.get(action.name, "")
            return messages.SUCCESS, f"Job {single_id} {action.past}{extra}."
        reason = next(iter(outcome.skipped))
        return messages.WARNING, f"Job {single_id} not {action.past}: {why(reason, 0)}."
    if not done and not skipped:
        return messages.INFO, f"No {status} jobs matched: nothing was {action.past}."
    text = f"{done} {action.past}"
    if skipped:
        if len(outcome.skipped) == 1:
            reason = next(iter(outcome.skipped))
            text += f", {skipped} skipped: {why(reason, 0 if skipped == 1 else 1)}"
        else:
            parts = ", ".join(f"{n} {why(r, 2)}" for r, n in outcome.skipped.most_common())
            text += f", {skipped} skipped ({parts})"
    return (messages.WARNING if skipped else messages.SUCCESS), text + "."


_LOGGED_IDS = 20  # job ids a log entry's message lists


def _log(
    request: HttpRequest,
    action: Action,
    outcome: Outcome,
    selection: Selection,
) -> None:
    """One admin LogEntry for the action, whatever the number of jobs (they show under
    "Recent actions"): for one job, an entry about that job (linked to its page); for
    several, one entry saying how many, which filter, and the first ids."""
    user_id = request.user.pk
    count = outcome.done_count
    if not count or user_id is None:
        return
    flag = DELETION if action.name == "delete" else CHANGE
    verb = action.past.capitalize()
    if count == 1 and outcome.done:
        job_id = outcome.done[0]
        object_id: str | None = job_id
        title = job_id
        message = "" if action.name == "delete" else f"{verb} from the admin."
    else:
        object_id = None
        status = selection.filters.status
        title = f"{count} {status} job{'s' if count != 1 else ''}"
        message = f"{verb} {title} from the admin"
        described = selection.filters.describe()
        if selection.across:
            every = f": every {status} job"
            message += f"{every} {described}" if described else every
        shown = outcome.done[:_LOGGED_IDS]
        if shown:
            more = count - len(shown)
            message += ": " + ", ".join(shown) + (f" and {more} more" if more else "")
        message += "."
    LogEntry.objects.create(
        user_id=user_id,
        content_type=ContentType.objects.get_for_model(Job),
        object_id=object_id,
        object_repr=title[:200],
        action_flag=flag,
        change_message=message,
    )


def _act_on_matches(queue: JobQueue, action: Action, filters: JobFilters) -> Outcome:
    """Every job matching ``filters`` (of the list's status), in one store operation;
    those the store left are counted as skipped (a live dedupe key, already due)."""
    selected = {k: v for k, v in filters.queue_filters().items() if v is not None}
    if action.name == "cancel":
        return Outcome(matched=queue.cancel_matching(**selected))
    if action.name == "delete":
        return Outcome(matched=queue.delete_matching(**selected))
    if action.name == "retry":
        selected.pop("status", None)  # retry_matching takes failed jobs only
        outcome = Outcome(matched=queue.retry_matching(**selected))
        left = "key-live"  # still failed: their dedupe keys are live
    else:
        outcome = Outcome(matched=queue.run_now_matching(**selected))
        left = "already-due"  # pending all along: they were due already
    # The store answers how many it acted on; whatever still matches was left.
    remaining = queue.count_jobs(**filters.queue_filters())
    if action.name == "run_now":
        remaining -= outcome.done_count
    if remaining > 0:
        outcome.skipped[left] = remaining
    return outcome


def run(request: HttpRequest, action: Action, selection: Selection) -> Outcome:
    queue = get_job_queue()
    ids = selection.ids
    if selection.across and selection.filters.waiting:
        # No store writes "every waiting job" in one operation (the filter is exact above
        # the store, durabl.stores.waiting): their ids first, then each job.
        ids = tuple(JobListing(queue, selection.filters).ids())
    if selection.across and not selection.filters.waiting:
        outcome = _act_on_matches(queue, action, selection.filters)
    else:
        outcome = Outcome()
        for job_id in ids:
            reason = action.perform(queue, job_id, selection.filters.status)
            if reason is None:
                outcome.done.append(job_id)
            else:
                outcome.skipped[reason] += 1
    _log(request, action, outcome, selection)
    return outcome


def _preview(queue: JobQueue, selection: Selection) -> tuple[int, list[DurablJob[Any]], int]:
    """(how many jobs, the first of them, how many of the listed ids no longer exist)."""
    if selection.across:
        listing = JobListing(queue, selection.filters)
        return listing.count(), listing.fetch(0, PREVIEW_MATCHING), 0
    jobs = [queue.get_job(job_id) for job_id in selection.ids[:PREVIEW_SELECTED]]
    found = [job for job in jobs if job is not None]
    return len(selection.ids), found, len(jobs) - len(found)


def confirmation(
    model_admin: ModelAdmin[Any],
    request: HttpRequest,
    action: Action,
    selection: Selection,
    *,
    post_url: str,
    cancel_url: str,
    job: DurablJob[Any] | None = None,
) -> HttpResponse:
    """The "are you sure?" page: it lists what would be affected and changes nothing."""
    queue = get_job_queue()
    count, jobs, missing = _preview(queue, selection)
    context = {
        **base_context(model_admin, request, "Are you sure?"),
        "action": action,
        "count": count,
        "across": selection.across,
        "filter_description": selection.filters.describe(),
        "jobs": [
            {
                "id": j.id,
                "url": admin_url(f"{SECTION_MODELS.get(j.status, 'job')}_detail", j.id),
                "type": j.type,
                "status": j.status,
                "kind": kind_label(j.failure_kind),
                "reason": first_line(j.fail_reason, 100),
            }
            for j in jobs
        ],
        "more": max(0, count - len(jobs) - missing),
        "missing": missing,
        "hidden_fields": selection.hidden_fields(),
        "post_url": post_url,
        "cancel_url": cancel_url,
        "job": job,
        "job_short_id": short_id(job.id) if job is not None else "",
        "list_url": admin_url(f"{selection.section}_changelist"),
        "status": selection.filters.status,
        "list_title": TITLES[selection.filters.status],
    }
    return render(model_admin, request, "job_action_confirm.html", context)


def _finish(
    request: HttpRequest,
    action: Action,
    selection: Selection,
    to: str | Callable[[], str],
    single: str | None = None,
) -> HttpResponse:
    """Act, say what happened, and go to ``to`` (called after acting, when a function)."""
    outcome = run(request, action, selection)
    level, text = summary(action, outcome, single, selection.filters.status)
    messages.add_message(request, level, text)
    return HttpResponseRedirect(to if isinstance(to, str) else to())


def bulk_action(
    model_admin: ModelAdmin[Any], request: HttpRequest, name: str, *, confirmed: bool | None = None
) -> HttpResponse:
    """``retry/`` and ``delete/``: confirm (GET, or a POST without ``post=yes``), then act
    on the selection (POST with ``post=yes``) and go back to the filtered list."""
    action = ACTIONS[name]
    require(request, action.permission)
    selection = Selection.from_request(request, list_status(model_admin))
    if selection.empty:
        messages.warning(
            request,
            "Items must be selected in order to perform actions on them. "
            "No items have been changed.",
        )
        return HttpResponseRedirect(selection.back_url())
    if confirmed is None:
        confirmed = request.method == "POST" and request.POST.get("post") == "yes"
    if confirmed:
        return _finish(request, action, selection, selection.back_url())
    return confirmation(
        model_admin,
        request,
        action,
        selection,
        post_url=admin_url(f"{selection.section}_{name}"),
        cancel_url=selection.back_url(),
    )


def single_action(
    model_admin: ModelAdmin[Any], request: HttpRequest, name: str, job_id: str
) -> HttpResponse:
    """``<id>/retry/`` and ``<id>/delete/`` from the detail page: confirm, then act."""
    action = ACTIONS[name]
    require(request, action.permission)
    status = list_status(model_admin)
    selection = Selection(ids=(job_id,), filters=JobFilters(status))
    detail_url = admin_url(f"{selection.section}_detail", job_id)
    if request.method == "POST" and request.POST.get("post") == "yes":
        to: str | Callable[[], str] = admin_url(f"{selection.section}_changelist")
        if name in ("retry", "run_now"):  # the job's page, under the list it is in now
            to = lambda: current_detail_url(job_id)  # noqa: E731
        return _finish(request, action, selection, to, single=job_id)
    job = get_job_queue().get_job(job_id)
    if job is None:
        return missing_job(request, job_id)
    return confirmation(
        model_admin,
        request,
        action,
        selection,
        post_url=admin_url(f"{selection.section}_{name}_one", job_id),
        cancel_url=detail_url,
        job=job,
    )


def changelist_action(model_admin: ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """A list's action form (a POST): show the chosen action's confirmation."""
    name = LIST_ACTIONS.get(request.POST.get("action", ""))
    status = list_status(model_admin)
    if name is None or status not in ACTION_STATUSES[name]:
        messages.warning(request, "No action selected.")
        return HttpResponseRedirect(Selection.from_request(request, status).back_url())
    return bulk_action(model_admin, request, name, confirmed=False)
