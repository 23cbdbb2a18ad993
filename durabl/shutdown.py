"""Graceful shutdown: the drain, and signal handlers that only start it."""

from __future__ import annotations

import logging
import signal as signal_module
import threading
from collections.abc import Callable
from concurrent.futures import Future
from types import FrameType
from typing import TYPE_CHECKING, Any

from durabl.options import RELEASE_WRITE_TIMEOUT

if TYPE_CHECKING:
    from durabl.queue import JobQueue

logger = logging.getLogger(__name__)

THREAD_JOIN_TIMEOUT = 5.0


class Drain:
    """The one shutdown of a queue. ``begin()`` fences new work and creates the future;
    ``run()`` does the waiting, aborting and releasing."""

    def __init__(self, queue: JobQueue) -> None:
        self.queue = queue
        self._lock = threading.Lock()
        self.future: Future[None] | None = None
        self._owner = False

    @property
    def started(self) -> bool:
        return self.future is not None

    def begin(self) -> bool:
        """Fence new claims; True for the caller that must carry out the drain."""
        with self._lock:
            if self.future is not None:
                return False
            self.future = Future()
            self.future.set_running_or_notify_cancel()
            return True

    def run(self, timeout: float) -> None:
        if not self.begin():
            assert self.future is not None
            self.future.result()
            return
        assert self.future is not None
        try:
            self._drain(timeout)
        except BaseException as exc:
            self.future.set_exception(exc)
            raise
        else:
            self.future.set_result(None)

    def _drain(self, timeout: float) -> None:
        queue = self.queue
        clock = queue.clock
        deadline = clock.monotonic() + timeout
        queue.stop_reaper()
        queue._stop_push()  # the change-stream watcher, if any: no new wake-ups from here on
        processors = list(queue.processors.values())
        for processor in processors:
            processor.stop_polling(None)  # signal them all first, then join with one bound
        join_by = clock.monotonic() + THREAD_JOIN_TIMEOUT
        for processor in processors:
            processor.join_poller(max(join_by - clock.monotonic(), 0.0))
        for run in queue.active_runs():
            if not run.started:  # claimed but not begun: fenced, handed straight back
                run.abort_and_release(RELEASE_WRITE_TIMEOUT)
        with queue._runs_changed:
            queue._runs_changed.wait_for(
                lambda: not queue._runs, timeout=max(deadline - clock.monotonic(), 0.0)
            )
            remaining = list(queue._runs)
        for run in remaining:
            result = run.abort_and_release(RELEASE_WRITE_TIMEOUT)
            if result is not None:
                logger.warning(
                    "shutdown released job %s (%s) after the %.1fs grace period",
                    run.job_id,
                    result.status,
                    timeout,
                    extra={"job_id": run.job_id, "type": run.handle.type},
                )
        stuck: list[str] = []
        for processor in processors:
            processor.stop_workers(None)
        join_by = clock.monotonic() + RELEASE_WRITE_TIMEOUT
        for processor in processors:
            stuck += processor.join_workers(max(join_by - clock.monotonic(), 0.0))
        # Completions handed over by finished runs: written unless the store is down. They
        # get what is left of the drain's time, and at least the time a release gets.
        write_by = max(deadline, clock.monotonic() + RELEASE_WRITE_TIMEOUT)
        for processor in processors:
            unwritten = processor.close_completer(max(write_by - clock.monotonic(), 0.0))
            if unwritten:
                logger.warning(
                    "shutdown left %d completions of %s jobs unwritten; the reaper will hand "
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


def install_signal_handlers(
    queue: JobQueue, signals: tuple[int, ...] | None, timeout: float
) -> Callable[[], None]:
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("install_signal_handlers() must be called from the main thread")
    chosen = signals if signals is not None else (signal_module.SIGTERM, signal_module.SIGINT)
    previous: dict[int, Any] = {}

    def on_signal(signum: int, frame: FrameType | None) -> None:
        if not queue._drain.begin():
            logger.warning("signal %d received again; the drain is already under way", signum)
            return
        logger.info("signal %d received: draining (timeout %.1fs)", signum, timeout)
        # The handler only starts the drain; a non-daemon thread does the work, so the
        # process lives until it is done.
        threading.Thread(
            target=_finish_drain, args=(queue, timeout), name="durabl-shutdown", daemon=False
        ).start()

    for sig in chosen:
        previous[sig] = signal_module.signal(sig, on_signal)

    def uninstall() -> None:
        for sig, old in previous.items():
            if signal_module.getsignal(sig) is on_signal:
                signal_module.signal(sig, old)
        previous.clear()

    return uninstall


def _finish_drain(queue: JobQueue, timeout: float) -> None:
    drain = queue._drain
    assert drain.future is not None
    try:
        drain._drain(timeout)
    except BaseException as exc:
        logger.exception("shutdown failed")
        drain.future.set_exception(exc)
    else:
        drain.future.set_result(None)
