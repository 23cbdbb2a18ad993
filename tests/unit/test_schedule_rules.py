"""The store-neutral schedule rules (durabl.model.schedule): ticks, DST, catch-up."""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import pytest

from durabl.model.schedule import Schedule, build_schedule, plan_firing

UTC = timezone.utc


def at(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def stored(schedule: Schedule, next_run_at: datetime) -> Schedule:
    return Schedule.from_stored(schedule.name, schedule.definition(), next_run_at, None, None)


def test_every_ticks_are_aligned_to_the_epoch() -> None:
    s = build_schedule("s", "t", every=30)
    assert s.next_tick(at(2030, 1, 1, 0, 0, 7)) == at(2030, 1, 1, 0, 0, 30)
    assert s.next_tick(at(2030, 1, 1, 0, 0, 30)) == at(2030, 1, 1, 0, 1)
    assert build_schedule("s", "t", every=timedelta(hours=1)).every == 3600


def test_a_repeated_wall_clock_time_ticks_once_when_dst_ends() -> None:
    s = build_schedule("s", "t", cron="30 2 * * *", timezone="Europe/Paris")
    first = s.next_tick(at(2030, 10, 26, 12))  # clocks go back on 27 October 2030
    assert first == at(2030, 10, 27, 0, 30)  # 02:30 CEST
    assert s.next_tick(first) == at(2030, 10, 28, 1, 30)  # not 02:30 CET the same night
    # Walking back from after the repeated hour finds one tick for that night as well.
    assert s.ticks_back(at(2030, 10, 27, 3), at(2030, 10, 26, 12), 5) == [first]


def test_a_missing_wall_clock_time_ticks_at_the_next_instant_when_dst_starts() -> None:
    s = build_schedule("s", "t", cron="30 2 * * *", timezone="Europe/Paris")
    assert s.next_tick(at(2030, 3, 30, 12)) == at(2030, 3, 31, 1)  # 03:00 CEST


def test_a_cron_schedule_in_utc_by_default() -> None:
    s = build_schedule("s", "t", cron="0 2 * * *")
    assert s.timezone == "UTC" and s.next_tick(at(2030, 1, 1)) == at(2030, 1, 1, 2)


def test_a_long_outage_is_planned_without_walking_every_missed_tick() -> None:
    s = build_schedule("s", "t", cron="* * * * * *", catch_up="all")  # every second
    due = at(2030, 1, 1)
    began = time.monotonic()
    firing = plan_firing(stored(s, due), due + timedelta(days=365))
    assert time.monotonic() - began < 1.0
    assert firing is not None and len(firing.ticks) == 100
    assert firing.ticks[-1] == due + timedelta(days=365)
    assert firing.next_run_at == due + timedelta(days=365, seconds=1)


@pytest.mark.parametrize("catch_up", ["latest", "none", "all"])
def test_nothing_is_planned_before_the_tick(catch_up: str) -> None:
    s = build_schedule("s", "t", every=10, catch_up=catch_up)
    assert plan_firing(stored(s, at(2030, 1, 1, 0, 0, 10)), at(2030, 1, 1, 0, 0, 9)) is None


def test_the_definition_survives_a_round_trip() -> None:
    s = build_schedule(
        "s", "t", cron="0 * * * *", data={"b": b"x", "when": at(2030, 1, 1), "t": (1, 2)},
        priority=4, dedupe_key="k",
    )  # fmt: skip
    again = stored(s, at(2030, 1, 1))
    assert again.definition() == s.definition()
    assert again.options == {"priority": 4, "dedupe_key": "k"}
