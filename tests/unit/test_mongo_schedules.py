"""MongoDB schedules without transactions: a firing that died between its compare-and-set
and its inserts is finished by the next scheduler, once, and blocks later ticks until then."""

from __future__ import annotations

import mongomock

from durabl import JobQueue, MongoJobQueue
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
