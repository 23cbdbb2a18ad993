"""One claim's heartbeat: :meth:`Heartbeat.beat` is one renewal; a named thread repeats it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from durabl.abort import LEASE_LOST, LEASE_UNCONFIRMED, AbortSignal, JobContext
from durabl.backend import Backend
from durabl.clock import Clock

logger = logging.getLogger(__name__)


class Heartbeat:
    """Renews one lease every ``interval`` seconds until stopped.

    A confirmed renewal moves the run's local deadline to (time the renewal was sent +
    ``visibility_timeout``). A ``lease-lost`` answer aborts the run at once; errors leave
    the deadline where it is, so the run aborts when it passes unconfirmed.
    """

    def __init__(
        self,
        backend: Backend,
        job_id: str,
        token: str,
        *,
        signal: AbortSignal,
        ctx: JobContext,
        clock: Clock,
        interval: float,
        visibility_timeout: float,
        on_lease_lost: Callable[[], None] | None = None,
    ) -> None:
        self.backend = backend
        self.job_id = job_id
        self.token = token
        self.signal = signal
        self.ctx = ctx
        self.clock = clock
        self.interval = interval
        self.visibility_timeout = visibility_timeout
        self.on_lease_lost = on_lease_lost
        self.beats = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._due = 0.0

    def beat(self) -> str | None:
        """One renewal. Returns "applied", "lease-lost", or None after an error."""
        sent_at = self.clock.monotonic()
        logs = self.ctx._take_logs()
        try:
            result = self.backend.heartbeat(self.job_id, self.token, logs=logs)
        except Exception:
            self.ctx._requeue_logs(logs)
            logger.warning(
                "heartbeat failed for job %s",
                self.job_id,
                exc_info=True,
                extra={"job_id": self.job_id},
            )
            return None
        self.beats += 1
        if result == "applied":
            self.signal.extend(sent_at + self.visibility_timeout)
        elif self.signal.abort(LEASE_LOST) and self.on_lease_lost is not None:
            self.on_lease_lost()
        return result

    def start(self) -> None:
        self._due = self.clock.monotonic() + self.interval
        self._thread = threading.Thread(
            target=self._run, name=f"durabl-heartbeat-{self.job_id}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._next_wait()):
            if self.signal.aborted:
                # Lease trouble is reported; shutdown and a run's own limits are not.
                lost = self.signal.reason in (LEASE_LOST, LEASE_UNCONFIRMED)
                if self.on_lease_lost is not None and lost:
                    self.on_lease_lost()
                return
            if self.signal.deadline is not None and self.clock.monotonic() < self._due:
                continue
            self._due = self.clock.monotonic() + self.interval
            if self.beat() == "lease-lost":
                return

    def _next_wait(self) -> float:
        """Sleep until the next renewal, but wake by the lease deadline to notice it."""
        now = self.clock.monotonic()
        wait = self._due - now
        deadline = self.signal.deadline
        if deadline is not None:
            wait = min(wait, deadline - now)
        limit: float | None = getattr(self.signal, "limit", None)  # a RunSignal's limit
        if limit is not None:
            wait = min(wait, limit - now)
        return max(wait, 0.01)

    def stop(self, timeout: float | None = 5.0) -> None:
        """Stop renewing and join the thread (bounded: a renewal in flight may hang)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
