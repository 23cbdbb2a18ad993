"""Test doubles built on :class:`MemoryBackend`: DummyBackend records what it is asked and
runs nothing; ImmediateBackend runs each job inside ``enqueue``."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

from durabl.model.clock import Clock
from durabl.model.job import Job, JobHandle
from durabl.model.options import NewJob
from durabl.stores import base
from durabl.stores.base import EnqueueResult, InlineClaimResult
from durabl.stores.memory.backend import MemoryBackend

__all__ = ["DummyBackend", "ImmediateBackend"]


class DummyBackend(MemoryBackend):
    """Records what it is asked and never runs anything.

    ``jobs`` holds a snapshot of every job it accepted, in enqueue order; ``calls`` holds
    ``(method, args, kwargs)`` for each Backend method called from outside (not ``now``,
    which is a clock read). Claims find nothing, so no handler ever runs; ``claim_or_enqueue``
    only enqueues.
    """

    def __init__(self, *, clock: Clock | None = None, clock_skew_allowance: float = 0.0) -> None:
        super().__init__(clock=clock, clock_skew_allowance=clock_skew_allowance)
        self.jobs: list[Job[Any]] = []
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []
        self._depth = threading.local()  # > 0 inside a recorded call: inner calls not kept

    def reset(self) -> None:
        """Forget every job and call."""
        with self._store.lock:
            self.jobs.clear()
            self.calls.clear()
            self._store.clear()

    def enqueue(self, job: NewJob) -> EnqueueResult:
        with self._store.lock:
            result = super().enqueue(job)
            if result.job_id is not None:
                self.jobs.append(self._store.snapshot(self._store.jobs[result.job_id]))
            return result

    def insert_many(self, jobs: Sequence[NewJob]) -> list[str | None]:
        with self._store.lock:
            ids = super().insert_many(jobs)
            self.jobs.extend(self._store.snapshot(self._store.jobs[i]) for i in ids if i)
            return ids

    def claim_or_enqueue(self, job: NewJob, lease_owner: str) -> InlineClaimResult:
        result = self.enqueue(job)
        return InlineClaimResult(None, result.job_id, result.coalesced)

    def claim_due(
        self, type: str, limit: int, lease_owner: str, starting: int | None
    ) -> list[JobHandle[Any]]:
        return []

    def claim_next_by_key(
        self, type: str, dedupe_key: str, *, lease_owner: str = ""
    ) -> JobHandle[Any] | None:
        return None


def _recording(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
    """``method``, keeping the call in ``calls`` unless a recorded method made it."""

    @functools.wraps(method)
    def recorded(self: DummyBackend, *args: Any, **kwargs: Any) -> Any:
        depth: int = getattr(self._depth, "n", 0)
        if depth == 0:
            with self._store.lock:
                self.calls.append((name, args, dict(kwargs)))
        self._depth.n = depth + 1
        try:
            return method(self, *args, **kwargs)
        finally:
            self._depth.n = depth

    return recorded


for _name in base.BACKEND_OPERATIONS:
    if _name != "now":  # a clock read, not an operation
        setattr(DummyBackend, _name, _recording(_name, getattr(DummyBackend, _name)))
del _name


class ImmediateBackend(MemoryBackend):
    """A MemoryBackend whose ``immediate`` flag tells JobQueue to run the handler that
    ``queue.process`` registered for the type inside ``enqueue`` itself, so ``enqueue``
    returns only after the job has run. Jobs of a type with no handler wait in memory."""

    immediate = True
