"""The step machine: ``octx``, the context an orchestration body receives.

One :class:`OrchestrationContext` drives one attempt of a body over the journal the job
carried when it was claimed. The same machine runs under a worker (the journal is written to
the store, fenced on the claim token) and in :class:`durabl.testing.OrchestrationHarness`
(an in-memory journal), so a body behaves the same in both. Child jobs and signal waits
are its base classes, in :mod:`durabl.orchestrator.children` and
:mod:`durabl.orchestrator.signal_waits`.
"""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, NoReturn, Protocol, TypeVar, cast

from durabl.model.abort import LEASE_LOST, AbortSignal, JobAborted
from durabl.model.clock import Seconds, to_seconds
from durabl.model.exceptions import JournalTooLarge, NondeterminismError
from durabl.model.job import Job, JournalAppendResult
from durabl.model.payload import check_payload
from durabl.model.subscriptions import check_event, step_event_key
from durabl.orchestrator import journal as jr
from durabl.orchestrator.children import ChildrenIO, ChildSteps
from durabl.orchestrator.signal_waits import SignalsIO, SignalWaits
from durabl.runtime.handler import RunSignal, SuspendRun

R = TypeVar("R")

Body = Callable[[Job[Any], "OrchestrationContext"], object]
"""An orchestration body: ``body(job, octx)``. Return completes the job."""

HeartbeatStatus = Literal["heartbeated", "lease-lost"]


@dataclass(frozen=True)
class StepKeys:
    """What a step function receives first: ``idempotency_key`` (pass it to the API the
    step calls), and the step's identity."""

    idempotency_key: str
    job_id: str
    step: str
    seq: int


class JournalIO(ChildrenIO, SignalsIO, Protocol):
    """Where a context reads time and writes its journal."""

    def now(self) -> datetime:
        """The store's clock."""

    def append(self, entries: list[dict[str, Any]], position: int) -> JournalAppendResult:
        """Append fenced on the claim; ``position`` is the journal's length before."""

    def heartbeat(self) -> HeartbeatStatus: ...

    def send_event(self, event: str, data: Any, dedupe_key: str) -> list[str]:
        """Send ``event`` with ``data``, or return the jobs an earlier send with
        ``dedupe_key`` started (``JobQueue.send_event_once``)."""


class StepHooks(Protocol):
    """Test hooks (the harness's simulated crashes); production uses none."""

    def step_ran(self, name: str) -> None:
        """The step's function returned; its result is not journaled yet."""

    def step_journaled(self, name: str) -> None:
        """The step's result is journaled."""


class _NoHooks:
    def step_ran(self, name: str) -> None:
        pass

    def step_journaled(self, name: str) -> None:
        pass


def _check_step_fn(name: str, fn: object) -> None:
    if not callable(fn):
        raise TypeError(f"step {name!r}: fn must be callable, got {fn!r}")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return  # a builtin without a signature: let the call decide
    try:
        signature.bind(None, None)
    except TypeError:
        raise TypeError(
            f"step {name!r}: fn must accept (keys, signal), for example "
            "lambda keys, signal: ...; it takes " + str(signature)
        ) from None


