"""How a queue tells what happened to the jobs it runs: the ``claimed`` event, each run's
outcome (its event and its log line), and dead letters (the ``dead-lettered`` event and
the type's ``on_dead_letter`` hook). Events are built only when some sink takes their
kind; a failing sink or hook is logged and never affects a job."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any, Protocol

from durabl.model.bulk import Child
from durabl.model.declared import TypeOptions
from durabl.model.job import DEAD_LETTER_KINDS, FailureKind, Job, JobHandle, JobResult
from durabl.model.reports import JobEvent
from durabl.runtime.failures import error_text
from durabl.runtime.handler import HANDED_BACK, Snooze, SuspendRun
from durabl.stores.base import Backend

logger = logging.getLogger(__name__)

#: Results of an ending write that recorded nothing: someone else owns the job now.
NOT_RECORDED = ("lease-lost", "already-terminal", "not-found")
#: Results of an ending write that ended the job: a child's may wake its parent.
ENDED = ("completed", "superseded", "cancelled", "failed-terminal")


class EventSink(Protocol):
    """What reporting needs from a queue: its sinks, its store, its per-type options."""

    backend: Backend

    def listens(self, kind: str) -> bool:
        """Whether any event sink takes events of this kind (else none need be built)."""
        ...

    def emit(self, event: JobEvent) -> None: ...

    def type_options(self, type: str) -> TypeOptions | None:
        """The type's schema, dead-letter hook and defaults (None: none declared)."""
        ...

    # -- a run's child jobs (durabl.runtime.children) --------------------------------------
    def child_ended(self, parent_id: str) -> None:
        """A child of ``parent_id`` ended: wake its parent if it waited for it last."""

    def start_children_once(
        self, parent_id: str, step: str, children: Sequence[Child], known: Collection[str] | None
    ) -> list[str]:
        """``JobQueue.start_children_once``: what ``octx.start_children`` does."""

    def wake_parent(self, parent_id: str) -> bool:
        """``JobQueue.wake_parent``: what a gather asks once its job is released."""


def emit_claimed(queue: EventSink, handle: JobHandle[Any]) -> None:
    """The ``claimed`` event of ``handle``, built only when some sink takes it."""
    if queue.listens("claimed"):
        queue.emit(JobEvent("claimed", handle.type, handle.id, attempt=handle.attempts))


def emit(queue: EventSink, handle: JobHandle[Any], kind: str, **fields: Any) -> None:
    """An event of ``kind`` about ``handle``'s job, built only when some sink takes it."""
    if queue.listens(kind):
        queue.emit(JobEvent(kind, handle.type, handle.id, **fields))


def report_outcome(
    queue: EventSink,
    handle: JobHandle[Any],
    error: BaseException | None,
    result: JobResult,
    duration: float,
    *,
    fatal: bool,
    kind: FailureKind | None = None,
) -> None:
    """The event and log line of a run of ``handle`` that ended with ``error`` (None: its
    handler returned) and whose ending write answered ``result``; ``fatal``: the error
    fails the job at once; ``kind``: the failure kind it is recorded with if it ends the
    job (a terminal ``failed`` event says so in ``extra`` when it is ``timed-out``)."""
    status = result.status
    extra = {"job_id": handle.id, "type": handle.type}
    if status in NOT_RECORDED:
        op = "complete" if error is None else "fail"
        if isinstance(error, HANDED_BACK):
            op = "release"
        emit(queue, handle, "lease-lost", op=op)
        logger.warning("job %s: outcome not recorded (%s)", handle.id, status, extra=extra)
    elif status == "completed":
        emit(queue, handle, "completed", duration=duration, attempt=handle.attempts)
    elif status == "superseded":
        emit(queue, handle, "superseded", duration=duration)
    elif status == "cancelled":
        emit(queue, handle, "cancelled", duration=duration, attempt=handle.attempts)
        logger.info("job %s cancelled", handle.id, extra=extra)
    elif isinstance(error, SuspendRun):
        emit(queue, handle, "suspended", duration=duration, extra={"run_at": error.run_at})
    elif isinstance(error, Snooze):
        snoozed = {"seconds": error.seconds}
        emit(queue, handle, "snoozed", duration=duration, attempt=handle.attempts, extra=snoozed)
        logger.info("job %s snoozed for %g s", handle.id, error.seconds, extra=extra)
    elif error is not None and fatal:
        emit(queue, handle, "fail-fatal", duration=duration, terminal=True, error=error)
        logger.error("job %s failed fatally: %s", handle.id, error_text(error), extra=extra)
    else:
        terminal = status == "failed-terminal"
        emit(
            queue,
            handle,
            "failed",
            duration=duration,
            terminal=terminal,
            error=error,
            attempt=handle.attempts,
            extra={"failure_kind": kind} if terminal and kind == "timed-out" else {},
        )
        log = logger.error if terminal else logger.warning
        log(
            "job %s attempt %d/%d failed%s: %s",
            handle.id,
            handle.attempts,
            handle.max_attempts,
            "" if not terminal else " for the last time",
            "no error" if error is None else f"{type(error).__name__}: {error_text(error)}",
            extra=extra,
        )
    if handle.parent_id is not None and status in ENDED:
        queue.child_ended(handle.parent_id)


def report_timed_out(
    queue: EventSink,
    handle: JobHandle[Any],
    duration: float,
    *,
    limit: float,
    abandoned: bool,
    terminal: bool,
) -> None:
    """The ``timed-out`` event of a run of ``handle`` that passed its time ``limit`` and
    whose failed attempt was recorded; ``abandoned``: its handler did not return within
    the grace, and its thread was left behind."""
    emit(
        queue,
        handle,
        "timed-out",
        duration=duration,
        terminal=terminal,
        attempt=handle.attempts,
        extra={"timeout": limit, "abandoned": abandoned},
    )


def dead_letter(
    queue: EventSink,
    type: str,
    job_id: str,
    kind: FailureKind | None,
    job: Job[Any] | None = None,
) -> None:
    """A job of ``type`` was just recorded failed with ``kind`` by this process: when the
    kind dead-letters, send the sink a ``dead-lettered`` event and call the type's
    ``on_dead_letter(job)`` with the stored job (``job`` when the caller has just read
    it, else read here). Never raises: a failing hook is logged."""
    if kind not in DEAD_LETTER_KINDS:
        return
    extra = {"job_id": job_id, "type": type}
    if queue.listens("dead-lettered"):
        queue.emit(JobEvent("dead-lettered", type, job_id, extra={"failure_kind": kind}))
    options = queue.type_options(type)
    hook = None if options is None else options.on_dead_letter
    if hook is None:
        return
    try:
        job = job if job is not None else queue.backend.get_job(job_id)
        if job is not None:
            hook(job)
    except Exception:
        logger.exception("on_dead_letter for job %s (%s) raised", job_id, type, extra=extra)
