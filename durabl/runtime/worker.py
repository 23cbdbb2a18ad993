"""A processor for one job type: one poller thread feeding a pool of worker threads.

Idle cost is one claim query per type per (jittered) poll interval, whatever the
concurrency. The poller claims only as many jobs as there are free workers, and polls again
at once while claims keep coming back full; an enqueue of a due job in this process, or a
change-stream notification (push pickup), wakes it immediately.
"""

from __future__ import annotations

import logging
import os
import queue as queue_module
import random
import socket
import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from durabl.model.abort import Handler
from durabl.model.clock import Clock, Seconds, to_seconds
from durabl.model.declared import DeclaredOptions
from durabl.model.exceptions import BackendUnavailableError, QueueShutdownError
from durabl.model.job import JobHandle
from durabl.model.options import check_job_type
from durabl.runtime.completer import Completer
from durabl.runtime.failures import is_interrupt
from durabl.runtime.handler import check_plain_function
from durabl.runtime.heartbeat import HeartbeatThread, LeaseKeeper, heartbeat_outage_log
from durabl.runtime.inline import run_due
from durabl.runtime.outages import OutageLog
from durabl.runtime.pacing import next_poll_wait
from durabl.runtime.reports import emit_claimed
from durabl.runtime.run import ManagedRun, Runtime
from durabl.runtime.timeouts import PoolTimeLimits

logger = logging.getLogger(__name__)

SHORT_RUN_SECONDS = 0.5  # runs shorter than this on average let the poller read ahead
MIN_READ_AHEAD = 32  # claims waiting for a worker, at most (or concurrency, if larger)
READ_AHEAD_SECONDS = 0.05  # ...and at most this much work, at the recent pace of runs
READ_AHEAD_LEASE_SHARE = 0.1  # ...and never more than this share of the lease


