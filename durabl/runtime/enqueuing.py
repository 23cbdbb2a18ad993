"""Making jobs: ``enqueue`` (stored for the workers) and ``claim_or_enqueue`` (stored
already claimed, for an inline run). :class:`Enqueuing` is a base class of
:class:`durabl.JobQueue`: its methods are the queue's own."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, TypedDict, TypeVar

from durabl.model.bulk import Child, at_position, batch_item, check_batch_scopes
from durabl.model.clock import Seconds
from durabl.model.exceptions import DurablError
from durabl.model.job import JobHandle
from durabl.model.options import NewJob
from durabl.runtime.catalog import TypeCatalog
from durabl.runtime.hooks import EnqueueHooks
from durabl.runtime.inline import InlineRuns
from durabl.runtime.shutdown import Drain
from durabl.runtime.worker import Processors
from durabl.stores.base import Backend


class EnqueueOptions(TypedDict):
    """The options of one enqueue as the caller gave them (None: not given, so the
    type's declared default applies, else durabl's); ``build_new_job`` checks them."""

    priority: int | None
    delay: Seconds
    run_at: datetime | None
    max_attempts: int | None
    dedupe_key: str | None
    dedupe_scope: str | None
    coalesce: str | None
    backoff: str | None
    backoff_delay: Seconds | None
    backoff_max_delay: Seconds | None
    concurrency_key: str | None
    concurrency_limit: int | None
    debounce: Seconds | None
    debounce_max: Seconds | None
    timeout: Seconds | None


T = TypeVar("T")
R = TypeVar("R")


def _placed(check: Callable[[T], R], item: T, position: int) -> R:
    """``check(item)``; its error says the item's position in the batch."""
    try:
        return check(item)
    except (TypeError, ValueError, DurablError) as error:
        raise at_position(error, position)  # noqa: B904 - the very error, placed


#: What claim_or_enqueue() refuses, and why.
_NOT_INLINE = {
    "delay": "runs the job now; use enqueue() to schedule",
    "run_at": "runs the job now; use enqueue() to schedule",
    "concurrency_key": "runs the job now, outside flow control; use enqueue()",
    "concurrency_limit": "runs the job now, outside flow control; use enqueue()",
    "connection": "runs the job now, before the caller's transaction commits; use enqueue()",
    "debounce": "runs the job now; use enqueue() to debounce",
    "debounce_max": "runs the job now; use enqueue() to debounce",
}


