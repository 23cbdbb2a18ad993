"""Outcomes written in the background: one named thread per processor.

A worker whose handler ended hands its run's ending write here (the one write the run
built for its claim, see :mod:`durabl.runtime.ending`), whatever its outcome, and takes
its next job at once. The completer thread passes every completion waiting at that moment
to one ``Backend.complete_many`` call (one transaction on SQLite), then tells each run how
its write went. While one batch is being written the next one gathers, so a busy pool
writes many completions per transaction and an idle one writes each as soon as it
arrives: nothing waits for a batch to fill. Every other write (a failure, a suspension,
a cancellation) is written on its own, in the order handed over: the stores have no
batched failure, and failures are rare enough not to need one. A run whose lease was lost
hands over no write; it is only told, in its turn, so that it reports it.

A handed-over run stays tracked by its queue (and its ``done`` event unset) until its
outcome is written, so a graceful shutdown waits for it like a running handler; its lease
is renewed meanwhile (:class:`~durabl.runtime.heartbeat.LeaseKeeper`). Every write is
still fenced on the run's claim token: a lease lost in the meantime is reported as
``lease-lost``, never written over.

While the store is unavailable a write is tried again (:mod:`durabl.runtime.retrying`)
until it is written, its lease is known lost, or the shutdown's deadline passes
(:meth:`Completer.close`). Meanwhile the waiting outcomes count against
:data:`MAX_WAITING`, so the workers stop taking jobs whose outcomes could not be written
either.
"""

from __future__ import annotations

import logging
import queue as queue_module
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from durabl.model.clock import SYSTEM_CLOCK, Clock
from durabl.model.exceptions import BackendUnavailableError
from durabl.model.job import JobResult
from durabl.runtime.ending import ClaimWrite, write_alone
from durabl.runtime.heartbeat import Heartbeat, LeaseKeeper
from durabl.runtime.outages import OutageLog
from durabl.runtime.retrying import GaveUp, LeaseLost, WriteRetries, lost
from durabl.stores.base import Backend, Completion

logger = logging.getLogger(__name__)

MAX_BATCH = 256
"""Most completions written in one call."""
MAX_WAITING = 2 * MAX_BATCH
"""Most completions handed over and not yet written. A worker that would go past it waits:
when writes fall behind, workers slow down rather than pile up finished runs."""


class CompletionOwner(Protocol):
    """What hands a write over (a managed run): told once it is written, on the completer
    thread."""

    @property
    def job_id(self) -> str: ...

    def completion_written(self, result: JobResult | Exception, duration: float) -> None:
        """The write handed over was recorded (``result``), could not be (the error), or
        there was none to make (``lease-lost``)."""


R = TypeVar("R", bound=CompletionOwner)


@dataclass(frozen=True)
class _Start:
    """A reserved claim whose handler starts now: recorded with the next batch."""

    job_id: str
    token: str


@dataclass(frozen=True)
class _Handed(Generic[R]):
    """A run's ending write (None: nothing to write, its lease was lost), to write in
    its turn; ``lease`` is renewed until then."""

    run: R
    write: ClaimWrite | None
    duration: float
    lease: Heartbeat | None


# What the thread takes: a write, a start, or the end marker (None).
_Item = _Handed[R] | _Start | None


def _not_ending(starts: list[_Start], batch: list[_Handed[R]]) -> list[_Start]:
    """``starts`` without those whose claim ``batch`` ends."""
    if not starts:
        return starts
    ending = {(item.write.job_id, item.write.token) for item in batch if item.write is not None}
    return [start for start in starts if (start.job_id, start.token) not in ending]


