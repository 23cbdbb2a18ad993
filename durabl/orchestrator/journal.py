"""The journal format: what each entry holds, how entries decode, and what they weigh.

A journal is a list of portable dicts stored on the job, in append order. Its kinds:

- ``{"kind": "step", "seq", "name", "result", "key", "at", "attempt"}``: a completed step;
  an ``octx.send_event`` step also holds ``"event"``, the event's name (``result``: the
  ids of the jobs it started; its dedupe key derives from ``key``,
  :func:`~durabl.model.subscriptions.step_event_key`). Journals written before that
  field was added have none: they replay the same, the send is only not named;
- ``{"kind": "sleep", "seq", "name", "wake_at", "at", "attempt"}``: a durable sleep;
- ``{"kind": "wait", "seq", "name", "signal", "wake_at", "at", "attempt"}``: a wait for
  the signal ``signal`` suspended the job until ``wake_at`` (its timeout, or
  :data:`~durabl.model.signals.WAIT_FOREVER`);
- ``{"kind": "signal", "seq", "name", "signal", "result", "signal_seq", "at", "attempt"}``:
  what that wait received: the signal (``result``: its name, data and ``sent_at``; its
  stored ``signal_seq``), or None when the timeout passed;
- ``{"kind": "bootstrap", "started_at", "seed", "at"}``: what ``octx.now()`` and
  ``octx.uuid()`` derive from; at most one, outside the step numbering.

``seq`` numbers steps, sleeps and waits from 0 in the order the body asks for them: a step's
identity is its position and its name. Pure: no I/O.
"""

from __future__ import annotations

import copy
import hashlib
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from durabl.model.clock import as_utc
from durabl.model.exceptions import DurablError
from durabl.model.job import Job, JournalRecord
from durabl.model.options import MAX_PAYLOAD_BYTES
from durabl.model.payload import check_payload
from durabl.model.payload import portable as _portable
from durabl.model.signals import WAIT_FOREVER, Signal, StoredSignal

STEP = "step"
SLEEP = "sleep"
WAIT = "wait"
SIGNAL = "signal"
BOOTSTRAP = "bootstrap"
DEFAULT_MAX_JOURNAL_BYTES = 4 * 1024 * 1024
"""The default cap on one job's journal (a job's data shares the same budget)."""

EntryKind = Literal["step", "sleep", "wait", "signal", "spawn", "children", "gather", "gathered"]
#: The kinds of child jobs' steps are :mod:`durabl.orchestrator.children`'s.
_KINDS: tuple[EntryKind, ...] = (
    "step",
    "sleep",
    "wait",
    "signal",
    "spawn",
    "children",
    "gather",
    "gathered",
)


class StepResultError(DurablError, TypeError):
    """A step returned a value the store cannot hold (checked before it is journaled).

    The run fails at once (``fatal``): retrying would repeat the step's side effect and
    fail again the same way."""


@dataclass(frozen=True)
class StepRecord:
    """One journaled step or sleep, decoded: ``seq`` is its position among the body's
    steps and sleeps, ``at`` when it was journaled, ``attempt`` the attempt that ran it."""

    name: str
    result: Any
    seq: int
    kind: EntryKind = "step"
    at: datetime | None = None
    attempt: int | None = None
    idempotency_key: str | None = None
    wake_at: datetime | None = None
    #: A signal wait's signal name, and the stored ``seq`` of the signal it received.
    signal: str | None = None
    signal_seq: int | None = None
    #: The event an ``octx.send_event`` step sent (None for other steps, and for a send
    #: journaled before sends were named).
    event: str | None = None


@dataclass(frozen=True)
class Bootstrap:
    """The journaled start instant and seed behind ``octx.now()`` and ``octx.uuid()``."""

    started_at: datetime
    seed: str


def portable(value: Any) -> Any:
    """A fresh copy of a checked value as every store returns it (tuples as lists,
    datetimes as aware UTC milliseconds), so a step returns the same value the first time
    as on every replay."""
    return _portable(value)


def step_entry(
    seq: int,
    name: str,
    result: Any,
    *,
    key: str,
    at: datetime,
    attempt: int,
    event: str | None = None,
) -> dict[str, Any]:
    """A step's journal entry (``event``: the event a send step sent);
    :class:`StepResultError` if ``result`` is not storable."""
    try:
        check_payload(result, what=f"result of step {name!r}")
    except TypeError as exc:
        raise StepResultError(
            f"{exc}. A step's result is journaled on the job: return ids and plain data "
            "(None, bool, int, float, str, bytes, datetime, list, dict with str keys)"
        ) from None
    entry: dict[str, Any] = {
        "kind": STEP,
        "seq": seq,
        "name": name,
        "result": portable(result),
        "key": key,
        "at": at,
        "attempt": attempt,
    }
    if event is not None:
        entry["event"] = event
    return entry


def sleep_entry(
    seq: int, name: str, wake_at: datetime, *, at: datetime, attempt: int
) -> dict[str, Any]:
    return {
        "kind": SLEEP,
        "seq": seq,
        "name": name,
        "wake_at": wake_at,
        "at": at,
        "attempt": attempt,
    }


def wait_entry(
    seq: int, name: str, signal: str, wake_at: datetime, *, at: datetime, attempt: int
) -> dict[str, Any]:
    return {
        "kind": WAIT,
        "seq": seq,
        "name": name,
        "signal": signal,
        "wake_at": wake_at,
        "at": at,
        "attempt": attempt,
    }


