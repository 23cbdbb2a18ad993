"""``durabl worker MODULE ...``: the worker process for any app (Flask, plain WSGI, scripts).

It imports the modules named (which declare job types with ``@durabl.job`` and schedules
with ``durabl.schedule``), processes every declared type (or the ``--type`` ones) with the
reaper and the scheduler, and on SIGTERM/SIGINT drains: running jobs get
``--shutdown-timeout`` seconds, then what is left is handed back to the queue. A second
signal exits at once (code 1); the leases of abandoned jobs expire for the reaper.

The main thread only waits: a signal starts the drain on a helper thread (at once, even
while the processors are still starting), and the main thread prints what the drain still
waits for every few seconds. The drain ends within the timeout plus
:data:`~durabl.runtime.shutdown.DRAIN_GRACE`; closing the store and the interpreter's exit
get :data:`~durabl.cli.exits.EXIT_GRACE` more, after which the process ends itself (exit
1, :class:`~durabl.cli.exits.ExitDeadline`, which ``manage.py runworkers`` shares): nothing
that does not answer (a store that is down, an exit hook, a thread that is not a daemon)
keeps it past the bound the operator was promised.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from types import FrameType
from typing import Any, TextIO

from durabl.cli.args import positive_int_arg, positive_seconds_arg
from durabl.cli.common import (
    URL_ENV,
    CommandError,
    Sub,
    UsageError,
    add_url_option,
    command_parser,
    one_line,
    open_store,
    redact,
    store_errors,
    store_url,
)
from durabl.cli.exits import ABORT_EXIT_CODE as ABORT_EXIT_CODE  # noqa: PLC0414
from durabl.cli.exits import EXIT_GRACE as EXIT_GRACE  # noqa: PLC0414
from durabl.cli.exits import ExitDeadline
from durabl.model.exceptions import QueueShutdownError
from durabl.model.options import DEFAULT_SHUTDOWN_TIMEOUT
from durabl.runtime.queue import JobQueue

SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: Seconds between the lines a long drain prints about the jobs it still waits for (at most;
#: see :func:`drain_report_interval`).
DRAIN_REPORT_EVERY = 5


def configure_worker(sub: Sub) -> None:
    p = command_parser(
        sub,
        "worker",
        "run the job types declared in your modules until SIGTERM/SIGINT",
        "Import the modules given (they declare job types with @durabl.job and "
        "schedules with durabl.schedule), then process every declared type (or the --type "
        "ones) with the reaper and the scheduler until SIGTERM or SIGINT. Then drain: "
        "running jobs get --shutdown-timeout seconds to finish, the rest are handed back "
        "to the queue (no attempt used). A second signal stops at once (exit 1). The "
        "current directory is on the import path, as for gunicorn.",
        "durabl worker myapp.jobs --url sqlite:///jobs.db",
        "DURABL_URL=postgresql://app@db/app durabl worker myapp.jobs myapp.reports",
        "durabl worker myapp.jobs --type welcome-email --concurrency 8 --metrics-port 9100",
    )
    p.add_argument("modules", nargs="+", metavar="MODULE", help="a module to import, e.g. app.jobs")
    add_url_option(p)
    p.add_argument(
        "--type",
        action="append",
        dest="types",
        metavar="T",
        help="process only this declared type (repeat for several; default: every one)",
    )
    p.add_argument(
        "--concurrency",
        type=positive_int_arg,
        metavar="N",
        help="worker threads per type, overriding each declaration's concurrency",
    )
    p.add_argument(
        "--shutdown-timeout",
        type=positive_seconds_arg,
        default=DEFAULT_SHUTDOWN_TIMEOUT,
        metavar="S",
        help="seconds running jobs get to finish after a signal (default: %(default)g)",
    )
    p.add_argument("--no-reaper", action="store_true", help="do not run the reaper here")
    p.add_argument("--no-scheduler", action="store_true", help="do not run the scheduler here")
    p.add_argument(
        "--metrics-port",
        type=positive_int_arg,
        metavar="P",
        help="serve Prometheus metrics on http://0.0.0.0:P/metrics (needs prometheus_client)",
    )
    p.set_defaults(run=run_worker)


def import_modules(modules: list[str]) -> None:
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # a broken user module: one line, the module named
            raise CommandError(
                f"cannot import {name}: {type(exc).__name__}: {one_line(exc)}"
            ) from exc


def declared() -> tuple[Callable[[], list[str]], Any]:
    """``durabl.declared_types`` and the registry behind it."""
    try:
        from durabl.runtime import declared as declarations
    except ImportError:  # pragma: no cover - the registry ships with durabl
        raise CommandError("this durabl has no @durabl.job declarations to run") from None
    return declarations.declared_types, declarations.registry


def select_types(known: list[str], wanted: list[str] | None, modules: list[str]) -> list[str]:
    if not known:
        raise CommandError(
            f"no job types declared in {', '.join(modules)}: decorate handlers with "
            "@durabl.job('type-name')"
        )
    if not wanted:
        return known
    unknown = [t for t in dict.fromkeys(wanted) if t not in known]
    if unknown:
        raise UsageError(f"--type {', '.join(unknown)}: not declared; declared: {', '.join(known)}")
    return list(dict.fromkeys(wanted))


def planned_concurrency(types: list[str], concurrency: int | None) -> dict[str, int]:
    """Each type's worker threads: ``--concurrency`` or the declared concurrency."""
    _, registry = declared()
    return {name: concurrency or registry.get(name).concurrency for name in types}


