"""MongoDB-specific behaviour: indexes, transient retries, server time, the mongomock lock."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import mongomock
import pytest
from pymongo.errors import AutoReconnect, NotPrimaryError, ServerSelectionTimeoutError

from durabl import BackendUnavailableError, DurablError, JobQueue, MongoJobQueue
from durabl.model.options import build_new_job
from durabl.stores.mongo.indexes import INDEXES
from durabl.testing import FakeClock
from tests.conftest import make_mongomock_backend


def test_startup_creates_every_index_and_is_idempotent(mongo_backend: MongoJobQueue) -> None:
    mongo_backend.startup()
    mongo_backend.store.started = False
    mongo_backend.startup()
    info = mongo_backend.col.index_information()
    for spec in INDEXES:
        assert spec.name in info
        assert [tuple(k) for k in info[spec.name]["key"]] == [
            (name, int(direction)) for name, direction in spec.keys
        ]
    for name in ("durabl_dedupe_live", "durabl_dedupe_pending", "durabl_dedupe_active"):
        assert info[name]["unique"] is True
        assert "partialFilterExpression" in info[name]


def test_startup_on_a_collection_that_already_holds_jobs() -> None:
    db = mongomock.MongoClient(tz_aware=True)["app"]
    first = MongoJobQueue(db)
    first.startup()
    first.enqueue(build_new_job("t", {}, dedupe_key="k"))
    first.enqueue(build_new_job("t", {}, dedupe_key="k2"))
    second = MongoJobQueue(db)
    second.startup()
    assert second.enqueue(build_new_job("t", {}, dedupe_key="k")).job_id is None


def test_claim_index_matches_the_claim_filter_and_sort() -> None:
    claim = next(spec for spec in INDEXES if spec.name == "durabl_claim")
    assert [k for k, _ in claim.keys] == ["type", "priority", "run_at", "_id"]
    assert claim.options["partialFilterExpression"] == {"status": "pending"}
    lease = next(spec for spec in INDEXES if spec.name == "durabl_lease")
    assert lease.options["partialFilterExpression"] == {"status": "active"}


def test_an_index_with_our_name_and_other_keys_is_reported_not_dropped() -> None:
    db = mongomock.MongoClient(tz_aware=True)["app"]
    db["durabl_jobs"].create_index([("type", -1)], name="durabl_claim")
    with pytest.raises(DurablError, match="durabl_claim"):
        MongoJobQueue(db).startup()


def test_a_queue_creates_indexes_before_its_first_operation() -> None:
    backend = make_mongomock_backend()
    queue = JobQueue(backend)
    assert queue.enqueue("t", {}, dedupe_key="k") is not None
    assert "durabl_dedupe_live" in backend.col.index_information()
    assert queue.enqueue("t", {}, dedupe_key="k") is None


class Flaky:
    """A collection proxy whose chosen method raises ``error`` the first ``times`` calls."""

    def __init__(self, col: Any, method: str, error: Exception, times: int = 1) -> None:
        self._col, self._method, self._error, self._left = col, method, error, times
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._col, name)
        if name != self._method:
            return attr

        def wrapper(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self._left > 0:
                self._left -= 1
                raise self._error
            return attr(*args, **kwargs)

        return wrapper


@pytest.mark.parametrize("error", [AutoReconnect("blip"), NotPrimaryError("stepped down")])
def test_transient_errors_are_retried_for_fenced_writes(error: Exception) -> None:
    backend = make_mongomock_backend()
    backend.startup()
    backend.enqueue(build_new_job("t", {}))
    (handle,) = backend.claim("t")
    flaky = Flaky(backend.col, "update_one", error)
    backend.col = flaky  # type: ignore[assignment]
    assert handle.complete().status == "completed"
    assert flaky.calls == 2


def test_an_ambiguous_complete_reports_its_first_result() -> None:
    """The write applied but its reply was lost: the repeat finds the receipt."""
    backend = make_mongomock_backend()
    backend.startup()
    backend.enqueue(build_new_job("t", {}))
    (handle,) = backend.claim("t")
    real = backend.col

    class LostReply:
        def __getattr__(self, name: str) -> Any:
            attr = getattr(real, name)
            if name != "update_one":
                return attr

            def wrapper(*args: Any, **kwargs: Any) -> Any:
                attr(*args, **kwargs)
                backend.col = real  # type: ignore[assignment]
                raise AutoReconnect("connection reset after the write")

            return wrapper

    backend.col = LostReply()  # type: ignore[assignment]
    assert handle.complete().status == "completed"


def test_claims_are_not_repeated_on_transient_errors() -> None:
    backend = make_mongomock_backend()
    backend.startup()
    backend.enqueue(build_new_job("t", {}))
    flaky = Flaky(backend.col, "find_one_and_update", AutoReconnect("blip"))
    backend.col = flaky  # type: ignore[assignment]
    with pytest.raises(BackendUnavailableError):
        backend.claim("t")
    assert flaky.calls == 1


def test_retries_are_bounded_and_end_in_a_durabl_error() -> None:
    backend = make_mongomock_backend()
    backend.startup()
    backend.enqueue(build_new_job("t", {}))
    (handle,) = backend.claim("t")
    backend.col = Flaky(backend.col, "update_one", AutoReconnect("down"), times=100)  # type: ignore[assignment]
    with pytest.raises(BackendUnavailableError) as info:
        handle.heartbeat()
    assert isinstance(info.value.__cause__, AutoReconnect)


def test_server_selection_timeouts_are_not_multiplied() -> None:
    backend = make_mongomock_backend()
    backend.startup()
    flaky = Flaky(backend.col, "find_one", ServerSelectionTimeoutError("no servers"), times=5)
    backend.col = flaky  # type: ignore[assignment]
    with pytest.raises(BackendUnavailableError):
        backend.get_job("0123456789abcdef01234567")
    assert flaky.calls == 1


def test_lease_times_come_from_the_server_clock() -> None:
    db = mongomock.MongoClient(tz_aware=True)["app"]
    backend = MongoJobQueue(db, server_time=True)
    backend.store.server_time = True  # as on a real server; mongomock has no `hello`
    server_now = datetime.now(timezone.utc) + timedelta(minutes=7)

    class Db:
        name = "app"

        def command(self, name: str) -> dict[str, Any]:
            assert name == "hello"
            return {"localTime": server_now}

    backend.db = Db()  # type: ignore[assignment]
    skew = (backend.now() - datetime.now(timezone.utc)).total_seconds()
    assert 419 < skew < 421


def test_mongomock_calls_are_serialised_and_real_servers_are_not() -> None:
    backend = make_mongomock_backend()
    assert backend.store.lock is not None
    other = make_mongomock_backend()
    # one lock for every mongomock database in the process
    assert other.store.lock is backend.store.lock


def test_change_streams_are_refused_on_mongomock() -> None:
    backend = MongoJobQueue(mongomock.MongoClient()["app"], use_change_streams=True)
    with pytest.raises(DurablError, match="replica set"):
        backend.startup()


def test_dates_come_back_aware_utc(clock: FakeClock) -> None:
    backend = make_mongomock_backend(clock)
    backend.startup()
    job_id = backend.enqueue(build_new_job("t", {})).job_id
    job = backend.get_job(job_id or "")
    assert job is not None
    assert job.created_at.tzinfo is not None
    assert job.created_at.utcoffset() == timedelta(0)
    assert job.run_at == clock.now()


def test_a_largest_job_still_fits_when_full_logs_and_a_long_reason_are_added() -> None:
    """The size budget keeps room for the writes that end a job's life."""
    import bson

    from durabl.model.job import LogEntry
    from durabl.model.options import (
        MAX_DOCUMENT_BYTES,
        MAX_FAIL_REASON_BYTES,
        MAX_LOG_ENTRIES,
        MAX_LOG_MESSAGE_BYTES,
        MAX_PAYLOAD_BYTES,
    )

    backend = make_mongomock_backend()
    backend.startup()
    filler = MAX_PAYLOAD_BYTES - 64  # the largest payload a job may carry
    job_id = backend.enqueue(build_new_job("big", {"blob": b"x" * filler})).job_id
    assert job_id is not None
    (handle,) = backend.claim("big")
    now = backend.now()
    line = "é" * MAX_LOG_MESSAGE_BYTES  # two bytes each: clipped to the byte budget
    for _ in range(3):
        handle.backend.heartbeat(
            handle.id, handle.claim_token, logs=[LogEntry(now, line)] * MAX_LOG_ENTRIES
        )
    result = backend.fail_fatal(handle.id, handle.claim_token, "r" * (MAX_FAIL_REASON_BYTES * 4))
    assert result.status == "failed-terminal"
    stored = backend.col.find_one()
    assert stored is not None
    assert len(stored["logs"]) == MAX_LOG_ENTRIES
    assert len(bson.encode(stored)) <= MAX_DOCUMENT_BYTES
