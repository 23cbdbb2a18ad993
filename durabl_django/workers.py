"""What ``manage.py runworkers`` runs: the declared job types, and how it stops.

Stopping: the first SIGTERM/SIGINT starts durabl's drain (``queue.install_signal_handlers``);
the main thread waits on an event set when ``queue.draining`` resolves, then returns. A
second signal during the drain ends the process at once with exit code 1: running jobs are
abandoned, and their leases expire for the reaper to hand them back. Should the process
still be alive the shutdown timeout plus 2.5 s after the first signal (an exit hook, a
thread that is not a daemon, a store that does not answer), the command's
``durabl.ExitDeadline`` ends it then, with exit code 1 and a line on stderr, as it does
``durabl worker``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import FrameType
from typing import Any, Protocol

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import close_old_connections
from django.utils.module_loading import import_string

import durabl
from durabl import Job, JobEvent, JobQueue, QueueShutdownError
from durabl_django.registry import JobSpec, registry

SIGNALS = (signal.SIGTERM, signal.SIGINT)
ABORT_EXIT_CODE = 1  # a second signal, or the exit deadline: stopped without a clean exit


def fresh_connections(job: Job[Any], proceed: Callable[[], object]) -> object:
    """A run hook (``queue.add_run_hook``) that brackets every run with Django's
    ``close_old_connections``, as a request is: a worker thread then drops a broken or
    expired database connection before each job instead of failing every later job on it.
    Worker processes only: inside a request's transaction it would close the connection."""
    close_old_connections()
    try:
        return proceed()
    finally:
        close_old_connections()


class Output(Protocol):
    """A text stream: ``sys.stdout`` or a management command's ``OutputWrapper``."""

    def write(self, text: str, /) -> object: ...

    def flush(self) -> object: ...


def task_specs() -> list[JobSpec]:
    """Job types of every ``TASKS`` backend that is a ``DurablBackend``."""
    configured = getattr(settings, "TASKS", None)
    if not isinstance(configured, dict):
        return []
    specs: list[JobSpec] = []
    for alias, params in configured.items():
        path = params.get("BACKEND") if isinstance(params, dict) else None
        try:
            backend_class = import_string(str(path))
        except ImportError:
            continue  # the task framework reports its own broken backends
        if _is_durabl_backend(backend_class):
            from durabl_django.tasks import task_job_specs

            specs += task_job_specs(alias, params)
    return specs


def _is_durabl_backend(candidate: object) -> bool:
    try:
        from durabl_django.tasks import DurablBackend
    except ImportError:
        return False
    return isinstance(candidate, type) and issubclass(candidate, DurablBackend)


def declared_jobs() -> dict[str, JobSpec]:
    """Every job type this project declares: ``@job`` handlers (``durabl_django.job`` and
    plain ``@durabl.job``: one registry) and django.tasks queues."""
    specs = registry.specs()
    for name in durabl.declared_types():
        declaration = durabl.get_declaration(name)
        if name not in specs and declaration is not None:
            specs[name] = JobSpec(
                name,
                declaration.handler,
                declaration.concurrency,
                declaration.poll_interval,
                declaration.heartbeat_interval,
                declaration.options,
            )
    for spec in task_specs():
        known = specs.get(spec.type)
        if known is None:
            specs[spec.type] = spec
        elif known.handler is spec.handler:  # two TASKS aliases share a queue name
            specs[spec.type] = replace(known, concurrency=max(known.concurrency, spec.concurrency))
        else:
            raise ImproperlyConfigured(
                f"job type {spec.type!r} is declared by {known.origin} and is also a "
                "django.tasks queue; rename one of them"
            )
    return dict(sorted(specs.items()))


def select(specs: dict[str, JobSpec], types: Iterable[str] | None) -> list[JobSpec]:
    """The specs named by ``types`` (all when None); ``KeyError`` lists what is unknown."""
    if not types:
        return list(specs.values())
    wanted = list(dict.fromkeys(types))
    unknown = [t for t in wanted if t not in specs]
    if unknown:
        raise KeyError(", ".join(unknown))
    return [specs[t] for t in wanted]


def startup_line(specs: list[JobSpec], *, reaper: bool, scheduler: bool | None = None) -> str:
    types = ", ".join(f"{spec.type} (x{spec.concurrency})" for spec in specs)
    schedules = "" if scheduler is None else f"; scheduler {'on' if scheduler else 'off'}"
    return (
        f"durabl: processing {types}; reaper {'on' if reaper else 'off'}{schedules}; "
        "Ctrl-C or SIGTERM to stop"
    )


