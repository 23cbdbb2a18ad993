"""An insert applied just before the primary restarted, and the driver's retry of it.

A primary that restarts (or fails over) between applying an insert and replying may come
back without its record of that retryable write; pymongo's one retry of the same insert
(same ``lsid`` and ``txnNumber``) then meets the document the first attempt wrote and is
answered E11000 on ``_id``. The store must see its own job there, not a taken dedupe slot:
the enqueue returns the job's id, nothing lost and nothing written twice. A duplicate key
on a dedupe index with no job of that id stays a dedupe hit.
"""

from __future__ import annotations

from typing import Any

import pytest
from mockupdb import Request

from durabl.model.options import build_new_job
from durabl.stores.mongo.codec import PENDING_SLOT
from tests.wire.server import Call, Wire, duplicate_key, found, txn

pytestmark = pytest.mark.wire


def _retry_meets_the_first_write(wire: Wire, call: Call) -> dict[str, Any]:
    """Lose the reply of the first insert (it applied); answer the driver's retry of the
    same write E11000 on ``_id``, as a restarted primary does. Returns the job document,
    once the store has asked for its ``_id``."""
    first = wire.receives("insert")
    doc: dict[str, Any] = dict(first.doc["documents"][0])
    first.hangup()
    again = wire.receives("insert")
    assert txn(again) == txn(first), "the driver's own retry of the same write"
    assert again.doc["documents"][0]["_id"] == doc["_id"]
    duplicate_key(again)
    lookup = wire.receives("find")
    assert lookup.doc["filter"] == {"_id": doc["_id"]}
    found(lookup, {"_id": doc["_id"]})
    return doc


def test_enqueue_whose_retry_meets_its_own_insert_returns_the_job(wire: Wire) -> None:
    call = wire.start(wire.store.enqueue, build_new_job("email", {"to": "a@example.com"}))
    doc = _retry_meets_the_first_write(wire, call)
    result = call.result()
    assert (result.job_id, result.coalesced) == (str(doc["_id"]), False)
    assert wire.idle(), "no second insert, no coalescing write"


def test_dedupe_enqueue_whose_retry_meets_its_own_insert_returns_the_job(wire: Wire) -> None:
    job = build_new_job("email", {}, dedupe_key="invoice-7", coalesce="latest")
    call = wire.start(wire.store.enqueue, job)
    doc = _retry_meets_the_first_write(wire, call)
    scope_check = wire.receives("find")  # the job's own: no live job under the other scope
    assert scope_check.doc["filter"]["_id"] == {"$ne": doc["_id"]}
    found(scope_check)
    result = call.result()
    assert (result.job_id, result.coalesced) == (str(doc["_id"]), False)
    assert wire.idle(), "the job's own slot is not mistaken for another's: nothing coalesced"


def test_inline_claim_whose_retry_meets_its_own_insert_hands_out_the_job(wire: Wire) -> None:
    """``claim_or_enqueue`` inserts the job already claimed: the same retry must hand out
    that claim, not report the job as deduplicated."""
    call = wire.start(wire.store.claim_or_enqueue, build_new_job("email", {}), "w1")
    doc = _retry_meets_the_first_write(wire, call)
    result = call.result()
    assert result.handle is not None
    assert (result.handle.id, result.handle.claim_token) == (str(doc["_id"]), doc["claim_token"])
    assert wire.idle()


def _dedupe_hit(wire: Wire, call: Call) -> Request:
    """Answer the insert E11000 on a dedupe index; the store's look-up of its own ``_id``
    finds nothing. Returns that look-up."""
    insert = wire.receives("insert")
    doc = insert.doc["documents"][0]
    assert doc[PENDING_SLOT] == "invoice-7"
    duplicate_key(insert, index="durabl_dedupe_pending")
    lookup = wire.receives("find")
    assert lookup.doc["filter"] == {"_id": doc["_id"]}
    found(lookup)
    return lookup


def test_a_taken_dedupe_slot_is_still_a_dedupe_hit(wire: Wire) -> None:
    job = build_new_job("email", {}, dedupe_key="invoice-7", dedupe_scope="pending")
    call = wire.start(wire.store.enqueue, job)
    _dedupe_hit(wire, call)
    result = call.result()
    assert (result.job_id, result.coalesced) == (None, False)
    assert wire.idle()
