"""Inline runs: a job claimed as it is created, run in the calling thread, then its
same-key followers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durabl.model.exceptions import QueueShutdownError
from durabl.model.job import JobEvent, JobHandle
from durabl.model.options import NewJob
from durabl.runtime.run import Handler, ManagedRun, Runtime, is_interrupt, release_unrun


def claim_new(
    runtime: Runtime,
    job: NewJob,
    *,
    lease_owner: str,
    closing: Callable[[], bool],
    job_due: Callable[[str], None],
) -> JobHandle[Any] | None:
    """Store ``job`` already claimed when its dedupe key allows a run now, as
    :meth:`durabl.JobQueue.claim_or_enqueue` describes; otherwise it is enqueued (or
    coalesced; ``job_due`` is told of a new pending job) and None returned. A claim made
    as the queue began closing is handed back and refused."""
    result = runtime.backend.claim_or_enqueue(job, lease_owner)
    handle = result.handle
    if handle is None:
        if result.enqueued_id is not None:
            job_due(job.type)
        return None
    if closing():
        release_unrun(handle)
        raise QueueShutdownError("claim_or_enqueue() refused: the queue is shutting down")
    runtime.emit(JobEvent("claimed", handle.type, handle.id, attempt=handle.attempts))
    return handle


def run_claimed(
    runtime: Runtime,
    handle: JobHandle[Any],
    handler: Handler,
    *,
    max_drains: int,
    lease_owner: str,
    closing: Callable[[], bool],
) -> None:
    """Check the options of :meth:`durabl.JobQueue.run_claimed`, refuse (handing the
    claim back) once the queue is closing, else run it with its followers."""
    if isinstance(max_drains, bool) or not isinstance(max_drains, int) or max_drains < 0:
        raise ValueError(f"max_drains must be an int >= 0, got {max_drains!r}")
    if closing():
        release_unrun(handle)
        raise QueueShutdownError("run_claimed() refused: the queue is shutting down")
    run_with_followers(
        runtime, handle, handler, max_drains=max_drains, lease_owner=lease_owner, closing=closing
    )


def run_with_followers(
    runtime: Runtime,
    handle: JobHandle[Any],
    handler: Handler,
    *,
    max_drains: int,
    lease_owner: str,
    closing: Callable[[], bool],
) -> None:
    """Run ``handle`` under management, then claim and run pending jobs of the same type
    and dedupe key (at most ``max_drains``), as :meth:`durabl.JobQueue.run_claimed`
    describes. Raises the first handler error at the end."""
    first_error: BaseException | None = None
    current: JobHandle[Any] | None = handle
    drains = 0
    while current is not None:
        outcome = ManagedRun(current, handler, runtime).execute()
        if is_interrupt(outcome.error):
            raise outcome.error  # type: ignore[misc]  # recorded as a failed attempt
        if outcome.error is not None and first_error is None:
            first_error = outcome.error
        key = current.dedupe_key
        may_drain = outcome.error is None or outcome.status == "superseded"
        if key is None or not may_drain or drains >= max_drains:
            break
        current = runtime.backend.claim_next_by_key(current.type, key, lease_owner=lease_owner)
        if current is None:
            break
        drains += 1
        if closing():
            release_unrun(current)
            break
        runtime.emit(JobEvent("claimed", current.type, current.id, attempt=current.attempts))
    if first_error is not None:
        raise first_error
