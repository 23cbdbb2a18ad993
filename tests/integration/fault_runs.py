"""The engine side of the MongoDB fault tests (``test_mongo_fault_points``): the worker
queue under test with what it did (its client's commands, its events, its handler runs,
counted outside the queue), handlers, and the check every test ends with: each job
completed, by one run per claim, its record one completion."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from durabl import Job, JobContext, JobEvent, JobQueue
from durabl.testing import wait_until
from tests.integration.mongo_faults import Wire

JOBS = 5  # the wire server is slow: a handful of jobs per test
DONE_WITHIN = 60.0

Handler = Callable[[Job[Any], JobContext], dict[str, int]]


@dataclass
class Worker:
    """The queue under test, its client's wire, its events and its handler runs."""

    queue: JobQueue
    wire: Wire
    events: list[JobEvent] = field(default_factory=list)
    runs: Counter[str] = field(default_factory=Counter)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def ran(self, job_id: str) -> int:
        """Count a run of ``job_id`` (a side effect outside the queue); its ordinal."""
        with self.lock:
            self.runs[job_id] += 1
            return self.runs[job_id]

    def kinds(self) -> list[str]:
        return [event.kind for event in list(self.events)]

    def echo(self) -> Handler:
        """A handler that counts its run and returns the job's ``n``."""

        def handler(job: Job[Any], ctx: JobContext) -> dict[str, int]:
            self.ran(job.id)
            return {"n": job.data["n"]}

        return handler


@dataclass
class Held:
    """A handler that counts its run, says it started, and returns (the job's ``n``) only
    once the test lets it: a fault is set while every run is in its handler."""

    worker: Worker
    go: threading.Event = field(default_factory=threading.Event)
    _started: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def __call__(self, job: Job[Any], ctx: JobContext) -> dict[str, int]:
        self.worker.ran(job.id)
        self._started.release()
        self.go.wait(DONE_WITHIN)
        return {"n": job.data["n"]}

    def wait_started(self, count: int = 1) -> None:
        for _ in range(count):
            assert self._started.acquire(timeout=DONE_WITHIN), "a handler did not start"


def until(
    predicate: Callable[[], object], timeout: float = DONE_WITHIN, interval: float = 0.1
) -> bool:
    """:func:`wait_until`, gentler on the server: most predicates here are queries."""
    return wait_until(predicate, timeout=timeout, interval=interval)


def enqueue(view: JobQueue, count: int = JOBS) -> list[str]:
    """``count`` jobs of type ``t``, data ``{"n": <0..count-1>}``; their ids in order."""
    return [view.enqueue("t", {"n": n}) or "" for n in range(count)]


def completed_once(view: JobQueue, worker: Worker, ids: list[str], attempts: int = 1) -> None:
    """Every job of ``ids`` (as :func:`enqueue` made them) completed with its own result,
    its handler run once per claim (``attempts``), its record one completion, last."""
    assert until(lambda: view.count_jobs(status="completed") == len(ids)), {
        job.id: (job.status, job.attempts) for job in view.list_jobs(limit=0)
    }
    for n, job_id in enumerate(ids):
        job = view.get_job(job_id)
        assert job is not None
        assert (job.status, job.attempts, job.result) == ("completed", attempts, {"n": n})
        outcomes = [attempt.outcome for attempt in job.attempt_history]
        assert outcomes.count("completed") == 1 and outcomes[-1] == "completed", outcomes
    assert worker.runs == dict.fromkeys(ids, attempts)
