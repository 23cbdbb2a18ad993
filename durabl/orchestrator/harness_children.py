"""The child jobs of an :class:`~durabl.testing.OrchestrationHarness`: created as a store
creates them (once per parent and place, however often the step runs again), kept in
memory, and ended only when the test says so (``t.finish_child``)."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from durabl.model.bulk import Child
from durabl.model.children import child_place, is_terminal
from durabl.model.job import TERMINAL_STATUSES, Job
from durabl.model.payload import check_payload, check_result, portable


class HarnessChildren:
    """The children one harnessed orchestration started, by id, in the order created."""

    def __init__(self, parent_id: str, now: Callable[[], datetime]) -> None:
        self._parent_id = parent_id
        self._now = now
        self._jobs: dict[str, Job[Any]] = {}
        #: The ids the last gather read: whether its wait is over (``waited_done``).
        self._gathered: list[str] = []

    @property
    def jobs(self) -> list[Job[Any]]:
        return list(self._jobs.values())

    def start(
        self, step: str, children: Sequence[Child], known: Collection[str] | None
    ) -> list[str]:
        """What ``JobQueue.start_children_once`` does: a child already stored at its place
        (when ``known`` is given: the step ran before) is kept, the others created."""
        for child in children:
            check_payload(child.data, what=f"data of child job {child.type!r}")
        ids: list[str] = []
        for index, child in enumerate(children):
            place = child_place(step, index)
            earlier = None
            if known is not None:
                earlier = next(
                    (
                        j
                        for j in self._jobs.values()
                        if j.parent_step == place and j.id not in known
                    ),
                    None,
                )
            if earlier is None:
                earlier = self._create(child, place)
            ids.append(earlier.id)
        return ids

    def _create(self, child: Child, place: str) -> Job[Any]:
        now = self._now()
        job: Job[Any] = Job(
            id=f"{child.type}-{len(self._jobs) + 1}",
            type=child.type,
            data=portable(child.data),
            status="pending",
            priority=child.priority or 0,
            run_at=now,
            max_attempts=child.max_attempts or 3,
            created_at=now,
            updated_at=now,
            parent_id=self._parent_id,
            parent_step=place,
        )
        self._jobs[job.id] = job
        return job

    def read(self, ids: Sequence[str]) -> list[Job[Any]]:
        self._gathered = list(ids)
        missing = [job_id for job_id in ids if job_id not in self._jobs]
        if missing:
            raise ValueError(f"gather: job {missing[0]} does not exist (deleted, or never created)")
        return [self._jobs[job_id] for job_id in ids]

    def waited_done(self) -> bool:
        """Whether every job the last gather waited for has ended since."""
        return all(
            job_id in self._jobs and is_terminal(self._jobs[job_id]) for job_id in self._gathered
        )

    def finish(
        self,
        child_id: str,
        status: str = "completed",
        result: Any = None,
        reason: str | None = None,
    ) -> Job[Any]:
        """End child ``child_id`` with ``status`` (a terminal one), keeping ``result``
        (completed) or ``reason`` (failed, cancelled); the job as it is now."""
        job = self._jobs.get(child_id)
        if job is None:
            raise KeyError(f"no child job {child_id!r}; the body started {list(self._jobs)[:5]}")
        if status not in TERMINAL_STATUSES:
            raise ValueError(f"status must be one of {TERMINAL_STATUSES}, got {status!r}")
        if is_terminal(job):
            raise ValueError(f"child job {child_id!r} already ended ({job.status})")
        now = self._now()
        failed = status == "failed"
        ended = replace(
            job,
            status=status,
            attempts=max(job.attempts, 1),
            updated_at=now,
            finished_at=now,
            result=None if result is None else check_result(result),
            fail_reason=reason if reason is not None else ("failed" if failed else None),
            failure_kind="retries-exhausted" if failed else None,
        )
        self._jobs[child_id] = ended
        return ended
