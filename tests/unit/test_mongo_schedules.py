"""MongoDB schedules without transactions: a firing that died between its compare-and-set
and its inserts is finished by the next scheduler, once, and blocks later ticks until then."""

from __future__ import annotations

import threading
from typing import Any

import mongomock

from durabl import JobQueue, MongoJobQueue
from durabl.model.exceptions import BackendUnavailableError
from durabl.model.options import build_new_job
from durabl.model.schedule import plan_firing, tick_job
from durabl.testing import FakeClock


def test_an_outbox_left_by_a_dead_scheduler_is_finished_once() -> None:
    clock = FakeClock()
    store = MongoJobQueue(mongomock.MongoClient(tz_aware=True)["d"], clock=clock)
    queue = JobQueue(store, clock=clock)
    queue.schedule("s", "tick", every=10)
    clock.advance(10)
    (schedule,) = queue.list_schedules()
    firing = plan_firing(schedule, clock.now())
    assert firing is not None
    jobs = [(tick, tick_job(schedule, tick)) for tick in firing.ticks]
    outbox = store.schedules.claim(schedule, firing.next_run_at, jobs)  # then the process dies
    assert outbox is not None and len(outbox) == 1

    clock.advance(9)  # the outbox is younger than the grace: its writer may be slow
    queue.scheduler.run_once()
    assert store.count_jobs(type="tick") == 0
    clock.advance(2)  # 21 s: the outbox is finished, then the 20 s tick fires
    queue.scheduler.run_once()
    assert store.schedules.finish("s", outbox) == [str(outbox[0]["_id"])]  # a late repeat
    runs = sorted(job.run_at for job in store.list_jobs(type="tick"))
    assert [int(at.timestamp()) % 100 for at in runs] == [10, 20]
    (state,) = queue.list_schedules()
    assert state.last_job_id is not None and state.last_run_at == runs[-1]


# -- a paused writer: its outbox finished by another process, the job run and deleted ------
def paused_firing(clock: FakeClock) -> tuple[MongoJobQueue, JobQueue, list[dict[str, Any]]]:
    """A schedule whose writer did step 1 (the outbox) and then paused."""
    store = MongoJobQueue(mongomock.MongoClient(tz_aware=True)["d"], clock=clock)
    queue = JobQueue(store, clock=clock)
    queue.schedule("s", "tick", every=60)
    clock.advance(60)
    (schedule,) = queue.list_schedules()
    firing = plan_firing(schedule, clock.now())
    assert firing is not None
    jobs = [(tick, tick_job(schedule, tick)) for tick in firing.ticks]
    outbox = store.schedules.claim(schedule, firing.next_run_at, jobs)
    assert outbox is not None and len(outbox) == 1
    return store, queue, outbox


def run_and_delete_the_tick(store: MongoJobQueue, job_id: str) -> None:
    (handle,) = store.claim("tick", limit=5, lease_owner="w")
    assert handle.id == job_id
    assert store.complete(handle.id, handle.claim_token).status == "completed"
    assert store.delete(job_id)  # or retention pruned it


def test_a_paused_writer_does_not_enqueue_a_tick_again_after_its_job_was_deleted() -> None:
    clock = FakeClock()
    store, queue, outbox = paused_firing(clock)
    clock.advance(11)  # past the grace: another scheduler finishes the outbox
    queue.scheduler.run_once()
    job_id = str(outbox[0]["_id"])
    run_and_delete_the_tick(store, job_id)
    # The paused writer wakes up and carries on with step 2.
    assert store.schedules.finish("s", outbox) == [job_id]
    assert store.count_jobs(type="tick") == 0  # not inserted again, nothing held left
    assert store.claim("tick", limit=5, lease_owner="w") == []


