"""Orchestrator: declare orchestration bodies as job types and run them on workers.

An orchestration is an ordinary job type whose handler is an :class:`OrchestrationHandler`:
it runs under the queue's managed run (claim, heartbeat, lease, shutdown) and drives the
body through an :class:`~durabl.orchestrator.context.OrchestrationContext` whose journal is
written to the job, fenced on the claim token.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, overload

from durabl.model.bulk import Child
from durabl.model.clock import Seconds
from durabl.model.exceptions import DurablError, JournalTooLarge, NondeterminismError, WaitTimeout
from durabl.model.job import Job, JournalAppendResult
from durabl.model.options import check_job_type
from durabl.model.signals import StoredSignal
from durabl.orchestrator.context import Body, HeartbeatStatus, OrchestrationContext
from durabl.orchestrator.journal import (
    DEFAULT_MAX_JOURNAL_BYTES,
    StepResultError,
    journal_budget,
)
from durabl.orchestrator.limits import RunLimits
from durabl.runtime.handler import check_plain_function
from durabl.runtime.run import ManagedHandler, ManagedRun

if TYPE_CHECKING:
    from datetime import datetime

    from durabl.runtime.queue import JobQueue
    from durabl.stores.base import Backend

logger = logging.getLogger(__name__)

B = TypeVar("B", bound=Body)

PROCESS_OPTIONS = ("concurrency", "poll_interval", "heartbeat_interval")


class JournalUnsupportedError(DurablError):
    """The queue's backend cannot hold an orchestration journal."""


def journal_capable(backend: Backend) -> bool:
    """Whether the store declares that it holds orchestration journals."""
    return backend.supports_journal


def _journal_unsupported(backend: object) -> JournalUnsupportedError:
    return JournalUnsupportedError(
        f"{backend!r} cannot hold an orchestration journal (supports_journal is false): "
        "use MongoJobQueue, PostgresJobQueue, SqliteJobQueue or MemoryBackend"
    )


class _RunJournal:
    """The journal of one claimed job, written through its run, fenced on the claim."""

    def __init__(self, run: ManagedRun) -> None:
        self._run = run
        self._backend = run.runtime.backend

    def now(self) -> datetime:
        return self._backend.now()

    def append(self, entries: list[dict[str, Any]], position: int) -> JournalAppendResult:
        return self._run.append_journal(entries, position)

    def send_event(self, event: str, data: Any, dedupe_key: str) -> list[str]:
        return self._run.runtime.send_event_once(event, data, dedupe_key)

    def next_signal(self, name: str, after_seq: int) -> StoredSignal | None:
        return self._backend.next_signal(self._run.handle.id, name, after_seq)

    def wake_if_signalled(self, name: str, after_seq: int) -> bool:
        return self._run.runtime.wake_signalled(self._run.handle.id, name, after_seq)

    def start_children(
        self, step: str, children: Sequence[Child], known: Collection[str] | None
    ) -> list[str]:
        return self._run.runtime.start_children_once(self._run.handle.id, step, children, known)

    def read_children(self, ids: Sequence[str]) -> list[Job[Any]]:
        return read_jobs(self._backend, self._run.handle.id, ids)

    def wake_if_children_done(self) -> bool:
        return self._run.runtime.wake_parent(self._run.handle.id)

    def heartbeat(self) -> HeartbeatStatus:
        result = self._run.renew()
        if result == "applied":
            return "heartbeated"
        if result == "lease-lost":
            return "lease-lost"
        raise DurablError("the heartbeat could not reach the store; the lease was not renewed")


def read_jobs(backend: Backend, parent_id: str, ids: Sequence[str]) -> list[Job[Any]]:
    """The jobs ``ids`` names, in order: the children of ``parent_id`` in one read, any
    other one by its id; ``ValueError`` for one that does not exist (deleted or pruned)."""
    wanted = set(ids)
    found = {j.id: j for j in backend.list_jobs(parent_id=parent_id, limit=0) if j.id in wanted}
    for job_id in wanted - set(found):
        job = backend.get_job(job_id)
        if job is None:
            raise ValueError(f"gather: job {job_id} does not exist (deleted, or never created)")
        found[job_id] = job
    return [found[job_id] for job_id in ids]


class OrchestrationHandler(ManagedHandler):
    """Runs an orchestration body as a job handler. Pass it to ``queue.process`` (or any
    registry that ends in it) like a function; :meth:`Orchestrator.define` builds one.

    ``max_journal_bytes`` caps the journal (the job's data shares the budget);
    ``step_timeout`` is the default per-step timeout (None: the queue's visibility
    timeout); ``max_duration`` bounds one run of the body (None: unbounded).
    """

    fatal_errors = (
        NondeterminismError,
        JournalTooLarge,
        StepResultError,
        JournalUnsupportedError,
        WaitTimeout,  # raised again by every replay of its gather: a retry cannot help
    )

    def __init__(
        self,
        body: Body,
        *,
        max_journal_bytes: int = DEFAULT_MAX_JOURNAL_BYTES,
        step_timeout: Seconds | None = None,
        max_duration: Seconds | None = None,
    ) -> None:
        check_plain_function(body, "orchestration body", "bodies")
        self.body = body
        self.limits = RunLimits.checked(
            max_journal_bytes=max_journal_bytes,
            step_timeout=step_timeout,
            max_duration=max_duration,
        )
        self.max_journal_bytes = self.limits.max_journal_bytes
        self.step_timeout, self.max_duration = self.limits.step_timeout, self.limits.max_duration
        functools.update_wrapper(self, body, updated=())

    def __repr__(self) -> str:
        name = getattr(self.body, "__qualname__", None) or repr(self.body)
        return f"OrchestrationHandler({getattr(self.body, '__module__', '?')}.{name})"

    def run_managed(self, run: ManagedRun) -> object:
        runtime = run.runtime
        backend = runtime.backend
        if not journal_capable(backend):
            raise _journal_unsupported(backend)
        job = run.handle.as_job()
        octx = OrchestrationContext(
            job,
            io=_RunJournal(run),
            signal=run.signal,
            log=run.ctx.log,
            budget=journal_budget(job, self.max_journal_bytes),
            step_timeout=self.step_timeout or runtime.visibility_timeout,
            monotonic=runtime.clock.monotonic,
            started_at=backend.now(),
            seed=lambda: secrets.token_hex(16),
            run_limit=self.limits.run_limit(run.started_at),
        )
        return octx.run(self.body)  # the body's return value is the job's result


