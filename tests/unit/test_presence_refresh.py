"""The workers registry entry's refresh rules, step by step on a fake clock (no threads):
the active count is written at the next look after it changes, a look every tenth of the
interval (at most one a second), never a write per job, and nothing after the removal."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from durabl.model.workers import WorkerInfo, active_check_every
from durabl.runtime.presence import Presence
from durabl.testing import FakeClock


class Processor:
    """What the presence reads of a processor."""

    def __init__(self, heartbeat_interval: float) -> None:
        self.type = "mail"
        self.concurrency = 4
        self.heartbeat_interval = heartbeat_interval


class RecordingStore:
    """A registry that records each write."""

    supports_workers = True

    def __init__(self) -> None:
        self.written: list[WorkerInfo] = []
        self.deleted: list[str] = []

    def now(self) -> datetime:
        return datetime(2030, 1, 1, tzinfo=timezone.utc)

    def upsert_worker(self, info: WorkerInfo) -> None:
        self.written.append(info)

    def prune_workers(self, last_seen_before: datetime) -> int:
        return 0

    def delete_worker(self, worker_id: str) -> bool:
        self.deleted.append(worker_id)
        return True


class Runs:
    def __init__(self) -> None:
        self.count = 0


def presence(interval: float = 100.0) -> tuple[Presence, RecordingStore, Runs, FakeClock]:
    store, runs, clock = RecordingStore(), Runs(), FakeClock()
    made = Presence(
        store,  # type: ignore[arg-type]
        processors=lambda: [Processor(interval)],  # type: ignore[list-item]
        active=lambda: runs.count,
        default_interval=interval,
        clock=clock,
    )
    return made, store, runs, clock


@pytest.mark.parametrize(
    ("interval", "every"), [(100.0, 10.0), (30.0, 3.0), (5.0, 1.0), (0.5, 0.5)]
)
def test_a_worker_looks_at_its_runs_ten_times_an_interval_but_at_most_once_a_second(
    interval: float, every: float
) -> None:
    assert active_check_every(interval) == every


def test_a_changed_active_count_is_written_at_the_next_look_not_after_an_interval() -> None:
    entry, store, runs, clock = presence(interval=100.0)
    assert entry.beat()
    assert entry.until_next_look() == 10.0
    clock.advance(10)
    assert not entry.refresh_if_due()  # nothing changed: no write
    runs.count = 1
    clock.advance(10)
    assert entry.refresh_if_due()
    assert [w.active for w in store.written] == [0, 1]


def test_many_runs_between_two_looks_cost_one_write() -> None:
    entry, store, runs, clock = presence(interval=100.0)
    entry.beat()
    for _ in range(500):  # jobs start and end between two looks
        runs.count += 1
    runs.count -= 499
    clock.advance(entry.until_next_look())
    assert entry.refresh_if_due()
    assert not entry.refresh_if_due()
    assert [w.active for w in store.written] == [0, 1]


def test_the_regular_refresh_comes_every_interval_even_when_nothing_changed() -> None:
    entry, store, _, clock = presence(interval=25.0)
    entry.beat()
    for _ in range(10):
        clock.advance(entry.until_next_look())
        entry.refresh_if_due()
    assert len(store.written) == 2  # ten looks 2.5 s apart; one refresh, at 25 s
    clock.advance(3)
    assert entry.until_next_look() == pytest.approx(2.5)  # the next look comes first
    clock.advance(20)
    assert entry.until_next_look() == pytest.approx(2.0)  # the refresh comes first


def test_no_refresh_writes_the_entry_again_once_it_was_removed() -> None:
    entry, store, runs, clock = presence()
    entry.beat()
    entry.remove()
    entry.remove()
    runs.count = 3
    clock.advance(1000)
    assert not entry.beat()
    assert not entry.refresh_if_due()
    assert len(store.written) == 1 and store.deleted == [entry.id]


def test_a_stopped_presence_refuses_to_start() -> None:
    entry, store, _, _ = presence()
    entry.stop(0.0)
    entry.start()
    assert store.written == [] and store.deleted == []
