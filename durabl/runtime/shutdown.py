"""Graceful shutdown: the drain, and signal handlers that only start it."""

from __future__ import annotations

import logging
import signal as signal_module
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from types import FrameType
from typing import Any

from durabl.model.abort import SHUTDOWN
from durabl.model.clock import Clock
from durabl.model.exceptions import QueueShutdownError
from durabl.model.job import JobResult
from durabl.model.options import RELEASE_WRITE_TIMEOUT
from durabl.runtime.registry import RunRegistry
from durabl.runtime.run import ManagedRun
from durabl.runtime.worker import Processor

logger = logging.getLogger(__name__)

THREAD_JOIN_TIMEOUT = 5.0
DRAIN_GRACE = 1.0
"""Seconds a drain may take past its timeout: ``shutdown(timeout=T)`` returns within
``T + DRAIN_GRACE`` (plus scheduling noise), however many threads and runs it stops."""
MIN_RELEASE_TIMEOUT = 0.05
"""Below this much time left, a release is not attempted: the run is only fenced."""


@dataclass(eq=False, kw_only=True)
class Drain:
    """The one shutdown of a queue. ``begin()`` fences new work and creates the future;
    ``run()`` does the waiting, aborting and releasing.

    Built from the parts of the queue it stops: its clock, its live ``runs``, its
    ``processors``, and the functions that stop its reaper and its push pickup (each
    given how long it may take).
    """

    clock: Clock
    runs: RunRegistry[ManagedRun]
    processors: Callable[[], list[Processor]]
    stop_reaper: Callable[[float], None]
    stop_pickup: Callable[[float], None]
    #: Removes the queue's entry from the workers registry, given how long to wait for it
    #: (None: start the removal and return). Started once the runs are over or being
    #: handed back, waited for last.
    stop_presence: Callable[[float | None], None] = field(default=lambda timeout: None)
    future: Future[None] | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _owner: bool = field(default=False, init=False)

    @property
    def started(self) -> bool:
        return self.future is not None

    def check_open(self, what: str) -> None:
        """Refuse new work (``what``) once the drain has begun."""
        if self.future is not None:
            raise QueueShutdownError(f"{what} refused: the queue is shutting down")

    def begin(self) -> bool:
        """Fence new claims; True for the caller that must carry out the drain."""
        with self._lock:
            if self.future is not None:
                return False
            self.future = Future()
            self.future.set_running_or_notify_cancel()
            return True

    def run(self, timeout: float) -> None:
        """Drain, or wait for the drain under way to end."""
        if not self.begin():
            assert self.future is not None
            self.future.result()
            return
        self.finish(timeout)

    def finish(self, timeout: float) -> None:
        """Carry out the drain that :meth:`begin` started, and resolve its future."""
        assert self.future is not None
        try:
            self._drain(timeout)
        except BaseException as exc:
            self.future.set_exception(exc)
            raise
        else:
            self.future.set_result(None)

    def _drain(self, timeout: float) -> None:
        """Everything the drain does fits in ``timeout`` plus :data:`DRAIN_GRACE`: runs may
        finish until ``timeout``; releasing the rest, joining threads and writing the last
        completions share the one grace period after it, however many threads there are.
        """
        clock = self.clock
        deadline = clock.monotonic() + timeout
        hard = deadline + DRAIN_GRACE

        def left(until: float, cap: float | None = None) -> float:
            remaining = max(until - clock.monotonic(), 0.0)
            return remaining if cap is None else min(remaining, cap)

        # Stopping the background threads may eat into the grace, but never all of it:
        # releasing the runs left is what keeps their jobs from waiting for the reaper.
        stop_by = hard - DRAIN_GRACE / 2
        self.stop_reaper(left(stop_by, THREAD_JOIN_TIMEOUT))
        # The change-stream watcher, if any: no new wake-ups from here on.
        self.stop_pickup(left(stop_by, THREAD_JOIN_TIMEOUT))
        processors = self.processors()
        for processor in processors:
            processor.stop_polling(None)  # signal them all first, then join with one bound
        join_by = min(clock.monotonic() + THREAD_JOIN_TIMEOUT, stop_by)
        for processor in processors:
            processor.join_poller(left(join_by))
        for run in self.runs.snapshot():
            if not run.started:  # claimed but not begun: fenced, handed straight back
                _release(run, left(hard, RELEASE_WRITE_TIMEOUT))
        self.runs.wait_until_empty(left(deadline))
        # From here the queue runs nothing of its own: its registry entry goes now, on the
        # presence thread, beside the releases and joins below (which a handler that
        # ignores its signal can stretch to the end of the grace); the end waits for it.
        self.stop_presence(None)
        for run in self.runs.snapshot():
            result = _release(run, left(hard, RELEASE_WRITE_TIMEOUT))
            if result is not None:
                outcome = "" if result.status == "released" else f" ({result.status})"
                logger.warning(
                    "shutdown released job %s%s after the %.1fs grace period",
                    run.job_id,
                    outcome,
                    timeout,
                    extra={"job_id": run.job_id, "type": run.handle.type},
                )
        stuck: list[str] = []
        for processor in processors:
            processor.stop_workers(None)
        join_by = min(clock.monotonic() + RELEASE_WRITE_TIMEOUT, hard)
        for processor in processors:
            stuck += processor.join_workers(left(join_by), clock=clock)
        # Outcomes handed over by finished runs: written unless the store is down. They get
        # what is left of the grace period.
        for processor in processors:
            unwritten = processor.close_completer(left(hard))
            if unwritten:
                logger.warning(
                    "shutdown left %d outcomes of %s jobs unwritten; the reaper will hand "
                    "their jobs back and they will run again",
                    unwritten,
                    processor.type,
                    extra={"type": processor.type},
                )
        if stuck:
            logger.warning(
                "worker threads still inside handlers after shutdown (claims released, "
                "writes fenced; daemon threads are abandoned): %s",
                ", ".join(stuck),
            )
        self.stop_presence(left(hard, THREAD_JOIN_TIMEOUT))


def _release(run: ManagedRun, timeout: float) -> JobResult | None:
    """Abort ``run`` and hand its claim back within ``timeout``; with no time left the run
    is only fenced (aborted, its writes suppressed) and the reaper hands the job back."""
    if timeout < MIN_RELEASE_TIMEOUT:
        run.abort(SHUTDOWN)
        return None
    return run.abort_and_release(timeout)


def install_signal_handlers(
    drain: Drain, signals: tuple[int, ...] | None, timeout: float
) -> Callable[[], None]:
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("install_signal_handlers() must be called from the main thread")
    chosen = signals if signals is not None else (signal_module.SIGTERM, signal_module.SIGINT)
    previous: dict[int, Any] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not drain.begin():
            logger.warning("signal %d received again; the drain is already under way", signum)
            return
        # debug: the command that installed the handlers announces the drain its own way
        logger.debug("signal %d received: draining (timeout %.1fs)", signum, timeout)
        # The handler only starts the drain; a non-daemon thread does the work, so the
        # process lives until it is done.
        threading.Thread(
            target=_finish_drain, args=(drain, timeout), name="durabl-shutdown", daemon=False
        ).start()

    for sig in chosen:
        previous[sig] = signal_module.signal(sig, on_signal)

    def uninstall() -> None:
        for sig, old in previous.items():
            if signal_module.getsignal(sig) is on_signal:
                signal_module.signal(sig, old)
        previous.clear()

    return uninstall


def _finish_drain(drain: Drain, timeout: float) -> None:
    try:
        drain.finish(timeout)
    except BaseException:
        logger.exception("shutdown failed")