def default_lease_owner() -> str:
    """Who holds this process's claims: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def check_registration(
    type: str,
    handler: Handler,
    concurrency: int,
    poll_interval: Seconds | None,
    heartbeat_interval: Seconds | None,
    visibility_timeout: float,
) -> tuple[float | None, float | None]:
    """Refuse a handler or option no processor can run with; the poll interval and the
    heartbeat interval in seconds (None where not given)."""
    check_plain_function(handler, f"handler for {type!r}", "handlers")
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
        raise ValueError(f"concurrency must be an int >= 1, got {concurrency!r}")
    interval = None
    if poll_interval is not None:
        interval = to_seconds(poll_interval, "poll_interval")
        if interval <= 0:
            raise ValueError("poll_interval must be positive")
    beat = None
    if heartbeat_interval is not None:
        beat = to_seconds(heartbeat_interval, "heartbeat_interval")
        if not 0 < beat < visibility_timeout:
            raise ValueError(
                "heartbeat_interval must be positive and shorter than the visibility timeout"
            )
    return interval, beat


@dataclass(eq=False)
class Processors:
    """The processors of one queue, by type: one per type, registered once, none after
    the queue began closing. Finds the processor a due job wakes, or runs in the caller.

    ``ready`` prepares the store (the queue's startup); ``immediate``: a job that becomes
    due runs in the calling thread instead of waking a worker.
    """

    runtime: Runtime
    _: KW_ONLY
    lock: threading.RLock
    closing: Callable[[], bool]
    ready: Callable[[], object]
    lease_owner: str
    immediate: bool = False
    #: The live map by type; read it under ``lock`` where registration must not race.
    by_type: dict[str, Processor] = field(default_factory=dict, init=False)

    def register(
        self,
        type: str,
        handler: Handler,
        given: DeclaredOptions,
        default_poll_interval: Callable[[str], float],
    ) -> Processor:
        """A new processor for ``type`` (no threads started) with the concurrency and
        intervals ``given``; refuses a second one for a type, a bad handler or option, and
        any registration once the queue is closing. ``default_poll_interval(type)`` gives
        the interval of a processor that chose none, and has it follow push pickup."""
        check_job_type(type)
        concurrency = given.concurrency
        interval, beat = check_registration(
            type,
            handler,
            concurrency,
            given.poll_interval,
            given.heartbeat_interval,
            self.runtime.visibility_timeout,
        )
        self.ready()
        with self.lock:
            if self.closing():
                raise QueueShutdownError("process() refused: the queue is shutting down")
            if type in self.by_type:
                raise ValueError(f"a handler for job type {type!r} is already registered")
            if interval is None:
                interval = default_poll_interval(type)
            processor = Processor(
                type,
                handler,
                self.runtime,
                concurrency=concurrency,
                poll_interval=interval,
                heartbeat_interval=beat,
                lease_owner=self.lease_owner,
                takes_keys=given.concurrency_key is not None,
            )
            self.by_type[type] = processor
        return processor

    def all(self) -> list[Processor]:
        return list(self.by_type.values())

    def job_due(self, type: str) -> None:
        """A job of ``type`` became due in this process: wake its processor, or, in
        immediate mode, run one job in the calling thread. Nothing once closing."""
        processor = self.by_type.get(type)
        if processor is None or self.closing():
            return
        if self.immediate:
            processor.process_one()
        else:
            processor.wake()

    def key_freed(self, type: str) -> None:
        """A run of ``type`` that held a concurrency key is over, in this process: a job
        held back on the key may start now. The processors that take jobs with keys (a key
        may span types) poll at once, or as soon as a run of theirs ends: ``type``'s, those
        whose type declares a key, and those that ran a job with one. A processor of jobs
        without keys is left alone."""
        ran = self.by_type.get(type)
        if ran is not None:
            ran.takes_keys = True
        if self.closing():
            return
        for processor in self.all():
            if not processor.takes_keys:
                continue
            if processor.free_slots() > 0:
                processor.poll_soon()
            else:
                processor.note_due()

    def job_moved(self, job_id: str, moved: bool) -> bool:
        """After an operation that may have made job ``job_id`` due (``moved``): wake the
        processor of its type. Returns ``moved``."""
        job = self.runtime.backend.get_job(job_id) if moved else None
        if job is not None:
            self.job_due(job.type)
        return moved

    def jobs_moved(self, type: str | None, moved: int) -> int:
        """After a bulk operation made ``moved`` jobs of ``type`` due (None: of any type):
        wake the processors concerned. Returns ``moved``."""
        if moved:
            for due in [type] if type else list(self.by_type):
                self.job_due(due)
        return moved

    def run_pending(self, type: str | None, *, limit: int | None) -> int:
        """Run due jobs of ``type`` (None: every registered type) in the calling thread,
        as :func:`run_due` does; refuses a type with no handler."""
        self.ready()
        if type is not None and type not in self.by_type:
            raise ValueError(
                f"no handler registered for {type!r}; registered: {sorted(self.by_type)}"
            )
        processors = [self.by_type[type]] if type else self.all()
        return run_due(processors, limit=limit, closing=self.closing)


@dataclass(eq=False)
class Processor:
    """Runs ``handler`` for jobs of ``type`` with ``concurrency`` worker threads."""

    type: str
    handler: Handler
    runtime: Runtime
    _: KW_ONLY
    concurrency: int = 1
    poll_interval: float = 5.0
    heartbeat_interval: float | None = None
    lease_owner: str = ""
    #: Whether jobs of this type may have a concurrency key (declared, or one ran here):
    #: then a run of that key ending in this process wakes this processor.
    takes_keys: bool = False
    rand: Callable[[], float] = random.random
    polls: int = field(default=0, init=False)
    #: Worker threads left behind, each stuck in a handler past its time limit.
    abandoned_threads: list[threading.Thread | None] = field(default_factory=list, init=False)

    def __post_init__(self) -> None:
        self._handoff: queue_module.SimpleQueue[ManagedRun | None] = queue_module.SimpleQueue()
        self._lock = threading.Lock()
        self._outstanding = 0  # claimed and not finished: running or waiting for a worker
        self._run_seconds: float | None = None  # moving average of recent run durations
        self._maybe_more = False
        self._errors = 0  # failed claims in a row
        self._unavailable = False  # the last one failed with the store unavailable
        self._enqueued = 0  # local enqueues since the last poll: how many to claim on wake
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._poller: threading.Thread | None = None
        self._workers: list[threading.Thread] = []
        self._hosts: list[HeartbeatThread] = []
        self._named = 0  # worker threads started: the next one's number
        # One line when claims start failing and one when they work again, not one a poll.
        self.claim_failures = OutageLog(
            logger,
            f"claiming {self.type} jobs",
            ("claim", "claims"),
            clock=self.runtime.clock,
            extra={"type": self.type},
        )
        # The heartbeats of this processor's worker threads share one log.
        self.heartbeat_failures = heartbeat_outage_log(self.type, self.runtime.clock)
        # Every outcome is written by one thread (completions in batches), while workers
        # run on; the leases of the outcomes waiting there are renewed on another.
        self.completer: Completer[ManagedRun] = Completer(
            self.runtime.backend,
            f"durabl-completer-{self.type}",
            on_written=self._after_write,
            clock=self.runtime.clock,
            leases=LeaseKeeper(f"durabl-leases-{self.type}", failures=self.heartbeat_failures),
        )
        #: Abandons runs past their time limit and grace, replacing their threads.
        self.time_limits = PoolTimeLimits(self.type, self.handler, self.runtime, self.completer)
        self.time_limits.on_abandoned = self._replace_worker

    # -- one step, for tests and for the poller ------------------------------------------
    def free_slots(self) -> int:
        """How many more jobs the poller may claim now: a free worker each, plus a small
        read-ahead while runs are short (so a backlog is claimed in batches)."""
        with self._lock:
            return self._capacity() - self._outstanding

    def _capacity(self) -> int:
        avg = self._run_seconds
        if avg is None or avg >= SHORT_RUN_SECONDS:
            return self.concurrency
        ahead = max(self.concurrency, MIN_READ_AHEAD)
        # A claim read ahead waits, unrenewed, for the runs before it: ``ahead`` runs shared
        # by the workers take about ahead * avg / concurrency seconds. Keep that short, so
        # the wait stays a small part of the lease, a higher-priority job arriving now is
        # not stuck behind a long line, and other processes get their share of a backlog.
        horizon = min(READ_AHEAD_SECONDS, self.runtime.visibility_timeout * READ_AHEAD_LEASE_SHARE)
        if ahead * avg > horizon * self.concurrency:
            ahead = int(horizon * self.concurrency / avg)
        return self.concurrency + ahead

    def _should_refill(self) -> bool:
        """Claim again at once: a free worker, and any read-ahead drained to at most one
        job per worker (so a backlog is claimed in batches, not one job per finished
        run)."""
        with self._lock:
            return (
                self._maybe_more
                and self._outstanding < self._capacity()
                and (self._outstanding <= self.concurrency)
            )

    def poll_once(self, limit: int | None = None) -> int:
        """Claim as many due jobs as there are free workers (at most ``limit``) and hand
        them over."""
        with self._lock:
            free = self._capacity() - self._outstanding
            idle = max(self.concurrency - self._outstanding, 0)  # workers with nothing to do
        if limit is not None:
            free = min(limit, free)
        if free <= 0 or self._stopping.is_set():
            return 0
        self.polls += 1
        claimed_at = self.runtime.clock.monotonic()
        backend = self.runtime.backend
        # Jobs for idle workers start at once; the rest are read ahead, *reserved*: their
        # start is recorded when a worker takes them, and the reaper gives back the attempt
        # of a reserved job whose worker died before it began (see durabl.model.rules).
        starting = min(idle, free)
        handles = backend.claim(
            self.type, limit=free, lease_owner=self.lease_owner, starting=starting
        )
        claimed = len(handles)
        with self._lock:
            self._outstanding += claimed
            self._maybe_more = claimed == free
        for n, handle in enumerate(handles):
            ahead = n >= starting
            emit_claimed(self.runtime, handle)
            # The run tracks itself from here on, so shutdown sees (and fences) it unstarted.
            self._handoff.put(self._new_run(handle, claimed_at, reserved=ahead))
        return claimed

    def process_one(self) -> bool:
        """Claim and run one job in the calling thread; False when none was due."""
        claimed_at = self.runtime.clock.monotonic()
        handles = self.runtime.backend.claim(self.type, limit=1, lease_owner=self.lease_owner)
        if not handles:
            return False
        emit_claimed(self.runtime, handles[0])
        outcome = self._new_run(handles[0], claimed_at).execute()
        if is_interrupt(outcome.error):
            # The calling thread's own run: SystemExit / KeyboardInterrupt go on up once
            # the attempt is recorded (a worker thread logs them and serves the next job).
            raise outcome.error  # type: ignore[misc]
        return True

    def _new_run(
        self, handle: JobHandle[object], claimed_at: float, *, reserved: bool = False
    ) -> ManagedRun:
        return ManagedRun(
            handle,
            self.handler,
            self.runtime,
            heartbeat_interval=self.heartbeat_interval,
            claimed_at=claimed_at,
            reserved=reserved,
        )

    # -- threads --------------------------------------------------------------------------
    def start(self) -> None:
        for _ in range(self.concurrency):
            self._start_worker()
        self._poller = threading.Thread(
            target=self._poll_loop, name=f"durabl-poller-{self.type}", daemon=True
        )
        self._poller.start()

    def _start_worker(self) -> None:
        n, self._named = self._named, self._named + 1
        host = HeartbeatThread(
            f"durabl-heartbeat-{self.type}-{n}",
            self.heartbeat_interval or self.runtime.visibility_timeout / 3,
            failures=self.heartbeat_failures,
        )
        self._hosts.append(host)
        thread = threading.Thread(
            target=self._work, args=(host,), name=f"durabl-worker-{self.type}-{n}", daemon=True
        )
        thread.start()
        self._workers.append(thread)

    def _replace_worker(self, stuck: threading.Thread | None) -> None:
        """A run of ``stuck`` was abandoned past its time limit: its slot is free (the
        stuck thread leaves the pool once its handler returns, without accounting for
        it), and a new worker thread takes its place, so the type keeps its concurrency."""
        with self._lock:
            self._outstanding -= 1
            if stuck in self._workers:
                self._workers.remove(stuck)
            self.abandoned_threads.append(stuck)
        if not self._stopping.is_set():
            self._start_worker()
        self._wake.set()

    def wake(self, count: int = 1) -> None:
        """Poll now: ``count`` jobs of this type became due (an enqueue in this process, or
        a change-stream notification), so claim that many."""
        with self._lock:
            self._enqueued += count
        self._wake.set()

    def poll_soon(self) -> None:
        """Poll now for every free slot (push pickup stopped, or it asked for a resync)."""
        self._wake.set()

    def note_due(self) -> None:
        """A job became due while no slot was free: poll again as soon as a run finishes
        instead of waiting out the poll interval."""
        with self._lock:
            self._maybe_more = True

    def _next_wait(self) -> float:
        return next_poll_wait(self.poll_interval, self._errors, self._unavailable, self.rand())

    def _poll_loop(self) -> None:
        limit: int | None = None
        while not self._stopping.is_set():
            try:
                got = self.poll_once(limit)
                self._errors = 0
                self.claim_failures.succeeded()
            except Exception as exc:
                self._errors += 1
                self._unavailable = isinstance(exc, BackendUnavailableError)
                got = 0
                self.claim_failures.failed(exc)
            if got and self._should_refill():
                limit = None
                continue
            woken = self._wake.wait(self._next_wait())
            self._wake.clear()
            with self._lock:
                # Woken only by local enqueues: claim that many, not every free slot, so a
                # job arriving at idle workers costs one claim and no empty query after it.
                enqueued, self._enqueued = self._enqueued, 0
                limit = enqueued if woken and enqueued and not self._maybe_more else None

    def _work(self, heartbeats: HeartbeatThread) -> None:
        while True:
            run = self._handoff.get()
            if run is None:
                return
            started = self.runtime.clock.monotonic()
            try:
                run.execute(heartbeats, self.completer, self.time_limits.for_run(run))
            except BaseException:
                logger.exception("worker for %s stopped by an exception", self.type)
            if run.abandoned:  # another thread took this one's place: leave the pool
                heartbeats.close(0)
                return
            took = self.runtime.clock.monotonic() - started
            with self._lock:
                self._outstanding -= 1
                avg = self._run_seconds
                self._run_seconds = took if avg is None else avg + (took - avg) / 8
                # Refill once the read-ahead has drained, so claims come in batches.
                more = self._maybe_more and self._outstanding <= self.concurrency
            if more or (run.done.is_set() and self._frees_a_follower(run)):
                self._wake.set()

    @staticmethod
    def _frees_a_follower(run: ManagedRun) -> bool:
        """A finished run of a "pending"-scope key frees the key's active slot: its pending
        follower (no store event announces it) may be claimable now."""
        handle = run.handle
        return handle.dedupe_key is not None and handle.dedupe_scope == "pending"

    def _after_write(self, run: ManagedRun) -> None:
        if self._frees_a_follower(run):
            self._wake.set()

    def stop_polling(self, timeout: float | None = 5.0) -> None:
        """No new claims from here on; joins the poller unless ``timeout`` is None."""
        self._stopping.set()
        self._wake.set()
        if timeout is not None:
            self.join_poller(timeout)

    def join_poller(self, timeout: float) -> None:
        if self._poller is not None:
            self._poller.join(timeout)

    def stop_workers(self, timeout: float | None = 1.0) -> list[str]:
        """Ask idle workers to exit; with a ``timeout``, join them too and return the names
        still running (stuck in a handler whose claim was released: abandoned daemons)."""
        for _ in self._workers:
            self._handoff.put(None)
        return [] if timeout is None else self.join_workers(timeout)

    def join_workers(self, timeout: float, *, clock: Clock | None = None) -> list[str]:
        """Join the worker threads and their heartbeat threads, all within ``timeout``
        in total (not each). The names of the threads still running."""
        clock = clock or self.runtime.clock
        until = clock.monotonic() + timeout
        for thread in self._workers:
            thread.join(max(until - clock.monotonic(), 0.0))
        for host in self._hosts:  # idle by now: every run's heartbeat has stopped
            host.close(max(until - clock.monotonic(), 0.0))
        self.time_limits.close(max(until - clock.monotonic(), 0.0))
        return [t.name for t in self._workers if t.is_alive()]

    def close_completer(self, timeout: float) -> int:
        """Write the outcomes still waiting, then stop the completion thread. Returns
        how many were left unwritten after ``timeout`` (their jobs stay active until the
        reaper hands them back, and then run again)."""
        if self.completer.close(timeout):
            return 0
        return self.completer.waiting()
