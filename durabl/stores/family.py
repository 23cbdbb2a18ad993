"""Parents and their child jobs, decided once above every store: the wake of a parent
waiting in a gather once its last child ended, and a cancel's cascade to a parent's live
children. A store only keeps ``parent_id`` on its jobs and lists them by it (the filter of
``list_jobs`` and ``count_jobs``); :class:`StoreFamily` is a base of
:class:`durabl.stores.engine.StoreBase`.

The wake is a check, not a count kept somewhere: after a child's terminal write, are any
of its parent's children still pending or active? If none is and the parent is suspended
in a gather, it is made due (``run_now``: the store's push tells every process at once).
Two last children ending together may both find none live and both make it due: the
parent is claimed once, so its body runs once after the wait either way.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import Any

from durabl.model.job import Job, JobFilter
from durabl.model.waiting import CHILDREN_PREFIX
from durabl.stores.parts import StoreParts

LIVE_STATUSES = ("pending", "active")


class StoreFamily(StoreParts):
    """The operations on parents and children, the same on every store."""

    def wake_parent(self, parent_id: str) -> Job[Any] | None:
        """See :meth:`Backend.wake_parent`. Pending children counted first: in a large
        fan-out most children end while others still wait, and one count (stopped at
        the first match) tells so."""
        if self.has_live_children(parent_id):
            return None
        parent = self.get_job(parent_id)
        if parent is None or not (parent.waiting_for or "").startswith(CHILDREN_PREFIX):
            return None
        return parent if self.run_now(parent_id) else None

    def has_live_children(self, parent_id: str) -> bool:
        return any(
            self.count_jobs(parent_id=parent_id, status=status, at_most=1)
            for status in LIVE_STATUSES
        )

    def cancel_children(self, parent_id: str, reason: str) -> int:
        """Cancel every pending child of ``parent_id`` and request it of every active
        one, and so on down the tree (a child may be an orchestration with children of
        its own): how many were cancelled or asked to stop. One write per parent, a
        count per live child to find the children that are parents themselves."""
        total = 0
        parents = [parent_id]
        while parents:
            parent = parents.pop()
            if not self.has_live_children(parent):
                continue
            children = self.list_jobs(parent_id=parent, limit=0)
            live = [child.id for child in children if child.status in LIVE_STATUSES]
            total += self.cancel_selected(JobFilter(parent_id=parent), reason)
            parents.extend(c for c in live if self.count_jobs(parent_id=c, at_most=1))
        return total

    @abstractmethod
    def cancel_selected(self, filters: JobFilter, reason: str) -> int:
        """See :meth:`durabl.stores.engine.StoreBase.cancel_selected`."""

    def child_cancelled(self, job_id: str) -> Job[Any] | None:
        """A job just cancelled while pending: if it was a child, its parent may now wait
        for no child (:meth:`wake_parent`); the parent woken, else None."""
        job = self.get_job(job_id)
        if job is None or job.parent_id is None:
            return None
        return self.wake_parent(job.parent_id)
