"""Inline runs: a job claimed as it is created, run in the calling thread, then its
same-key followers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from durabl.model.abort import Handler
from durabl.model.exceptions import QueueShutdownError
from durabl.model.job import JobHandle
from durabl.model.options import NewJob
from durabl.runtime.failures import is_interrupt
from durabl.runtime.reports import emit_claimed
from durabl.runtime.run import ManagedRun, Runtime


class OneAtATime(Protocol):
    """A processor, as :func:`run_due` drives it: one job at a time."""

    def process_one(self) -> bool:
        """Claim and run one job in the calling thread; False when none was due."""
        ...


def run_due(
    processors: Sequence[OneAtATime], *, limit: int | None, closing: Callable[[], bool]
) -> int:
    """Run due jobs of ``processors`` in the calling thread, in turn, until none is due,
    ``limit`` ran, or ``closing()`` says the queue is shutting down. How many ran."""
    ran = 0
    progress = True
    while progress and (limit is None or ran < limit):
        progress = False
        for processor in processors:
            if limit is not None and ran >= limit:
                break
            if closing():
                return ran
            if processor.process_one():
                ran += 1
                progress = True
    return ran


@dataclass(frozen=True)
class InlineRuns:
    """The inline runs of one queue (``runtime``), claimed for ``lease_owner``;
    ``closing`` tells whether the queue is shutting down, and ``job_due`` is told of a
    new pending job of a type."""

    runtime: Runtime
    lease_owner: str
    closing: Callable[[], bool]
    job_due: Callable[[str], None]

    def claim_new(self, job: NewJob) -> tuple[JobHandle[Any] | None, str | None]:
        """Store ``job`` already claimed when its dedupe key allows a run now, as
        :meth:`durabl.JobQueue.claim_or_enqueue` describes; otherwise it is enqueued (or
        coalesced). The handle (None when not claimed) and the id of the job stored (the
        claimed one, a pending follower, or None when nothing new was). A claim made as
        the queue began closing is handed back and refused."""
        result = self.runtime.backend.claim_or_enqueue(job, self.lease_owner)
        handle = result.handle
        if handle is None:
            if result.enqueued_id is not None:
                self.job_due(job.type)
            return None, result.enqueued_id
        self._refuse_when_closing(handle, "claim_or_enqueue()")
        self._claimed(handle)
        return handle, handle.id

    def hand_back(self, handle: JobHandle[Any]) -> None:
        """Give back a claim that will not run (the queue began shutting down between the
        claim and its run, or a hook refused it): no attempt used. The one fenced write
        made for a claim that no :class:`~durabl.runtime.run.ManagedRun` owns."""
        handle.release(timeout=1.0)

    def run_claimed(self, handle: JobHandle[Any], handler: Handler, max_drains: int) -> None:
        """Run ``handle`` under management, then claim and run pending jobs of the same
        type and dedupe key (at most ``max_drains``), as :meth:`durabl.JobQueue.run_claimed`
        describes. Raises the first handler error at the end. Refused (the claim handed
        back) once the queue is closing."""
        if isinstance(max_drains, bool) or not isinstance(max_drains, int) or max_drains < 0:
            raise ValueError(f"max_drains must be an int >= 0, got {max_drains!r}")
        self._refuse_when_closing(handle, "run_claimed()")
        first_error: BaseException | None = None
        current: JobHandle[Any] | None = handle
        drains = 0
        while current is not None:
            outcome = ManagedRun(current, handler, self.runtime).execute()
            if is_interrupt(outcome.error):
                raise outcome.error  # type: ignore[misc]  # recorded as a failed attempt
            if outcome.error is not None and first_error is None:
                first_error = outcome.error
            key = current.dedupe_key
            may_drain = outcome.error is None or outcome.status == "superseded"
            if key is None or not may_drain or drains >= max_drains:
                break
            current = self.runtime.backend.claim_next_by_key(
                current.type, key, lease_owner=self.lease_owner
            )
            if current is None:
                break
            drains += 1
            if self.closing():
                self.hand_back(current)
                break
            self._claimed(current)
        if first_error is not None:
            raise first_error

    def _refuse_when_closing(self, handle: JobHandle[Any], what: str) -> None:
        if self.closing():
            self.hand_back(handle)
            raise QueueShutdownError(f"{what} refused: the queue is shutting down")

    def _claimed(self, handle: JobHandle[Any]) -> None:
        emit_claimed(self.runtime, handle)