class OrchestrationContext(ChildSteps, SignalWaits):
    """``octx``: journaled steps, durable sleep, deterministic time and ids, logging.

    Everything the body decides must come from the job's data, from step results, or from
    ``now()`` and ``uuid()``: on resume the body runs again from the top, and completed
    steps return their journaled results instead of running.
    """

    _io: JournalIO

    def __init__(
        self,
        job: Job[Any],
        *,
        io: JournalIO,
        signal: RunSignal,
        log: Callable[[str], None],
        budget: int,
        step_timeout: float | None,
        monotonic: Callable[[], float],
        started_at: datetime,
        seed: Callable[[], str],
        run_limit: tuple[float, str] | None = None,
        hooks: StepHooks | None = None,
    ) -> None:
        self.job = job
        self._io = io
        self._signal = signal
        self._log = log
        self._budget = budget
        self._step_timeout = step_timeout
        self._monotonic = monotonic
        self._started_at = started_at
        self._new_seed = seed
        self._run_limit = run_limit
        self._hooks: StepHooks = hooks or _NoHooks()
        self._journal: list[dict[str, Any]] = [dict(e) for e in job.journal]
        self._entries, self._bootstrap = jr.decode(self._journal)
        self._size = jr.journal_size(self._journal)
        self._cursor = 0
        self._halt: BaseException | None = None
        self._restore_limit()

    def __repr__(self) -> str:
        return f"OrchestrationContext(job={self.job.id!r}, position={self._cursor})"

    # -- public ----------------------------------------------------------------------------
    @property
    def signal(self) -> AbortSignal:
        """Aborts on lease loss, shutdown, a step's timeout or the run's ``max_duration``.
        ``step()`` refuses to start once it has; pass it to long work outside steps."""
        return self._signal

    @property
    def replaying(self) -> bool:
        """True while the body is still going over steps the journal already holds."""
        return self._cursor < len(self._entries)

    def step(
        self,
        name: str,
        fn: Callable[[StepKeys, AbortSignal], R],
        *,
        idempotency_key: str | None = None,
        timeout: Seconds | None = None,
    ) -> R:
        """Run ``fn(keys, signal)`` once and journal its result; on resume, return the
        journaled result without calling ``fn``.

        At-least-once: a crash after ``fn`` returns and before its result is journaled runs
        it again on the next attempt, with the same ``keys.idempotency_key`` (by default
        ``"<job id>:<name>:<position>"``; pass ``idempotency_key`` to scope it to an entity
        instead). ``timeout`` (seconds; default the step timeout of the orchestration,
        itself the queue's visibility timeout by default) bounds how long the run keeps its
        lease while ``fn`` runs; past it the run aborts and the job is retried.
        """
        return self._journaled_step(name, fn, idempotency_key=idempotency_key, timeout=timeout)

    def _journaled_step(
        self,
        name: str,
        fn: Callable[[StepKeys, AbortSignal], R],
        *,
        idempotency_key: str | None = None,
        timeout: Seconds | None = None,
        event: str | None = None,
    ) -> R:
        """:meth:`step`, whose journal entry also names the ``event`` a send step sent."""
        self._check_halt()
        if not isinstance(name, str) or not name:
            raise ValueError(f"step name must be a non-empty string, got {name!r}")
        if idempotency_key is not None and not isinstance(idempotency_key, str):
            raise TypeError(f"idempotency_key must be a str, got {idempotency_key!r}")
        seconds = self._step_timeout if timeout is None else to_seconds(timeout, "timeout")
        if seconds is not None and seconds <= 0:
            raise ValueError(f"step {name!r}: timeout must be positive, got {timeout!r}")
        _check_step_fn(name, fn)
        seq = self._cursor
        recorded = self._replay("step", name)
        if recorded is not None:
            return cast(R, copy.deepcopy(recorded.result))
        self._halt_if_aborted()
        key = idempotency_key if idempotency_key is not None else f"{self.job.id}:{name}:{seq}"
        keys = StepKeys(key, self.job.id, name, seq)
        self._set_limit(self._step_limit(name, seconds))
        try:
            result = fn(keys, self._signal)
        finally:
            _ = self._signal.aborted  # a limit passed during fn aborts the run now
            self._restore_limit()
        self._guard(self._hooks.step_ran, name)
        entry = self._guard(
            jr.step_entry,
            seq,
            name,
            result,
            key=key,
            at=self._io.now(),
            attempt=self.job.attempts,
            event=event,
        )
        self._append([entry], name)
        self._cursor += 1
        self._guard(self._hooks.step_journaled, name)
        return cast(R, copy.deepcopy(entry["result"]))

    def sleep(self, name: str, seconds: Seconds) -> None:
        """Suspend the job for ``seconds``: the run ends, the worker is freed, and the job
        is pending again at the wake time (no attempt used). On wake the body runs from the
        top, completed steps replay, and it continues after this call. Reached again
        before the wake time (the worker died before it released the job, and the reaper
        made it due), it sleeps again until the same wake time."""
        self._check_halt()
        if not isinstance(name, str) or not name:
            raise ValueError(f"sleep name must be a non-empty string, got {name!r}")
        duration = to_seconds(seconds, "seconds")
        self._sleep(name, lambda now: now + timedelta(seconds=duration))

    def sleep_until(self, name: str, when: datetime) -> None:
        """Suspend the job until the instant ``when`` (a timezone-aware datetime), as
        :meth:`sleep` does: no worker is held, no attempt is used. An instant already past
        continues at once (the sleep is still journaled, so the body replays the same)."""
        self._check_halt()
        if not isinstance(name, str) or not name:
            raise ValueError(f"sleep name must be a non-empty string, got {name!r}")
        wake_at = jr.check_wake_instant(name, when)
        self._sleep(name, lambda now: wake_at)

    def _sleep(self, name: str, wake_time: Callable[[datetime], datetime]) -> None:
        """Journal a sleep to ``wake_time(now)`` the first time; suspend until the journaled
        wake time while it is ahead (also when replayed early, after a reap)."""
        recorded = self._replay("sleep", name)
        if recorded is not None:
            wake_at = recorded.wake_at or self._io.now()
        else:
            self._halt_if_aborted()
            now = self._io.now()
            wake_at = wake_time(now)
            wake_at = wake_at.replace(microsecond=wake_at.microsecond // 1000 * 1000)
            seq = self._cursor
            entry = jr.sleep_entry(seq, name, wake_at, at=now, attempt=self.job.attempts)
            self._append([entry], name)
            self._cursor += 1
            self._guard(self._hooks.step_journaled, name)
        if self._io.now() < wake_at:
            self._stop(SuspendRun(wake_at, f"sleeping in {name!r} until {wake_at.isoformat()}"))

    def send_event(self, name: str, event: str, data: Any = None) -> list[str]:
        """Send ``event`` (``queue.send_event``) as the journaled step ``name``: the ids of
        the jobs it started, one of every subscribed type; on resume, the journaled ids.

        Never twice: a run that crashed after the send and before the journal write sends
        again with the same dedupe key (from the job's id, ``name`` and the step's
        position), which finds the jobs the first send started, pending, running or
        finished, as long as they are stored (a job pruned or deleted in between is not
        found, and is started again)."""
        check_event(event)
        data = {} if data is None else data
        check_payload(data, what=f"data of event {event!r}")
        return self._journaled_step(
            name,
            lambda keys, signal: self._io.send_event(
                event, data, step_event_key(keys.idempotency_key)
            ),
            event=event,
        )

    def now(self) -> datetime:
        """The instant this orchestration started (its first journaled attempt), the same
        on every resume. Use it instead of reading the clock in the body."""
        return self._ensure_bootstrap().started_at

    def uuid(self, label: str) -> str:
        """A UUID string derived from the journaled seed and ``label``: the same label gives
        the same value on every resume. Not for secrets or tokens."""
        if not isinstance(label, str):
            raise TypeError(f"uuid label must be a str, got {label!r}")
        return jr.derive_uuid(self._ensure_bootstrap().seed, label)

    def log(self, message: str) -> None:
        """A line on the job's log (bounded; never counted against the journal budget)."""
        self._log(str(message))

    def heartbeat(self) -> HeartbeatStatus:
        """Renew the lease now (the worker already does it on a timer). ``lease-lost``
        once the run is aborted: another worker may own the job, or a limit passed."""
        if self._signal.aborted:
            return "lease-lost"
        return self._io.heartbeat()

    # -- driving a body --------------------------------------------------------------------
    def run(self, body: Body) -> object:
        """Run ``body`` to its end for this attempt. Returns what it returned (the job's
        result) when it completed; raises what ended it otherwise (:class:`SuspendRun` for
        a sleep, the body's error, or what the machine stopped it with, even if the body
        caught that)."""
        try:
            returned = body(self.job, self)
        except Exception:
            self._check_halt()  # what stopped the machine wins over what the body made of it
            raise
        finally:
            self._signal.set_limit(None)
        self._check_halt()
        if self._cursor < len(self._entries):
            left = [e.name for e in self._entries[self._cursor :]]
            self._stop(
                NondeterminismError(
                    f"the body returned after {self._cursor} step(s), but the journal holds "
                    f"{len(left)} more: {left[:5]}; the body no longer asks for them"
                )
            )
        return returned

    # -- inside ----------------------------------------------------------------------------
    def _check_halt(self) -> None:
        if self._halt is not None:
            raise self._halt

    def _halt_if_aborted(self) -> None:
        """Refuse to start a step (or sleep) once the run is aborted, for good: a body that
        catches the refusal and returns must not get its job marked completed."""
        if self._signal.aborted:
            self._stop(JobAborted(self._signal.reason or "aborted"))

    def _stop(self, exc: BaseException) -> NoReturn:
        """End the attempt with ``exc``; every later call raises it again, so a body that
        catches it cannot carry on past it."""
        self._halt = exc
        raise exc

    def _guard(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            self._stop(exc)

    def _replay(self, kind: str, name: str) -> jr.StepRecord | None:
        """The journaled entry at the cursor (advancing past it), None past the journal;
        :class:`NondeterminismError` when it is not this step."""
        seq = self._cursor
        if seq >= len(self._entries):
            return None
        recorded = self._entries[seq]
        if recorded.kind != kind or recorded.name != name:
            self._stop(
                NondeterminismError(
                    f"position {seq} of the journal holds {recorded.kind} {recorded.name!r}, "
                    f"but the body asked for {kind} {name!r}: the body changed, or it "
                    "branches on something that is not journaled"
                )
            )
        self._cursor += 1
        return recorded

    def _step_limit(self, name: str, seconds: float | None) -> tuple[float, str] | None:
        """The earlier of the run's limit and this step's timeout, from now."""
        run = self._run_limit
        if seconds is None or math.isinf(seconds):
            return run
        at = self._monotonic() + seconds
        if run is not None and run[0] <= at:
            return run
        return (at, f"step-timeout: step {name!r} ran longer than {seconds:g} s")

    def _set_limit(self, limit: tuple[float, str] | None) -> None:
        if limit is None:
            self._signal.set_limit(None)
        else:
            self._signal.set_limit(*limit)

    def _restore_limit(self) -> None:
        self._set_limit(self._run_limit)

    def _ensure_bootstrap(self) -> jr.Bootstrap:
        self._check_halt()
        if self._bootstrap is None:
            self._append([], "now/uuid")
        assert self._bootstrap is not None
        return self._bootstrap

    def _append(self, entries: list[dict[str, Any]], step: str) -> None:
        """Journal ``entries`` (with the bootstrap first, the first time anything is
        journaled), within the budget and fenced on the claim."""
        new_bootstrap: jr.Bootstrap | None = None
        if self._bootstrap is None:
            new_bootstrap = jr.Bootstrap(self._started_at, self._new_seed())
            entries = [
                jr.bootstrap_entry(new_bootstrap.started_at, new_bootstrap.seed, at=self._io.now()),
                *entries,
            ]
        position = len(self._journal)
        size = self._size + sum(
            self._guard(jr.entry_size, position + i, e) for i, e in enumerate(entries)
        )
        if size > self._budget:
            self._stop(JournalTooLarge(step, size, self._budget))
        if self._io.append(entries, position) != "applied":
            self._signal.abort(LEASE_LOST)
            self._stop(JobAborted(LEASE_LOST))
        self._journal.extend(entries)
        self._size = size
        if new_bootstrap is not None:
            self._bootstrap = new_bootstrap
