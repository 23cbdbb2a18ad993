"""Parents and their child jobs, decided once above every store: the wake of a parent
waiting in a gather once its last child ended, and a cancel's cascade to a parent's live
children (of one job, or of every job a ``cancel_matching`` selects). A store only keeps
``parent_id`` on its jobs and lists them by it (the filter of ``list_jobs`` and
``count_jobs``); :class:`StoreFamily` is a base of :class:`durabl.stores.engine.StoreBase`.

The wake is a check, not a count kept somewhere: after a child's terminal write, are any
of its parent's children still pending or active? If none is and the parent is suspended
in a gather, it is made due (``run_now``: the store's push tells every process at once).
Two last children ending together may both find none live and both make it due: the
parent is claimed once, so its body runs once after the wait either way.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import replace
from typing import Any

from durabl.model.children import may_have_children
from durabl.model.job import CANCELLED, Job, JobFilter
from durabl.model.rules import JobPage
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

    def cancel_selected_families(self, selection: JobFilter, reason: str) -> int:
        """:meth:`cancel_selected` (``selection``: live statuses only, no ``waiting``),
        then what :meth:`durabl.stores.engine.StoreBase.cancel` does after each job's
        write: a matching parent's live children cancelled (:meth:`cancel_children`), and
        a parent waiting in a gather woken when the write cancelled the last children it
        waited for (:meth:`wake_parent`). How many matching jobs were cancelled or asked
        to stop (their children are not counted, as ``cancel`` counts none).

        What it reads is bounded by the orchestrations, never by the jobs the selection
        matches, so cancelling a backlog of a million plain jobs reads none of them:
        before the write, the matching jobs that carry a journal (only an orchestration
        starts children; ``waiting=True`` given to :meth:`find_jobs` selects those, see
        :mod:`durabl.stores.waiting`), one read per live status the selection allows;
        and, when pending children may be among the matches, the parents waiting in a
        gather (the one named by ``parent_id`` if the selection names one, else every
        pending job with a journal, one read). After it, each matching parent costs a
        read and its cascade, and each gathering parent the checks of its wake (a count
        when a child of its is still live, as it is for the parents of other types)."""
        parents: list[str] = []  # matches whose journal began a start_children step
        matched: set[str] = set()
        for status in LIVE_STATUSES:
            if selection.status in (None, status):
                chosen = replace(selection, status=status, waiting=True)
                for job in self.find_jobs(chosen, JobPage(0)):
                    matched.add(job.id)
                    if may_have_children(job):
                        parents.append(job.id)
        gathering = self._gathering_parents(selection)
        total = self.cancel_selected(selection, reason)
        for parent_id in parents:
            parent = self.get_job(parent_id)  # ended before the write: not cancelled by it
            if parent is not None and parent.status in ("active", CANCELLED):
                self.cancel_children(parent_id, reason)
        for parent_id in gathering:
            if parent_id not in matched:  # a matching parent was cancelled, not woken
                self.wake_parent(parent_id)
        return total

    def _gathering_parents(self, selection: JobFilter) -> list[str]:
        """The parents a cancel of ``selection`` may leave waiting for no child: none when
        it cancels no pending job (an active child's run ends, and wakes its parent, as
        any run does); the one it names by ``parent_id``; else every job waiting in a
        gather now."""
        if selection.status not in (None, "pending"):
            return []
        if selection.parent_id is not None:
            return [selection.parent_id]
        waiting = JobFilter(status="pending", waiting=True)
        return [
            job.id
            for job in self.find_jobs(waiting, JobPage(0))
            if (job.waiting_for or "").startswith(CHILDREN_PREFIX)
        ]

    @abstractmethod
    def cancel_selected(self, filters: JobFilter, reason: str) -> int:
        """See :meth:`durabl.stores.engine.StoreBase.cancel_selected`."""

    @abstractmethod
    def find_jobs(self, filters: JobFilter, page: JobPage) -> list[Job[Any]]:
        """See :meth:`durabl.stores.engine.StoreBase.find_jobs`."""

    def child_cancelled(self, job_id: str) -> Job[Any] | None:
        """A job just cancelled while pending: if it was a child, its parent may now wait
        for no child (:meth:`wake_parent`); the parent woken, else None."""
        job = self.get_job(job_id)
        if job is None or job.parent_id is None:
            return None
        return self.wake_parent(job.parent_id)