def test_a_writer_paused_after_inserting_its_held_copy_releases_nothing_later() -> None:
    clock = FakeClock()
    store, queue, outbox = paused_firing(clock)
    job_id = str(outbox[0]["_id"])
    resume = threading.Event()
    paused = threading.Event()
    main = threading.current_thread()
    real_call = store.store.call
    calls: list[str] = []

    def call(operation: str, fn: Any, **kw: Any) -> Any:
        # The writer's thread pauses after its insert (step 2a), before its step 2b.
        if threading.current_thread() is not main and operation == "fire_schedule":
            calls.append(getattr(fn, "__name__", ""))
            if calls == ["insert", "own"]:
                paused.set()
                assert resume.wait(10)
        return real_call(operation, fn, **kw)

    store.store.call = call  # type: ignore[method-assign]
    ids: list[Any] = []
    late = threading.Thread(target=lambda: ids.extend(store.schedules.finish("s", outbox)))
    late.start()
    assert paused.wait(10)
    held = store.get_job(job_id)
    assert held is not None and held.status == "pending" and held.run_at.year == 9999
    assert store.claim("tick", limit=5, lease_owner="w") == []  # held: not claimable
    clock.advance(11)
    queue.scheduler.run_once()  # another scheduler finishes the outbox: releases that copy
    run_and_delete_the_tick(store, job_id)
    resume.set()
    late.join(10)
    assert ids == [job_id]
    assert store.count_jobs(type="tick") == 0
    (state,) = queue.list_schedules()
    assert state.last_job_id == job_id


def finish_and_die(store: MongoJobQueue, outbox: list[dict[str, Any]], before: str) -> None:
    """Run the outbox's steps 2-3 in a process that dies (SystemExit) just before the store
    call that comes after the step named ``before`` ("insert": between 2a and 2b; "own":
    after 2b, before the copy is released or deleted)."""
    real_call = store.store.call
    seen: list[str] = []

    def dying(operation: str, fn: Any, **kw: Any) -> Any:
        if seen and seen[-1] == before:
            raise SystemExit
        seen.append(getattr(fn, "__name__", ""))
        return real_call(operation, fn, **kw)

    store.store.call = dying  # type: ignore[method-assign]
    try:
        store.schedules.finish("s", outbox)
    except SystemExit:
        pass
    finally:
        store.store.call = real_call  # type: ignore[method-assign]


def test_a_held_copy_left_by_a_dead_writer_is_released_once() -> None:
    clock = FakeClock()
    store, queue, outbox = paused_firing(clock)
    job_id = str(outbox[0]["_id"])
    finish_and_die(store, outbox, before="insert")  # dies between step 2a and 2b
    clock.advance(11)
    queue.scheduler.run_once()
    (job,) = store.list_jobs(type="tick")
    assert job.id == job_id and job.run_at == outbox[0]["run_at"]
    run_and_delete_the_tick(store, job_id)
    assert store.claim("tick", limit=5, lease_owner="w") == []


def test_a_late_copy_left_by_a_writer_that_died_is_swept_by_the_reaper() -> None:
    """A paused writer inserts its copy after the tick ran and was deleted, then dies before
    deleting it: the copy would stay pending at year 9999, holding its dedupe slot. The
    reaper's sweep deletes it; it never runs."""
    clock = FakeClock()
    store, queue, outbox = paused_firing(clock)
    job_id = str(outbox[0]["_id"])
    clock.advance(11)
    queue.scheduler.run_once()  # another scheduler finishes the outbox
    run_and_delete_the_tick(store, job_id)
    finish_and_die(store, outbox, before="own")  # dies before deleting its late copy
    late = store.get_job(job_id)
    assert late is not None and late.status == "pending" and late.run_at.year == 9999
    store.reap(30)
    assert store.get_job(job_id) is None
    assert store.count_jobs(type="tick") == 0


def test_the_sweep_leaves_a_held_copy_that_a_finisher_will_release() -> None:
    clock = FakeClock()
    store, queue, outbox = paused_firing(clock)
    job_id = str(outbox[0]["_id"])
    finish_and_die(store, outbox, before="insert")
    clock.advance(11)
    store.reap(30)  # its outbox entry has no owner yet: the tick's real job
    held = store.get_job(job_id)
    assert held is not None and held.run_at.year == 9999
    queue.scheduler.run_once()
    (job,) = store.list_jobs(type="tick")
    assert job.id == job_id and job.run_at == outbox[0]["run_at"]


def test_a_failed_sweep_of_held_copies_does_not_lose_the_reap_report() -> None:
    clock = FakeClock()
    store = MongoJobQueue(mongomock.MongoClient(tz_aware=True)["d"], clock=clock)
    store.startup()
    job_id = store.enqueue(build_new_job("t", {})).job_id
    store.claim("t", limit=1, lease_owner="w")
    clock.advance(60)

    def unavailable() -> int:
        raise BackendUnavailableError("MongoDB unavailable during reap: gone")

    store.schedules.sweep_held = unavailable  # type: ignore[method-assign]
    report = store.reap(30)
    assert report.recovered == 1 and report.job_ids == (job_id,)
