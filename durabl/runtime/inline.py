"""Inline runs: a claimed job run in the calling thread, then its same-key followers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durabl.model.job import JobEvent, JobHandle
from durabl.runtime.run import Handler, ManagedRun, Runtime, is_interrupt


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
            current.release(timeout=1.0)
            break
        runtime.emit(JobEvent("claimed", current.type, current.id, attempt=current.attempts))
    if first_error is not None:
        raise first_error
