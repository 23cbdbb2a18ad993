"""MongoDB ``complete_many``: one unordered ``bulk_write`` per batch, and the per-job
resolution from receipts when some update of it matched nothing.

The semantics every backend shares are in tests/contract/test_complete_many.py; these tests
count what the Mongo backend sends, through a spy on its collection.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from bson import ObjectId
from pymongo import UpdateOne
from pymongo.errors import AutoReconnect, BulkWriteError

from durabl import DurablError, MongoJobQueue
from durabl.model.job import JobHandle, JobResult, LogEntry
from durabl.model.options import build_new_job
from durabl.stores.base import Completion
from durabl.stores.mongo.mongomock_adapter import MongomockUpdateOne, fenced_update
from durabl.testing import FakeClock
from tests.conftest import make_mongomock_backend


class Spy:
    """A collection proxy that counts each method call and keeps ``bulk_write``'s requests."""

    def __init__(self, col: Any) -> None:
        self._col = col
        self.calls: Counter[str] = Counter()
        self.bulks: list[list[Any]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._col, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            if name == "bulk_write":
                self.bulks.append(list(args[0] if args else kwargs["requests"]))
            return attr(*args, **kwargs)

        return counted


def claimed(backend: MongoJobQueue, count: int) -> list[JobHandle[Any]]:
    for n in range(count):
        backend.enqueue(build_new_job("t", {"n": n}))
    handles = backend.claim("t", limit=count)
    assert len(handles) == count
    return handles


def spy_on(backend: MongoJobQueue) -> Spy:
    spy = Spy(backend.col)
    backend.col = spy  # type: ignore[assignment]
    return spy


def statuses(backend: MongoJobQueue, handles: list[JobHandle[Any]]) -> list[str]:
    return [getattr(backend.get_job(h.id), "status", None) or "gone" for h in handles]


def test_a_batch_costs_one_bulk_write_and_no_per_job_update(
    mongo_backend: MongoJobQueue, clock: FakeClock
) -> None:
    handles = claimed(mongo_backend, 6)
    spy = spy_on(mongo_backend)
    batch = [Completion(h.id, h.claim_token, [LogEntry(clock.now(), h.id)]) for h in handles]
    assert mongo_backend.complete_many(batch) == [JobResult("completed")] * 6
    assert spy.calls == Counter(bulk_write=1)  # no update_one, and no read on the happy path
    (requests,) = spy.bulks
    assert len(requests) == 6
    assert all(isinstance(r, UpdateOne) for r in requests)
    for handle, request in zip(handles, requests, strict=True):
        assert request._filter == {
            "_id": ObjectId(handle.id),
            "claim_token": handle.claim_token,
            "status": "active",
        }
        assert request._doc["$set"]["status"] == "completed"
        pushed = request._doc["$push"]
        assert pushed["receipts"]["$each"] == [
            {"t": handle.claim_token, "op": "complete", "r": "completed"}
        ]
        assert [entry["msg"] for entry in pushed["logs"]["$each"]] == [handle.id]
    assert statuses(mongo_backend, handles) == ["completed"] * 6
    for handle in handles:
        job = mongo_backend.get_job(handle.id)
        assert job is not None and [e.message for e in job.logs] == [handle.id]


def test_a_stale_token_falls_back_to_resolving_each_completion(
    mongo_backend: MongoJobQueue,
) -> None:
    first, stale, done, last = claimed(mongo_backend, 4)
    assert mongo_backend.complete(done.id, done.claim_token) == "completed"
    spy = spy_on(mongo_backend)
    results = mongo_backend.complete_many(
        [
            Completion(first.id, first.claim_token),
            Completion(stale.id, "an-older-token"),
            Completion(done.id, "another-token"),
            Completion("not-an-object-id", "token"),
            Completion(last.id, last.claim_token),
        ]
    )
    assert results == [
        JobResult("completed"),
        JobResult("lease-lost"),
        JobResult("already-terminal", "completed"),
        JobResult("not-found"),
        JobResult("completed"),
    ]
    # One read of the claims this backend object did not make itself (the two stale
    # tokens: another object's claims would need it for their attempt entries), one bulk
    # with a request per parsable id, then one receipt read per request.
    assert spy.calls == Counter(find=1, bulk_write=1, find_one=4)
    assert len(spy.bulks[0]) == 4
    assert statuses(mongo_backend, [first, stale, done, last]) == [
        "completed",
        "active",
        "completed",
        "completed",
    ]


def test_the_same_completion_twice_is_sent_once_and_answered_twice(
    mongo_backend: MongoJobQueue,
) -> None:
    one, other = claimed(mongo_backend, 2)
    spy = spy_on(mongo_backend)
    batch = [Completion(one.id, one.claim_token), Completion(other.id, other.claim_token)]
    assert mongo_backend.complete_many([batch[0], *batch, batch[1]]) == ["completed"] * 4
    assert spy.calls == Counter(bulk_write=1)
    assert len(spy.bulks[0]) == 2


def test_a_batch_of_unparsable_ids_writes_nothing(mongo_backend: MongoJobQueue) -> None:
    spy = spy_on(mongo_backend)
    batch = [Completion("nope", "t"), Completion("", "t")]
    assert mongo_backend.complete_many(batch) == [JobResult("not-found")] * 2
    assert mongo_backend.complete_many([]) == []
    assert spy.calls == Counter()


def test_a_bulk_whose_reply_was_lost_is_repeated_and_answered_from_receipts() -> None:
    backend = make_mongomock_backend()
    backend.startup()
    handles = claimed(backend, 3)
    real = backend.col
    sent = Counter[str]()

    class LostReply:
        def __getattr__(self, name: str) -> Any:
            attr = getattr(real, name)
            if name != "bulk_write":
                return attr

            def wrapper(*args: Any, **kwargs: Any) -> Any:
                sent[name] += 1
                result = attr(*args, **kwargs)
                if sent[name] == 1:
                    raise AutoReconnect("connection reset after the write")
                return result

            return wrapper

    backend.col = LostReply()  # type: ignore[assignment]
    batch = [Completion(h.id, h.claim_token) for h in handles]
    assert backend.complete_many(batch) == [JobResult("completed")] * 3
    assert sent["bulk_write"] == 2
    backend.col = real
    assert statuses(backend, handles) == ["completed"] * 3
    assert [len(doc["receipts"]) for doc in real.find()] == [1, 1, 1]  # each applied once


def test_a_transient_error_before_the_write_is_retried() -> None:
    backend = make_mongomock_backend()
    backend.startup()
    handles = claimed(backend, 2)
    real = backend.col
    attempts = Counter[str]()

    class Blip:
        def __getattr__(self, name: str) -> Any:
            attr = getattr(real, name)
            if name != "bulk_write":
                return attr

            def wrapper(*args: Any, **kwargs: Any) -> Any:
                attempts[name] += 1
                if attempts[name] == 1:
                    raise AutoReconnect("blip")
                return attr(*args, **kwargs)

            return wrapper

    backend.col = Blip()  # type: ignore[assignment]
    batch = [Completion(h.id, h.claim_token) for h in handles]
    assert backend.complete_many(batch) == ["completed", "completed"]
    assert attempts["bulk_write"] == 2


def test_a_write_error_in_the_bulk_raises_a_durabl_error_without_repeating() -> None:
    backend = make_mongomock_backend()
    backend.startup()
    (handle,) = claimed(backend, 1)
    real = backend.col
    calls = Counter[str]()

    class Rejecting:
        def __getattr__(self, name: str) -> Any:
            attr = getattr(real, name)
            if name != "bulk_write":
                return attr

            def wrapper(*args: Any, **kwargs: Any) -> Any:
                calls[name] += 1
                raise BulkWriteError({"writeErrors": [{"index": 0, "code": 2}], "nMatched": 0})

            return wrapper

    backend.col = Rejecting()  # type: ignore[assignment]
    with pytest.raises(DurablError, match="complete_many"):
        backend.complete_many([Completion(handle.id, handle.claim_token)])
    assert calls["bulk_write"] == 1


def test_a_server_gets_pymongos_own_update_one() -> None:
    oid = ObjectId()
    server = fenced_update(oid, "tok", {"$set": {"status": "completed"}}, mongomock=False)
    mock = fenced_update(oid, "tok", {"$set": {"status": "completed"}}, mongomock=True)
    assert type(server) is UpdateOne
    assert type(mock) is MongomockUpdateOne
    assert server._filter == mock._filter == {"_id": oid, "claim_token": "tok", "status": "active"}
    assert server._doc == mock._doc
