"""Child jobs in an orchestration: ``octx.start_children`` (fan-out) and ``octx.gather``
(fan-in). :class:`ChildSteps` is a base class of
:class:`~durabl.orchestrator.context.OrchestrationContext`: its methods are ``octx``'s own,
on the same step machine (the journal, the replay, the crash hooks).

Journal entries (see :mod:`durabl.orchestrator.journal` for the others):

- ``{"kind": "spawn", "seq", "name", "at", "attempt"}``: a ``start_children`` step began,
  journaled before the first child is created. Replayed without the entry that follows,
  it says an attempt may have died after creating some or all of the children: the next
  one looks them up (by parent and place) instead of creating them again.
- ``{"kind": "children", "seq", "name", "result", "at", "attempt"}``: the ids it created.
- ``{"kind": "gather", "seq", "name", "wake_at", "at", "attempt"}``: a gather suspended
  the job until its children end, or ``wake_at`` (its timeout, or
  :data:`~durabl.model.signals.WAIT_FOREVER`).
- ``{"kind": "gathered", "seq", "name", "result", "at", "attempt"}``: what it returned
  (each child's record, :func:`~durabl.model.children.child_record`), or None when its
  timeout passed (:class:`~durabl.WaitTimeout`, raised again on every replay).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any, Protocol

from durabl.model.bulk import Child
from durabl.model.children import (
    GATHER_RECHECK,
    SPAWN,
    check_children,
    check_gather_ids,
    check_step_name,
    child_record,
    is_terminal,
    job_of_record,
)
from durabl.model.clock import Seconds, to_seconds
from durabl.model.exceptions import WaitTimeout
from durabl.model.job import Job
from durabl.orchestrator import journal as jr
from durabl.orchestrator.machine import StepMachine
from durabl.runtime.handler import SuspendRun

CHILDREN = "children"
GATHER = "gather"
GATHERED = "gathered"


class ChildrenIO(Protocol):
    """Where a context creates and reads its job's children."""

    def now(self) -> datetime:
        """The store's clock."""

    def start_children(
        self, step: str, children: Sequence[Child], known: Collection[str] | None
    ) -> list[str]:
        """Create ``children`` of this job for ``step`` (``JobQueue.start_children_once``;
        ``known`` not None: look up the ones an earlier attempt created first)."""

    def read_children(self, ids: Sequence[str]) -> list[Job[Any]]:
        """The jobs ``ids`` names, in order; ``ValueError`` for one that does not exist."""

    def wake_if_children_done(self) -> object:
        """Once the job is suspended in a gather: make it due now if none of its children
        is pending or active (one ended while the job still ran toward its wait)."""


class ChildSteps(StepMachine):
    """``octx.start_children`` and ``octx.gather``, over the context's step machine."""

    _io: ChildrenIO

    # -- public ----------------------------------------------------------------------------
    def start_children(self, name: str, children: Sequence[Child]) -> list[str]:
        """Create ``children`` (each a :class:`durabl.Child`: type, data and ``enqueue()``'s
        options but a dedupe key, coalescing or debounce) as the journaled step ``name``,
        and return their ids in order; on resume, the journaled ids. Each child's
        ``parent_id`` is this job's id.

        Exactly once: a run that died after creating some or all of them and before
        journaling their ids is followed by one that finds them (by parent and place) and
        creates only the rest. Written through ``enqueue_many``: up to 1,000 children
        per round trip."""
        self._check_halt()
        check_step_name("start_children", name)
        checked = check_children(name, children)
        began = self._replay_if(SPAWN, name)
        if self.replaying:
            return list(self._recorded(CHILDREN, name).result)
        self._halt_if_aborted()
        known: set[str] | None = None
        if began is None:
            self._journal_entry(SPAWN, name)
        else:
            known = {i for e in self._entries if e.kind == CHILDREN for i in e.result or ()}
        ids = self._guard(self._io.start_children, name, checked, known)
        self._guard(self._hooks.step_ran, name)
        self._journal_entry(CHILDREN, name, result=list(ids))
        self._guard(self._hooks.step_journaled, name)
        return list(ids)

    def gather(
        self, name: str, ids: Sequence[str], timeout: Seconds | None = None
    ) -> list[Job[Any]]:
        """Wait, as the journaled step ``name``, until every job of ``ids`` (this job's
        children) is terminal, and return them in ``ids`` order: status, result, failure
        (a failed child is returned, not raised). :class:`durabl.WaitTimeout` once
        ``timeout`` seconds (None: no limit) passed first.

        While it waits the job holds no worker: it is pending, and the terminal write of
        its last child makes it due at once. What it returns is journaled: on resume the
        same gather returns the same jobs (the logs, journal and attempt history left out,
        a failure reason clipped to 2 KB)."""
        self._check_halt()
        check_step_name("gather", name)
        wanted = check_gather_ids(name, ids)
        seconds = None if timeout is None else to_seconds(timeout, "timeout")
        if seconds is not None and seconds < 0:
            raise ValueError(f"gather {name!r}: timeout must not be negative, got {timeout!r}")
        wait = self._replay_if(GATHER, name)
        if self.replaying:
            return self._gathered(self._recorded(GATHERED, name))
        self._halt_if_aborted()
        jobs = self._guard(self._io.read_children, wanted)
        done = all(is_terminal(job) for job in jobs)
        now = self._io.now()
        if not done:
            if wait is not None:
                deadline = wait.wake_at or now
            else:
                deadline = jr.wait_deadline(now, seconds)
                if now < deadline:
                    self._journal_entry(GATHER, name, wake_at=deadline)
            if now < deadline:
                # Woken by the last child's write; the recheck bounds a wake that was lost.
                wake = min(deadline, _millis(now + timedelta(seconds=GATHER_RECHECK)))
                reason = f"gathering {len(wanted)} children in {name!r}"
                self._stop(SuspendRun(wake, reason, after_release=self._io.wake_if_children_done))
        self._guard(self._hooks.step_ran, name)
        records = [child_record(job) for job in jobs] if done else None
        entry = self._journal_entry(GATHERED, name, result=records)
        self._guard(self._hooks.step_journaled, name)
        return self._gathered(jr.decode_entry(entry))

    # -- inside ----------------------------------------------------------------------------
    def _replay_if(self, kind: str, name: str) -> jr.StepRecord | None:
        """The journaled entry at the cursor when it is of ``kind`` (the first half of a
        step journaled in two), else None."""
        if self.replaying and self._entries[self._cursor].kind == kind:
            return self._replay(kind, name)
        return None

    def _recorded(self, kind: str, name: str) -> jr.StepRecord:
        recorded = self._replay(kind, name)
        assert recorded is not None  # replaying: the journal holds an entry here
        return recorded

    def _journal_entry(self, kind: str, name: str, **fields: Any) -> dict[str, Any]:
        now = self._io.now()
        entry = {"kind": kind, "seq": self._cursor, "name": name, **fields}
        entry.update(at=now, attempt=self.job.attempts)
        self._append([entry], name)
        self._cursor += 1
        return entry

    def _gathered(self, record: jr.StepRecord) -> list[Job[Any]]:
        if record.result is None:
            raise WaitTimeout(f"gather {record.name!r}: the timeout passed first")
        return [job_of_record(child) for child in record.result]


def _millis(value: datetime) -> datetime:
    return value.replace(microsecond=value.microsecond // 1000 * 1000)
