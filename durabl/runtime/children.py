"""Child jobs from the queue's side: creating an orchestration's children exactly once, and
waking a parent once its last child ended. :class:`ChildJobs` is a base class of
:class:`durabl.JobQueue`: its methods are the queue's own.

What makes a start exactly once is decided here: each child carries its parent and its
place (:func:`durabl.model.children.child_place`), so a step begun by an attempt that died
finds the children it created and creates only the others. Whether a parent wakes is the
store engine's (``Backend.wake_parent``, written once in
:class:`durabl.stores.family.StoreFamily`); here the queue tells its own processors of the
parent made due and reports the event ``woken``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import replace

from durabl.model.bulk import Child
from durabl.model.children import WAITING_PREFIX, child_index, child_place
from durabl.model.exceptions import DurablError
from durabl.model.reports import JobEvent
from durabl.runtime.enqueuing import Enqueuing

logger = logging.getLogger(__name__)


class ChildJobs(Enqueuing):
    """Where a :class:`durabl.JobQueue` starts child jobs and wakes their parents. Uses
    the store (``_ready()``), the batch path of ``enqueue_many`` (checks, enqueue hooks,
    chunks of ``BULK_CHUNK`` jobs per round trip), its processors and its event sinks."""

    def emit(self, event: JobEvent) -> None:
        raise NotImplementedError

    def listens(self, kind: str) -> bool:
        raise NotImplementedError

    def start_children_once(
        self, parent_id: str, step: str, children: Sequence[Child], known: Collection[str] | None
    ) -> list[str]:
        """Create ``children`` as children of job ``parent_id`` started by its step
        ``step``, and return their ids in order. ``known`` None: the step's first try,
        nothing looked up. Otherwise an earlier attempt began the step and may have died
        after creating some or all of them: the children stored with this step's places
        (but none of ``known``, the ids earlier steps journaled) are taken as they are,
        and only the others created. Every child is checked (its type's schema and
        defaults) before the first is written."""
        backend = self._ready()
        batch = [
            replace(job, parent_id=parent_id, parent_step=child_place(step, index))
            for index, job in enumerate(self._new_batch(backend, children))
        ]
        ids: list[str | None] = [None] * len(batch)
        if known is not None:
            for child in backend.list_jobs(parent_id=parent_id, limit=0):
                index = child_index(child.parent_step, step)
                if index is not None and index < len(ids) and child.id not in known:
                    ids[index] = child.id
        missing = [index for index, job_id in enumerate(ids) if job_id is None]
        if missing:
            made = self.enqueue_hooks.call_many(
                [batch[index] for index in missing],
                lambda ready: self._store_many(backend, ready),
            )
            for index, job_id in zip(missing, made, strict=True):
                ids[index] = job_id
        created = [job_id for job_id in ids if job_id is not None]
        if len(created) != len(ids):  # a child holds no dedupe key: nothing can refuse it
            raise DurablError(f"start_children {step!r}: the store refused a child")
        return created

    def wake_parent(self, parent_id: str) -> bool:
        """Make job ``parent_id`` due now if it waits in a gather and none of its children
        is pending or active (see ``Backend.wake_parent``); whether it was woken."""
        parent = self._ready().wake_parent(parent_id)
        if parent is None:
            return False
        self._processors.job_due(parent.type)
        if self.listens("woken"):
            step = (parent.waiting_for or "")[len(WAITING_PREFIX) :]
            self.emit(JobEvent("woken", parent.type, parent_id, extra={"children": step}))
        return True

    def child_ended(self, parent_id: str) -> None:
        """A run of a child of ``parent_id`` ended it: wake the parent if that was its
        last live child. A failure here is logged, never the child's: the parent's gather
        looks at its children again within ``GATHER_RECHECK`` seconds."""
        try:
            self.wake_parent(parent_id)
        except Exception:
            logger.warning("could not wake job %s after its child ended", parent_id, exc_info=True)
