"""Documents an earlier release wrote (no attempt history, result, cancellation or
concurrency fields) keep working on MongoDB: they read back with an empty history and no
result, and run, complete and cancel with the job record filled in from then on."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from bson import ObjectId

from durabl import JobQueue, MongoJobQueue
from durabl.testing import FakeClock


def old_document(clock: FakeClock, **fields: Any) -> dict[str, Any]:
    """A job as the release before the job record inserted it."""
    now = clock.now()
    doc: dict[str, Any] = {
        "_id": ObjectId(),
        "type": "t",
        "data": {"n": 1},
        "status": "pending",
        "priority": 0,
        "run_at": now,
        "attempts": 0,
        "max_attempts": 3,
        "created_at": now,
        "updated_at": now,
        "backoff": {"kind": "exponential", "delay": 1.0, "max_delay": 300.0},
    }
    doc.update(fields)
    return doc


def test_jobs_stored_before_the_job_record_read_run_and_cancel(
    mongo_backend: MongoJobQueue, clock: FakeClock
) -> None:
    col = mongo_backend.store.col
    done = old_document(clock, status="completed", finished_at=clock.now(), attempts=1)
    runs, waits = old_document(clock), old_document(clock, run_at=clock.now() + timedelta(1))
    col.insert_many([done, runs, waits])

    finished = mongo_backend.get_job(str(done["_id"]))
    assert finished is not None
    assert finished.status == "completed"
    assert finished.attempt_history == () and finished.result is None

    (handle,) = mongo_backend.claim("t")
    assert handle.id == str(runs["_id"])
    assert handle.complete(result={"ok": True}) == "completed"
    ran = mongo_backend.get_job(handle.id)
    assert ran is not None and ran.result == {"ok": True}
    assert [a.outcome for a in ran.attempt_history] == ["completed"]

    assert JobQueue(mongo_backend, clock=clock).cancel(str(waits["_id"])) is True
    cancelled = mongo_backend.get_job(str(waits["_id"]))
    assert cancelled is not None and cancelled.status == "cancelled"
