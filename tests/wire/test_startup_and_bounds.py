"""Startup under a failover, an unreachable server, and a release bounded by its timeout."""

from __future__ import annotations

import socket
import time

import pytest
from pymongo import MongoClient

from durabl import MongoJobQueue
from durabl.model.exceptions import BackendUnavailableError
from durabl.stores.mongo.indexes import INDEXES
from tests.wire.server import NAMESPACE, RETRYABLE_ERRORS, Wire, failed, txn

pytestmark = pytest.mark.wire


def test_startup_interrupted_by_a_failover_creates_only_the_missing_indexes(wire: Wire) -> None:
    call = wire.start(wire.store.startup)
    wire.receives("listIndexes").command_err(code=26, errmsg="ns does not exist")
    # One command creates every index; the server fails it after building the first two
    # (a createIndexes is not atomic across its indexes).
    first = wire.receives("createIndexes")
    assert [index["name"] for index in first.doc["indexes"]] == [s.name for s in INDEXES]
    failed(first, RETRYABLE_ERRORS["NotWritablePrimary"])
    created: list[str] = []
    # The store repeats startup: it lists what exists and creates the rest.
    existing = [{"v": 2, "key": dict(INDEXES[0].keys), "name": INDEXES[0].name}]
    existing.append({"v": 2, "key": dict(INDEXES[1].keys), "name": INDEXES[1].name})
    listed = wire.receives("listIndexes")
    listed.ok(cursor={"id": 0, "ns": NAMESPACE, "firstBatch": existing})
    while not call.done():
        if wire.server.got(timeout=0.05):
            request = wire.receives("createIndexes")
            created += [index["name"] for index in request.doc["indexes"]]
            request.ok()
    call.result()
    assert created == [spec.name for spec in INDEXES[2:]]
    assert wire.idle()


def test_unreachable_server_is_one_short_unavailable_line() -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    client: MongoClient[dict[str, object]] = MongoClient(
        f"mongodb://127.0.0.1:{port}/?replicaSet=rs", serverSelectionTimeoutMS=200
    )
    try:
        with pytest.raises(BackendUnavailableError) as info:
            MongoJobQueue(client["durabl"], "jobs").startup()
    finally:
        client.close()
    message = str(info.value)
    assert message.startswith("MongoDB unavailable during startup: 127.0.0.1:")
    assert "Topology Description" not in message and "\n" not in message


def test_release_with_a_timeout_gives_up_within_it(wire: Wire) -> None:
    """A release during shutdown is bounded (pymongo's CSOT): the driver repeats the same
    write until the deadline, then the caller gets one error, not a hang."""
    doc = wire.job(token="t1")
    wire.claimed("t1", doc)
    started = time.monotonic()
    call = wire.start(wire.store.release, str(doc["_id"]), "t1", timeout=0.5)
    refused = wire.refuse_until_done(call)
    with pytest.raises(BackendUnavailableError):
        call.result()
    assert time.monotonic() - started < 2.0
    writes = [r for r in refused if r.command_name == "update"]
    assert len(writes) >= 2 and txn(writes[0]) == txn(writes[1]), "the driver's retry"


def test_heartbeat_after_a_failover_renews_once(wire: Wire) -> None:
    """A stepdown answered with PrimarySteppedDown, then the new primary answers."""
    doc = wire.job(token="t1")
    wire.claimed("t1", doc)
    call = wire.start(wire.store.heartbeat, str(doc["_id"]), "t1")
    first = wire.receives("update")
    failed(first, RETRYABLE_ERRORS["PrimarySteppedDown"])
    again = wire.receives("update")
    assert txn(again) == txn(first)
    again.ok(n=1, nModified=1)
    assert call.result() == "applied"