def start_processing(queue: JobQueue, types: list[str], concurrency: int | None) -> None:
    """Start each type's processor."""
    _, registry = declared()
    if concurrency is None:
        queue.process_declared(types)
    for name in types:
        declaration = registry.get(name)
        if concurrency is not None:
            queue.process(
                name,
                declaration.handler,
                concurrency=concurrency,
                poll_interval=declaration.poll_interval,
                heartbeat_interval=declaration.heartbeat_interval,
            )


def run_worker(args: argparse.Namespace) -> int:
    url = store_url(args)
    import_modules(args.modules)
    declared_types, _ = declared()
    types = select_types(declared_types(), args.types, args.modules)
    out: TextIO = sys.stdout
    with store_errors(url):
        queue = JobQueue(open_store(url))
        metrics = None
        if args.metrics_port:
            from durabl import metrics as metrics_module

            metrics = metrics_module.install(queue)
            metrics_module.serve(args.metrics_port)
        try:
            queue.startup()
            # Announced before any job can run, so its log lines come after this one.
            concurrency = planned_concurrency(types, args.concurrency)
            port = args.metrics_port if metrics else None
            worker = Worker(queue, args.shutdown_timeout, out=out, err=sys.stderr)
            worker.install()
            print(startup_line(url, concurrency, args, metrics_port=port), file=out, flush=True)
            try:
                start_processing(queue, types, args.concurrency)
                if not args.no_reaper:
                    queue.start_reaper()
                if not args.no_scheduler:
                    queue.start_scheduler()
            except QueueShutdownError:
                if queue.draining is None:
                    raise
                # A signal came while the processors were starting: its drain takes over.
        except BaseException:
            queue.shutdown(timeout=0)
            queue.backend.close()
            raise
    try:
        return worker.wait()
    finally:
        queue.backend.close()


def startup_line(
    url: str, started: dict[str, int], args: argparse.Namespace, *, metrics_port: int | None
) -> str:
    types = ", ".join(f"{t} (x{n})" for t, n in started.items())
    parts = [
        f"durabl worker: store {redact(url)}",
        f"processing {types}",
        f"reaper {'off' if args.no_reaper else 'on'}",
        f"scheduler {'off' if args.no_scheduler else 'on'}",
    ]
    if metrics_port is not None:
        parts.append(f"metrics on :{metrics_port}/metrics")
    return "; ".join(parts) + "; Ctrl-C or SIGTERM to stop"


