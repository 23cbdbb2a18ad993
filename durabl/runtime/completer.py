"""Completions written in the background, in batches: one named thread per processor.

A worker whose handler returned hands the run here and takes its next job at once. The
completer thread writes every completion waiting at that moment with one
``Backend.complete_many`` call (one transaction on SQLite), then reports each run. While
one batch is being written the next one gathers, so a busy pool writes many completions
per transaction and an idle one writes each as soon as it arrives: nothing waits for a
batch to fill.

A handed-over run stays tracked by its queue (and its ``done`` event unset) until its
completion is written, so a graceful shutdown waits for it like a running handler. Every
write is still fenced on the run's claim token: a lease lost in the meantime is reported
as ``lease-lost``, never written over.
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from durabl.model.job import JobResult
from durabl.stores.base import Backend, Completion

logger = logging.getLogger(__name__)

MAX_BATCH = 256
"""Most completions written in one call."""
MAX_WAITING = 2 * MAX_BATCH
"""Most completions handed over and not yet written. A worker that would go past it waits:
when writes fall behind, workers slow down rather than pile up finished runs whose leases
nobody renews."""


class CompletionOwner(Protocol):
    """What hands a completion over: told once it is written (a managed run)."""

    @property
    def job_id(self) -> str: ...

    def completion_written(self, result: JobResult | Exception, duration: float) -> None: ...


R = TypeVar("R", bound=CompletionOwner)


@dataclass(frozen=True)
class _Start:
    """A reserved claim whose handler starts now: recorded with the next batch."""

    job_id: str
    token: str


class Completer(Generic[R]):
    """Writes the completions handed to :meth:`submit`, in order, in batches."""

    def __init__(
        self,
        backend: Backend,
        name: str,
        *,
        on_written: Callable[[R], None] | None = None,
        max_batch: int = MAX_BATCH,
        max_waiting: int | None = None,
    ) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch!r}")
        waiting = 2 * max_batch if max_waiting is None else max_waiting
        if waiting < 1:
            raise ValueError(f"max_waiting must be >= 1, got {max_waiting!r}")
        self._max_waiting = waiting
        self._unwritten = 0  # handed over, not yet written: at most _max_waiting
        self._room = threading.Condition(threading.Lock())
        self.backend = backend
        self.name = name
        self.max_batch = max_batch
        self._on_written = on_written
        self._items: queue_module.SimpleQueue[tuple[R, Completion, float] | _Start | None] = (
            queue_module.SimpleQueue()
        )
        self._closed = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        #: Batches handled, and completions written (for tests and benchmarks).
        self.batches = 0
        self.written = 0

    def submit(self, run: R, completion: Completion, duration: float) -> None:
        """Queue ``run``'s completion; ``run.completion_written`` is called once written.
        After :meth:`close`, the calling thread writes it at once."""
        item = (run, completion, duration)
        with self._room:  # room is made as completions are written: see MAX_WAITING
            while self._unwritten >= self._max_waiting:
                self._room.wait()
            self._unwritten += 1
        with self._start_lock:  # never queued behind close()'s end marker
            closed = self._closed
            if not closed:
                self._start()
                self._items.put(item)
        if closed:
            self._write([item])

    def mark_started(self, job_id: str, token: str) -> None:
        """Record, with the next batch, that the handler of this reserved claim started
        (see :mod:`durabl.model.rules`). The caller does not wait for the write. After
        :meth:`close`, the calling thread writes it at once."""
        start = _Start(job_id, token)
        with self._start_lock:
            closed = self._closed
            if not closed:
                self._start()
                self._items.put(start)
        if closed:
            self._write_starts([start])

    def waiting(self) -> int:
        """About how many completions are handed over and not yet written."""
        return self._items.qsize()

    def start(self) -> None:
        with self._start_lock:
            self._start()

    def _start(self) -> None:
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
            self._thread.start()

    def close(self, timeout: float | None = 5.0) -> bool:
        """Write what was submitted, then stop the thread and join it. True when it
        ended within ``timeout``. Later submissions are written by their caller."""
        with self._start_lock:
            thread = self._thread
            already = self._closed
            self._closed = True
            if thread is None:
                return True
            if not already:
                self._items.put(None)
        if thread is not threading.current_thread():
            thread.join(timeout)
        return not thread.is_alive()

    def _loop(self) -> None:
        while True:
            first = self._items.get()
            if first is None:
                return
            batch: list[tuple[R, Completion, float]] = []
            starts: list[_Start] = []
            stop = False
            item: tuple[R, Completion, float] | _Start | None = first
            while True:
                if isinstance(item, _Start):
                    starts.append(item)
                elif item is not None:
                    batch.append(item)
                if len(batch) >= self.max_batch:
                    break
                try:
                    item = self._items.get_nowait()
                except queue_module.Empty:
                    break
                if item is None:
                    stop = True
                    break
            # Starts first: a run that began must be counted before anything else is lost.
            self._write_starts(starts)
            if batch:
                self._write(batch)
            if stop:
                return

    def _write_starts(self, starts: list[_Start]) -> None:
        if not starts:
            return
        try:
            self.backend.mark_started([(s.job_id, s.token) for s in starts])
        except BaseException:  # never let it end the thread; the reaper refunds these
            logger.warning("recording %d job starts failed", len(starts), exc_info=True)

    def _write(self, batch: list[tuple[R, Completion, float]]) -> None:
        try:
            outcomes = self._outcomes([completion for _, completion, _ in batch])
            self.batches += 1
            for n, (run, _, duration) in enumerate(batch):
                self._report(run, outcomes[n], duration)
        finally:
            with self._room:
                full = self._unwritten >= self._max_waiting
                self._unwritten -= len(batch)
                if full:
                    self._room.notify_all()

    def _outcomes(self, completions: list[Completion]) -> list[JobResult | Exception]:
        """One result (or the error that kept it from being written) per completion. When
        the batch as a whole fails, each is tried on its own: one bad completion must not
        cost the others theirs, and a repeat of a completion already written is answered
        from its receipt."""
        try:
            results = list(self.backend.complete_many(completions))
            if len(results) == len(completions):
                self.written += len(results)
                return list(results)
            logger.error(
                "complete_many returned %d results for %d completions; writing them one by one",
                len(results),
                len(completions),
            )
        except BaseException:
            logger.warning(
                "writing %d completions together failed; writing them one by one",
                len(completions),
                exc_info=True,
            )
        outcomes: list[JobResult | Exception] = []
        for c in completions:
            try:
                outcomes.append(self.backend.complete(c.job_id, c.token, logs=c.logs))
                self.written += 1
            except Exception as exc:
                outcomes.append(exc)
            except BaseException as exc:  # never let it end the thread: report it instead
                outcomes.append(RuntimeError(f"{type(exc).__name__}: {exc}"))
        return outcomes

    def _report(self, run: R, outcome: JobResult | Exception, duration: float) -> None:
        try:
            run.completion_written(outcome, duration)
        except BaseException:  # a sink raising SystemExit must not stop the completions
            logger.exception("reporting the completion of job %s failed", run.job_id)
        if self._on_written is not None:
            try:
                self._on_written(run)
            except BaseException:
                logger.exception("after-completion hook failed for job %s", run.job_id)