class Completer(Generic[R]):
    """Writes what is handed to :meth:`submit`, in order: completions in batches, any
    other write on its own. Keeps renewing the lease given with each until it is written,
    then calls the run back."""

    def __init__(
        self,
        backend: Backend,
        name: str,
        *,
        on_written: Callable[[R], None] | None = None,
        max_batch: int = MAX_BATCH,
        max_waiting: int | None = None,
        clock: Clock = SYSTEM_CLOCK,
        leases: LeaseKeeper | None = None,
        rand: Callable[[], float] = random.random,
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
        #: Renews the leases of the outcomes waiting here (its thread starts with the first).
        self.leases = leases if leases is not None else LeaseKeeper(_leases_name(name))
        #: Failed writes and start records: one line when they begin failing, one when
        #: they work again (each job whose outcome is lost has its own line too).
        self.failures = OutageLog(
            logger, f"writing job outcomes ({name})", ("write", "writes"), clock=clock
        )
        self._retries = WriteRetries(self.failures, rand)
        #: Batches handled, and completions written (for tests and benchmarks).
        self.batches = 0
        self.written = 0

    def submit(
        self,
        run: R,
        write: ClaimWrite | None,
        duration: float,
        *,
        lease: Heartbeat | None = None,
    ) -> None:
        """Queue ``run``'s ending ``write`` (None: none, its lease was lost) after what was
        handed over before it; ``run.completion_written`` is called once it is written.
        ``lease`` (the run's heartbeat) is renewed until then. After :meth:`close`, the
        calling thread writes it at once."""
        item = _Handed(run, write, duration, lease)
        if lease is not None:
            self.leases.keep(lease)  # renewed while it waits, for room too
        with self._room:  # room is made as outcomes are written: see MAX_WAITING
            while self._unwritten >= self._max_waiting:
                self._room.wait()
            self._unwritten += 1
        with self._start_lock:  # never queued behind close()'s end marker
            closed = self._closed
            if not closed:
                self._start()
                self._items.put(item)
        if closed:
            self._write_in_order([item])

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
        """Write what was submitted, then stop the thread and join it, and stop renewing
        leases. True when it ended within ``timeout``. A write the store is unavailable
        for is retried until ``timeout`` (None: until written); past it, what is left is
        tried once more each, and logged as not recorded when that fails. Later
        submissions are written by their caller."""
        self._retries.give_up_within(timeout)
        with self._start_lock:
            thread = self._thread
            already = self._closed
            self._closed = True
            if thread is not None and not already:
                self._items.put(None)
        ended = True
        if thread is not None and thread is not threading.current_thread():
            started = time.monotonic()
            thread.join(timeout)
            ended = not thread.is_alive()
            if timeout is not None:
                timeout = max(0.0, timeout - (time.monotonic() - started))
        self.leases.close(timeout)
        return ended

    # -- the thread ------------------------------------------------------------------------
    def _loop(self) -> None:
        while True:
            first = self._items.get()
            if first is None:
                return
            batch: list[_Handed[R]] = []
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
            # A start whose run's ending write is in this batch is not written apart: that
            # write ends the claim (and clears ``reserved``) in the same turn, so the start
            # would only cost the job another row version.
            self._write_starts(_not_ending(starts, batch))
            self._write_in_order(batch)
            if stop:
                return

    def _write_in_order(self, batch: list[_Handed[R]]) -> None:
        """Each run of completions handed over in a row in one call; every other write
        on its own, between them, in the order handed over."""
        completions: list[_Handed[R]] = []
        records: list[Completion] = []
        for item in batch:
            write = item.write
            if isinstance(write, Completion):
                completions.append(item)
                records.append(write)
                continue
            if completions:
                self._write_completions(completions, records)
                completions, records = [], []
            self._write_other(item)
        if completions:
            self._write_completions(completions, records)

    def _write_starts(self, starts: list[_Start]) -> None:
        if not starts:
            return
        claims = [(s.job_id, s.token) for s in starts]
        try:
            self._retries.call(lambda: self.backend.mark_started(claims))
        except GaveUp:  # logged by the outage log; the reaper refunds these
            pass
        except Exception as exc:  # the reaper refunds these
            self.failures.failed(exc)
        except BaseException:  # never let it end the thread
            logger.warning("recording %d job starts failed", len(starts), exc_info=True)

    def _write_completions(self, batch: list[_Handed[R]], records: list[Completion]) -> None:
        """Write the completions ``records`` of the runs handed over as ``batch``."""
        try:
            outcomes = self._outcomes(batch, records)
            self.batches += 1
            for item, outcome in zip(batch, outcomes, strict=True):
                self._report(item, outcome)
        finally:
            self._make_room(len(batch))

    def _write_other(self, item: _Handed[R]) -> None:
        try:
            if item.write is None:  # nothing to write: the run reports its lost lease
                self._report(item, JobResult("lease-lost"))
            else:
                self._report(item, self._write_alone(item.write, item.lease))
        finally:
            self._make_room(1)

    def _make_room(self, written: int) -> None:
        with self._room:
            full = self._unwritten >= self._max_waiting
            self._unwritten -= written
            if full:
                self._room.notify_all()

    # -- writes, and their retries while the store is unavailable ----------------------------
    def _outcomes(
        self, batch: list[_Handed[R]], records: list[Completion]
    ) -> list[JobResult | Exception]:
        """One result (or the error that kept it from being written) per completion,
        written together and tried again together while the store is unavailable. When
        the batch fails otherwise, each is tried on its own: one bad completion must not
        cost the others theirs, and a repeat of a completion already written is answered
        from its receipt."""
        outcomes: list[JobResult | Exception | None] = [None] * len(batch)
        tries = 0
        while True:
            for n, item in enumerate(batch):  # known gone: not written
                if outcomes[n] is None and lost(item.lease):
                    outcomes[n] = JobResult("lease-lost")
            left = [n for n, outcome in enumerate(outcomes) if outcome is None]
            if not left:
                return [outcome for outcome in outcomes if outcome is not None]
            completions = [records[n] for n in left]
            try:
                results = list(self.backend.complete_many(completions))
            except BackendUnavailableError as exc:
                self.failures.failed(exc)
                tries += 1
                if self._retries.wait(tries):
                    continue
                for n in left:  # the shutdown's deadline passed
                    outcomes[n] = exc
                continue
            except Exception as exc:  # each is tried on its own next
                self.failures.failed(exc)
            except BaseException:
                logger.warning(
                    "writing %d completions together failed; writing them one by one",
                    len(completions),
                    exc_info=True,
                )
            else:
                if len(results) == len(completions):
                    self.written += len(results)
                    self.failures.succeeded()
                    for n, result in zip(left, results, strict=True):
                        outcomes[n] = result
                    continue
                logger.error(
                    "complete_many returned %d results for %d completions; one by one now",
                    len(results),
                    len(completions),
                )
            for n in left:
                outcomes[n] = self._write_alone(records[n], batch[n].lease)

    def _write_alone(self, write: ClaimWrite, lease: Heartbeat | None) -> JobResult | Exception:
        """Record ``write`` on its own (:func:`~durabl.runtime.ending.write_alone`), tried
        again while the store is unavailable; ``lease-lost`` without a try once ``lease``
        is known lost. The error that kept it from being written, if it was not."""
        try:
            result = self._retries.call(lambda: write_alone(self.backend, write), lease)
        except LeaseLost:
            return JobResult("lease-lost")
        except GaveUp as exc:
            return exc.error
        except Exception as exc:
            return exc
        except BaseException as exc:  # never let it end the thread: report it instead
            return RuntimeError(f"{type(exc).__name__}: {exc}")
        if isinstance(write, Completion):
            self.written += 1
        return result

    def _report(self, item: _Handed[R], outcome: JobResult | Exception) -> None:
        if item.lease is not None:  # written (or given up): no more renewals
            self.leases.drop(item.lease)
        try:
            item.run.completion_written(outcome, item.duration)
        except BaseException:  # a sink raising SystemExit must not stop the completions
            logger.exception("reporting the outcome of job %s failed", item.run.job_id)
        if self._on_written is not None:
            try:
                self._on_written(item.run)
            except BaseException:
                logger.exception("after-write hook failed for job %s", item.run.job_id)


def _leases_name(name: str) -> str:
    """The lease keeper's thread name: ``durabl-leases-<type>`` beside the completer's
    ``durabl-completer-<type>``."""
    prefix = "durabl-completer-"
    return "durabl-leases-" + name[len(prefix) :] if name.startswith(prefix) else f"{name}-leases"
