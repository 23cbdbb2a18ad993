"""The parts of a store that keep something beside its jobs: schedules, the workers
registry, event subscriptions, signals and paused types. Each is a small object a store hands over
(``schedules``, ``workers``, ``subscriptions``, ``signals``) with its flag; the operations
of :class:`~durabl.stores.base.Backend` that reach it are written here once, and a store
without the part answers ``NotImplementedError`` naming what it lacks."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from durabl.model.options import NewJob
from durabl.model.pauses import checked_type
from durabl.model.payload import to_millis
from durabl.model.schedule import Schedule
from durabl.model.signals import (
    SignalDelivery,
    StoredSignal,
    check_signal_name,
    checked_signal_data,
    waiting_for_signal,
)
from durabl.model.subscriptions import Subscription
from durabl.model.workers import WorkerInfo
from durabl.stores.base import Backend


class ScheduleStore(Protocol):
    """The part of a store that keeps its schedules (:attr:`StoreBase.schedules`): each
    method means what the ``*_schedule`` operation of :class:`Backend` of its name means."""

    def upsert(self, schedule: Schedule, next_run_at: datetime) -> None: ...

    def load(self) -> list[Schedule]: ...

    def delete(self, name: str) -> bool: ...

    def fire(
        self, schedule: Schedule, next_run_at: datetime, jobs: Sequence[tuple[datetime, NewJob]]
    ) -> list[str | None] | None: ...

    def set_paused(self, name: str, paused: bool, next_run_at: datetime | None) -> bool: ...


class WorkerRegistry(Protocol):
    """The part of a store that keeps the workers registry (:attr:`StoreBase.workers`):
    each method means what the ``*_worker(s)`` operation of :class:`Backend` means."""

    def upsert(self, info: WorkerInfo) -> None: ...

    def load(self) -> list[WorkerInfo]: ...

    def delete(self, worker_id: str) -> bool: ...

    def prune(self, last_seen_before: datetime) -> int: ...


class SubscriptionStore(Protocol):
    """The part of a store that keeps event subscriptions (:attr:`StoreBase.subscriptions`):
    each method means what the ``*_subscription(s)`` operation of :class:`Backend` of its
    name means (``upsert`` gets them sorted and without repeats, ``load`` may answer in
    any order)."""

    def upsert(self, subscriptions: Sequence[Subscription]) -> None: ...

    def load(self, event: str | None) -> list[Subscription]: ...

    def delete(self, subscription: Subscription) -> bool: ...


class SignalStore(Protocol):
    """The part of a store that keeps signals with their jobs (:attr:`StoreBase.signals`):
    ``store`` and ``next`` mean what ``store_signal`` and ``next_signal`` of
    :class:`Backend` mean."""

    def store(self, job_id: str, name: str, data: Any, sent_at: datetime) -> int | None: ...

    def next(self, job_id: str, name: str, after_seq: int) -> StoredSignal | None: ...


class PauseStore(Protocol):
    """The part of a store that keeps the paused types (:attr:`StoreBase.pauses`): one
    atomic write each (``resume``: whether the type was paused; where the store pushes,
    its other processes hear of the resume), and one read of them all. Its claims leave
    out a paused type's jobs (:mod:`durabl.model.pauses`)."""

    def pause(self, type: str) -> None: ...

    def resume(self, type: str) -> bool: ...

    def load(self) -> list[str]: ...


P = TypeVar("P")


