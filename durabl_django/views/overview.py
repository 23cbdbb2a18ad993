"""The queue overview, also the Durabl section's landing page: a banner when no worker
runs, per type the jobs in each status (failures by kind), the oldest pending job's lag
(no alarm while the type is paused) with Pause / Resume buttons, and a chart of each
type's last hour."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from django.http import HttpRequest, HttpResponse

from durabl import FAILURE_KINDS, QueueStats, total_stats
from durabl_django.admin_support import (
    CANCEL_PERMISSION,
    KIND_VAR,
    LISTED_STATUSES,
    TYPE_VAR,
    get_job_queue,
    has_perm,
    humanize_seconds,
    kind_label,
    require,
)
from durabl_django.views.charts import CHART_HEIGHT, CHART_WIDTH, X_LABELS, activity_charts
from durabl_django.views.common import (
    Cell,
    admin_url,
    base_context,
    live_workers,
    render,
    with_query,
)

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin

REFRESH_CHOICES = (0, 10, 30, 60)  # seconds between reloads of the overview (0: off)
#: The overview's count columns: (heading, status, list's model name).
COUNTS = [
    (status.capitalize(), status, "job" if status == "failed" else f"{status}job")
    for status in LISTED_STATUSES
]


def lag_threshold() -> float:
    from durabl_django.conf import durabl_settings

    return durabl_settings.seconds("ADMIN_LAG_THRESHOLD")


def _count_cell(count: int, url: str, text: str = "") -> Cell:
    return Cell(text or str(count), url=url if count else "")


def _stats_row(
    label: str, job_type: str | None, stats: QueueStats, threshold: float
) -> dict[str, Any]:
    """A type's row (the total's, ``job_type`` None): each count linked to its list
    (filtered by the type), the failures' kinds under the failed count."""

    def url(model: str, **query: str) -> str:
        if job_type is not None:
            query = {TYPE_VAR: job_type, **query}
        return with_query(admin_url(f"{model}_changelist"), query)

    counts = []
    for _, status, model in COUNTS:
        count = int(getattr(stats, status, 0))
        kinds = []
        if status == "failed":
            for kind in FAILURE_KINDS:
                n = stats.failed_by_kind.get(kind, 0)
                if n:
                    label_text = f"{kind_label(kind).lower()}: {n}"
                    kinds.append(_count_cell(n, url(model, **{KIND_VAR: kind}), label_text))
        counts.append({"cell": _count_cell(count, url(model)), "kinds": kinds})
    waiting = stats.pending > 0 and stats.oldest_pending_run_at is not None
    lag = stats.oldest_pending_lag if waiting else 0.0
    return {
        "label": label,
        "counts": counts,
        "lag": humanize_seconds(lag) if waiting else "\u2014",
        "is_total": job_type is None,
        # A paused type's jobs wait by decision: its lag is no alarm.
        "lag_high": waiting and lag > threshold and not stats.paused,
        "paused": stats.paused,
        "pending": stats.pending,
        "no_worker": False,
    }


def _refresh(request: HttpRequest) -> int:
    try:
        refresh = int(request.GET.get("refresh", "0"))
    except ValueError:
        return 0
    return refresh if refresh in REFRESH_CHOICES else 0


def overview_context(request: HttpRequest) -> dict[str, Any]:
    """What ``_overview.html`` shows: two store reads for the counts and the charts, and
    the workers registry. Raises PermissionDenied without ``view_job``."""
    require(request)
    queue = get_job_queue()
    threshold = lag_threshold()
    by_type = queue.stats_by_type()  # one read; a type only this process handles has none
    job_types = sorted(set(queue.job_types()) | set(by_type))  # paused types with no jobs
    rows = [_stats_row(t, t, by_type.get(t) or QueueStats(), threshold) for t in job_types]
    # The total's lag is of the types whose lag is an alarm (a paused type's is none).
    calm = total_stats(s for s in by_type.values() if not s.paused)
    everything = total_stats(by_type.values())
    total_stats_row = replace(
        everything,
        oldest_pending_run_at=calm.oldest_pending_run_at,
        oldest_pending_lag=calm.oldest_pending_lag,
    )
    total = _stats_row("Total", None, total_stats_row, threshold)
    workers = live_workers(queue)
    no_worker = False
    if workers is not None:  # say so when waiting jobs have nobody to run them
        served = {t for w in workers if not w.gone for t in w.concurrency}
        no_worker = not any(not w.gone for w in workers)
        for row in rows:
            row["no_worker"] = row["pending"] > 0 and row["label"] not in served
    refresh = _refresh(request)
    overview_url = admin_url("queueoverview_changelist")
    return {
        "charts": activity_charts(queue, job_types),
        "chart_width": CHART_WIDTH,
        "chart_height": CHART_HEIGHT,
        "chart_mid": CHART_HEIGHT // 2,
        "x_labels": X_LABELS,
        "refresh": refresh,
        "refresh_choices": [
            (
                seconds,
                f"every {seconds} s" if seconds else "off",
                f"{overview_url}?refresh={seconds}",
            )
            for seconds in REFRESH_CHOICES
        ],
        "rows": rows,
        "total": total,
        "can_pause": has_perm(request, CANCEL_PERMISSION),
        "pause_url": admin_url("queueoverview_pause"),
        "resume_url": admin_url("queueoverview_resume"),
        "paused_types": [row["label"] for row in rows if row["paused"]],
        "count_headings": [heading for heading, _, _ in COUNTS],
        "threshold": humanize_seconds(threshold),
        "no_worker": no_worker,
        "workers_url": admin_url("workerprocess_changelist"),
        "pending_url": admin_url("pendingjob_changelist"),
    }


def queue_overview(model_admin: ModelAdmin[Any], request: HttpRequest) -> HttpResponse:
    """The overview; ``?refresh=N`` reloads the page every N s."""
    context = {
        **base_context(model_admin, request, "Queue overview"),
        "overview": overview_context(request),
    }
    return render(model_admin, request, "queue_overview.html", context)
