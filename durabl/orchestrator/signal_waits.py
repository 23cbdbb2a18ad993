"""Signal waits in an orchestration: ``octx.wait_for_signal``. :class:`SignalWaits` is a
base class of :class:`~durabl.orchestrator.context.OrchestrationContext`: its method is
``octx``'s own, on the same step machine (the journal, the replay, the crash hooks).

Its journal entries (``wait``, then ``signal``) are described in
:mod:`durabl.orchestrator.journal`.
"""

from __future__ import annotations

import functools
from datetime import datetime
from typing import Protocol

from durabl.model.clock import Seconds, to_seconds
from durabl.model.exceptions import NondeterminismError
from durabl.model.signals import Signal, StoredSignal, check_signal_name
from durabl.orchestrator import journal as jr
from durabl.orchestrator.machine import StepMachine
from durabl.runtime.handler import SuspendRun


class SignalsIO(Protocol):
    """Where a context reads its job's signals."""

    def now(self) -> datetime:
        """The store's clock."""

    def next_signal(self, name: str, after_seq: int) -> StoredSignal | None:
        """The job's first stored signal ``name`` numbered after ``after_seq``."""

    def wake_if_signalled(self, name: str, after_seq: int) -> object:
        """Once the job is suspended waiting for ``name``: make it due now if such a
        signal was stored meanwhile (its sender saw the job running, not waiting)."""


class SignalWaits(StepMachine):
    """``octx.wait_for_signal``, over the context's step machine."""

    _io: SignalsIO

    def wait_for_signal(
        self, name: str, signal: str, timeout: Seconds | None = None
    ) -> Signal | None:
        """Wait, as the journaled step ``name``, for the next signal ``signal`` sent to this
        job (``queue.signal``) and return it; None once ``timeout`` seconds (None: no
        limit) passed without one. A signal sent before the body got here was kept and is
        returned at once; several of one name come one per wait, in the order sent.

        While it waits the job holds no worker: it is pending, due at the timeout, and the
        signal's send makes it due at once. The signal received is journaled: on resume
        the same wait returns the same signal (and a signal read but not journaled before
        a crash is read again: none is lost or received twice)."""
        self._check_halt()
        if not isinstance(name, str) or not name:
            raise ValueError(f"wait name must be a non-empty string, got {name!r}")
        check_signal_name(signal)
        seconds = None if timeout is None else to_seconds(timeout, "timeout")
        if seconds is not None and seconds < 0:
            raise ValueError(f"wait {name!r}: timeout must not be negative, got {timeout!r}")
        wait: jr.StepRecord | None = None
        if self.replaying and self._entries[self._cursor].kind != jr.SIGNAL:
            wait = self._replay_wait(jr.WAIT, name, signal)
        if self.replaying:
            return jr.received_signal(self._replay_wait(jr.SIGNAL, name, signal))
        self._halt_if_aborted()
        after = jr.last_signal_seq(jr.decode(self._journal)[0], signal)
        found = self._guard(self._io.next_signal, signal, after)
        now = self._io.now()
        if found is None:
            deadline = self._wait_deadline(name, signal, seconds, now, wait)
            if now < deadline:
                recheck = functools.partial(self._io.wake_if_signalled, signal, after)
                reason = f"waiting in {name!r} for signal {signal!r}"
                self._stop(SuspendRun(deadline, reason, after_release=recheck))
        self._guard(self._hooks.step_ran, name)
        entry = jr.signal_entry(
            self._cursor, name, signal, found, at=now, attempt=self.job.attempts
        )
        self._append([entry], name)
        self._cursor += 1
        self._guard(self._hooks.step_journaled, name)
        return jr.received_signal(jr.decode_entry(entry))

    def _replay_wait(self, kind: str, name: str, signal: str) -> jr.StepRecord:
        recorded = self._replay(kind, name)
        assert recorded is not None  # replaying: the journal holds an entry here
        if recorded.signal != signal:
            self._stop(
                NondeterminismError(
                    f"the journal's wait {name!r} is for signal {recorded.signal!r}, but "
                    f"the body now waits for {signal!r}"
                )
            )
        return recorded

    def _wait_deadline(
        self,
        name: str,
        signal: str,
        seconds: float | None,
        now: datetime,
        wait: jr.StepRecord | None,
    ) -> datetime:
        """The journaled timeout of this wait; the first time, the timeout from now,
        journaled unless it is already past (a zero timeout only looks)."""
        if wait is not None:
            return wait.wake_at or now
        deadline = jr.wait_deadline(now, seconds)
        if now < deadline:
            seq = self._cursor
            self._append(
                [jr.wait_entry(seq, name, signal, deadline, at=now, attempt=self.job.attempts)],
                name,
            )
            self._cursor += 1
        return deadline
