"""The write concern each write of the store carries on the wire.

A server whose default write concern is ``w: 1`` acknowledges a write only the primary's
memory holds: a crash or a failover loses it. So unless the user chose a write concern (in
the URL, on the client or database, or with ``write_concern=``), every write durabl sends
says ``{w: "majority", j: true}`` itself.
"""

from __future__ import annotations

from typing import Any

import pytest
from mockupdb import Request
from pymongo.write_concern import WriteConcern

from durabl import BackendUnavailableError, MongoJobQueue
from durabl.model.options import build_new_job
from durabl.model.schedule import Schedule
from tests.wire.server import (
    COLLECTION,
    Wire,
    claimed_by,
    inserted,
    modified,
    new_token,
    updated,
)

pytestmark = pytest.mark.wire

DURABLE = {"w": "majority", "j": True}


def write_concern(request: Request) -> dict[str, Any] | None:
    sent = request.doc.get("writeConcern")
    return None if sent is None else dict(sent)


def test_enqueue_claim_and_complete_wait_for_a_journaled_majority(wire: Wire) -> None:
    enqueue = wire.start(wire.store.enqueue, build_new_job("email", {}))
    insert = wire.receives("insert")
    inserted(insert)
    job_id = enqueue.result().job_id
    assert write_concern(insert) == DURABLE

    doc = wire.job()
    claim = wire.start(wire.store.claim, "email", limit=1, lease_owner="w1")
    request = wire.receives("findAndModify")
    modified(request, claimed_by(request, doc))
    (handle,) = claim.result()
    assert write_concern(request) == DURABLE

    complete = wire.start(wire.store.complete, handle.id, handle.claim_token)
    update = wire.receives("update")
    updated(update)
    assert complete.result() == "completed"
    assert write_concern(update) == DURABLE
    assert job_id is not None and wire.idle()


def test_heartbeat_and_failure_carry_it_too(wire: Wire) -> None:
    token = new_token()
    doc = wire.job(token=token)
    wire.claimed(token, doc)
    beat = wire.start(wire.store.heartbeat, str(doc["_id"]), token)
    request = wire.receives("update")
    updated(request)
    assert beat.result() == "applied"
    assert write_concern(request) == DURABLE

    fail = wire.start(wire.store.fail_fatal, str(doc["_id"]), token, "boom")
    request = wire.receives("update")
    updated(request)
    assert fail.result() == "failed-terminal"
    assert write_concern(request) == DURABLE
    assert wire.idle()


def test_the_collections_beside_the_jobs_carry_it(wire: Wire) -> None:
    """Schedules and rate limits live in collections of their own: the same write
    concern, not the server's default."""
    schedule = Schedule("nightly", "report", None, 3600.0, "UTC")
    upsert = wire.start(wire.store.upsert_schedule, schedule, wire.job()["run_at"])
    changed = wire.receives("update")
    assert changed.doc["update"] == f"{COLLECTION}_schedules"
    updated(changed, 0)
    insert = wire.receives("insert")
    inserted(insert)
    upsert.result()
    assert write_concern(changed) == write_concern(insert) == DURABLE

    limit = wire.start(wire.store.set_rate_limit, "email", 10, 60.0)
    rate = wire.receives("update")
    assert rate.doc["update"] == f"{COLLECTION}_rate_limits"
    updated(rate)
    limit.result()
    assert write_concern(rate) == DURABLE
    assert wire.idle()


@pytest.mark.parametrize(
    ("on_database", "explicit", "sent"),
    [
        (WriteConcern(w=1), None, {"w": 1}),
        (WriteConcern(w=2, wtimeout=5000), None, {"w": 2, "wtimeout": 5000}),
        (None, WriteConcern(w="majority", wtimeout=2000), {"w": "majority", "wtimeout": 2000}),
        (WriteConcern(w=1), WriteConcern(w="majority"), {"w": "majority"}),
        # Explicitly the server's default: nothing is sent.
        (None, WriteConcern(), None),
    ],
    ids=["database-w1", "database-w2", "keyword", "keyword-over-database", "server-default"],
)
def test_a_write_concern_the_user_chose_is_kept(
    wire: Wire,
    on_database: WriteConcern | None,
    explicit: WriteConcern | None,
    sent: dict[str, Any] | None,
) -> None:
    db = wire.client.get_database("durabl", write_concern=on_database)
    store = MongoJobQueue(db, COLLECTION, write_concern=explicit)
    enqueue = wire.start(store.enqueue, build_new_job("email", {}))
    insert = wire.receives("insert")
    inserted(insert)
    assert enqueue.result().job_id is not None
    assert write_concern(insert) == sent
    assert wire.idle()


def test_a_majority_that_does_not_answer_in_wtimeout_is_one_unavailable_error(
    wire: Wire,
) -> None:
    """With ``wtimeout`` set (as on a set whose majority can be lost while its primary
    stays up), a write the majority did not confirm in time is reported at once, not
    repeated: the primary applied it, so the outcome is unknown, as for any
    ``BackendUnavailableError``."""
    store = MongoJobQueue(
        wire.client["durabl"], COLLECTION, write_concern=WriteConcern("majority", 2000, j=True)
    )
    call = wire.start(store.enqueue, build_new_job("email", {}))
    insert = wire.receives("insert")
    assert write_concern(insert) == {"w": "majority", "wtimeout": 2000, "j": True}
    insert.ok(
        n=1,
        writeConcernError={
            "code": 64,
            "codeName": "WriteConcernFailed",
            "errmsg": "waiting for replication timed out",
            "errInfo": {"wtimeout": True},
        },
    )
    with pytest.raises(BackendUnavailableError) as info:
        call.result()
    message = str(info.value)
    assert message.startswith("MongoDB unavailable during enqueue: waiting for replication")
    assert "\n" not in message
    assert wire.idle(), "not repeated"