def signal_entry(
    seq: int,
    name: str,
    signal: str,
    received: StoredSignal | None,
    *,
    at: datetime,
    attempt: int,
) -> dict[str, Any]:
    """What the wait ``name`` for ``signal`` received (None: its timeout passed)."""
    result = None
    if received is not None:
        sent = received.signal
        result = {"name": sent.name, "data": portable(sent.data), "sent_at": sent.sent_at}
    return {
        "kind": SIGNAL,
        "seq": seq,
        "name": name,
        "signal": signal,
        "result": result,
        "signal_seq": None if received is None else received.seq,
        "at": at,
        "attempt": attempt,
    }


def wait_deadline(now: datetime, seconds: float | None) -> datetime:
    """When a signal wait started at ``now`` times out (to the millisecond):
    :data:`WAIT_FOREVER` without a timeout, or past it."""
    if seconds is None or seconds >= (WAIT_FOREVER - now).total_seconds():
        return WAIT_FOREVER
    deadline = now + timedelta(seconds=seconds)
    return deadline.replace(microsecond=deadline.microsecond // 1000 * 1000)


def last_signal_seq(entries: Iterable[StepRecord], signal: str) -> int:
    """The stored ``seq`` of the last signal ``signal`` that ``entries`` received (-1:
    none): the next wait for it takes the first stored after."""
    received = [
        e.signal_seq
        for e in entries
        if e.kind == SIGNAL and e.signal == signal and e.signal_seq is not None
    ]
    return max(received, default=-1)


def received_signal(record: StepRecord) -> Signal | None:
    """The signal a journaled ``signal`` entry holds (None: the wait timed out)."""
    result = record.result
    if not isinstance(result, dict):
        return None
    return Signal(str(result["name"]), copy.deepcopy(result["data"]), as_utc(result["sent_at"]))


def check_wake_instant(name: str, when: object) -> datetime:
    """``when`` as an aware UTC datetime for ``sleep_until``; TypeError for what is not a
    datetime, ValueError for a naive one (its instant would depend on the server's zone)."""
    if not isinstance(when, datetime):
        raise TypeError(f"sleep_until {name!r}: when must be a datetime, got {when!r}")
    if when.tzinfo is None or when.utcoffset() is None:
        raise ValueError(
            f"sleep_until {name!r}: when must be timezone-aware "
            "(for example datetime(2026, 12, 24, tzinfo=timezone.utc)), got a naive datetime"
        )
    try:
        return when.astimezone(timezone.utc)
    except OverflowError:
        raise ValueError(f"sleep_until {name!r}: {when!r} is outside UTC's range") from None


def bootstrap_entry(started_at: datetime, seed: str, *, at: datetime) -> dict[str, Any]:
    return {"kind": BOOTSTRAP, "started_at": started_at, "seed": seed, "at": at}


def _opt_time(value: Any) -> datetime | None:
    return as_utc(value) if isinstance(value, datetime) else None


def decode_entry(entry: JournalRecord) -> StepRecord:
    kind = entry.get("kind")
    known = [k for k in _KINDS if k == kind]
    if not known:
        raise DurablError(f"journal entry of unknown kind {kind!r}")
    signal_seq = entry.get("signal_seq")
    signal = entry.get("signal")
    event = entry.get("event")
    return StepRecord(
        name=str(entry.get("name")),
        result=entry.get("result"),
        seq=int(entry.get("seq", -1)),
        kind=known[0],
        signal=signal if isinstance(signal, str) else None,
        signal_seq=signal_seq if isinstance(signal_seq, int) else None,
        at=_opt_time(entry.get("at")),
        attempt=entry.get("attempt"),
        idempotency_key=entry.get("key"),
        wake_at=_opt_time(entry.get("wake_at")),
        event=event if isinstance(event, str) else None,
    )


def decode(journal: Iterable[JournalRecord]) -> tuple[list[StepRecord], Bootstrap | None]:
    """Steps and sleeps in order, and the bootstrap if one was journaled."""
    steps: list[StepRecord] = []
    bootstrap: Bootstrap | None = None
    for entry in journal:
        if entry.get("kind") == BOOTSTRAP:
            if bootstrap is None:
                bootstrap = Bootstrap(as_utc(entry["started_at"]), str(entry["seed"]))
        else:
            steps.append(decode_entry(entry))
    return steps, bootstrap


# -- size -------------------------------------------------------------------------------------
def entry_size(index: int, entry: Mapping[str, Any]) -> int:
    """The bytes ``entry`` adds to the journal array at ``index`` (BSON element)."""
    return 2 + len(str(index)) + check_payload(dict(entry), what="journal entry")


def journal_size(journal: Iterable[JournalRecord]) -> int:
    """The BSON size of the journal array."""
    return 5 + sum(entry_size(i, e) for i, e in enumerate(journal))


def job_weight(job: Job[Any]) -> int:
    """What the job's own data takes of the shared budget (as enqueue counts it)."""
    key = job.dedupe_key or ""
    return (
        check_payload(job.data)
        + len(job.type.encode("utf-8", "replace"))
        + 2 * len(key.encode("utf-8", "replace"))
    )


def journal_budget(job: Job[Any], max_journal_bytes: int) -> int:
    """How large this job's journal may grow: the configured cap, and never so large that
    data and journal together leave no room for the logs and failure reason the job must
    still be able to take (the payload budget of :mod:`durabl.model.options`)."""
    return max(min(max_journal_bytes, MAX_PAYLOAD_BYTES - job_weight(job)), 0)


# -- determinism ------------------------------------------------------------------------------
def derive_uuid(seed: str, label: str) -> str:
    """A UUID (version 4 layout) derived from the journaled seed and ``label``: the same
    on every resume. Not for secrets: anyone who reads the journal can derive it."""
    digest = hashlib.sha256(f"{seed}\x00{label}".encode()).digest()
    return str(uuid.UUID(bytes=digest[:16], version=4))
