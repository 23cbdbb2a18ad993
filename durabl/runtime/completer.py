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
outcome is written, so a graceful shutdown waits for it like a running handler; its lease
is renewed meanwhile (:class:`~durabl.runtime.heartbeat.LeaseKeeper`). Every write is
still fenced on the run's claim token: a lease lost in the meantime is reported as
``lease-lost``, never written over.

**While the store is unavailable** (a write raised
:class:`~durabl.model.exceptions.BackendUnavailableError`: the server is down, restarting,
out of reach), an outcome is not given up: its write is tried again, after a short
jittered wait (:data:`RETRY_FIRST_WAIT` doubling to :data:`RETRY_MAX_WAIT`; a store that
fails at once is asked about once a second, one that waits for a connection is asked again
as soon as that wait ends), until it is written, its lease is known lost (a renewal
answered ``lease-lost``: someone else owns the job), or the shutdown's deadline passes
(:meth:`Completer.close`). Repeating is safe: the write is fenced by the claim token, and
a repeat of a write that applied is answered from its receipt. It goes on past the lease's
local deadline: past it the reaper *may* have handed the job on, and then the fenced write
is refused (``lease-lost``); if it has not, the write lands and the job does not run
again. Giving up at the deadline could only lose outcomes, never protect one. Meanwhile
the waiting outcomes count against :data:`MAX_WAITING`, so the workers stop taking jobs
whose outcomes could not be written either.
"""

from __future__ import annotations

import logging
import queue as queue_module
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Generic, Protocol, TypeVar

from durabl.model.clock import SYSTEM_CLOCK, Clock
from durabl.model.exceptions import BackendUnavailableError
from durabl.model.job import JobResult
from durabl.runtime.heartbeat import Heartbeat, LeaseKeeper
from durabl.runtime.outages import OutageLog
from durabl.stores.base import Backend, Completion

logger = logging.getLogger(__name__)

MAX_BATCH = 256
"""Most completions written in one call."""
MAX_WAITING = 2 * MAX_BATCH
"""Most completions handed over and not yet written. A worker that would go past it waits:
when writes fall behind, workers slow down rather than pile up finished runs."""
RETRY_FIRST_WAIT = 0.1
"""Seconds before the second try of a write the store was unavailable for."""
RETRY_MAX_WAIT = 1.0
"""The longest wait between two tries, before jitter: an outcome is written within about
a second of the store answering again (plus the store's own wait for a connection)."""
RETRY_JITTER = 0.25
"""Each wait is shortened at random by up to this fraction, so that the processes of a
fleet do not all try again in step."""

GIVE_UP_MARGIN = 0.1
"""Seconds before the end of :meth:`Completer.close`'s timeout that retries stop, so that
the outcomes given up are reported (and their runs let go) within it."""

T = TypeVar("T")
#: How a run has its own outcome written: the completer calls the write given, again after
#: each failure while the store is unavailable, and returns its result (or ``lease-lost``
#: without a try once the lease is known lost).
Persist = Callable[[Callable[[], JobResult]], JobResult]


class CompletionOwner(Protocol):
    """What hands an outcome over (a managed run): told once its completion is written,
    or asked to write any other outcome itself, on the completer thread, through the
    completer's retries."""

    @property
    def job_id(self) -> str: ...

    def completion_written(self, result: JobResult | Exception, duration: float) -> None: ...

    def write_outcome(self, persist: Persist) -> None: ...


R = TypeVar("R", bound=CompletionOwner)


@dataclass(frozen=True)
class _Start:
    """A reserved claim whose handler starts now: recorded with the next batch."""

    job_id: str
    token: str


@dataclass(frozen=True)
class _Completion(Generic[R]):
    """A run's completion, to write in a batch; ``lease`` is renewed until then."""

    run: R
    completion: Completion
    duration: float
    lease: Heartbeat | None


@dataclass(frozen=True)
class _Outcome(Generic[R]):
    """A run whose outcome is not a plain completion: the run writes it, one at a time."""

    run: R
    lease: Heartbeat | None


# What the thread takes: a completion, another outcome, a start, or the end marker (None).
_Item = _Completion[R] | _Outcome[R] | _Start | None


class _GaveUp(Exception):
    """A write the store was unavailable for, given up at the shutdown's deadline."""

    def __init__(self, error: BackendUnavailableError) -> None:
        super().__init__(str(error))
        self.error = error


class _LeaseLost(Exception):
    """A write not tried: a renewal made while it waited answered ``lease-lost``."""


class Completer(Generic[R]):
    """Writes the completions handed to :meth:`submit`, in order, in batches, and has the
    runs handed to :meth:`submit_outcome` write their other outcomes, in the same order.
    Keeps renewing the lease given with each until it is written."""

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
        self._rand = rand
        # Retries stop at this time.monotonic() (set by close(); None: never), and a
        # retry's wait is cut short when close() sets it.
        self._give_up_at: float | None = None
        self._retry_wait = threading.Condition(threading.Lock())
        #: Failed writes and start records: one line when they begin failing, one when
        #: they work again (each job whose outcome is lost has its own line too).
        self.failures = OutageLog(
            logger, f"writing job outcomes ({name})", ("write", "writes"), clock=clock
        )
        #: Batches handled, and completions written (for tests and benchmarks).
        self.batches = 0
        self.written = 0

    def submit(
        self, run: R, completion: Completion, duration: float, *, lease: Heartbeat | None = None
    ) -> None:
        """Queue ``run``'s completion; ``run.completion_written`` is called once written.
        ``lease`` (the run's heartbeat) is renewed until then. After :meth:`close`, the
        calling thread writes it at once."""
        item = _Completion(run, completion, duration, lease)
        if not self._hand_over(item):
            self._write([item])

    def submit_outcome(self, run: R, *, lease: Heartbeat | None = None) -> None:
        """Queue ``run`` to write its outcome (not a plain completion) with
        ``run.write_outcome(persist)`` on the completer thread, after what was handed over
        before it; ``lease`` is renewed until then. After :meth:`close`, the calling thread
        has it written at once."""
        item = _Outcome(run, lease)
        if not self._hand_over(item):
            self._write_outcome(item)

    def _hand_over(self, item: _Completion[R] | _Outcome[R]) -> bool:
        """Queue a terminal item once there is room; False when closed (not queued)."""
        if item.lease is not None:
            self.leases.keep(item.lease)  # renewed while it waits, for room too
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
        """Write what was submitted, then stop the thread and join it, and stop renewing
        leases. True when it ended within ``timeout``. A write the store is unavailable
        for is retried until ``timeout`` (None: until written); past it, what is left is
        tried once more each, and logged as not recorded when that fails. Later
        submissions are written by their caller."""
        with self._retry_wait:  # given up a little early, so its reports fit the timeout
            margin = 0.0 if timeout is None else min(GIVE_UP_MARGIN, timeout / 10)
            self._give_up_at = None if timeout is None else time.monotonic() + timeout - margin
            self._retry_wait.notify_all()
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
            batch: list[_Completion[R] | _Outcome[R]] = []
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

    def _write_in_order(self, batch: list[_Completion[R] | _Outcome[R]]) -> None:
        """Each run of completions handed over in a row in one call; every other outcome
        on its own, between them, in the order handed over."""
        completions: list[_Completion[R]] = []
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
        claims = [(s.job_id, s.token) for s in starts]
        try:
            self._retrying(lambda: self.backend.mark_started(claims))
        except _GaveUp:  # logged by the outage log; the reaper refunds these
            pass
        except Exception as exc:  # the reaper refunds these
            self.failures.failed(exc)
        except BaseException:  # never let it end the thread
            logger.warning("recording %d job starts failed", len(starts), exc_info=True)

    def _write(self, batch: list[_Completion[R]]) -> None:
        try:
            outcomes = self._outcomes(batch)
            self.batches += 1
            for item, outcome in zip(batch, outcomes, strict=True):
                self._report(item, outcome)
        finally:
            self._make_room(len(batch))

    def _write_outcome(self, item: _Outcome[R]) -> None:
        run = item.run
        try:
            try:
                run.write_outcome(lambda write: self._persist(write, item.lease))
            except BaseException:  # never let it end the thread; the reaper recovers the job
                logger.exception("writing the outcome of job %s failed", run.job_id)
            if item.lease is not None:
                self.leases.drop(item.lease)
            self._written(run)
        finally:
            self._make_room(1)

    def _make_room(self, written: int) -> None:
        with self._room:
            full = self._unwritten >= self._max_waiting
            self._unwritten -= written
            if full:
                self._room.notify_all()

    # -- writes, and their retries while the store is unavailable ----------------------------
    def _outcomes(self, batch: list[_Completion[R]]) -> list[JobResult | Exception]:
        """One result (or the error that kept it from being written) per completion,
        written together and tried again together while the store is unavailable. When
        the batch fails otherwise, each is tried on its own: one bad completion must not
        cost the others theirs, and a repeat of a completion already written is answered
        from its receipt."""
        outcomes: list[JobResult | Exception | None] = [None] * len(batch)
        tries = 0
        while True:
            for n, item in enumerate(batch):  # known gone: not written (see the module)
                if outcomes[n] is None and _lost(item.lease):
                    outcomes[n] = JobResult("lease-lost")
            left = [n for n, outcome in enumerate(outcomes) if outcome is None]
            if not left:
                return [outcome for outcome in outcomes if outcome is not None]
            completions = [batch[n].completion for n in left]
            try:
                results = list(self.backend.complete_many(completions))
            except BackendUnavailableError as exc:
                self.failures.failed(exc)
                tries += 1
                if self._wait_to_retry(tries):
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
                outcomes[n] = self._complete_alone(batch[n])

    def _complete_alone(self, item: _Completion[R]) -> JobResult | Exception:
        """Write one completion on its own, exactly as the batch would have: every field
        of the :class:`Completion` (the handler's result, its logs) goes to ``complete``.
        Passing them by name from the record means a field added to ``Completion`` reaches
        this write too, or fails loudly here, instead of being dropped on this path only.
        The error that kept it from being written, if it was not."""
        completion = item.completion
        written = {f.name: getattr(completion, f.name) for f in fields(completion)}
        try:
            result = self._retrying(lambda: self.backend.complete(**written), item.lease)
        except _LeaseLost:
            return JobResult("lease-lost")
        except _GaveUp as exc:
            return exc.error
        except Exception as exc:
            return exc
        except BaseException as exc:  # never let it end the thread: report it instead
            return RuntimeError(f"{type(exc).__name__}: {exc}")
        self.written += 1
        return result

    def _persist(self, write: Callable[[], JobResult], lease: Heartbeat | None) -> JobResult:
        """``write()``'s result, tried again while the store is unavailable; ``lease-lost``
        without a try once ``lease`` is known lost. Raises the write's error when it is
        another one, or the last one once the shutdown's deadline passed."""
        try:
            return self._retrying(write, lease)
        except _LeaseLost:
            return JobResult("lease-lost")
        except _GaveUp as exc:
            raise exc.error from None

    def _retrying(self, write: Callable[[], T], lease: Heartbeat | None = None) -> T:
        """``write()``, tried again while it raises :class:`BackendUnavailableError`.
        :class:`_LeaseLost` before a try once ``lease`` is known lost; :class:`_GaveUp`
        once the shutdown's deadline passed."""
        tries = 0
        while True:
            if _lost(lease):
                raise _LeaseLost
            try:
                value = write()
            except BackendUnavailableError as exc:
                self.failures.failed(exc)
                tries += 1
                if not self._wait_to_retry(tries):
                    raise _GaveUp(exc) from exc
                continue
            self.failures.succeeded()
            return value

    def _wait_to_retry(self, tries: int) -> bool:
        """Wait before try ``tries + 1`` of a write the store was unavailable for: the
        first wait :data:`RETRY_FIRST_WAIT`, doubling up to :data:`RETRY_MAX_WAIT`, each
        shortened at random by up to :data:`RETRY_JITTER`. False, at once, when the
        shutdown's deadline has passed: give up."""
        delay = min(RETRY_MAX_WAIT, RETRY_FIRST_WAIT * 2.0 ** min(tries - 1, 10))
        delay *= 1.0 - RETRY_JITTER * self._rand()
        with self._retry_wait:
            give_up_at = self._give_up_at
            if give_up_at is not None:
                left = give_up_at - time.monotonic()
                if left <= 0:
                    return False
                delay = min(delay, left)
            self._retry_wait.wait(delay)  # close() cuts it short
        return True

    def _report(self, item: _Completion[R], outcome: JobResult | Exception) -> None:
        if item.lease is not None:  # written (or given up): no more renewals
            self.leases.drop(item.lease)
        try:
            item.run.completion_written(outcome, item.duration)
        except BaseException:  # a sink raising SystemExit must not stop the completions
            logger.exception("reporting the completion of job %s failed", item.run.job_id)
        self._written(item.run)

    def _written(self, run: R) -> None:
        if self._on_written is not None:
            try:
                self._on_written(run)
            except BaseException:
                logger.exception("after-completion hook failed for job %s", run.job_id)


def _lost(lease: Heartbeat | None) -> bool:
    """Whether a renewal of ``lease`` made while its outcome waited answered lease-lost."""
    return lease is not None and lease.lease_lost


def _leases_name(name: str) -> str:
    """The lease keeper's thread name: ``durabl-leases-<type>`` beside the completer's
    ``durabl-completer-<type>``."""
    prefix = "durabl-completer-"
    return "durabl-leases-" + name[len(prefix) :] if name.startswith(prefix) else f"{name}-leases"
