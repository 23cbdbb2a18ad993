"""Helpers for testing code that uses durabl: a controllable clock, a bounded wait, and a
harness that runs orchestration bodies on the real step machine without a queue."""

from __future__ import annotations

import copy
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from durabl.model.abort import JobContext, LogBuffer
from durabl.model.clock import Seconds, to_seconds
from durabl.model.job import Job, JournalAppendResult, LogEntry
from durabl.model.options import MAX_LOG_ENTRIES
from durabl.model.payload import check_payload
from durabl.model.signals import (
    WAIT_FOREVER,
    Signal,
    StoredSignal,
    check_signal_name,
    checked_signal_data,
)
from durabl.model.waiting import suspension_of
from durabl.orchestrator import Body, OrchestrationContext, StepRecord
from durabl.orchestrator.harness_children import HarnessChildren
from durabl.orchestrator.journal import (
    DEFAULT_MAX_JOURNAL_BYTES,
    decode,
    journal_budget,
    last_signal_seq,
    portable,
)
from durabl.orchestrator.limits import RunLimits
from durabl.runtime.handler import RunSignal, Snooze, SuspendRun

__all__ = ["FakeClock", "OrchestrationHarness", "SimulatedCrash", "wait_until"]


class FakeClock:
    """A clock that moves only when told. ``now()`` and ``monotonic()`` advance together."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2030, 1, 1, tzinfo=timezone.utc)
        if self._now.tzinfo is None:
            raise ValueError("FakeClock needs a timezone-aware start")
        self._mono = 1000.0
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def monotonic(self) -> float:
        with self._lock:
            return self._mono

    def advance(self, seconds: Seconds) -> datetime:
        """Move time forward; returns the new now."""
        step = to_seconds(seconds, "seconds")
        with self._lock:
            self._now += timedelta(seconds=step)
            self._mono += step
            return self._now


def wait_until(
    predicate: Callable[[], object], timeout: float = 10.0, interval: float = 0.005
) -> bool:
    """Poll ``predicate`` until it is truthy or ``timeout`` real seconds pass.

    For end-to-end tests of real threads where no event exists to wait on.
    """
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        pause.wait(interval)


# -- orchestrations ---------------------------------------------------------------------------
HARNESS_SEED = "durabl-harness-seed"
"""The bootstrap seed an :class:`OrchestrationHarness` uses unless given another."""

HarnessStatus = Literal["new", "completed", "crashed", "sleeping", "waiting", "failed"]


class SimulatedCrash(Exception):
    """How the harness stops a body at a crash point. The machine halts with it, so a body
    that catches it cannot carry on; the harness reports the attempt as ``crashed``."""


class _CrashHooks:
    def __init__(self, after: str | None, before: str | None) -> None:
        self.after = after
        self.before = before
        self.fired = False

    def step_ran(self, name: str) -> None:
        if name == self.before and not self.fired:
            self.fired = True
            raise SimulatedCrash(f"crash after step {name!r} ran, before it was journaled")

    def step_journaled(self, name: str) -> None:
        if name == self.after and not self.fired:
            self.fired = True
            raise SimulatedCrash(f"crash right after step {name!r} was journaled")


class _MemoryJournal:
    """A harness's journal (the list itself, appended in place), its clock and its
    event sends."""

    def __init__(
        self,
        journal: list[dict[str, Any]],
        now: Callable[[], datetime],
        send_event: Callable[[str, Any, str], list[str]],
        next_signal: Callable[[str, int], StoredSignal | None],
        children: HarnessChildren,
    ) -> None:
        self._journal = journal
        self._now = now
        self.send_event = send_event
        self.next_signal = next_signal
        self.start_children = children.start
        self.read_children = children.read

    def wake_if_children_done(self) -> bool:
        return False  # the harness resumes only when told: resume() reads the children

    def wake_if_signalled(self, name: str, after_seq: int) -> bool:
        return False  # the harness resumes only when told: resume() finds the signal

    def now(self) -> datetime:
        return self._now()

    def append(self, entries: list[dict[str, Any]], position: int) -> JournalAppendResult:
        journal = self._journal
        if position != len(journal):
            return "lease-lost"
        journal.extend(portable(e) for e in entries)  # as a store hands it back
        return "applied"

    def heartbeat(self) -> Literal["heartbeated", "lease-lost"]:
        return "heartbeated"


class OrchestrationHarness:
    """Run an orchestration body on the real step machine over an in-memory journal: no
    queue, no backend, no threads.

    ``run()`` is the first attempt; ``crash_after(step)`` and ``crash_before(step)`` run an
    attempt that dies right after that step is journaled, or after its function ran but
    before its result was journaled; ``resume()`` is the next attempt over the same
    journal, and ``resume_with(body)`` the next attempt of a changed body (it raises
    :class:`~durabl.NondeterminismError` when the change cannot replay the journal).

    A body's errors propagate from these calls after the attempt is recorded (``status``
    ``"failed"``, ``error``); a completed body's return value is ``result``, as the job's
    would be. Step results are checked and stored as a store would
    (``TypeError`` for what no store can hold; tuples come back as lists), and the journal
    budget applies as in production. ``octx.now()`` is the clock's start (by default
    2030-01-01 UTC) and ``octx.uuid()`` derives from a fixed seed, so results are stable
    between test runs.

    Sleep: an attempt that reaches ``octx.sleep`` ends with ``status == "sleeping"`` and
    ``wake_at`` set; ``resume()`` first moves the clock to the wake time (the sleep
    elapses) unless ``elapse_sleep=False``, which wakes the body early so it sleeps again.
    As in production, waking from a sleep does not count an attempt.

    Signals: ``send_signal(name, data)`` keeps a signal for the body, as ``queue.signal``
    does; an attempt that reaches ``octx.wait_for_signal`` with none kept ends with
    ``status == "waiting"`` (``wake_at``: its timeout, ``waiting_for``: ``"signal:<name>"``),
    and ``resume()`` receives a signal sent meanwhile, or else lets the timeout pass (a wait
    without one waits again).

    Events: ``octx.send_event`` appends ``(event, data)`` to ``sent_events``, once per
    step however often the step runs again (``crash_before`` included), and returns one
    id per type that ``subscriptions`` (event name -> job types) subscribes to it.

    Child jobs: ``octx.start_children`` creates them in the harness (``children``, each
    once however often its step runs again); an attempt that reaches ``octx.gather``
    before they all ended has ``status == "waiting"`` (``waiting_for``:
    ``"children:<step>"``); ``finish_child(child_id, status, result)`` ends one, and
    ``resume()`` returns from the gather once all it waits for ended, else lets its
    timeout pass (a gather without one waits again).
    """

    def __init__(
        self,
        body: Body,
        data: Any = None,
        *,
        clock: FakeClock | None = None,
        job_id: str = "job-1",
        type: str = "orchestration",
        dedupe_key: str | None = None,
        seed: str = HARNESS_SEED,
        max_journal_bytes: int | None = None,
        step_timeout: Seconds | None = 300.0,
        max_duration: Seconds | None = None,
        subscriptions: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        if not callable(body):
            raise TypeError(f"body must be callable, got {body!r}")
        check_payload({} if data is None else data)
        self.body = body
        self.data = portable({} if data is None else data)
        self.clock = clock or FakeClock()
        self.job_id = job_id
        self.type = type
        self.dedupe_key = dedupe_key
        self.seed = seed
        self.limits = RunLimits.checked(
            max_journal_bytes=DEFAULT_MAX_JOURNAL_BYTES
            if max_journal_bytes is None
            else max_journal_bytes,
            step_timeout=step_timeout,
            max_duration=max_duration,
        )
        self.max_journal_bytes = self.limits.max_journal_bytes
        self.step_timeout, self.max_duration = self.limits.step_timeout, self.limits.max_duration
        self.attempts = 0
        self.runs = 0
        self.status: HarnessStatus = "new"
        self.error: BaseException | None = None
        #: What the body returned once it completed (the job's result), else None.
        self.result: Any = None
        self.wake_at: datetime | None = None
        self._journal: list[dict[str, Any]] = []
        self._created = self._now()
        self._logs: deque[LogEntry] = deque(maxlen=MAX_LOG_ENTRIES)
        self.subscriptions = {e: list(types) for e, types in (subscriptions or {}).items()}
        #: Every event the body sent, as ``(event, data)``, each send once.
        self.sent_events: list[tuple[str, Any]] = []
        self._sends: dict[str, list[str]] = {}
        self._started_jobs = 0
        self._signals: list[StoredSignal] = []
        self._children = HarnessChildren(job_id, self._now)

    def __repr__(self) -> str:
        return (
            f"OrchestrationHarness(status={self.status!r}, attempts={self.attempts}, "
            f"steps={[s.name for s in self.steps]})"
        )

    # -- attempts ---------------------------------------------------------------------------
    def run(self) -> HarnessStatus:
        """The first attempt, to its end (completed, sleeping or failed)."""
        if self.runs:
            raise RuntimeError("run() starts the orchestration once; use resume() after it")
        return self._attempt(self.body)

    def resume(self, *, elapse_sleep: bool = True) -> HarnessStatus:
        """The next attempt over the same journal: journaled steps replay, the rest run."""
        return self._attempt(self.body, elapse_sleep=elapse_sleep)

    def resume_with(self, body: Body, *, elapse_sleep: bool = True) -> HarnessStatus:
        """The next attempt with ``body`` in place of the current one (a deploy of a changed
        body); it stays in place for later attempts."""
        self.body = body
        return self._attempt(body, elapse_sleep=elapse_sleep)

    def crash_after(self, step: str) -> HarnessStatus:
        """An attempt that dies right after ``step`` is journaled: the next one skips it."""
        return self._attempt(self.body, after=step)

    def crash_before(self, step: str) -> HarnessStatus:
        """An attempt that dies after ``step``'s function ran but before its result was
        journaled: the next one runs it again, with the same idempotency key."""
        return self._attempt(self.body, before=step)

    def send_signal(self, name: str, data: Any = None) -> None:
        """Send the signal ``name`` to the orchestration (``queue.signal``): the body's
        ``wait_for_signal`` for it receives it on the next attempt (``resume()``), or it is
        kept until a wait asks for it. Checked as ``queue.signal`` checks it."""
        check_signal_name(name)
        stored = checked_signal_data(name, data)
        self._signals.append(StoredSignal(len(self._signals), Signal(name, stored, self._now())))

    @property
    def children(self) -> list[Job[Any]]:
        """The child jobs the body started (``octx.start_children``), in the order
        created: each once, however often its step ran again."""
        return self._children.jobs

    def finish_child(
        self,
        child_id: str,
        status: str = "completed",
        result: Any = None,
        *,
        reason: str | None = None,
    ) -> Job[Any]:
        """End the child ``child_id`` with ``status`` (``completed``, ``failed``,
        ``cancelled`` or ``superseded``), its ``result`` (or failure ``reason``), so a
        ``gather`` waiting for it can return on the next ``resume()``."""
        return self._children.finish(child_id, status, result, reason)

    @property
    def waiting_for(self) -> str | None:
        """What the suspended orchestration waits for (``"signal:approve"``, ``"until
        ..."``), as ``Job.waiting_for`` says it; None unless sleeping or waiting."""
        if self.status not in ("sleeping", "waiting") or self.wake_at is None:
            return None
        return suspension_of("pending", self.wake_at, self._journal, self._now())

    # -- what happened ----------------------------------------------------------------------
    @property
    def steps(self) -> list[StepRecord]:
        """The journaled steps (and sleeps, ``kind="sleep"``) in order, decoded."""
        return decode(self._journal)[0]

    @property
    def journal(self) -> list[dict[str, Any]]:
        """The raw journal entries, as a store would hold them."""
        return copy.deepcopy(self._journal)

    @property
    def logs(self) -> list[str]:
        """Every ``octx.log`` line of every attempt (bounded and clipped as on a job)."""
        return [entry.message for entry in self._logs]

    # -- inside -----------------------------------------------------------------------------
    def _send_event(self, event: str, data: Any, dedupe_key: str) -> list[str]:
        """What a store's send does, kept here: a repeat of a step's send (same key)
        returns the ids of the first and records nothing more."""
        earlier = self._sends.get(dedupe_key)
        if earlier is not None:
            return list(earlier)
        self.sent_events.append((event, portable(data)))
        ids = []
        for type in self.subscriptions.get(event, []):
            self._started_jobs += 1
            ids.append(f"{type}-{self._started_jobs}")
        self._sends[dedupe_key] = ids
        return list(ids)

    def _next_signal(self, name: str, after_seq: int) -> StoredSignal | None:
        kept = self._signals[after_seq + 1 :]
        return next((s for s in kept if s.signal.name == name), None)

    def _signal_arrived(self) -> bool:
        """Whether the signal a waiting body waits for was sent since it suspended."""
        last = self._journal[-1] if self._journal else {}
        name = last.get("signal")
        if last.get("kind") != "wait" or not isinstance(name, str):
            return False
        after = last_signal_seq(self.steps, name)
        return self._next_signal(name, after) is not None

    def _gathered_children(self) -> bool:
        """Whether a gather waits and every child it waits for ended since."""
        last = self._journal[-1] if self._journal else {}
        return last.get("kind") == "gather" and self._children.waited_done()

    def _gather_deadline(self) -> datetime | None:
        """A waiting gather's timeout (the harness lets it pass on resume, not the
        recheck a worker makes)."""
        last = self._journal[-1] if self._journal else {}
        wake_at = last.get("wake_at")
        return wake_at if last.get("kind") == "gather" and isinstance(wake_at, datetime) else None

    def _now(self) -> datetime:
        now = self.clock.now()
        return now.replace(microsecond=now.microsecond // 1000 * 1000)

    def _attempt(
        self,
        body: Body,
        *,
        after: str | None = None,
        before: str | None = None,
        elapse_sleep: bool = True,
    ) -> HarnessStatus:
        if self.status in ("sleeping", "waiting") and self.wake_at is not None:
            elapse = elapse_sleep and self.clock.now() < self.wake_at
            if self.status == "waiting":  # a signal, or the timeout, ends the wait
                ended = self._signal_arrived() or self._gathered_children()
                elapse = elapse and self.wake_at < WAIT_FOREVER and not ended
            if elapse:
                self.clock.advance((self.wake_at - self.clock.now()).total_seconds())
        else:
            self.attempts += 1
        self.runs += 1
        now = self._now()
        job: Job[Any] = Job(
            id=self.job_id,
            type=self.type,
            data=copy.deepcopy(self.data),
            status="active",
            run_at=now,
            attempts=self.attempts,
            max_attempts=max(self.attempts, 3),
            dedupe_key=self.dedupe_key,
            dedupe_scope="pending+active" if self.dedupe_key else None,
            created_at=self._created,
            updated_at=now,
            journal=tuple(copy.deepcopy(self._journal)),
        )
        signal = RunSignal(self.clock)
        logs = LogBuffer(self._now)
        ctx = JobContext(signal, logs)
        hooks = _CrashHooks(after, before)
        octx = OrchestrationContext(
            job,
            io=_MemoryJournal(
                self._journal, self._now, self._send_event, self._next_signal, self._children
            ),
            signal=signal,
            log=ctx.log,
            budget=journal_budget(job, self.max_journal_bytes),
            step_timeout=self.step_timeout,
            monotonic=self.clock.monotonic,
            started_at=now,
            seed=lambda: self.seed,
            run_limit=self.limits.run_limit(self.clock.monotonic()),
            hooks=hooks,
        )
        self.error = None
        self.wake_at = None
        try:
            self.result = octx.run(body)
        except SimulatedCrash:
            self.status = "crashed"
        except SuspendRun as suspend:
            self.status = "sleeping" if suspend.after_release is None else "waiting"
            self.wake_at = self._gather_deadline() or suspend.run_at
        except Snooze as snooze:
            self.status = "sleeping"
            self.wake_at = now + timedelta(seconds=snooze.seconds)
        except Exception as exc:
            self.status = "failed"
            self.error = exc
            raise
        else:
            self.status = "completed"
        finally:
            self._logs.extend(logs.take())
        target = after or before
        if target is not None and not hooks.fired:
            raise AssertionError(
                f"no crash: step {target!r} did not run in this attempt (status {self.status!r})"
            )
        return self.status
