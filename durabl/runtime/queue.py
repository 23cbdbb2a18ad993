"""JobQueue: the front of durabl. Enqueue anywhere; process where intended."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from datetime import datetime
from typing import Any

from durabl.model.clock import Clock, Seconds, to_seconds
from durabl.model.declared import (
    ConcurrencyKey,
    DeadLetterHook,
    TypeOptions,
    build_type_options,
    given_options,
)
from durabl.model.job import (
    JobEvent,
    JobHandle,
    QueueHealth,
    ReapReport,
    StartReaperResult,
)
from durabl.model.options import (
    DEFAULT_MAX_DRAINS,
    DEFAULT_SHUTDOWN_TIMEOUT,
    DEFAULT_VISIBILITY_TIMEOUT,
    check_queue_durations,
)
from durabl.model.schedule import Schedule, build_schedule
from durabl.model.workers import WorkerInfo
from durabl.runtime.catalog import TypeCatalog
from durabl.runtime.forward import Forward
from durabl.runtime.hooks import RunHook, RunHooks, emit_event
from durabl.runtime.inline import InlineRuns
from durabl.runtime.operations import QueueOperations
from durabl.runtime.presence import Presence
from durabl.runtime.push import PushPickup
from durabl.runtime.reaper import ReaperSlot
from durabl.runtime.registry import RunRegistry
from durabl.runtime.run import Handler, ManagedRun
from durabl.runtime.scheduler import Scheduler
from durabl.runtime.shutdown import Drain, install_signal_handlers
from durabl.runtime.worker import Processor, Processors, default_lease_owner
from durabl.stores.base import Backend

_module_logger = logging.getLogger(__name__)


class JobQueue:
    """Enqueue jobs, process them with worker threads, run them inline, and operate the
    queue (reaper, stats, retries, graceful shutdown). Thread-safe and synchronous.

    ``immediate=True`` runs the handler registered for a type inside ``enqueue`` itself
    (tests, scripts); None takes the store's default (``ImmediateBackend`` says True).
    """

    def __init__(
        self,
        backend: Backend,
        logger: logging.Logger | None = None,
        visibility_timeout: Seconds = DEFAULT_VISIBILITY_TIMEOUT,
        on_job_event: Callable[[JobEvent], object] | None = None,
        *,
        clock: Clock | None = None,
        immediate: bool | None = None,
        retention: Seconds | None = None,
    ) -> None:
        vt, keep = check_queue_durations(visibility_timeout, retention)
        #: Seconds finished jobs are kept: when set, every reaper sweep prunes older ones
        #: (:meth:`prune` with its default statuses).
        self.retention = keep
        self.backend = backend
        self.logger = logger or _module_logger
        self.visibility_timeout = vt
        self.on_job_event = on_job_event
        self.clock: Clock = clock or backend.clock
        self.immediate: bool = backend.immediate if immediate is None else bool(immediate)
        self.lease_owner = default_lease_owner()
        self._lock = threading.RLock()
        self._started = False
        self._processors = Processors(
            self,
            lock=self._lock,
            closing=self._closing,
            ready=self._ready,
            lease_owner=self.lease_owner,
            immediate=self.immediate,
        )
        #: The live runs: each tracks itself from its claim until its outcome is written.
        self.runs: RunRegistry[ManagedRun] = RunRegistry()
        #: What wraps every run: see :meth:`add_run_hook`.
        self.run_hooks = RunHooks()
        #: Per-type options: those given to :meth:`process` over the declared ones.
        self.types = TypeCatalog()
        self._reaper = ReaperSlot(self)
        #: The scheduler (docs/schedules.md): its thread starts with start_scheduler().
        self.scheduler = Scheduler(backend, self.clock, self.logger, new_job=self.types.tick_job)
        #: Push pickup: one change-stream watcher, started by the first process().
        self.pickup = PushPickup(
            backend,
            self._processors.by_type,
            lock=self._lock,
            closing=self._closing,
            sink=self.emit,
            logger=self.logger,
        )
        #: This queue's entry in the workers registry: written by the first process().
        self.presence = Presence(
            backend,
            processors=self._processors.all,
            active=lambda: len(self.runs),
            default_interval=self.visibility_timeout / 3,
        )
        self._drain = Drain(
            clock=self.clock,
            runs=self.runs,
            processors=self._processors.all,
            stop_reaper=self.stop_reaper,
            stop_pickup=self.pickup.stop,
            stop_presence=self.presence.stop,
        )
        self._inline = InlineRuns(self, self.lease_owner, self._closing, self._processors.job_due)
        #: The operator's store operations (list, retry, cancel, prune, stats, ...).
        self.operations = QueueOperations(
            self._ready, self._processors, lambda: self.visibility_timeout
        )

    def __repr__(self) -> str:
        return f"JobQueue({self.backend!r}, visibility_timeout={self.visibility_timeout})"

    # -- runtime hooks used by runs, processors and the reaper ----------------------------
    def emit(self, event: JobEvent) -> None:
        """Send an event to the sink; a failing sink is logged and never affects a job."""
        emit_event(self.on_job_event, event, self.logger)

    def active_runs(self) -> list[ManagedRun]:
        """The runs of this queue not over yet (claimed, running, or being written)."""
        return self.runs.snapshot()

    def wait_idle(self, timeout: Seconds | None = None) -> bool:
        """Wait up to ``timeout`` seconds (None: forever) until no run of this queue is
        left; True when none is. New claims may start runs again afterwards."""
        return self.runs.wait_until_empty(timeout)

    def add_run_hook(self, hook: RunHook) -> Callable[[], None]:
        """Wrap every managed run of this queue (worker pools, :meth:`run_pending`,
        :meth:`run_claimed`, immediate runs, orchestrations) in
        ``hook(job, proceed) -> object``, which must call ``proceed()`` exactly once and
        return its value. Hooks nest in the order added (the first added is outermost);
        one that raises before proceeding fails the attempt like the handler would.
        Returns a function that removes the hook."""
        return self.run_hooks.add(hook)

    # -- setup ----------------------------------------------------------------------------
    def startup(self) -> None:
        """Create the store's indexes/schema (idempotent). Called for you before the first
        operation, so a process that never calls it still gets dedupe enforced."""
        with self._lock:
            if self._started:
                return
            self.backend.startup()
            self._started = True

    def _ready(self) -> Backend:
        if not self._started:
            self.startup()
        return self.backend

    def _closing(self) -> bool:
        return self._drain.started

    # -- enqueue --------------------------------------------------------------------------
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
        connection: object | None = None,
    ) -> str | None:
        """Store a job; its id, or None when its dedupe slot is taken (see the docs).

        An option left at None takes the type's declared default (``@durabl.job`` or
        :meth:`process`), else durabl's (priority 0, 3 attempts, ``pending+active``,
        exponential backoff from 1 s to 300 s). A type with a schema validates ``data``
        first: ``PayloadValidationError`` and nothing written when it does not match.

        ``connection``: the caller's open database connection (a psycopg ``Connection``
        on ``PostgresJobQueue``; other stores raise ``ValueError``). The job is inserted
        inside the transaction open on it: it exists if and only if that commits."""
        if connection is not None and self.immediate:
            raise ValueError(
                "enqueue(connection=...) cannot be used on an immediate queue: the job "
                "would run before the caller's transaction commits"
            )
        backend = self._ready()
        job = self.types.new_job(
            type,
            data,
            priority=priority,
            delay=delay,
            run_at=run_at,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
            dedupe_scope=dedupe_scope,
            coalesce=coalesce,
            backoff=backoff,
            backoff_delay=backoff_delay,
            backoff_max_delay=backoff_max_delay,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
            now=backend.now() if delay else None,
        )
        if connection is not None:  # workers learn of it at the caller's commit
            return backend.enqueue_through(job, connection).job_id
        result = backend.enqueue(job)
        if result.job_id is not None and (job.run_at is None or job.run_at <= backend.now()):
            self._processors.job_due(type)
        return result.job_id

    def type_options(self, type: str) -> TypeOptions | None:
        """The per-type options this queue applies to ``type``: those given to
        :meth:`process`, else the type's declaration (``@durabl.job``), else None."""
        return self.types.options(type)

    # -- processing -----------------------------------------------------------------------
    def process(
        self,
        type: str,
        handler: Handler,
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
    ) -> None:
        """Run ``handler(job, ctx)`` for jobs of ``type`` on ``concurrency`` worker threads.

        Return completes the job; an ``Exception`` retries it; ``FatalJobError`` fails it
        at once. ``poll_interval`` defaults to 5 s, or 60 s while push pickup is active.
        The per-type options of ``@durabl.job`` (``schema``, ``on_dead_letter``, enqueue
        defaults, ...) may be given here instead; given, they replace the declared ones
        for this queue.
        """
        given = given_options(
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
        )
        processor = self.register(
            type,
            handler,
            concurrency=concurrency,
            poll_interval=poll_interval,
            heartbeat_interval=heartbeat_interval,
            **given,
        )
        declared = self.type_options(type)
        if declared is not None and declared.rate_limit is not None:
            self._ready().set_rate_limit(type, *declared.rate_limit)  # kept in the store
        if not self.immediate:
            processor.start()
            self.pickup.route(type)
            self.presence.start()

    def register(
        self,
        type: str,
        handler: Handler,
        *,
        concurrency: int = 1,
        poll_interval: Seconds | None = None,
        heartbeat_interval: Seconds | None = None,
        **type_options: Any,
    ) -> Processor:
        """Declare the handler for ``type`` without starting threads: jobs then run only
        through :meth:`run_pending` (tests, burst workers). :meth:`process` is this plus
        the worker threads. ``type_options``: the per-type options of :meth:`process`."""
        options = build_type_options(type, **type_options) if type_options else None
        processor = self._processors.register(
            type,
            handler,
            concurrency=concurrency,
            poll_interval=poll_interval,
            heartbeat_interval=heartbeat_interval,
            default_poll_interval=self.pickup.default_poll_interval,
        )
        if options is not None:
            self.types.give(type, options)
        return processor

    def process_declared(self, types: Iterable[str] | None = None) -> list[str]:
        """Start processing every type declared with ``@durabl.job`` in this process (or
        only those named), each with its declared concurrency and intervals; the names
        started, sorted. ``ValueError`` naming any type not declared, before any starts."""
        declarations = self.types.declarations(types)
        for declaration in declarations:
            self.process(
                declaration.type,
                declaration.handler,
                concurrency=declaration.concurrency,
                poll_interval=declaration.poll_interval,
                heartbeat_interval=declaration.heartbeat_interval,
            )
        return [declaration.type for declaration in declarations]

    @property
    def processors(self) -> dict[str, Processor]:
        return dict(self._processors.by_type)

    def is_healthy(self) -> QueueHealth:
        """Whether the queue runs (True until shutdown starts) and how it picks up jobs:
        ``pickup="push"`` while a change stream is connected, else ``"poll"``, with the
        reason. Truthy when healthy. Not a database probe."""
        return self.pickup.health()

    def run_pending(self, type: str | None = None, *, limit: int | None = None) -> int:
        """Run due jobs of the registered types in the calling thread until none is due
        (or ``limit`` ran). For tests, scripts and cron-style "burst" workers."""
        return self._processors.run_pending(type, limit=limit)

    # -- inline runs ----------------------------------------------------------------------
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
    ) -> JobHandle[Any] | None:
        """Create the job already claimed when its dedupe key allows a run now, for
        :meth:`run_claimed`; otherwise enqueue (or coalesce) as :meth:`enqueue` and
        return None. Takes the options of :meth:`enqueue`; ``delay`` and ``run_at`` are
        refused, since an inline run happens now."""
        self._drain.check_open("claim_or_enqueue()")
        if delay or run_at is not None:
            raise ValueError("claim_or_enqueue() runs the job now; use enqueue() to schedule")
        job = self.types.new_job(
            type,
            data,
            priority=priority,
            max_attempts=max_attempts,
            dedupe_key=dedupe_key,
            dedupe_scope=dedupe_scope,
            coalesce=coalesce,
            backoff=backoff,
            backoff_delay=backoff_delay,
            backoff_max_delay=backoff_max_delay,
        )
        self._ready()
        return self._inline.claim_new(job)

    def run_claimed(
        self, handle: JobHandle[Any], handler: Handler, *, max_drains: int = DEFAULT_MAX_DRAINS
    ) -> None:
        """Run a claimed job under management, then drain same-key followers.

        After a success, pending jobs of the same type and key are claimed and run (at most
        ``max_drains`` more). If the handler fails while a follower already covers its
        work, the old job is superseded and the follower runs. The first handler error is
        re-raised at the end.
        """
        self._inline.run_claimed(handle, handler, max_drains)

    # -- operations: durabl.runtime.operations ------------------------------------------
    has_outstanding = Forward("operations", QueueOperations.has_outstanding)
    get_job = Forward("operations", QueueOperations.get_job)
    list_failed = Forward("operations", QueueOperations.list_failed)
    list_jobs = Forward("operations", QueueOperations.list_jobs)
    count_jobs = Forward("operations", QueueOperations.count_jobs)
    retry = Forward("operations", QueueOperations.retry)
    delete = Forward("operations", QueueOperations.delete)
    wait = Forward("operations", QueueOperations.wait)
    prune = Forward("operations", QueueOperations.prune)
    cancel = Forward("operations", QueueOperations.cancel)
    retry_matching = Forward("operations", QueueOperations.retry_matching)
    delete_matching = Forward("operations", QueueOperations.delete_matching)
    cancel_matching = Forward("operations", QueueOperations.cancel_matching)
    run_now = Forward("operations", QueueOperations.run_now)
    run_now_matching = Forward("operations", QueueOperations.run_now_matching)
    set_rate_limit = Forward("operations", QueueOperations.set_rate_limit)
    get_rate_limit = Forward("operations", QueueOperations.get_rate_limit)
    get_stats = Forward("operations", QueueOperations.get_stats)
    job_types = Forward("operations", QueueOperations.job_types)

    # -- reaper ---------------------------------------------------------------------------
    def start_reaper(self, interval: Seconds | None = None) -> StartReaperResult:
        """Sweep once now (``recovered``: how many, None if it failed), then periodically."""
        self._drain.check_open("start_reaper()")
        self._ready()
        return self._reaper.start(interval)

    def reap_once(self, visibility_timeout: Seconds | None = None) -> ReapReport:
        """One recovery sweep now, in this thread (``manage.py reap``, cron): expired
        leases back to pending, stalled at their last attempt, or superseded. Uses the
        queue's visibility timeout unless told otherwise."""
        self._ready()
        return self._reaper.reap_once(visibility_timeout)

    def stop_reaper(self, timeout: float = 5.0) -> None:
        """Stop the periodic sweeps; waits up to ``timeout`` for a sweep under way."""
        self._reaper.stop(timeout)

    # -- schedules (docs/schedules.md) -------------------------------------------------
    def schedule(
        self,
        name: str,
        type: str,
        *,
        cron: str | None = None,
        every: Seconds | None = None,
        data: Any = None,
        timezone: str = "UTC",
        catch_up: str = "latest",
        **enqueue_options: Any,
    ) -> None:
        """Store a schedule now (unchanged when stored with the same definition): ``cron``
        (5 fields, or 6 with seconds first) in ``timezone``, or ``every`` seconds."""
        schedule = build_schedule(
            name,
            type,
            cron=cron,
            every=every,
            data=data,
            timezone=timezone,
            catch_up=catch_up,
            **enqueue_options,
        )
        self._ready()
        self.scheduler.store(schedule)

    def start_scheduler(self) -> None:
        """Store the schedules declared with ``durabl.schedule`` and start the scheduler
        thread (idempotent; ``shutdown()`` stops it). Safe in any number of processes."""
        self._drain.check_open("start_scheduler()")
        self._ready()
        self.scheduler.start_declared()

    def list_schedules(self) -> list[Schedule]:
        """Every schedule in the store, by name, with its next and last tick."""
        return self._ready().load_schedules()

    def delete_schedule(self, name: str) -> bool:
        """Remove a stored schedule; False when there was none. (A declared schedule is
        stored again by the next ``start_scheduler()``.)"""
        return self._ready().delete_schedule(name)

    # -- workers registry (docs/operations.md) ------------------------------------------
    def list_workers(self) -> list[WorkerInfo]:
        """The worker processes recorded in the store (every queue that runs processors,
        in any process), by host and pid; ``gone`` marks those unseen for three heartbeat
        intervals. An empty list when the store keeps no registry."""
        self._ready()
        return self.presence.workers()

    # -- shutdown -------------------------------------------------------------------------
    @property
    def draining(self) -> Future[None] | None:
        """None until shutdown starts; then a future resolved when the drain is done."""
        return self._drain.future

    def shutdown(self, timeout: Seconds = DEFAULT_SHUTDOWN_TIMEOUT) -> None:
        """Stop claiming, wait up to ``timeout`` for running jobs, then abort the rest and
        hand their claims back (no attempt used). Safe to call more than once."""
        self.scheduler.stop()
        self._drain.run(to_seconds(timeout, "timeout"))  # the drain stops the watcher too

    def install_signal_handlers(
        self,
        *,
        signals: tuple[int, ...] | None = None,
        timeout: Seconds = DEFAULT_SHUTDOWN_TIMEOUT,
    ) -> Callable[[], None]:
        """Drain on SIGTERM/SIGINT (main thread only). Never exits the process: wait on
        ``queue.draining``. Returns a function that restores the previous handlers."""
        return install_signal_handlers(self._drain, signals, to_seconds(timeout, "timeout"))