@dataclass(frozen=True)
class OrchestrationDefinition:
    """One declared orchestration: what ``queue.process(type, handler, **process_options)``
    needs to run it."""

    type: str
    body: Body
    handler: OrchestrationHandler
    process_options: Mapping[str, Any] = field(default_factory=dict)


class Orchestrator:
    """Declares orchestrations on ``queue`` and runs them like ``queue.process`` does.

    ``max_journal_bytes``, ``step_timeout`` and ``max_duration`` are defaults for every
    :meth:`define` (see :class:`OrchestrationHandler`). Raises :class:`DurablError` when
    the queue's backend cannot hold a journal.
    """

    def __init__(
        self,
        queue: JobQueue,
        *,
        max_journal_bytes: int | None = None,
        step_timeout: Seconds | None = None,
        max_duration: Seconds | None = None,
    ) -> None:
        if not journal_capable(queue.backend):
            raise _journal_unsupported(queue.backend)
        self.queue = queue
        given = {
            "max_journal_bytes": max_journal_bytes,
            "step_timeout": step_timeout,
            "max_duration": max_duration,
        }
        #: The limits given here, for every define() that does not give its own.
        self._defaults: dict[str, Any] = {k: v for k, v in given.items() if v is not None}
        RunLimits.checked(**self._defaults)  # refuse bad defaults now, not at define()
        self._definitions: dict[str, OrchestrationDefinition] = {}
        self._started: set[str] = set()

    def __repr__(self) -> str:
        return f"Orchestrator({self.queue!r}, types={sorted(self._definitions)})"

    @overload
    def define(
        self,
        type: str,
        body: None = None,
        *,
        start: bool = True,
        max_journal_bytes: int | None = None,
        step_timeout: Seconds | None = None,
        max_duration: Seconds | None = None,
        **process_options: Any,
    ) -> Callable[[B], B]: ...

    @overload
    def define(
        self,
        type: str,
        body: B,
        *,
        start: bool = True,
        max_journal_bytes: int | None = None,
        step_timeout: Seconds | None = None,
        max_duration: Seconds | None = None,
        **process_options: Any,
    ) -> B: ...

    def define(
        self,
        type: str,
        body: Body | None = None,
        *,
        start: bool = True,
        max_journal_bytes: int | None = None,
        step_timeout: Seconds | None = None,
        max_duration: Seconds | None = None,
        **process_options: Any,
    ) -> Any:
        """Declare ``body(job, octx)`` as the orchestration for jobs of ``type``; as a
        decorator when ``body`` is omitted. Returns the body unchanged (test it with
        :class:`durabl.testing.OrchestrationHarness`).

        ``process_options`` (``concurrency``, ``poll_interval``, ``heartbeat_interval``)
        go to ``queue.process``, which is called at once unless ``start=False``: then
        nothing touches the queue until :meth:`start` (for processes that declare but do
        not consume, such as a web server).
        """
        check_job_type(type)
        unknown = sorted(set(process_options) - set(PROCESS_OPTIONS))
        if unknown:
            raise TypeError(f"define() got unexpected options {unknown}; use {PROCESS_OPTIONS}")

        def declare(fn: B) -> B:
            given = {
                "max_journal_bytes": max_journal_bytes,
                "step_timeout": step_timeout,
                "max_duration": max_duration,
            }
            options: dict[str, Any] = {
                **self._defaults,
                **{k: v for k, v in given.items() if v is not None},
            }
            handler = OrchestrationHandler(fn, **options)
            if type in self._definitions:
                raise ValueError(f"an orchestration for job type {type!r} is already defined")
            self._definitions[type] = OrchestrationDefinition(
                type, fn, handler, dict(process_options)
            )
            if start:
                try:
                    self.start(type)
                except BaseException:
                    del self._definitions[type]
                    raise
            return fn

        if body is None:
            return declare
        return declare(body)

    @property
    def definitions(self) -> dict[str, OrchestrationDefinition]:
        """Every declared orchestration by type, started or not."""
        return dict(self._definitions)

    @property
    def started(self) -> frozenset[str]:
        """The types this orchestrator has handed to ``queue.process``."""
        return frozenset(self._started)

    def start(self, *types: str) -> list[str]:
        """``queue.process`` every declared type not started yet (or just ``types``);
        returns the types started now."""
        names = list(types) if types else list(self._definitions)
        missing = [t for t in names if t not in self._definitions]
        if missing:
            raise ValueError(f"no orchestration defined for {missing}")
        started: list[str] = []
        for name in names:
            if name in self._started:
                continue
            definition = self._definitions[name]
            self.queue.process(name, definition.handler, **definition.process_options)
            self._started.add(name)
            started.append(name)
        return started
