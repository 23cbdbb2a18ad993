"""JobQueue: the front of durabl. Enqueue anywhere; process where intended.

The class is written in six modules, one concern each: making jobs
(:mod:`durabl.runtime.enqueuing`), sending events (:mod:`durabl.runtime.events`), the
operator's store operations (:mod:`durabl.runtime.operations`), the controls (pauses,
:mod:`durabl.runtime.controls`) and the background
services (:mod:`durabl.runtime.services`) are its base classes; here are its state,
processing, inline runs, hooks and shutdown."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from typing import Any, NoReturn

from durabl.model.abort import Handler
from durabl.model.clock import Clock, Seconds, to_seconds
from durabl.model.declared import (
    ConcurrencyKey,
    DeadLetterHook,
    DeclaredOptions,
    TypeOptions,
    build_type_options,
)
from durabl.model.job import JobHandle
from durabl.model.options import (
    DEFAULT_MAX_DRAINS,
    DEFAULT_SHUTDOWN_TIMEOUT,
    DEFAULT_VISIBILITY_TIMEOUT,
    check_keywords,
    check_queue_durations,
)
from durabl.model.reports import JobEvent, QueueHealth
from durabl.runtime.catalog import TypeCatalog
from durabl.runtime.children import ChildJobs
from durabl.runtime.controls import QueueControls
from durabl.runtime.events import EventSending, RecordedSubscriptions
from durabl.runtime.hooks import (
    EnqueueHook,
    EnqueueHooks,
    EventSinks,
    RunHook,
    RunHooks,
    emit_event,
    process_enqueue_hooks,
    process_run_hooks,
)
from durabl.runtime.inline import InlineRuns
from durabl.runtime.operations import QueueOperations
from durabl.runtime.presence import Presence
from durabl.runtime.push import PushPickup
from durabl.runtime.reaper import ReaperSlot
from durabl.runtime.registry import RunRegistry
from durabl.runtime.run import ManagedRun
from durabl.runtime.scheduler import Scheduler
from durabl.runtime.services import QueueServices
from durabl.runtime.shutdown import Drain, install_signal_handlers
from durabl.runtime.signals import Signalling
from durabl.runtime.worker import Processor, Processors, default_lease_owner
from durabl.stores.base import Backend

_module_logger = logging.getLogger(__name__)


class JobQueue(EventSending, ChildJobs, Signalling, QueueControls, QueueOperations, QueueServices):
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
        #: Sinks added beside ``on_job_event``: see :meth:`add_event_sink`.
        self.event_sinks = EventSinks()
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
        self.runs: RunRegistry[ManagedRun] = RunRegistry(on_untrack=self._run_over)
        #: What wraps every run: see :meth:`add_run_hook`.
        self.run_hooks = RunHooks(process_run_hooks)
        #: What wraps every enqueue: see :meth:`add_enqueue_hook`.
        self.enqueue_hooks = EnqueueHooks(process_enqueue_hooks)
        #: Per-type options: those given to :meth:`process` over the declared ones.
        self.types = TypeCatalog()
        #: The ``on_event`` subscriptions this queue wrote to its store.
        self.recorded_subscriptions = RecordedSubscriptions()
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
            stop_reaper=self._reaper.stop,
            stop_pickup=self.pickup.stop,
            stop_presence=self.presence.stop,
        )
        self._inline = InlineRuns(self, self.lease_owner, self._closing, self._processors.job_due)

    def __repr__(self) -> str:
        return f"JobQueue({self.backend!r}, visibility_timeout={self.visibility_timeout})"

    # -- runtime hooks used by runs, processors and the reaper ----------------------------
    def emit(self, event: JobEvent) -> None:
        """Send an event to the sink; a failing sink is logged and never affects a job."""
        emit_event(self.on_job_event, event, self.logger)
        if self.event_sinks.own:
            self.event_sinks.emit(event, self.logger)

    def listens(self, kind: str) -> bool:
        """Whether any sink takes events of ``kind`` (else none need be built)."""
        return self.on_job_event is not None or self.event_sinks.wants(kind)

    def add_event_sink(
        self, sink: Callable[[JobEvent], object], *, kinds: Iterable[str] | None = None
    ) -> Callable[[], None]:
        """Send every later event (of ``kinds`` only, when given) to ``sink`` too, after
        ``on_job_event`` (a failing sink is logged and never affects a job). An unknown
        kind is a ``ValueError``. Returns a function that removes it."""
        return self.event_sinks.add(sink, kinds)

    def _run_over(self, run: ManagedRun) -> None:
        """A run is over: its outcome written, or its claim lost or handed back. A job
        with a concurrency key no longer holds its slot, and no store event need tell
        this process: wake the processors that may have jobs held back on the key."""
        if run.handle.concurrency_key is not None:
            self._processors.key_freed(run.handle.type)

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

    def add_enqueue_hook(self, hook: EnqueueHook) -> Callable[[], None]:
        """Wrap every job this queue stores from :meth:`enqueue` or
        :meth:`claim_or_enqueue` in ``hook(new_job, proceed)``, which must call
        ``proceed(new_job)`` exactly once, with the job or a copy whose ``trace_context``
        it set (``dataclasses.replace``; any other change is a ``ValueError``). The enqueue
        returns what the store returned (the job's id, or None when a dedupe key already
        covered it), whatever the hook returns. Hooks nest in the order added (the first
        added is outermost); one that raises before proceeding stores nothing. Returns a
        function that removes it."""
        return self.enqueue_hooks.add(hook)

    # -- setup ----------------------------------------------------------------------------
    def startup(self) -> None:
        """Create the store's indexes/schema (idempotent). Called for you before the first
        operation, so a process that never calls it still gets dedupe enforced."""
        with self._lock:
            if self._started:
                return
            self.backend.startup()
            self._started = True
        self.record_subscriptions()

    def _ready(self) -> Backend:
        if not self._started:
            self.startup()
        return self.backend

    def _closing(self) -> bool:
        return self._drain.started

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
        timeout: Seconds | None = None,
        on_event: str | tuple[str, ...] | None = None,
        **unexpected: NoReturn,
    ) -> None:
        """Run ``handler(job, ctx)`` for jobs of ``type`` on ``concurrency`` worker threads.

        Return completes the job; an ``Exception`` retries it; ``FatalJobError`` fails it
        at once. ``poll_interval`` defaults to 5 s, or 60 s while push pickup is active.
        The per-type options of ``@durabl.job`` (``schema``, ``on_dead_letter``, enqueue
        defaults, ``timeout``, ...) may be given here instead; given, they replace the
        declared ones for this queue. ``timeout``: the time limit of each run in seconds
        (a job's own ``enqueue(timeout=)`` wins); see docs/concepts.md, Time limits.
        """
        check_keywords("process()", unexpected, ())  # named as the call is written
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
        processor = self._register(type, handler, given)
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
    ) -> Processor:
        """Declare the handler for ``type`` without starting threads: jobs then run only
        through :meth:`run_pending` (tests, burst workers). :meth:`process` is this plus
        the worker threads, and takes the same options."""
        check_keywords("register()", unexpected, ())  # named as the call is written
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
        return self._register(type, handler, given)

    def _register(self, type: str, handler: Handler, given: DeclaredOptions) -> Processor:
        """:meth:`register` with the options ``given``: its per-type ones, when any is
        given, replace the declared ones for this queue."""
        options = build_type_options(type, given) if given.given_type_options() else None
        processor = self._processors.register(
            type, handler, given, self.pickup.default_poll_interval
        )
        if options is not None:
            self.types.give(type, options)
        declared = self.type_options(type)
        if declared is not None and declared.on_event:
            self.record_subscriptions()  # kept in the store, for every process to send
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

    # -- inline runs ---------------------------------------------------------------------
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
