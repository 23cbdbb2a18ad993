"""An enqueue whose insert meets the job an earlier attempt of it already wrote.

When a primary restarts between applying an insert and replying, pymongo's retry of the
same insert finds the document there and gets E11000 on ``_id`` (tests/wire has that
conversation byte by byte). Here the earlier attempt is simulated on a real server and on
mongomock: the document is written just before the store's insert, which meets it. The
enqueue must return the job, which exists once.
"""

from __future__ import annotations

from typing import Any

import pytest
from pymongo.collection import Collection

from durabl import JobQueue, MongoJobQueue
from durabl.model.options import build_new_job
from durabl.testing import FakeClock


class EarlierAttemptLanded:
    """The jobs collection, where every insert finds its document written already, as
    the lost first attempt of it would have left it: the ids written that way."""

    def __init__(self, col: Collection[dict[str, Any]]) -> None:
        self.col = col
        self.landed: list[Any] = []

    def insert_one(self, doc: dict[str, Any]) -> Any:
        self.col.insert_one(dict(doc))
        self.landed.append(doc["_id"])
        return self.col.insert_one(doc)  # the retry: E11000 on _id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.col, name)


@pytest.fixture
def earlier_attempt_landed(
    mongo_backend: MongoJobQueue, monkeypatch: pytest.MonkeyPatch
) -> list[Any]:
    landing = EarlierAttemptLanded(mongo_backend.store.col)
    monkeypatch.setattr(mongo_backend.store, "col", landing)
    return landing.landed


def jobs_stored(backend: MongoJobQueue) -> list[dict[str, Any]]:
    return list(backend.col.find({}, {"_id": 1, "status": 1, "claim_token": 1}))


def test_enqueue_meeting_its_own_earlier_insert_returns_the_job(
    mongo_backend: MongoJobQueue, clock: FakeClock, earlier_attempt_landed: list[Any]
) -> None:
    queue = JobQueue(mongo_backend, clock=clock)
    job_id = queue.enqueue("email", {"to": "a@example.com"})
    assert job_id is not None, "the job was stored: its id, not a dedupe miss"
    assert [str(i) for i in earlier_attempt_landed] == [job_id]
    assert [(str(d["_id"]), d["status"]) for d in jobs_stored(mongo_backend)] == [
        (job_id, "pending")
    ]
    job = queue.get_job(job_id)
    assert job is not None and job.data == {"to": "a@example.com"}
    queue.shutdown(timeout=2)


def test_coalescing_enqueue_meeting_its_own_insert_is_not_coalesced_into_itself(
    mongo_backend: MongoJobQueue, earlier_attempt_landed: list[Any]
) -> None:
    job = build_new_job("digest", {"v": 1}, dedupe_key="daily", coalesce="latest")
    result = mongo_backend.enqueue(job)
    assert (result.job_id, result.coalesced) == (str(earlier_attempt_landed[0]), False)
    assert len(jobs_stored(mongo_backend)) == 1


def test_inline_claim_meeting_its_own_insert_hands_out_its_claim(
    mongo_backend: MongoJobQueue, earlier_attempt_landed: list[Any]
) -> None:
    result = mongo_backend.claim_or_enqueue(build_new_job("email", {}), "w1")
    assert result.handle is not None
    (stored,) = jobs_stored(mongo_backend)
    assert result.handle.id == str(stored["_id"])
    assert (stored["status"], stored["claim_token"]) == ("active", result.handle.claim_token)


def test_a_dedupe_slot_held_by_another_job_is_still_a_dedupe_hit(
    mongo_backend: MongoJobQueue,
) -> None:
    first = mongo_backend.enqueue(build_new_job("email", {}, dedupe_key="invoice-7"))
    again = mongo_backend.enqueue(build_new_job("email", {}, dedupe_key="invoice-7"))
    assert first.job_id is not None and again.job_id is None
    assert len(jobs_stored(mongo_backend)) == 1


class EarlierBulkLanded:
    """The jobs collection, where every ``insert_many`` finds the documents its lost
    first attempt wrote (all of them): the retry meets each on ``_id``."""

    def __init__(self, col: Collection[dict[str, Any]]) -> None:
        self.col = col

    def insert_many(self, docs: list[dict[str, Any]], ordered: bool = True) -> Any:
        self.col.insert_many([dict(doc) for doc in docs], ordered=False)
        return self.col.insert_many(docs, ordered=ordered)  # the retry: E11000 on each _id

    def __getattr__(self, name: str) -> Any:
        return getattr(self.col, name)


def test_a_bulk_insert_meeting_its_own_earlier_attempt_returns_every_job(
    mongo_backend: MongoJobQueue, monkeypatch: pytest.MonkeyPatch
) -> None:
    queue = JobQueue(mongo_backend)
    queue.enqueue("t", 0, dedupe_key="taken")
    monkeypatch.setattr(mongo_backend.store, "col", EarlierBulkLanded(mongo_backend.store.col))
    ids = queue.enqueue_many(
        [("t", 1), ("t", 2, {"dedupe_key": "k"}), ("t", 3, {"dedupe_key": "taken"})]
    )
    assert ids[0] is not None and ids[1] is not None and ids[2] is None
    assert len(jobs_stored(mongo_backend)) == 3
    queue.shutdown(timeout=2)
