"""What a queue reports about itself: job counts, reaper sweeps, how it picks up jobs, and
the events its sinks receive. Pure data: no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args


@dataclass(frozen=True)
class QueueStats:
    """A point-in-time gauge of one type (or of every type). ``paused``: the type is paused
    (``queue.pause``), so its lag is not an alarm; always False for every type together."""

    pending: int = 0
    active: int = 0
    completed: int = 0
    failed: int = 0
    superseded: int = 0
    cancelled: int = 0
    oldest_pending_run_at: datetime | None = None
    oldest_pending_lag: float = 0.0
    failed_by_kind: Mapping[str, int] = field(default_factory=dict)
    paused: bool = False


@dataclass(frozen=True)
class ReapReport:
    """What one reaper sweep did."""

    recovered: int = 0
    stalled: int = 0
    superseded: int = 0
    saturated: bool = False
    job_ids: tuple[str, ...] = ()

    @property
    def handled(self) -> int:
        return self.recovered + self.stalled + self.superseded


@dataclass(frozen=True)
class StartReaperResult:
    status: Literal["started", "already-running"]
    recovered: int | None = None


EventKind = Literal[
    "claimed",
    "started",
    "completed",
    "failed",
    "superseded",
    "cancelled",
    "fail-fatal",
    "lease-lost",
    "reaper-recovered",
    "reaper-error",
    "shutdown-released",
    "suspended",
    "snoozed",
    "timed-out",
    "dead-lettered",
    "changestream-connected",
    "changestream-error",
    "changestream-fallback",
    "changestream-closed",
    "event-sent",
    "signalled",
    "woken",
]

#: Every :data:`EventKind`, for checking the kinds a sink asks for.
EVENT_KINDS: frozenset[str] = frozenset(get_args(EventKind))

PickupMode = Literal["push", "poll"]


@dataclass(frozen=True)
class QueueHealth:
    """What :meth:`JobQueue.is_healthy` reports. Truthy when ``healthy``.

    ``healthy`` is True until shutdown starts; it is not a database probe. ``pickup`` says
    how this process learns about new jobs: ``"push"`` while a change stream is connected,
    else ``"poll"``; ``reason`` says why, in words for people (not an API).
    """

    healthy: bool
    pickup: PickupMode
    reason: str
    processing: tuple[str, ...] = ()
    details: Mapping[str, Any] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return self.healthy


@dataclass(frozen=True, init=False)
class JobEvent:
    """One thing that happened, for metrics. Fields beyond kind/type/job_id depend on kind."""

    kind: str
    type: str | None = None
    job_id: str | None = None
    duration: float | None = None
    terminal: bool | None = None
    op: str | None = None
    handled: int | None = None
    saturated: bool | None = None
    error: BaseException | None = None
    attempt: int | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    def __init__(
        self,
        kind: str,
        type: str | None = None,
        job_id: str | None = None,
        duration: float | None = None,
        terminal: bool | None = None,
        op: str | None = None,
        handled: int | None = None,
        saturated: bool | None = None,
        error: BaseException | None = None,
        attempt: int | None = None,
        extra: Mapping[str, Any] | None = None,
    ) -> None:
        # Built for every claim and outcome while a sink listens: one write of the
        # instance's dict, not the frozen dataclass's object.__setattr__ per field.
        self.__dict__.update(
            kind=kind,
            type=type,
            job_id=job_id,
            duration=duration,
            terminal=terminal,
            op=op,
            handled=handled,
            saturated=saturated,
            error=error,
            attempt=attempt,
            extra={} if extra is None else extra,
        )

    @property
    def event(self) -> str | None:
        """``event-sent``: the event's name (None for other kinds)."""
        value = self.extra.get("event")
        return value if isinstance(value, str) else None

    @property
    def job_ids(self) -> tuple[str, ...]:
        """``event-sent``: the ids of the jobs the event started (empty for other kinds)."""
        return tuple(self.extra.get("job_ids", ()))
