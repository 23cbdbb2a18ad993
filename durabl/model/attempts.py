"""A job's attempt history: one entry per claim, saying how it ended. Pure: no I/O.

Every store appends an :class:`Attempt` when a claim ends (a terminal write, a release, a
reaper's recovery) and keeps the newest :data:`ATTEMPTS_KEPT`; the job record
(:attr:`durabl.model.job.Job.attempt_history`) carries them back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, get_args

AttemptOutcome = Literal[
    "completed",
    "retry-scheduled",
    "failed",
    "lease-lost",
    "released",
    "snoozed",
    "stalled",
    "cancelled",
    "superseded",
    "invalid-payload",
]
ATTEMPT_OUTCOMES: tuple[AttemptOutcome, ...] = get_args(AttemptOutcome)
#: How many attempts a job's history keeps (the newest).
ATTEMPTS_KEPT = 25
#: The longest one-line error an attempt keeps, in characters.
ATTEMPT_ERROR_CHARS = 200


@dataclass(frozen=True)
class Attempt:
    """One claim of a job and how it ended (:attr:`Job.attempt_history`). ``number`` is the
    job's attempt count during the claim (a released claim gives its attempt back, so the
    next one has the same number); ``worker`` the claiming process's lease owner; ``error``
    a one-line summary of the failure (the full text stays in :attr:`Job.fail_reason`)."""

    number: int
    worker: str | None
    started_at: datetime | None
    ended_at: datetime
    outcome: AttemptOutcome
    error: str | None = None


def attempt_error(reason: str | None) -> str | None:
    """The one-line summary of a failure reason that an attempt keeps: its first non-blank
    line (``Type: message`` for a handler's exception), clipped."""
    if not reason:
        return None
    line = next((ln.strip() for ln in reason.splitlines() if ln.strip()), "")
    if len(line) > ATTEMPT_ERROR_CHARS:
        line = line[: ATTEMPT_ERROR_CHARS - 1] + "\u2026"
    return line or None


def add_attempt(history: Sequence[Attempt], attempt: Attempt) -> tuple[Attempt, ...]:
    """``history`` with ``attempt`` appended, the oldest dropped past ATTEMPTS_KEPT."""
    return (*history, attempt)[-ATTEMPTS_KEPT:]


def attempt_from_record(record: Mapping[str, Any], instant: Callable[[Any], datetime]) -> Attempt:
    """An attempt as the stores keep it (keys ``n``, ``w``, ``s``, ``e``, ``o``, ``x``;
    ``instant`` reads the store's instants) back as an :class:`Attempt`."""
    started = record.get("s")
    return Attempt(
        number=int(record.get("n") or 0),
        worker=record.get("w"),
        started_at=None if started is None else instant(started),
        ended_at=instant(record["e"]),
        outcome=record["o"],
        error=record.get("x"),
    )
