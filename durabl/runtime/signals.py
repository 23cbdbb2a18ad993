"""Signals to jobs: ``queue.signal`` and the wake-up a signal wait asks for once its job is
released. :class:`Signalling` is a base class of :class:`durabl.JobQueue`: its methods are
the queue's own.

What a send decides (store, then wake the job if it waits for this name) is the store
engine's (``Backend.send_signal``, written once in :class:`durabl.stores.engine.StoreBase`);
here the queue tells its own processors of a job made due (so a worker of this process
claims it at once, as after ``run_now``) and reports the events ``signalled`` and
``woken``.
"""

from __future__ import annotations

from typing import Any

from durabl.model.reports import JobEvent
from durabl.model.signals import check_signal_name
from durabl.runtime.worker import Processors
from durabl.stores.base import Backend


class Signalling:
    """Where a :class:`durabl.JobQueue` sends signals. Uses the started store
    (``_ready()``), its processors and its event sinks."""

    _processors: Processors

    def _ready(self) -> Backend:
        raise NotImplementedError

    def emit(self, event: JobEvent) -> None:
        raise NotImplementedError

    def listens(self, kind: str) -> bool:
        raise NotImplementedError

    def signal(self, job_id: str, name: str, data: Any = None) -> bool:
        """Send the signal ``name`` with ``data`` to job ``job_id``: kept with the job until
        its orchestration's ``octx.wait_for_signal(step, name)`` takes it (a wait that is
        already suspended is woken at once). Several of one name are taken in the order
        sent, one per wait. False for an unknown or terminal job (nothing is stored).
        ``TypeError``/``ValueError`` for a bad name or data (the payload rules of job data),
        before anything is written."""
        check_signal_name(name)
        delivery = self._ready().send_signal(job_id, name, data)
        if delivery is None:
            return False
        if self.listens("signalled"):
            self.emit(JobEvent("signalled", delivery.type, job_id, extra={"signal": name}))
        if delivery.woken:
            self._woken(job_id, delivery.type, name)
        return True

    def wake_signalled(self, job_id: str, name: str, after_seq: int) -> bool:
        """Once job ``job_id`` is released to wait for ``name``: make it due now if a
        signal ``name`` numbered after ``after_seq`` was stored while it still ran."""
        if not self._ready().wake_if_signalled(job_id, name, after_seq):
            return False
        job = self._ready().get_job(job_id)
        self._woken(job_id, "" if job is None else job.type, name)
        return True

    def _woken(self, job_id: str, type: str, name: str) -> None:
        if type:
            self._processors.job_due(type)
        if self.listens("woken"):
            self.emit(JobEvent("woken", type, job_id, extra={"signal": name}))