@dataclass(eq=False)
class Worker:
    """Wait for a signal, drain within the timeout, and report what a long drain waits for."""

    queue: JobQueue
    shutdown_timeout: float
    _: KW_ONLY
    out: TextIO
    err: TextIO
    hard_exit: Callable[[int], object] = os._exit
    signalled: threading.Event = field(default_factory=threading.Event, init=False)
    drained: threading.Event = field(default_factory=threading.Event, init=False)
    released: int = field(default=0, init=False)
    previous: dict[int, Any] = field(default_factory=dict, init=False)
    #: When the drain started (monotonic), once it has.
    drain_started: float | None = field(default=None, init=False)
    _drain_lock: threading.Lock = field(default_factory=threading.Lock, init=False)
    _remove_sink: Callable[[], None] | None = field(default=None, init=False)

    def on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.signalled.is_set():
            print(
                f"durabl worker: second signal ({signal.Signals(signum).name}): stopping now; "
                "jobs still running are abandoned and return to pending when their lease "
                "expires",
                file=self.err,
                flush=True,
            )
            self.out.flush()
            self.hard_exit(ABORT_EXIT_CODE)
            return
        print(
            f"durabl worker: {signal.Signals(signum).name} received: draining (up to "
            f"{self.shutdown_timeout:g} s; signal again to stop at once)",
            file=self.err,
            flush=True,
        )
        # Only an event: the threads :meth:`install` started take it from here. (A handler
        # that started threads or took locks could deadlock on the main thread it
        # interrupted, which may be starting threads itself.)
        self.signalled.set()

    def count_release(self, event: Any) -> None:
        if event.kind == "shutdown-released":
            self.released += 1

    def drain(self) -> None:
        try:
            self.queue.shutdown(timeout=self.shutdown_timeout)
        finally:
            self.drained.set()

    def start_drain(self) -> None:
        """Start the drain on a helper thread, once."""
        with self._drain_lock:
            if self.drain_started is not None:
                return
            self.drain_started = time.monotonic()
            if self._remove_sink is None:
                self._remove_sink = self.queue.add_event_sink(
                    self.count_release, kinds=("shutdown-released",)
                )
        threading.Thread(target=self.drain, name="durabl-drain", daemon=True).start()

    def _drain_on_signal(self) -> None:
        """Start the drain as soon as a signal comes, even while the main thread is still
        starting the processors (held up, maybe, by a store that does not answer)."""
        self.signalled.wait()
        self.start_drain()

    def install(self) -> None:
        """Take over SIGTERM/SIGINT (restored by :meth:`wait`), with the threads that act
        on the first signal: one starts the drain, one ends the process if its exit
        overruns the bound (the timeout plus ``DRAIN_GRACE`` plus ``EXIT_GRACE``)."""
        self._remove_sink = self.queue.add_event_sink(
            self.count_release, kinds=("shutdown-released",)
        )
        threading.Thread(
            target=self._drain_on_signal, name="durabl-drain-on-signal", daemon=True
        ).start()
        ExitDeadline(
            self.shutdown_timeout,
            name="durabl worker",
            stderr=self.err,
            stdout=self.out,
            hard_exit=self.hard_exit,
            armed=self.signalled,
        ).start()
        self.previous = {sig: signal.signal(sig, self.on_signal) for sig in SIGNALS}

    def wait(self) -> int:
        """Block until a signal, wait for its drain, restore the signals; the exit code."""
        try:
            while not self.signalled.wait(1.0):
                pass
            self.start_drain()  # a signal's has begun; here when signalled otherwise
            assert self.drain_started is not None
            self.report_until_drained(self.drain_started)
        finally:
            if self._remove_sink is not None:
                self._remove_sink()
            for sig, handler in self.previous.items():
                signal.signal(sig, handler)
        if self.released:
            print(
                f"durabl worker: drain timed out; {self.released} job(s) still running were "
                "handed back to the queue; exiting",
                file=self.out,
                flush=True,
            )
        else:
            print("durabl worker: drained; exiting", file=self.out, flush=True)
        return 0

    def report_until_drained(self, started: float) -> None:
        """Say what the drain waits for at each whole multiple of the report interval
        before the timeout; past it the drain hands the jobs back, and its last line says
        how many."""
        every = drain_report_interval(self.shutdown_timeout)
        # The first line not yet due: the drain may have begun while the processors were
        # still starting.
        due = max(every, every * math.ceil((time.monotonic() - started) / every))
        while due < self.shutdown_timeout:
            if self.drained.wait(max(0.0, started + due - time.monotonic())):
                return
            self.report_waiting(due)
            due += every
        while not self.drained.wait(1.0):  # in steps, so a second signal is handled at once
            pass

    def report_waiting(self, elapsed: int) -> None:
        runs = self.queue.active_runs()
        if not runs:
            return
        shown = ", ".join(f"{run.handle.type} {run.job_id}" for run in runs[:5])
        more = f" and {len(runs) - 5} more" if len(runs) > 5 else ""
        print(
            f"durabl worker: draining for {elapsed} s of {self.shutdown_timeout:g} s; "
            f"waiting for {len(runs)} job(s): {shown}{more}",
            file=self.err,
            flush=True,
        )


def drain_report_interval(timeout: float) -> int:
    """Whole seconds between drain progress lines: DRAIN_REPORT_EVERY, or a third of a
    shorter timeout so a short drain reports too, but at least 1, so that no two lines
    show the same second."""
    return max(1, min(DRAIN_REPORT_EVERY, math.floor(timeout / 3)))


__all__ = ["URL_ENV", "configure_worker", "run_worker"]