class StoreParts(Backend):
    """The operations of :class:`Backend` that a store's parts answer; the base of
    :class:`durabl.stores.engine.StoreBase`."""

    # -- schedules: a store that keeps them sets the flag and either gives the part that
    # keeps them (``schedules``) or overrides these four ----------------------------------
    supports_schedules: bool = False
    schedules: ScheduleStore | None = None

    def _schedule_store(self) -> ScheduleStore:
        return self._part(self.schedules, "does not keep schedules")

    def upsert_schedule(self, schedule: Schedule, next_run_at: datetime) -> None:
        self._schedule_store().upsert(schedule, next_run_at)

    def load_schedules(self) -> list[Schedule]:
        return self._schedule_store().load()

    def delete_schedule(self, name: str) -> bool:
        return self._schedule_store().delete(name)

    def fire_schedule(
        self, schedule: Schedule, next_run_at: datetime, jobs: Sequence[tuple[datetime, NewJob]]
    ) -> list[str | None] | None:
        return self._schedule_store().fire(schedule, next_run_at, jobs)

    def set_schedule_paused(self, name: str, paused: bool, next_run_at: datetime | None) -> bool:
        return self._schedule_store().set_paused(name, paused, next_run_at)

    # -- workers registry: as schedules, the flag and the part (``workers``) or overrides
    supports_workers: bool = False
    workers: WorkerRegistry | None = None

    def _worker_registry(self) -> WorkerRegistry:
        return self._part(self.workers, "does not keep a workers registry")

    def _part(self, part: P | None, missing: str) -> P:
        """``part`` of this store; ``NotImplementedError`` (the store ``missing`` it) when
        the store has none."""
        if part is None:
            raise NotImplementedError(f"{type(self).__name__} {missing}")
        return part

    def upsert_worker(self, info: WorkerInfo) -> None:
        self._worker_registry().upsert(info)

    def load_workers(self) -> list[WorkerInfo]:
        return self._worker_registry().load()

    def delete_worker(self, worker_id: str) -> bool:
        return self._worker_registry().delete(worker_id)

    def prune_workers(self, last_seen_before: datetime) -> int:
        return self._worker_registry().prune(last_seen_before)

    # -- event subscriptions: as schedules, the flag and the part (``subscriptions``) ------
    supports_subscriptions: bool = False
    subscriptions: SubscriptionStore | None = None

    def _subscription_store(self) -> SubscriptionStore:
        return self._part(self.subscriptions, "does not keep event subscriptions")

    def upsert_subscriptions(self, subscriptions: Sequence[Subscription]) -> None:
        if subscriptions:
            self._subscription_store().upsert(sorted(set(subscriptions)))

    def load_subscriptions(self, event: str | None = None) -> list[Subscription]:
        return sorted(self._subscription_store().load(event))

    def delete_subscription(self, subscription: Subscription) -> bool:
        return self._subscription_store().delete(subscription)

    # -- signals: the part (``signals``) stores; the decisions are made here, once -------
    supports_signals: bool = False
    signals: SignalStore | None = None

    def store_signal(self, job_id: str, name: str, data: Any, sent_at: datetime) -> int | None:
        return self._part(self.signals, "does not keep signals").store(job_id, name, data, sent_at)

    def next_signal(self, job_id: str, name: str, after_seq: int) -> StoredSignal | None:
        return self._part(self.signals, "does not keep signals").next(job_id, name, after_seq)

    def send_signal(self, job_id: str, name: str, data: Any) -> SignalDelivery | None:
        """Stored first, then the job read: a job that suspended before the store saw the
        signal waits for it and is made due here; one still running then finds it itself
        once released (:meth:`wake_if_signalled`), so no signal waits unseen. A job made
        due needlessly (it moved on meanwhile) only runs its body's checks again."""
        check_signal_name(name)
        if not isinstance(job_id, str):
            raise TypeError(f"job_id must be a str, got {job_id!r}")
        stored = checked_signal_data(name, data)
        seq = self.store_signal(job_id, name, stored, to_millis(self.now()))
        if seq is None:
            return None
        job = self.get_job(job_id)
        waiting = job is not None and job.waiting_for == waiting_for_signal(name)
        woken = waiting and self.run_now(job_id)
        return SignalDelivery(job_id, "" if job is None else job.type, seq, woken)

    def wake_if_signalled(self, job_id: str, name: str, after_seq: int) -> bool:
        if self.next_signal(job_id, name, after_seq) is None:
            return False
        return self.run_now(job_id)

    # -- paused types: the part (``pauses``) stores them; the type is checked here, once --
    supports_pause: bool = False
    pauses: PauseStore | None = None

    def _pause_store(self) -> PauseStore:
        return self._part(self.pauses, "does not keep paused types")

    def pause_type(self, type: str) -> None:
        self.write_pause(checked_type(type))

    def resume_type(self, type: str) -> bool:
        return self.write_resume(checked_type(type))

    def paused_types(self) -> list[str]:
        return sorted(self.read_paused())

    # A store whose pauses are no separate object (SQL's) overrides these three instead.
    def write_pause(self, type: str) -> None:
        self._pause_store().pause(type)

    def write_resume(self, type: str) -> bool:
        return self._pause_store().resume(type)

    def read_paused(self) -> list[str]:
        return self._pause_store().load()
