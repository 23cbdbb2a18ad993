"""A claim of a job with a concurrency key, with the reply of its slot write lost.

A keyed claim is two writes: the claim itself, then the slot the job takes of its key
(:mod:`durabl.stores.mongo.flow`). When both replies of the slot write are lost, the store
looks its claim token up; the job it finds must hold a slot before its handle is handed
out, or two jobs of a key at limit 1 could run at once.
"""

from __future__ import annotations

from typing import Any

import pytest
from mockupdb import Request

from durabl.stores.mongo import flow
from tests.wire.server import Call, Wire, claimed_by, found, modified, updated

pytestmark = pytest.mark.wire


def _claim_with_lost_slot_write(wire: Wire) -> tuple[Call, dict[str, Any], Request]:
    """Start a claim of a keyed job; lose both replies of its slot write. Returns the
    call, the job as the claim left it, and the store's look-up of its claim token."""
    doc = wire.job(concurrency_key="acct-1", concurrency_limit=1)
    call = wire.start(wire.store.claim, "email", limit=1, lease_owner="w1")
    claim = wire.receives("findAndModify")
    after = claimed_by(claim, doc)
    modified(claim, after)
    slot = wire.receives("update")
    assert slot.doc["updates"][0]["u"]["$set"] == {flow.SLOT: "0:acct-1"}
    slot.hangup()
    wire.receives("update").hangup()  # the driver's retry of the same write, lost too
    lookup = wire.receives("find")
    assert lookup.doc["filter"]["claim_token"] == after["claim_token"]
    return call, after, lookup


def test_slot_write_lost_before_it_applied_is_made_before_the_job_is_handed_out(
    wire: Wire,
) -> None:
    call, after, lookup = _claim_with_lost_slot_write(wire)
    found(lookup, after)  # active under the claim, with no slot
    slot = wire.receives("update")
    assert slot.doc["updates"][0]["q"]["claim_token"] == after["claim_token"]
    assert slot.doc["updates"][0]["u"]["$set"] == {flow.SLOT: "0:acct-1"}
    updated(slot)
    assert [h.id for h in call.result()] == [str(after["_id"])]
    assert wire.idle()


def test_slot_write_that_applied_is_not_made_again(wire: Wire) -> None:
    call, after, lookup = _claim_with_lost_slot_write(wire)
    found(lookup, {**after, flow.SLOT: "0:acct-1"})
    assert [h.id for h in call.result()] == [str(after["_id"])]
    assert wire.idle(), "no second slot write"


def test_key_found_full_meanwhile_hands_the_job_back(wire: Wire) -> None:
    """Another claimer took the key's one slot while the replies were lost: the job goes
    back to pending (its attempt refunded) and nothing is handed out."""
    call, after, lookup = _claim_with_lost_slot_write(wire)
    found(lookup, after)
    slot = wire.receives("update")
    slot.ok(
        n=0,
        writeErrors=[{"index": 0, "code": 11000, "errmsg": "E11000 duplicate key error"}],
    )
    back = wire.receives("update")
    assert back.doc["updates"][0]["u"]["$set"]["status"] == "pending"
    assert back.doc["updates"][0]["u"]["$inc"] == {"attempts": -1}
    updated(back)
    # The claim goes on past the held-back job: nothing else is due.
    found(wire.receives("find"), {"_id": after["_id"]})
    again = wire.receives("findAndModify")
    assert again.doc["query"]["_id"] == {"$nin": [after["_id"]]}
    modified(again, None)
    assert call.result() == []
    assert wire.idle()
