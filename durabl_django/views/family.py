"""A job's parent and children on its page: the parent it was started by (a link), and
its children counted by status, each count linking to that status's list filtered to
them (``?parent=<id>``)."""

from __future__ import annotations

from typing import Any

from durabl import Job
from durabl_django.admin_support import LISTED_STATUSES, PARENT_VAR, get_job_queue
from durabl_django.views.common import SECTION_MODELS, admin_url, detail_url


def family(job: Job[Any]) -> dict[str, Any] | None:
    """The page's "Parent and children" context: ``parent`` (id, step, url) when the
    job is a child, ``children`` (status, count, url) when it started any; None for a
    job that is neither (one count, stopped at the first child, tells)."""
    queue = get_job_queue()
    parent = None
    if job.parent_id is not None:
        parent = {"id": job.parent_id, "step": job.parent_step, "url": detail_url(job.parent_id)}
    children = []
    if queue.count_jobs(parent_id=job.id, at_most=1):
        for status in LISTED_STATUSES:
            count = queue.count_jobs(parent_id=job.id, status=status)
            if count:
                url = admin_url(f"{SECTION_MODELS[status]}_changelist")
                children.append(
                    {"status": status, "count": count, "url": f"{url}?{PARENT_VAR}={job.id}"}
                )
    if parent is None and not children:
        return None
    return {"parent": parent, "children": children}
