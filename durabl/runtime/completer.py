"""Outcomes written in the background: one named thread per processor.

A worker whose handler ended hands the run here, whatever its outcome, and takes its next
job at once. The completer thread writes every completion waiting at that moment with one
``Backend.complete_many`` call (one transaction on SQLite), then reports each run. While
one batch is being written the next one gathers, so a busy pool writes many completions
per transaction and an idle one writes each as soon as it arrives: nothing waits for a
batch to fill. Every other outcome (a failure, a suspension, a lost lease to report) is
handed back to its run to write on this thread, one at a time, in the order handed over:
the stores have no batched failure, and failures are rare enough not to need one.

A handed-over run stays tracked by its queue (and its ``done`` event unset) until its
outcome is written, so a graceful shutdown waits for it like a running handler. Every
write is still fenced on the run's claim token: a lease lost in the meantime is reported
as ``lease-lost``, never written over.
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Generic, Protocol, TypeVar

from durabl.model.clock import SYSTEM_CLOCK, Clock
from durabl.model.job import JobResult
from durabl.runtime.outages import OutageLog
from durabl.stores.base import Backend, Completion

logger = logging.getLogger(__name__)

MAX_BATCH = 256
"""Most completions written in one call."""
MAX_WAITING = 2 * MAX_BATCH
"""Most completions handed over and not yet written. A worker that would go past it waits:
when writes fall behind, workers slow down rather than pile up finished runs whose leases
nobody renews."""


class CompletionOwner(Protocol):
    """What hands an outcome over (a managed run): told once its completion is written,
    or asked to write any other outcome itself, on the completer thread."""

    @property
    def job_id(self) -> str: ...

    def completion_written(self, result: JobResult | Exception, duration: float) -> None: ...

    def write_outcome(self) -> None: ...


R = TypeVar("R", bound=CompletionOwner)


@dataclass(frozen=True)
class _Start:
    """A reserved claim whose handler starts now: recorded with the next batch."""

    job_id: str
    token: str


@dataclass(frozen=True)
class _Outcome(Generic[R]):
    """A run whose outcome is not a plain completion: the run writes it, one at a time."""

    run: R


# What the thread takes: a completion, another outcome, a start, or the end marker (None).
_Item = tuple[R, Completion, float] | _Outcome[R] | _Start | None


class Completer(Generic[R]):
    """Writes the completions handed to :meth:`submit`, in order, in batches, and has the
    runs handed to :meth:`submit_outcome` write their other outcomes, in the same order."""

    def __init__(
        self,
        backend: Backend,
        name: str,
        *,
        on_written: Callable[[R], None] | None = None,
        max_batch: int = MAX_BATCH,
        max_waiting: int | None = None,
        clock: Clock = SYSTEM_CLOCK,
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
        self._items: queue_module.SimpleQueue[_Item[R]] = queue_module.SimpleQueue()
        self._closed = False
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()
        #: Failed batch writes and start records: one line when they begin failing, one
        #: when they work again (each job whose outcome is lost has its own line too).
        self.failures = OutageLog(
            logger, f"writing job outcomes ({name})", ("write", "writes"), clock=clock
        )
        #: Batches handled, and completions written (for tests and benchmarks).
        self.batches = 0
        self.written = 0

    def submit(self, run: R, completion: Completion, duration: float) -> None:
        """Queue ``run``'s completion; ``run.completion_written`` is called once written.
        After :meth:`close`, the calling thread writes it at once."""
        item = (run, completion, duration)
        if not self._hand_over(item):
            self._write([item])

    def submit_outcome(self, run: R) -> None:
        """Queue ``run`` to write its outcome (not a plain completion) with
        ``run.write_outcome()`` on the completer thread, after what was handed over
        before it. After :meth:`close`, the calling thread has it written at once."""
        item = _Outcome(run)
        if not self._hand_over(item):
            self._write_outcome(item)

    def _hand_over(self, item: tuple[R, Completion, float] | _Outcome[R]) -> bool:
        """Queue a terminal item once there is room; False when closed (not queued)."""
        with self._room:  # room is made as outcomes are written: see MAX_WAITING
            while self._unwritten >= self._max_waiting:
                self._room.wait()
            self._unwritten += 1
        with self._start_lock:  # never queued behind close()'s end marker
            if self._closed:
                return False
            self._start()
            self._items.put(item)
            return True

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
        """How many outcomes are handed over and not yet written, the batch being written
        included. Not the queue's length: that also holds the starts to record and the end
        marker :meth:`close` puts, which are no outcomes, and misses the batch in flight."""
        with self._room:
            return self._unwritten

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
            batch: list[tuple[R, Completion, float] | _Outcome[R]] = []
            starts: list[_Start] = []
            stop = False
            item: _Item[R] = first
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
            self._write_in_order(batch)
            if stop:
                return

    def _write_in_order(self, batch: list[tuple[R, Completion, float] | _Outcome[R]]) -> None:
        """Each run of completions handed over in a row in one call; every other outcome
        on its own, between them, in the order handed over."""
        completions: list[tuple[R, Completion, float]] = []
        for item in batch:
            if isinstance(item, _Outcome):
                if completions:
                    self._write(completions)
                    completions = []
                self._write_outcome(item)
            else:
                completions.append(item)
        if completions:
            self._write(completions)

    def _write_starts(self, starts: list[_Start]) -> None:
        if not starts:
            return
        try:
            self.backend.mark_started([(s.job_id, s.token) for s in starts])
        except Exception as exc:  # the reaper refunds these
            self.failures.failed(exc)
        except BaseException:  # never let it end the thread
            logger.warning("recording %d job starts failed", len(starts), exc_info=True)
        else:
            self.failures.succeeded()

    def _write(self, batch: list[tuple[R, Completion, float]]) -> None:
        try:
            outcomes = self._outcomes([completion for _, completion, _ in batch])
            self.batches += 1
            for n, (run, _, duration) in enumerate(batch):
                self._report(run, outcomes[n], duration)
        finally:
            self._make_room(len(batch))

    def _write_outcome(self, item: _Outcome[R]) -> None:
        run = item.run
        try:
            try:
                run.write_outcome()
            except BaseException:  # never let it end the thread; the reaper recovers the job
                logger.exception("writing the outcome of job %s failed", run.job_id)
            self._written(run)
        finally:
            self._make_room(1)

    def _make_room(self, written: int) -> None:
        with self._room:
            full = self._unwritten >= self._max_waiting
            self._unwritten -= written
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
                self.failures.succeeded()
                return list(results)
            logger.error(
                "complete_many returned %d results for %d completions; writing them one by one",
                len(results),
                len(completions),
            )
        except Exception as exc:  # each is tried on its own next
            self.failures.failed(exc)
        except BaseException:
            logger.warning(
                "writing %d completions together failed; writing them one by one",
                len(completions),
                exc_info=True,
            )
        outcomes: list[JobResult | Exception] = []
        for c in completions:
            try:
                outcomes.append(self._complete_alone(c))
                self.written += 1
                self.failures.succeeded()
            except Exception as exc:
                outcomes.append(exc)
            except BaseException as exc:  # never let it end the thread: report it instead
                outcomes.append(RuntimeError(f"{type(exc).__name__}: {exc}"))
        return outcomes

    def _complete_alone(self, completion: Completion) -> JobResult:
        """Write ``completion`` on its own, exactly as the batch would have: every field of
        the :class:`Completion` (the handler's result, its logs) goes to ``complete``.
        Passing them by name from the record means a field added to ``Completion`` reaches
        this write too, or fails loudly here, instead of being dropped on this path only."""
        written = {f.name: getattr(completion, f.name) for f in fields(completion)}
        return self.backend.complete(**written)

    def _report(self, run: R, outcome: JobResult | Exception, duration: float) -> None:
        try:
            run.completion_written(outcome, duration)
        except BaseException:  # a sink raising SystemExit must not stop the completions
            logger.exception("reporting the completion of job %s failed", run.job_id)
        self._written(run)

    def _written(self, run: R) -> None:
        if self._on_written is not None:
            try:
                self._on_written(run)
            except BaseException:
                logger.exception("after-completion hook failed for job %s", run.job_id)
