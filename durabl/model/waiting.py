"""What a suspended orchestration waits for (``Job.waiting_for``), read from the journal the
job carries: nothing more is stored or fetched for it. Pure: no I/O."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

from durabl.model.signals import waiting_for_signal

#: The journal kind of a gather's wait (:mod:`durabl.orchestrator.children`).
GATHER_KIND = "gather"
#: What a job waiting in a gather says it waits for (``"children:<step>"``).
CHILDREN_PREFIX = "children:"


def suspension_of(
    status: str,
    run_at: datetime,
    journal: Sequence[Mapping[str, Any]],
    updated_at: datetime | None = None,
) -> str | None:
    """:attr:`Job.waiting_for`: a pending job whose last journal entry is a sleep that wakes
    at the job's own due time is sleeping until then (a retry's backoff moves ``run_at``
    elsewhere, and the job then waits for no instant of its body's); one whose last entry
    is a signal wait timing out at its due time waits for that signal (a signal that woke
    it made it due now: it then waits for nothing). One whose last entry is a gather's
    wait waits for its children while it is due after its last write (``updated_at``):
    the suspension's release sets a later due time, a child's wake makes it due then."""
    if status != "pending" or not journal:
        return None
    last = journal[-1]
    if last.get("kind") == GATHER_KIND:
        if updated_at is None or _utc_millis(run_at) <= _utc_millis(updated_at):
            return None
        return CHILDREN_PREFIX + str(last.get("name"))
    wake_at = last.get("wake_at")
    kind = last.get("kind")
    if kind not in ("sleep", "wait") or not isinstance(wake_at, datetime):
        return None
    if _utc_millis(wake_at) != _utc_millis(run_at):
        return None
    if kind == "wait":
        return waiting_for_signal(str(last.get("signal")))
    return f"until {format_instant(wake_at)}"


def _utc_millis(value: datetime) -> int:
    aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    return (aware - _EPOCH) // timedelta(milliseconds=1)


_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def format_instant(value: datetime) -> str:
    """An instant as ISO 8601 in UTC with a ``Z`` (milliseconds only when there are any)."""
    aware = value if value.tzinfo is not None else value.replace(tzinfo=timezone.utc)
    utc = aware.astimezone(timezone.utc)
    text = utc.strftime("%Y-%m-%dT%H:%M:%S")
    if utc.microsecond:
        text += f".{utc.microsecond // 1000:03d}"
    return text + "Z"