class Runner:
    """Start processing ``specs`` on ``queue``, then block until a signal's drain ends."""

    def __init__(
        self,
        queue: JobQueue,
        specs: list[JobSpec],
        *,
        reaper: bool = True,
        scheduler: bool | None = None,
        shutdown_timeout: float = 30.0,
        stdout: Output | None = None,
        stderr: Output | None = None,
        hard_exit: Callable[[int], object] = os._exit,
        exit_deadline: durabl.ExitDeadline | None = None,
    ) -> None:
        self.queue = queue
        self.specs = specs
        self.reaper = reaper
        #: Run the scheduler (docs/schedules.md); None: off, and not in the startup line.
        self.scheduler = scheduler
        self.shutdown_timeout = shutdown_timeout
        self.stdout: Output = stdout or sys.stdout
        self.stderr: Output = stderr or sys.stderr
        self.hard_exit = hard_exit
        #: Ends the process if it has not exited in time after the first signal: started
        #: by :meth:`start`, armed by the first signal (the command's; a runner in a
        #: process that goes on after it, a test's, has none).
        self.exit_deadline = exit_deadline
        self.drained = threading.Event()
        self.released = 0  # runs the drain handed back after its timeout
        self._durabl_handlers: dict[int, Any] = {}
        self._signalled = False

    def start(self) -> None:
        """Connect, start the workers and the reaper, and take over the signals."""
        self.queue.add_event_sink(self._count_release, kinds=("shutdown-released",))
        self.queue.startup()
        if self.exit_deadline is not None:  # its thread starts here, not in a handler
            self.exit_deadline.start()
        self._uninstall = self.queue.install_signal_handlers(timeout=self.shutdown_timeout)
        for sig in SIGNALS:  # ours runs first and passes the first signal on to durabl's
            self._durabl_handlers[sig] = signal.signal(sig, self._on_signal)
        # Announced before any job can run, so its log lines come after this one.
        line = startup_line(self.specs, reaper=self.reaper, scheduler=self.scheduler)
        self.stdout.write(line + "\n")
        self.stdout.flush()
        self.queue.add_run_hook(fresh_connections)
        if self.queue.draining is None:  # no signal yet
            try:
                self._start_processing()
            except QueueShutdownError:
                if self.queue.draining is None:
                    raise
                # A signal came while the processors were starting: its drain takes over.
        else:  # a signal reached durabl's handler before ours
            self._signalled = True
            self._arm_exit_deadline()
            self._watch_drain()

    def _start_processing(self) -> None:
        for spec in self.specs:
            spec.start_on(self.queue.process)
        if self.reaper:
            self.queue.start_reaper()
        if self.scheduler:
            self.queue.start_scheduler()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self._signalled:
            self.stderr.write(
                f"durabl: second signal ({signal.Signals(signum).name}) during the drain: "
                "stopping now; jobs still running are abandoned and the reaper will return "
                "them to pending once their lease expires\n"
            )
            self.stderr.flush()
            self.stdout.flush()
            self.hard_exit(ABORT_EXIT_CODE)
            return
        self._signalled = True
        self._arm_exit_deadline()
        self.stderr.write(
            f"durabl: {signal.Signals(signum).name} received, draining (up to "
            f"{self.shutdown_timeout:g} s; signal again to stop at once)\n"
        )
        self.stderr.flush()
        durabl_handler = self._durabl_handlers[signum]  # starts the drain in a thread
        durabl_handler(signum, frame)
        self._watch_drain()

    def _arm_exit_deadline(self) -> None:
        if self.exit_deadline is not None:
            self.exit_deadline.arm()

    def _watch_drain(self) -> None:
        future = self.queue.draining
        if future is None:  # the drain did not start: nothing to wait for
            self.drained.set()
        else:
            future.add_done_callback(lambda _: self.drained.set())

    def wait(self) -> None:
        """Block until the drain started by a signal is done, then restore the signals.
        The exit deadline, armed by the signal, goes on: the process must end within it."""
        try:
            # In slices: a signal the kernel hands to another thread sets Python's flag but
            # does not wake a main thread blocked on a lock with no timeout, so the handler
            # would not run until something else woke it (a lost SIGTERM, seen under load).
            while not self.drained.wait(0.25):
                pass
        finally:
            for sig, handler in self._durabl_handlers.items():
                if signal.getsignal(sig) is self._on_signal:
                    signal.signal(sig, handler)
            self._uninstall()
        released = self.released
        if released:
            self.stdout.write(
                f"durabl: drain timed out; {released} job(s) still running were handed back "
                "to the queue; exiting\n"
            )
        else:
            self.stdout.write("durabl: drained; exiting\n")
        self.stdout.flush()

    def _count_release(self, event: JobEvent) -> None:
        if event.kind == "shutdown-released":
            self.released += 1
