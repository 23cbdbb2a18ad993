"""One claim's heartbeat: :meth:`Heartbeat.beat` is one renewal; a named thread repeats it.

Each running claim has its own heartbeat thread. A worker thread keeps one
:class:`HeartbeatThread` for the claims it runs one after another, so a short job does not
pay for starting and joining a thread; a run outside a worker pool starts its own.

A run whose handler has ended holds its claim until its outcome is written: in a worker
pool its processor's completer writes it, and while it waits there (behind other writes,
or while the store is down) a :class:`LeaseKeeper` goes on renewing its lease, so the
reaper does not hand the job to another worker for want of renewals.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from durabl.model.abort import LEASE_LOST, LEASE_UNCONFIRMED, TIMED_OUT, AbortSignal, LogBuffer
from durabl.model.clock import SYSTEM_CLOCK, Clock
from durabl.model.job import CANCELLED
from durabl.model.sync import Flag
from durabl.runtime.outages import OutageLog
from durabl.stores.base import Backend

logger = logging.getLogger(__name__)


def heartbeat_outage_log(type: str | None, clock: Clock = SYSTEM_CLOCK) -> OutageLog:
    """The log of failed renewals: of a processor's worker threads (``type``), or of one
    run outside a pool (None)."""
    doing = "renewing leases" if type is None else f"renewing the leases of {type} jobs"
    extra = {} if type is None else {"type": type}
    return OutageLog(logger, doing, ("renewal", "renewals"), clock=clock, extra=extra)


@dataclass(eq=False)
class Heartbeat:
    """Renews one lease every ``interval`` seconds until stopped.

    A confirmed renewal moves the run's local deadline to (time the renewal was sent +
    ``visibility_timeout``). A ``lease-lost`` answer aborts the run at once; errors leave
    the deadline where it is, so the run aborts when it passes unconfirmed.
    """

    backend: Backend
    job_id: str
    token: str
    _: KW_ONLY
    signal: AbortSignal
    logs: LogBuffer
    clock: Clock
    interval: float
    visibility_timeout: float
    on_lease_lost: Callable[[], None] | None = None
    #: Renew on after the run's signal aborted with ``timed-out`` (until stopped).
    renews_past_time_limit: bool = field(default=False, init=False)
    beats: int = field(default=0, init=False)
    #: Set when a renewal made while the run's outcome waited to be written answered
    #: ``lease-lost`` (:meth:`renew_waiting`): the outcome must not be written then.
    lease_lost: bool = field(default=False, init=False)
    _stop: Flag = field(default_factory=Flag, init=False, repr=False)
    _thread: threading.Thread | None = field(default=None, init=False, repr=False)
    _host: HeartbeatThread | None = field(default=None, init=False, repr=False)
    _due: float = field(default=0.0, init=False, repr=False)
    _failures: OutageLog | None = field(default=None, init=False, repr=False)

    def failures(self) -> OutageLog:
        """Where failed renewals are logged: a pool's runs share their processor's log
        (through the host thread); a run outside a pool has its own, made when needed."""
        if self._host is not None:
            return self._host.failures
        if self._failures is None:
            self._failures = heartbeat_outage_log(None, self.clock)
        return self._failures

    def beat(self) -> str | None:
        """One renewal. Returns "applied", "lease-lost", "cancel-requested" (renewed, and
        the run's signal now aborted with reason ``cancelled``), or None after an error."""
        sent_at = self.clock.monotonic()
        logs = self.logs.take()
        failures = self.failures()
        try:
            result = self.backend.heartbeat(self.job_id, self.token, logs=logs)
        except Exception as exc:
            self.logs.requeue(logs)
            failures.failed(exc)
            return None
        failures.succeeded()
        self.beats += 1
        if result in ("applied", "cancel-requested"):
            self.signal.extend(sent_at + self.visibility_timeout)
            if result == "cancel-requested":
                # queue.cancel() asked for it: the handler sees ctx.signal abort now.
                self.signal.abort(CANCELLED)
        elif self.signal.abort(LEASE_LOST) and self.on_lease_lost is not None:
            self.on_lease_lost()
        return result

    def renew_waiting(self, failures: OutageLog) -> str | None:
        """One renewal of a lease whose run has ended and whose outcome waits to be written
        (on a :class:`LeaseKeeper`). The run's signal is left as it was: the handler is
        over, and the outcome is written past the lease's local deadline too (the write is
        fenced: refused if the job went to someone else meanwhile). No log lines go with
        it: they go with the outcome. A ``lease-lost`` answer sets :attr:`lease_lost`."""
        self._due = self.clock.monotonic() + self.interval
        try:
            result = self.backend.heartbeat(self.job_id, self.token)
        except Exception as exc:
            failures.failed(exc)
            return None
        failures.succeeded()
        self.beats += 1
        if result == "lease-lost":
            self.lease_lost = True
        return result

    @property
    def due(self) -> float:
        """When the next renewal is due (monotonic seconds, on :attr:`clock`)."""
        return self._due

    def start(self, host: HeartbeatThread | None = None) -> None:
        """Start renewing: on ``host`` (a worker's reusable heartbeat thread) or on a
        thread of its own."""
        self._due = self.clock.monotonic() + self.interval
        if host is not None:
            self._host = host
            host.serve(self)
            return
        self._thread = threading.Thread(
            target=self._run, name=f"durabl-heartbeat-{self.job_id}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.next_wait()):
            if not self.tick():
                return

    def tick(self) -> bool:
        """What to do when a wait ends: renew if due. False once renewing is over."""
        if self.signal.aborted and not self._in_grace():
            # Lease trouble is reported; shutdown and a run's own limits are not.
            lost = self.signal.reason in (LEASE_LOST, LEASE_UNCONFIRMED)
            if self.on_lease_lost is not None and lost:
                self.on_lease_lost()
            return False
        if self.signal.deadline is not None and self.clock.monotonic() < self._due:
            return True
        self._due = self.clock.monotonic() + self.interval
        return self.beat() != "lease-lost"

    def _in_grace(self) -> bool:
        """Past its time limit, a run a worker pool will abandon keeps its lease until
        then: its attempt is recorded ``timed-out`` by this process, not by the reaper."""
        return self.renews_past_time_limit and self.signal.reason == TIMED_OUT

    def next_wait(self) -> float:
        """Sleep until the next renewal, but wake by the lease deadline to notice it."""
        now = self.clock.monotonic()
        wait = self._due - now
        deadline = self.signal.deadline
        if deadline is not None:
            wait = min(wait, deadline - now)
        limit = self.signal.limit
        if limit is not None:
            wait = min(wait, limit - now)
        return max(wait, 0.01)

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop renewing and join the thread, or leave the host thread (bounded: a renewal
        in flight may hang)."""
        self._stop.set()
        if self._host is not None:
            self._host.leave(self, timeout)
            return
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)


class HeartbeatThread:
    """A named heartbeat thread that serves one claim at a time, reused across the claims
    a worker runs in turn. :meth:`leave` returns only once the thread no longer touches
    that claim, so a stopped heartbeat is as finished as a joined thread.

    Taking a claim on or off does not wake the thread: when idle it looks every
    ``interval`` seconds, so a claim's first renewal comes between one and two intervals
    after it started (a lease lasts three) and a short job costs the thread nothing.
    """

    def __init__(self, name: str, interval: float, *, failures: OutageLog | None = None) -> None:
        self.name = name
        self.interval = interval
        #: Where the renewals of the claims it serves log their failures.
        self.failures = failures if failures is not None else heartbeat_outage_log(None)
        self._cond = threading.Condition()
        self._current: Heartbeat | None = None
        self._busy: Heartbeat | None = None
        self._changes = 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name=name, daemon=True)
        self._thread.start()

    def serve(self, heartbeat: Heartbeat) -> None:
        with self._cond:
            self._current = heartbeat
            self._changes += 1

    def leave(self, heartbeat: Heartbeat, timeout: float | None) -> None:
        with self._cond:
            if self._current is heartbeat:
                self._current = None
                self._changes += 1
            if self._busy is heartbeat:  # a renewal in flight: wait for it to end
                self._cond.wait_for(lambda: self._busy is not heartbeat, timeout)

    def _loop(self) -> None:
        with self._cond:
            while not self._closed:
                heartbeat = self._current
                if heartbeat is None:
                    self._cond.wait(self.interval)
                    continue
                wait = heartbeat.next_wait()
                if wait > 0.01:
                    seen = self._changes
                    self._cond.wait(min(wait, self.interval))
                    if self._changes != seen or self._current is not heartbeat:
                        continue  # reassigned, left or closed while waiting
                    if heartbeat.next_wait() > 0.01:
                        continue
                self._busy = heartbeat
                self._cond.release()
                try:
                    keep = heartbeat.tick()
                except Exception:
                    logger.exception("heartbeat of job %s failed", heartbeat.job_id)
                    keep = True
                finally:
                    self._cond.acquire()
                    self._busy = None
                    self._cond.notify_all()
                if not keep and self._current is heartbeat:
                    self._current = None

    def close(self, timeout: float | None = 5.0) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()


class LeaseKeeper:
    """Renews the leases of runs whose handler has ended and whose outcome waits to be
    written, each when its renewal is due, on one named thread (started with the first
    lease kept, ended by :meth:`close`). A processor's completer keeps the lease of every
    outcome handed to it, from hand-over until written, so a run's lease is renewed from
    its claim until its outcome is in the store, however long the write waits.

    A lease whose renewal answers ``lease-lost`` is no longer kept, and its heartbeat's
    ``lease_lost`` says so: its outcome must not be written. Keeping and dropping a lease
    costs a set operation; the thread is woken only when a lease comes due before the time
    it sleeps until, so a short run's hand-over does not wake it."""

    def __init__(self, name: str, *, failures: OutageLog | None = None) -> None:
        self.name = name
        #: Failed renewals: one line as they start failing, one when they work again.
        self.failures = failures if failures is not None else heartbeat_outage_log(None)
        self._cond = threading.Condition()
        self._kept: set[Heartbeat] = set()
        # The due time the thread sleeps until (on the heartbeats' clock): inf while it
        # has nothing to keep, -inf while it renews (it looks again right after).
        self._wake_at = math.inf
        self._closed = False
        self._thread: threading.Thread | None = None

    def keep(self, heartbeat: Heartbeat) -> None:
        """Renew ``heartbeat``'s lease when due, until :meth:`drop`. Nothing once closed."""
        with self._cond:
            if self._closed:
                return
            self._kept.add(heartbeat)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
                self._thread.start()
            elif heartbeat.due < self._wake_at:
                self._cond.notify()

    def drop(self, heartbeat: Heartbeat) -> None:
        """Stop renewing ``heartbeat``'s lease (its outcome is written). Does not wait for
        a renewal in flight: that one is fenced, and harmless once the outcome is in."""
        with self._cond:
            self._kept.discard(heartbeat)

    def _loop(self) -> None:
        with self._cond:
            while not self._closed:
                if not self._kept:
                    self._wake_at = math.inf
                    self._cond.wait()
                    continue
                first = min(self._kept, key=lambda heartbeat: heartbeat.due)
                wait = first.due - first.clock.monotonic()
                if wait > 0:
                    self._wake_at = first.due
                    self._cond.wait(wait)
                    continue
                self._wake_at = -math.inf
                self._cond.release()
                try:
                    first.renew_waiting(self.failures)
                except Exception:  # never let it end the thread
                    logger.exception("renewing the lease of job %s failed", first.job_id)
                finally:
                    self._cond.acquire()
                if first.lease_lost:
                    self._kept.discard(first)

    def close(self, timeout: float | None = 5.0) -> None:
        """Stop renewing and join the thread (bounded: a renewal in flight may hang)."""
        with self._cond:
            self._closed = True
            self._kept.clear()
            self._cond.notify_all()
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
