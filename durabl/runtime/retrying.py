"""The writes that end claims, tried again while the store is unavailable.

A processor's completer (:mod:`durabl.runtime.completer`) writes outcomes through
:class:`WriteRetries`. When a write raises
:class:`~durabl.model.exceptions.BackendUnavailableError` (the server is down,
restarting, out of reach) the outcome is not given up: the write is tried again, after a
short jittered wait (:data:`RETRY_FIRST_WAIT` doubling to :data:`RETRY_MAX_WAIT`; a store
that fails at once is asked about once a second, one that waits for a connection is asked
again as soon as that wait ends), until it is written, its lease is known lost (a renewal
answered ``lease-lost``: someone else owns the job), or the shutdown's deadline passes
(:meth:`WriteRetries.give_up_within`). Repeating is safe: the write is fenced by the claim
token, and a repeat of a write that applied is answered from its receipt. It goes on past
the lease's local deadline: past it the reaper *may* have handed the job on, and then the
fenced write is refused (``lease-lost``); if it has not, the write lands and the job does
not run again. Giving up at the deadline could only lose outcomes, never protect one.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from durabl.model.exceptions import BackendUnavailableError
from durabl.runtime.heartbeat import Heartbeat
from durabl.runtime.outages import OutageLog

RETRY_FIRST_WAIT = 0.1
"""Seconds before the second try of a write the store was unavailable for."""
RETRY_MAX_WAIT = 1.0
"""The longest wait between two tries, before jitter: an outcome is written within about
a second of the store answering again (plus the store's own wait for a connection)."""
RETRY_JITTER = 0.25
"""Each wait is shortened at random by up to this fraction, so that the processes of a
fleet do not all try again in step."""
GIVE_UP_MARGIN = 0.1
"""Seconds before the end of a shutdown's timeout that retries stop, so that the outcomes
given up are reported (and their runs let go) within it."""

T = TypeVar("T")


class GaveUp(Exception):
    """A write the store was unavailable for, given up at the shutdown's deadline."""

    def __init__(self, error: BackendUnavailableError) -> None:
        super().__init__(str(error))
        self.error = error


class LeaseLost(Exception):
    """A write not tried: a renewal made while it waited answered ``lease-lost``."""


def lost(lease: Heartbeat | None) -> bool:
    """Whether a renewal of ``lease`` made while its outcome waited answered lease-lost."""
    return lease is not None and lease.lease_lost


class WriteRetries:
    """Tries writes again while the store is unavailable, each failure and the recovery
    logged once per outage in ``failures``; ``rand`` gives the jitter. Thread-safe."""

    def __init__(self, failures: OutageLog, rand: Callable[[], float] = random.random) -> None:
        self.failures = failures
        self._rand = rand
        # Retries stop at this time.monotonic() (None: never), and a wait is cut short
        # when it is set.
        self._give_up_at: float | None = None
        self._wait = threading.Condition(threading.Lock())

    def give_up_within(self, timeout: float | None) -> None:
        """Stop retrying a little before ``timeout`` seconds from now (None: never), so
        that what is given up is reported within it; waits under way end early."""
        with self._wait:
            margin = 0.0 if timeout is None else min(GIVE_UP_MARGIN, timeout / 10)
            self._give_up_at = None if timeout is None else time.monotonic() + timeout - margin
            self._wait.notify_all()

    def call(self, write: Callable[[], T], lease: Heartbeat | None = None) -> T:
        """``write()``, tried again while it raises :class:`BackendUnavailableError`.
        :class:`LeaseLost` before a try once ``lease`` is known lost; :class:`GaveUp`
        once the shutdown's deadline passed."""
        tries = 0
        while True:
            if lost(lease):
                raise LeaseLost
            try:
                value = write()
            except BackendUnavailableError as exc:
                self.failures.failed(exc)
                tries += 1
                if not self.wait(tries):
                    raise GaveUp(exc) from exc
                continue
            self.failures.succeeded()
            return value

    def wait(self, tries: int) -> bool:
        """Wait before try ``tries + 1`` of a write the store was unavailable for: the
        first wait :data:`RETRY_FIRST_WAIT`, doubling up to :data:`RETRY_MAX_WAIT`, each
        shortened at random by up to :data:`RETRY_JITTER`. False, at once, when the
        shutdown's deadline has passed: give up."""
        delay = min(RETRY_MAX_WAIT, RETRY_FIRST_WAIT * 2.0 ** min(tries - 1, 10))
        delay *= 1.0 - RETRY_JITTER * self._rand()
        with self._wait:
            give_up_at = self._give_up_at
            if give_up_at is not None:
                left = give_up_at - time.monotonic()
                if left <= 0:
                    return False
                delay = min(delay, left)
            self._wait.wait(delay)  # give_up_within() cuts it short
        return True
