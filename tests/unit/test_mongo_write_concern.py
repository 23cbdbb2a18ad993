"""The write concern of every collection a MongoJobQueue writes.

durabl sends ``{w: "majority", j: true}`` unless the user chose a write concern: on a
server whose default is ``w: 1`` a crash loses acknowledged jobs. A choice made in the URL,
on the client or database, or with ``write_concern=`` is kept; an unacknowledged one is
refused, since dedupe, fencing and receipts read the server's answer to each write.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

import mongomock
import pytest
from pymongo import MongoClient, monitoring
from pymongo.collection import Collection
from pymongo.write_concern import WriteConcern

from durabl import JobQueue, MongoJobQueue, backend_from_url
from durabl.model.options import build_new_job
from tests.conftest import require_mongo

DURABLE = {"w": "majority", "j": True}
#: No server answers here: nothing in these tests connects unless it says so.
NOWHERE = "mongodb://127.0.0.1:9/app"


def written_collections(store: MongoJobQueue) -> dict[str, Collection[dict[str, Any]]]:
    """Every collection the store writes: the jobs and the ones beside them."""
    return {
        "jobs": store.col,
        "schedules": store.schedules.col,
        "workers": store.workers.col,
        "subscriptions": store.subscriptions.col,
        "rate_limits": store._rates,
    }


def write_concerns(store: MongoJobQueue) -> dict[str, dict[str, Any]]:
    return {name: col.write_concern.document for name, col in written_collections(store).items()}


def every(document: dict[str, Any] | None) -> dict[str, dict[str, Any] | None]:
    return dict.fromkeys(("jobs", "schedules", "workers", "subscriptions", "rate_limits"), document)


def test_a_database_with_the_server_default_gets_majority_and_journal() -> None:
    client: MongoClient[dict[str, Any]] = MongoClient(NOWHERE, connect=False)
    assert client["app"].write_concern.is_server_default
    store = MongoJobQueue(client["app"])
    assert write_concerns(store) == every(DURABLE)
    client.close()


def test_from_url_without_a_write_concern_gets_majority_and_journal() -> None:
    store = backend_from_url(NOWHERE)
    assert isinstance(store, MongoJobQueue)
    assert write_concerns(store) == every(DURABLE)
    store.close()


@pytest.mark.parametrize(
    ("query", "kept"),
    [
        ("w=1", {"w": 1}),
        ("w=1&journal=false", {"w": 1, "j": False}),
        ("w=majority&wtimeoutMS=2500", {"w": "majority", "wtimeout": 2500}),
    ],
)
def test_a_write_concern_in_the_url_is_kept(query: str, kept: dict[str, Any]) -> None:
    store = MongoJobQueue.from_url(f"{NOWHERE}?{query}")
    assert write_concerns(store) == every(kept)
    store.close()


def test_a_write_concern_on_the_client_or_database_is_kept() -> None:
    client: MongoClient[dict[str, Any]] = MongoClient(NOWHERE, connect=False, w=2)
    assert write_concerns(MongoJobQueue(client["app"])) == every({"w": 2})
    db = client.get_database("app", write_concern=WriteConcern(w=1, j=True))
    assert write_concerns(MongoJobQueue(db)) == every({"w": 1, "j": True})
    client.close()


def test_the_write_concern_keyword_wins() -> None:
    chosen = WriteConcern(w="majority", wtimeout=5000)
    store = MongoJobQueue.from_url(f"{NOWHERE}?w=1", write_concern=chosen)
    assert write_concerns(store) == every({"w": "majority", "wtimeout": 5000})
    store.close()
    # The server's own default, asked for by name: durabl sends none.
    client: MongoClient[dict[str, Any]] = MongoClient(NOWHERE, connect=False)
    assert write_concerns(MongoJobQueue(client["app"], write_concern=WriteConcern())) == every({})
    client.close()


@pytest.mark.parametrize("where", ["url", "keyword"])
def test_an_unacknowledged_write_concern_is_refused(where: str) -> None:
    with pytest.raises(ValueError, match="acknowledged"):
        if where == "url":
            MongoJobQueue.from_url(f"{NOWHERE}?w=0")
        else:
            MongoJobQueue.from_url(NOWHERE, write_concern=WriteConcern(w=0))


def test_a_write_concern_that_is_not_one_is_refused() -> None:
    client: MongoClient[dict[str, Any]] = MongoClient(NOWHERE, connect=False)
    with pytest.raises(TypeError, match="WriteConcern"):
        MongoJobQueue(client["app"], write_concern={"w": 1})  # type: ignore[arg-type]
    client.close()


def test_mongomock_carries_it_and_works() -> None:
    db: Any = mongomock.MongoClient(tz_aware=True)["app"]
    store = MongoJobQueue(db)
    assert write_concerns(store) == every(DURABLE)
    kept = MongoJobQueue(db, write_concern=WriteConcern(w=1))
    assert write_concerns(kept) == every({"w": 1})
    queue = JobQueue(store)
    job_id = queue.enqueue("email", {"to": "a@example.com"})
    assert job_id is not None and queue.get_job(job_id) is not None
    queue.shutdown(timeout=2)


class WriteConcernsSent(monitoring.CommandListener):
    """The write concern of each write command a client sends, by command name."""

    WRITES = frozenset({"insert", "update", "delete", "findAndModify"})

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any] | None]] = []
        self._lock = threading.Lock()

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        if event.command_name in self.WRITES:
            concern = event.command.get("writeConcern")
            with self._lock:
                self.sent.append((event.command_name, None if concern is None else dict(concern)))

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        pass

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        pass


def test_a_real_server_takes_majority_and_journal_on_every_write() -> None:
    """On a real server (the session's wire server, or MONGO_URL): a job's whole life,
    a schedule and a rate limit, each write acknowledged under majority and journal."""
    url = require_mongo()
    listener = WriteConcernsSent()
    client: MongoClient[dict[str, Any]] = MongoClient(
        url, tz_aware=True, event_listeners=[listener]
    )
    name = f"durabl_wc_{uuid.uuid4().hex[:8]}"
    store = MongoJobQueue(client[name])
    try:
        store.startup()
        store.set_rate_limit("email", 100, 60.0)
        job_id = store.enqueue(build_new_job("email", {})).job_id
        (handle,) = store.claim("email", limit=1, lease_owner="w1")
        assert handle.id == job_id
        assert store.heartbeat(handle.id, handle.claim_token) == "applied"
        assert store.complete(handle.id, handle.claim_token) == "completed"
    finally:
        client.drop_database(name)
        client.close()
    commands = {command for command, _ in listener.sent}
    assert {"insert", "findAndModify", "update"} <= commands
    assert [concern for _, concern in listener.sent] == [DURABLE] * len(listener.sent)
