"""Schedules: validation, the next tick and catch-up, written once for every store.

Pure: no I/O. A store keeps a schedule as its name, an opaque ``definition`` text (this
module encodes and decodes it) and three state fields (``next_run_at``, ``last_run_at``,
``last_job_id``); it advances them only by compare-and-set on ``next_run_at`` together
with the enqueue of the tick's jobs (see ``docs/schedules.md``).

Cron expressions are parsed by croniter (imported on first use: the ``durabl[cron]``
extra). Five fields are ``minute hour day month weekday``; six fields put **seconds
first**: ``second minute hour day month weekday``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Any, Literal

from durabl.model.clock import Seconds
from durabl.model.exceptions import ScheduleError
from durabl.model.options import NewJob, build_new_job, check_job_type
from durabl.model.payload import check_payload, to_millis
from durabl.model.tagged_json import decode_payload, encode_payload, from_ms, to_ms

CatchUp = Literal["latest", "none", "all"]
CATCH_UP_POLICIES: tuple[CatchUp, ...] = ("latest", "none", "all")
#: ``catch_up="all"`` enqueues at most this many missed ticks (the newest ones).
MAX_CATCH_UP = 100
#: Under ``catch_up="none"`` a tick still counts as on time this long after its instant
#: (and until the next tick), so a scheduler that wakes a little late does not skip it.
ON_TIME_GRACE = timedelta(seconds=10)
MAX_SCHEDULE_NAME_BYTES = 255
#: Enqueue options a schedule may carry for its jobs (``run_at`` is the tick's instant).
SCHEDULE_ENQUEUE_OPTIONS = frozenset(
    {
        "priority",
        "max_attempts",
        "dedupe_key",
        "dedupe_scope",
        "coalesce",
        "backoff",
        "backoff_delay",
        "backoff_max_delay",
        "timeout",
    }
)
_ONE_MS = timedelta(milliseconds=1)


@dataclass(frozen=True)
class Schedule:
    """A stored schedule as every process sees it (``queue.list_schedules()``).

    ``every`` is in seconds; ``next_run_at`` is the next tick not yet enqueued;
    ``last_run_at`` the newest tick that was, ``last_job_id`` its job (None when its dedupe
    slot was taken); ``paused``: it fires no tick until resumed (``queue.pause_schedule``)."""

    name: str
    type: str
    cron: str | None
    every: float | None
    timezone: str
    next_run_at: datetime | None = None
    last_run_at: datetime | None = None
    last_job_id: str | None = None
    data: Any = None
    catch_up: CatchUp = "latest"
    options: Mapping[str, Any] = field(default_factory=dict)
    paused: bool = False

    # -- what a store keeps ---------------------------------------------------------------
    def definition(self) -> str:
        """The declaration as stable text: a store keeps it opaque and compares it."""
        return encode_payload(
            {
                "type": self.type,
                "cron": self.cron,
                "every": self.every,
                "timezone": self.timezone,
                "catch_up": self.catch_up,
                "data": self.data,
                "options": {key: self.options[key] for key in sorted(self.options)},
            }
        )

    @classmethod
    def from_stored(
        cls,
        name: str,
        definition: str,
        next_run_at: datetime | None,
        last_run_at: datetime | None,
        last_job_id: str | None,
        paused: bool = False,
    ) -> Schedule:
        """A schedule from a store's row/document."""
        spec = decode_payload(definition)
        return cls(
            name=name,
            type=spec["type"],
            cron=spec["cron"],
            every=spec["every"],
            timezone=spec["timezone"],
            next_run_at=None if next_run_at is None else to_millis(next_run_at),
            last_run_at=None if last_run_at is None else to_millis(last_run_at),
            last_job_id=last_job_id,
            data=spec["data"],
            catch_up=spec["catch_up"],
            options=dict(spec["options"]),
            paused=bool(paused),
        )

    # -- ticks ----------------------------------------------------------------------------
    def next_tick(self, after: datetime) -> datetime:
        """The first tick strictly after ``after`` (millisecond precision, UTC)."""
        if self.every is not None:
            step = round(self.every * 1000)
            return from_ms((to_ms(after) // step + 1) * step)
        assert self.cron is not None
        zone = _zone(self.timezone)
        local = after.astimezone(zone)
        ticks = _croniter(self.cron, local)
        tick: datetime = ticks.get_next(datetime)
        # A wall-clock time that occurs twice (the hour repeated when DST ends) ticks once.
        while tick.replace(tzinfo=None) == local.replace(tzinfo=None):
            tick = ticks.get_next(datetime)
        return to_millis(tick.astimezone(timezone.utc))

    def ticks_back(self, now: datetime, since: datetime, limit: int) -> list[datetime]:
        """The newest ``limit`` ticks in ``[since, now]``, oldest first."""
        if self.every is not None:
            step = round(self.every * 1000)
            newest = to_ms(now) // step * step
            first = max(to_ms(since), newest - (limit - 1) * step)
            first = -(-first // step) * step
            return [from_ms(ms) for ms in range(first, newest + 1, step)]
        assert self.cron is not None
        zone = _zone(self.timezone)
        ticks = _croniter(self.cron, (now + _ONE_MS).astimezone(zone))
        found: list[datetime] = []  # newest first
        last_wall: datetime | None = None
        while len(found) < limit:
            local: datetime = ticks.get_prev(datetime)
            tick = to_millis(local.astimezone(timezone.utc))
            if tick < since:
                break
            wall = local.replace(tzinfo=None)
            if wall == last_wall:  # a repeated wall-clock time: its first occurrence ticks
                found[-1] = tick
            else:
                found.append(tick)
            last_wall = wall
        return found[::-1]

    def first_tick(self, now: datetime) -> datetime:
        """``next_run_at`` of a new (or redefined) schedule: the first tick after now."""
        return self.next_tick(now)


@dataclass(frozen=True)
class Firing:
    """What a due schedule does now: enqueue ``ticks`` (oldest first; possibly none, when
    catch-up skips them) and move ``next_run_at`` to ``next_run_at``."""

    ticks: tuple[datetime, ...]
    next_run_at: datetime


def plan_firing(schedule: Schedule, now: datetime) -> Firing | None:
    """The firing of ``schedule`` at ``now``, or None when it is not due or is paused.
    Missed ticks (every due tick but the newest, and the newest too when it is late under
    ``catch_up="none"``) follow the schedule's catch-up policy."""
    due = schedule.next_run_at
    if due is None or due > now or schedule.paused:
        return None
    # The due ticks, newest first from now back to ``due``: only as many as the policy can
    # use, so a long outage costs no walk over every tick it missed.
    wanted = MAX_CATCH_UP if schedule.catch_up == "all" else 1
    ticks = schedule.ticks_back(now, due, wanted)
    next_run_at = schedule.next_tick(now)
    if not ticks:  # cannot happen for a tick <= now; kept for safety
        return Firing((), next_run_at)
    newest_tick = ticks[-1]
    if schedule.catch_up == "all":
        chosen = tuple(ticks)
    elif schedule.catch_up == "latest":
        chosen = (newest_tick,)
    else:
        on_time = now - newest_tick <= ON_TIME_GRACE
        chosen = (newest_tick,) if on_time else ()
    return Firing(chosen, next_run_at)


def tick_job(schedule: Schedule, tick: datetime) -> NewJob:
    """The job a tick enqueues: the schedule's type, data and options, due at the tick."""
    return build_new_job(schedule.type, schedule.data, run_at=tick, **schedule.options)


def build_schedule(
    name: str,
    type: str,
    *,
    cron: str | None = None,
    every: Seconds | None = None,
    data: Any = None,
    timezone: str = "UTC",
    catch_up: str = "latest",
    **enqueue_options: Any,
) -> Schedule:
    """Validate a declaration; raise :class:`ScheduleError` (or the enqueue options' own
    ``ValueError``/``TypeError``) before anything is stored."""
    if not isinstance(name, str) or not name or name.isspace() or "\x00" in name:
        raise ScheduleError(f"schedule name must be a non-empty string, got {name!r}")
    if len(name.encode("utf-8", "replace")) > MAX_SCHEDULE_NAME_BYTES:
        raise ScheduleError(f"schedule name must be at most {MAX_SCHEDULE_NAME_BYTES} bytes")
    try:
        check_job_type(type)
    except ValueError as exc:
        raise ScheduleError(f"schedule {name!r}: {exc}") from None
    if (cron is None) == (every is None):
        raise ScheduleError(f"schedule {name!r} needs exactly one of cron= or every=")
    if not isinstance(timezone, str) or not timezone:
        raise ScheduleError(f"schedule {name!r}: timezone must be an IANA name, got {timezone!r}")
    _zone(timezone)
    if catch_up not in CATCH_UP_POLICIES:
        raise ScheduleError(
            f"schedule {name!r}: catch_up must be one of {CATCH_UP_POLICIES}, got {catch_up!r}"
        )
    seconds: float | None = None
    if every is not None:
        if isinstance(every, timedelta):
            seconds = every.total_seconds()
        elif isinstance(every, (int, float)) and not isinstance(every, bool):
            seconds = float(every)
        else:
            raise ScheduleError(
                f"schedule {name!r}: every must be seconds or a timedelta, got {every!r}"
            )
        if not math.isfinite(seconds) or round(seconds * 1000) < 1 or seconds > 10 * 366 * 86400:
            raise ScheduleError(
                f"schedule {name!r}: every must be between 1 ms and ten years, got {every!r}"
            )
        seconds = round(seconds * 1000) / 1000
    if cron is not None:
        cron = _check_cron(name, cron)
    unknown = set(enqueue_options) - SCHEDULE_ENQUEUE_OPTIONS
    if unknown:
        raise ScheduleError(
            f"schedule {name!r}: unknown or unsupported enqueue options {sorted(unknown)} "
            f"(a tick's job runs at the tick; allowed: {sorted(SCHEDULE_ENQUEUE_OPTIONS)})"
        )
    check_payload(data)
    schedule = Schedule(
        name=name,
        type=type,
        cron=cron,
        every=seconds,
        timezone=timezone,
        data=data,
        catch_up=catch_up,
        options=dict(enqueue_options),
    )
    tick_job(schedule, datetime(2000, 1, 1, tzinfo=_UTC))  # the options' own checks
    return schedule


def same_declaration(a: Schedule, b: Schedule) -> bool:
    return a.name == b.name and a.definition() == b.definition()


def with_state(schedule: Schedule, stored: Schedule) -> Schedule:
    """``schedule`` carrying ``stored``'s state fields."""
    return replace(
        schedule,
        next_run_at=stored.next_run_at,
        last_run_at=stored.last_run_at,
        last_job_id=stored.last_job_id,
        paused=stored.paused,
    )


_UTC = timezone.utc


def _zone(name: str) -> Any:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {name!r} (an IANA name such as 'Europe/Paris')"
        ) from None


def _croniter(expression: str, start: datetime) -> Any:
    from croniter import croniter  # type: ignore[import-untyped]

    return croniter(expression, start, second_at_beginning=len(expression.split()) == 6)


def _check_cron(name: str, cron: Any) -> str:
    if not isinstance(cron, str):
        raise ScheduleError(f"schedule {name!r}: cron must be a string, got {cron!r}")
    expression = " ".join(cron.split())
    fields = len(expression.split())
    if fields not in (5, 6):
        raise ScheduleError(
            f"schedule {name!r}: cron must have 5 fields (minute hour day month weekday) or 6 "
            f"(second minute hour day month weekday), got {fields} in {cron!r}"
        )
    try:
        from croniter import croniter
    except ImportError:  # pragma: no cover - the durabl[cron] extra
        raise ScheduleError("cron schedules need croniter: pip install 'durabl[cron]'") from None
    if not croniter.is_valid(expression, second_at_beginning=fields == 6):
        raise ScheduleError(f"schedule {name!r}: invalid cron expression {cron!r}")
    return expression
