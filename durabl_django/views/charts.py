"""The overview's charts of the last hour, per type: completions and failures in
5-minute bars and the oldest pending lag as a line on a scale of its own, drawn by the
server as SVG (no script, nothing from a CDN) with its axes labelled around it."""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from durabl_django.admin_support import humanize_seconds

if TYPE_CHECKING:
    from durabl import JobQueue

CHART_BUCKETS = 12  # the last hour in 5-minute bars
CHART_BUCKET = timedelta(minutes=5)
CHART_MAX_TYPES = 20
#: The SVG's own units; it stretches to the width of its box (the bars with it).
CHART_WIDTH, CHART_HEIGHT = 600, 100
BAR_GAP = 0.12  # of a bucket's width, on each side of its two bars
#: Under the plot, left to right.
X_LABELS = ("\u221260 min", "\u221245", "\u221230", "\u221215", "now")


def _bars(counts: list[int], peak: int, which: int, css: str) -> list[dict[str, Any]]:
    """One series' bars: ``which`` 0 is the left bar of each bucket, 1 the right one."""
    slot = CHART_WIDTH / len(counts)
    width = slot * (1 - 2 * BAR_GAP) / 2
    bars = []
    for n, count in enumerate(counts):
        if not count:
            continue
        height = round(CHART_HEIGHT * count / peak, 1) if peak else 0
        bars.append(
            {
                "x": round(n * slot + slot * BAR_GAP + which * width, 1),
                "y": round(CHART_HEIGHT - height, 1),
                "width": round(width, 1),
                "height": height,
                "css": css,
            }
        )
    return bars


def _lag_line(lags: list[float]) -> dict[str, Any]:
    """The lag as a line over the bars, on its own scale: each point at its bucket's end."""
    peak = max(lags, default=0.0)
    slot = CHART_WIDTH / len(lags)
    points = []
    for n, lag in enumerate(lags):
        y = CHART_HEIGHT - (CHART_HEIGHT - 2) * lag / peak if peak else CHART_HEIGHT
        points.append((round((n + 1) * slot, 1), round(y, 1)))
    return {
        "peak": humanize_seconds(peak) if peak else "",
        "polyline": " ".join(f"{x},{y}" for x, y in points),
    }


def _buckets(done: list[int], failed: list[int], lags: list[float]) -> list[dict[str, Any]]:
    """Each 5 minutes as a hover target: what happened in it, and the lag at its end."""
    slot = CHART_WIDTH / len(done)
    buckets = []
    for n, (completed, failures, lag) in enumerate(zip(done, failed, lags, strict=True)):
        start = (len(done) - n) * 5
        end = start - 5
        buckets.append(
            {
                "x": round(n * slot, 1),
                "width": round(slot, 1),
                "when": f"{start} to {end} min ago" if end else f"the last {start} min",
                "completed": completed,
                "failed": failures,
                "lag": humanize_seconds(lag) if lag else "none",
                "lag_at": f"{end} min ago" if end else "now",  # the bucket's end
            }
        )
    return buckets


def activity_charts(queue: JobQueue, job_types: list[str]) -> list[dict[str, Any]]:
    """Per type, completions and failures in each 5-minute bucket of the last hour and the
    oldest pending lag at each bucket's end: one store read for every type
    (``queue.activity``)."""
    shown = job_types[:CHART_MAX_TYPES]
    activity = queue.activity(shown, buckets=CHART_BUCKETS, width=CHART_BUCKET)
    charts = []
    for job_type in shown:
        done, failed = list(activity[job_type].completed), list(activity[job_type].failed)
        lags = list(activity[job_type].lag)
        peak = max([*done, *failed, 0])
        charts.append(
            {
                "type": job_type,
                "completed": sum(done),
                "failed": sum(failed),
                "peak": peak,
                "half": peak // 2 if peak > 1 and peak % 2 == 0 else None,
                "bars": _bars(done, peak, 0, "durabl-bar-completed")
                + _bars(failed, peak, 1, "durabl-bar-failed"),
                "lag": _lag_line(lags),
                "buckets": _buckets(done, failed, lags),
            }
        )
    return charts
