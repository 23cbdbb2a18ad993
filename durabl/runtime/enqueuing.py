"""Making jobs: ``enqueue`` (stored for the workers) and ``claim_or_enqueue`` (stored
already claimed, for an inline run). :class:`durabl.JobQueue` forwards both here."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from durabl.model.clock import Seconds
from durabl.model.job import JobHandle
from durabl.model.options import NewJob, check_keywords
from durabl.runtime.catalog import TypeCatalog
from durabl.runtime.forward import takes_as
from durabl.runtime.hooks import EnqueueHooks
from durabl.runtime.inline import InlineRuns
from durabl.runtime.worker import Processors
from durabl.stores.base import Backend


def enqueue_options(
    type: str,
    data: Any,
    *,
    priority: int | None = None,
    delay: Seconds = 0,
    run_at: datetime | None = None,
    max_attempts: int | None = None,
    dedupe_key: str | None = None,
    dedupe_scope: str | None = None,
    coalesce: str | None = None,
    backoff: str | None = None,
    backoff_delay: Seconds | None = None,
    backoff_max_delay: Seconds | None = None,
    concurrency_key: str | None = None,
    concurrency_limit: int | None = None,
    connection: object | None = None,
) -> None:
    """The parameters of :meth:`Enqueuing.enqueue` and :meth:`Enqueuing.claim_or_enqueue`,
    written once (their values are checked by ``build_new_job``)."""


_OPTIONS = frozenset(inspect.signature(enqueue_options).parameters) - {"type", "data"}


#: What claim_or_enqueue() refuses, and why.
_NOT_INLINE = {
    "delay": "runs the job now; use enqueue() to schedule",
    "run_at": "runs the job now; use enqueue() to schedule",
    "concurrency_key": "runs the job now, outside flow control; use enqueue()",
    "concurrency_limit": "runs the job now, outside flow control; use enqueue()",
    "connection": "runs the job now, before the caller's transaction commits; use enqueue()",
}


@dataclass(frozen=True)
class Enqueuing:
    """``ready`` returns the started store; ``types`` completes each job with its type's
    options; ``processors`` are told of jobs due now; ``check_open(what)`` refuses
    ``what`` once the queue is shutting down; ``immediate`` as the queue's; every job
    is stored inside ``hooks`` (the queue's enqueue hooks)."""

    ready: Callable[[], Backend]
    types: TypeCatalog
    processors: Processors
    inline: InlineRuns
    check_open: Callable[[str], None]
    immediate: bool
    hooks: EnqueueHooks

    @takes_as(enqueue_options)
    def enqueue(self, type: str, data: Any, **options: Any) -> str | None:
        """Store a job; its id, or None when its dedupe slot is taken (see the docs).

        An option left at None takes the type's declared default (``@durabl.job`` or
        :meth:`process`), else durabl's (priority 0, 3 attempts, ``pending+active``,
        exponential backoff from 1 s to 300 s). A type with a schema validates ``data``
        first: ``PayloadValidationError`` and nothing written when it does not match.

        ``connection``: the caller's open database connection (a psycopg ``Connection``
        on ``PostgresJobQueue``; other stores raise ``ValueError``). The job is inserted
        inside the transaction open on it: it exists if and only if that commits."""
        check_keywords("enqueue()", options, _OPTIONS)
        connection = options.pop("connection", None)
        if connection is not None and self.immediate:
            raise ValueError(
                "enqueue(connection=...) cannot be used on an immediate queue: the job "
                "would run before the caller's transaction commits"
            )
        backend = self.ready()
        now = backend.now() if options.get("delay") else None
        job = self.types.new_job(type, data, now=now, **options)
        if connection is not None:  # workers learn of it at the caller's commit
            return self.hooks.call(job, lambda j: backend.enqueue_through(j, connection).job_id)

        def store(job: NewJob) -> str | None:
            result = backend.enqueue(job)
            if result.job_id is not None and (job.run_at is None or job.run_at <= backend.now()):
                self.processors.job_due(job.type)
            return result.job_id

        return self.hooks.call(job, store) if self.hooks else store(job)

    @takes_as(enqueue_options)
    def claim_or_enqueue(self, type: str, data: Any, **options: Any) -> JobHandle[Any] | None:
        """Create the job already claimed when its dedupe key allows a run now, for
        :meth:`run_claimed`; otherwise enqueue (or coalesce) as :meth:`enqueue` and
        return None. Takes the options of :meth:`enqueue`; ``delay``, ``run_at``,
        ``concurrency_key``, ``concurrency_limit`` and ``connection`` are refused
        (``ValueError``), since an inline run happens now."""
        self.check_open("claim_or_enqueue()")
        check_keywords("claim_or_enqueue()", options, _OPTIONS)
        for name, why in _NOT_INLINE.items():
            if options.get(name):
                raise ValueError(f"claim_or_enqueue() {why} (got {name}={options[name]!r})")
        job = self.types.new_job(type, data, **options)
        self.ready()
        if not self.hooks:
            return self.inline.claim_new(job)[0]
        claimed: list[JobHandle[Any] | None] = [None]

        def store(job: NewJob) -> str | None:
            claimed[0], stored_id = self.inline.claim_new(job)
            return stored_id

        try:
            self.hooks.call(job, store)
        except BaseException:
            if claimed[0] is not None:  # a hook raised after the claim: it will not run
                self.inline.hand_back(claimed[0])
            raise
        return claimed[0]