class Enqueuing:
    """Where a :class:`durabl.JobQueue` makes jobs. Uses the queue's started store
    (``_ready()``), its ``types`` (each job completed with its type's options), its
    processors (told of jobs due now), its inline runs, its drain (no new job once
    shutting down), ``immediate`` and its enqueue hooks (every job is stored inside
    them)."""

    types: TypeCatalog
    immediate: bool
    enqueue_hooks: EnqueueHooks
    _processors: Processors
    _inline: InlineRuns
    _drain: Drain

    def _ready(self) -> Backend:
        raise NotImplementedError

    def enqueue(
        self,
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
        debounce: Seconds | None = None,
        debounce_max: Seconds | None = None,
        timeout: Seconds | None = None,
        connection: object | None = None,
    ) -> str | None:
        """Store a job; its id, or None when its dedupe slot is taken (see the docs).

        An option left at None takes the type's declared default (``@durabl.job`` or
        :meth:`process`), else durabl's (priority 0, 3 attempts, ``pending+active``,
        exponential backoff from 1 s to 300 s). A type with a schema validates ``data``
        first: ``PayloadValidationError`` and nothing written when it does not match.

        ``connection``: the caller's open database connection (a psycopg ``Connection``
        on ``PostgresJobQueue``; other stores raise ``ValueError``). The job is inserted
        inside the transaction open on it: it exists if and only if that commits.

        ``debounce`` (seconds, with a ``dedupe_key``): the job is due ``debounce`` seconds
        after the last enqueue of its key while it is pending; a later enqueue that finds it
        pending pushes its run_at (and returns None, as a taken slot does), never past
        its first enqueue + ``debounce_max``. See docs/concepts.md, "Debounce".
        ``timeout``: this job's time limit in seconds, over its type's (``@durabl.job`` or
        :meth:`process`); see docs/concepts.md, Time limits."""
        options: EnqueueOptions = {
            "priority": priority,
            "delay": delay,
            "run_at": run_at,
            "max_attempts": max_attempts,
            "dedupe_key": dedupe_key,
            "dedupe_scope": dedupe_scope,
            "coalesce": coalesce,
            "backoff": backoff,
            "backoff_delay": backoff_delay,
            "backoff_max_delay": backoff_max_delay,
            "concurrency_key": concurrency_key,
            "concurrency_limit": concurrency_limit,
            "debounce": debounce,
            "debounce_max": debounce_max,
            "timeout": timeout,
        }
        if connection is not None and self.immediate:
            raise ValueError(
                "enqueue(connection=...) cannot be used on an immediate queue: the job "
                "would run before the caller's transaction commits"
            )
        backend = self._ready()
        needs_now = bool(delay) or debounce is not None
        job = self.types.new_job(type, data, options, now=backend.now() if needs_now else None)
        if connection is not None:  # workers learn of it at the caller's commit
            return self.enqueue_hooks.call(
                job, lambda j: backend.enqueue_through(j, connection).job_id
            )

        def store(job: NewJob) -> str | None:
            result = backend.enqueue(job)
            if result.job_id is not None and (job.run_at is None or job.run_at <= backend.now()):
                self._processors.job_due(job.type)
            return result.job_id

        return self.enqueue_hooks.call(job, store) if self.enqueue_hooks else store(job)

    def enqueue_many(self, jobs: Iterable[tuple[Any, ...] | Child]) -> list[str | None]:
        """Store many jobs: each ``(type, data)``, ``(type, data, options)`` (a dict of
        :meth:`enqueue`'s keyword options but ``connection``) or a :class:`durabl.Child`.
        Returns what :meth:`enqueue` would for each, in order: its id, or None where its
        dedupe slot is taken, by a stored job or an earlier job of the batch.

        Every job is checked first (``ValueError``/``TypeError`` naming its position, and
        nothing written); then the store writes up to ``BULK_CHUNK`` jobs per round trip.
        A job with ``coalesce="latest"`` or ``debounce`` is written on its own, in its
        place (it may update the pending job holding its key)."""
        backend = self._ready()
        batch = self._new_batch(backend, jobs)
        check_batch_scopes(batch)
        return self.enqueue_hooks.call_many(batch, lambda ready: self._store_many(backend, ready))

    def _new_batch(self, backend: Backend, jobs: Iterable[tuple[Any, ...] | Child]) -> list[NewJob]:
        """Every job of a batch checked and built (``ValueError``/``TypeError`` naming its
        position), nothing written."""
        items = [_placed(batch_item, item, position) for position, item in enumerate(jobs)]
        # A delay or a debounce is an instant from the store's clock, read once for the batch.
        timed = any(options["delay"] or options["debounce"] for _, _, options in items)
        now = backend.now() if timed else None
        return [
            _placed(lambda i: self.types.new_job(*i, now=now), item, position)
            for position, item in enumerate(items)
        ]

    def _store_many(self, backend: Backend, jobs: list[NewJob]) -> list[str | None]:
        """Write ``jobs``, then wake this process's processors: once per type (each
        claims what is due), or once per job on an immediate queue (each runs one)."""
        ids = [result.job_id for result in backend.enqueue_many(jobs)]
        now = backend.now() if any(job.run_at is not None for job in jobs) else None
        due = [
            job.type
            for job, job_id in zip(jobs, ids, strict=True)
            if job_id is not None
            and (job.run_at is None or (now is not None and job.run_at <= now))
        ]
        for type in due if self.immediate else dict.fromkeys(due):
            self._processors.job_due(type)
        return ids

    def claim_or_enqueue(
        self,
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
        debounce: Seconds | None = None,
        debounce_max: Seconds | None = None,
        timeout: Seconds | None = None,
        connection: object | None = None,
    ) -> JobHandle[Any] | None:
        """Create the job already claimed when its dedupe key allows a run now, for
        :meth:`run_claimed`; otherwise enqueue (or coalesce) as :meth:`enqueue` and
        return None. Takes the options of :meth:`enqueue`; ``delay``, ``run_at``,
        ``concurrency_key``, ``concurrency_limit``, ``debounce``, ``debounce_max`` and
        ``connection`` are refused (``ValueError``), since an inline run happens now."""
        self._drain.check_open("claim_or_enqueue()")
        refused = {
            "delay": delay,
            "run_at": run_at,
            "concurrency_key": concurrency_key,
            "concurrency_limit": concurrency_limit,
            "debounce": debounce,
            "debounce_max": debounce_max,
            "connection": connection,
        }
        for name, why in _NOT_INLINE.items():
            if refused[name]:
                raise ValueError(f"claim_or_enqueue() {why} (got {name}={refused[name]!r})")
        options: EnqueueOptions = {
            "priority": priority,
            "delay": 0,
            "run_at": None,
            "max_attempts": max_attempts,
            "dedupe_key": dedupe_key,
            "dedupe_scope": dedupe_scope,
            "coalesce": coalesce,
            "backoff": backoff,
            "backoff_delay": backoff_delay,
            "backoff_max_delay": backoff_max_delay,
            "concurrency_key": None,
            "concurrency_limit": None,
            "debounce": None,
            "debounce_max": None,
            "timeout": timeout,
        }
        job = self.types.new_job(type, data, options)
        self._ready()
        if not self.enqueue_hooks:
            return self._inline.claim_new(job)[0]
        claimed: list[JobHandle[Any] | None] = [None]

        def store(job: NewJob) -> str | None:
            claimed[0], stored_id = self._inline.claim_new(job)
            return stored_id

        try:
            self.enqueue_hooks.call(job, store)
        except BaseException:
            if claimed[0] is not None:  # a hook raised after the claim: it will not run
                self._inline.hand_back(claimed[0])
            raise
        return claimed[0]
