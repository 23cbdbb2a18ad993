"""``@durabl.job(type, ...)``: declare a handler and its per-type options.

The decorator records a :class:`~durabl.runtime.declared.Declaration` in the process-wide
registry and returns a :class:`DeclaredJob`: the handler, still callable as
``handler(job, ctx)``, plus :meth:`DeclaredJob.enqueue` on the default queue. Nothing
connects or starts; ``queue.process_declared()`` runs the declared types.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NoReturn

from durabl.model.abort import Handler, JobContext
from durabl.model.clock import Seconds
from durabl.model.declared import (
    ConcurrencyKey,
    DeadLetterHook,
    DeclaredOptions,
    build_type_options,
)
from durabl.model.job import Job
from durabl.model.options import check_keywords
from durabl.runtime.declared import Declaration, check_process_options, registry


class DeclaredJob:
    """A declared handler: call it as the handler itself; :meth:`enqueue` a job of its
    type on the default queue (``durabl.get_default_queue()``)."""

    def __init__(self, declaration: Declaration) -> None:
        self.declaration = declaration
        functools.update_wrapper(self, declaration.handler)

    @property
    def type(self) -> str:
        return self.declaration.type

    def __repr__(self) -> str:
        return f"<declared job {self.type!r}: {self.declaration.origin}>"

    def __call__(self, job: Job[Any], ctx: JobContext) -> object:
        return self.declaration.handler(job, ctx)

    def enqueue(self, data: Any, **options: Any) -> str | None:
        """``get_default_queue().enqueue(type, data, **options)``: the new job's id, or
        None when its dedupe slot is taken. Takes every option of ``JobQueue.enqueue``;
        the type's declared defaults apply to those not given."""
        # Imported here: declaring a job type (at the import of the application's jobs
        # module) loads no queue, no worker and no store; only enqueueing needs them.
        from durabl.runtime.globals import get_default_queue

        return get_default_queue().enqueue(self.type, data, **options)


def job(
    type: str,
    *,
    concurrency: int = 1,
    poll_interval: Seconds | None = None,
    heartbeat_interval: Seconds | None = None,
    schema: Any = None,
    on_dead_letter: DeadLetterHook | None = None,
    max_attempts: int | None = None,
    priority: int | None = None,
    dedupe_scope: str | None = None,
    backoff: str | None = None,
    backoff_delay: Seconds | None = None,
    backoff_max_delay: Seconds | None = None,
    concurrency_key: ConcurrencyKey | None = None,
    concurrency_limit: int | None = None,
    rate_limit: tuple[int, Seconds] | None = None,
    timeout: Seconds | None = None,
    on_event: str | tuple[str, ...] | None = None,
    **unexpected: NoReturn,
) -> Callable[[Handler], DeclaredJob]:
    """Declare ``handler(job, ctx)`` as the handler of job ``type`` (see docs/api.md).

    ``concurrency``, ``poll_interval``, ``heartbeat_interval``: how
    ``queue.process_declared()`` runs it. ``max_attempts``, ``priority``,
    ``dedupe_scope``, ``backoff*``: defaults for every enqueue of the type in this process,
    overridable per call. ``schema``: what pydantic validates the payload against, at
    enqueue and at run. ``on_dead_letter(job)``: called once per terminal failure.
    ``concurrency_key`` (a string, or a callable of the payload), ``concurrency_limit``:
    flow control defaults for every enqueue; ``rate_limit=(limit, per)``: stored when the
    type's workers start. ``timeout``: the time limit of each run in seconds (a job's own
    ``enqueue(timeout=)`` wins). ``on_event`` (an event name or a tuple of them): sending one of
    them starts a job of the type (docs/workflows.md); recorded in the store when a queue
    of this process starts. Every option is checked here; nothing connects or starts."""
    check_keywords("@durabl.job()", unexpected, ())  # named as the decorator is written
    given = DeclaredOptions(
        concurrency=concurrency,
        poll_interval=poll_interval,
        heartbeat_interval=heartbeat_interval,
        schema=schema,
        on_dead_letter=on_dead_letter,
        max_attempts=max_attempts,
        priority=priority,
        dedupe_scope=dedupe_scope,
        backoff=backoff,
        backoff_delay=backoff_delay,
        backoff_max_delay=backoff_max_delay,
        concurrency_key=concurrency_key,
        concurrency_limit=concurrency_limit,
        rate_limit=rate_limit,
        timeout=timeout,
        on_event=on_event,
    )
    check_process_options(given.concurrency, given.poll_interval, given.heartbeat_interval)
    type_options = build_type_options(type, given)

    def declare(handler: Handler) -> DeclaredJob:
        if not callable(handler):
            raise TypeError(f"@durabl.job({type!r}) must decorate a callable, got {handler!r}")
        if isinstance(handler, DeclaredJob):
            handler = handler.declaration.handler
        declaration = Declaration(
            type,
            handler,
            given.concurrency,
            given.poll_interval,
            given.heartbeat_interval,
            options=type_options,
        )
        registry.add(declaration)
        return DeclaredJob(declaration)

    return declare
