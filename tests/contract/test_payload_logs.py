"""Payloads come back as stored (to BSON's precision) and logs are kept in order, clipped
and bounded, whichever store holds them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from durabl import DocumentTooLargeError
from durabl.model.job import LogEntry
from durabl.model.options import (
    MAX_DEDUPE_KEY_BYTES,
    MAX_FAIL_REASON_BYTES,
    MAX_LOG_ENTRIES,
    MAX_LOG_MESSAGE_BYTES,
    MAX_PAYLOAD_BYTES,
    MAX_TYPE_BYTES,
    build_new_job,
)
from durabl.model.payload import check_payload
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import claim_one, enqueue_id, get

PLUS_TWO = timezone(timedelta(hours=2))


def sample_payload() -> dict[str, Any]:
    return {
        "str": "héllo wörld ✓",
        "empty": "",
        "int": 42,
        "neg": -7,
        "big": 2**62,
        "int64_max": 2**63 - 1,
        "int64_min": -(2**63),
        "float": 3.25,
        "tiny": 1e-300,
        "huge": 1.5e308,
        "inf": float("inf"),
        "true": True,
        "false": False,
        "none": None,
        "bytes": b"\x00\x01\xffbinary",
        "empty_bytes": b"",
        "utc": datetime(2031, 5, 6, 7, 8, 9, 123456, tzinfo=timezone.utc),
        "offset": datetime(2031, 5, 6, 9, 8, 9, 999999, tzinfo=PLUS_TWO),
        "list": [1, "two", 3.0, None, [4, [5, {"six": 6}]]],
        "empty_list": [],
        "empty_dict": {},
        "nested": {"a": {"b": {"c": [True, {"d": b"e"}]}}},
    }


def expected_payload() -> dict[str, Any]:
    """What every store must hand back for :func:`sample_payload`."""
    expected = sample_payload()
    expected["utc"] = datetime(2031, 5, 6, 7, 8, 9, 123000, tzinfo=timezone.utc)
    expected["offset"] = datetime(2031, 5, 6, 7, 8, 9, 999000, tzinfo=timezone.utc)
    return expected


def assert_same(got: Any, want: Any, path: str = "data") -> None:
    """Equal, with the same types all the way down (True is not 1, 1.0 is not 1). An int
    may come back as an int subclass (pymongo decodes 64-bit ints as ``bson.Int64``)."""
    if isinstance(want, int) and not isinstance(want, bool):
        assert isinstance(got, int) and not isinstance(got, bool), f"{path}: {got!r} not an int"
    else:
        assert type(got) is type(want), f"{path}: {type(got).__name__} != {type(want).__name__}"
    if isinstance(want, dict):
        assert list(got) == list(want), f"{path}: keys {list(got)} != {list(want)}"
        for key in want:
            assert_same(got[key], want[key], f"{path}[{key!r}]")
    elif isinstance(want, list):
        assert len(got) == len(want), f"{path}: length {len(got)} != {len(want)}"
        for index, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_same(g, w, f"{path}[{index}]")
    elif isinstance(want, datetime):
        assert got == want, f"{path}: {got!r} != {want!r}"
        assert got.utcoffset() == timedelta(0), f"{path}: {got!r} is not UTC"
    else:
        assert got == want, f"{path}: {got!r} != {want!r}"


def test_payload_round_trips_through_get_job(backend: Backend) -> None:
    job_id = enqueue_id(backend, data=sample_payload())
    assert_same(get(backend, job_id).data, expected_payload())


def test_payload_round_trips_through_claim_and_list(backend: Backend) -> None:
    enqueue_id(backend, data=sample_payload())
    assert_same(claim_one(backend).data, expected_payload())
    (listed,) = backend.list_jobs()
    assert_same(listed.data, expected_payload())


def test_payload_round_trips_through_claim_or_enqueue(backend: Backend) -> None:
    result = backend.claim_or_enqueue(build_new_job("t", sample_payload()), "contract")
    assert result.handle is not None
    assert_same(result.handle.data, expected_payload())
    assert_same(get(backend, result.handle.id).data, expected_payload())


def test_payload_round_trips_through_coalesce(backend: Backend) -> None:
    job_id = enqueue_id(backend, data={"old": True}, dedupe_key="k")
    result = backend.enqueue(
        build_new_job("t", sample_payload(), dedupe_key="k", coalesce="latest")
    )
    assert result.coalesced
    assert_same(get(backend, job_id).data, expected_payload())


@pytest.mark.parametrize("data", [[1, 2, 3], "text", 7, None, 2.5, True, b"raw"])
def test_a_payload_need_not_be_a_dict(backend: Backend, data: Any) -> None:
    backend.enqueue(build_new_job("t", data))
    assert_same(claim_one(backend).data, data)


def test_tuples_come_back_as_lists(backend: Backend) -> None:
    job_id = enqueue_id(backend, data={"pair": (1, (2, 3))})
    assert_same(get(backend, job_id).data, {"pair": [1, [2, 3]]})


def test_tuples_come_back_as_lists_from_claim_or_enqueue(backend: Backend) -> None:
    result = backend.claim_or_enqueue(build_new_job("t", {"pair": (1, (2, 3))}), "contract")
    assert result.handle is not None
    assert_same(result.handle.data, {"pair": [1, [2, 3]]})


def test_mutating_the_enqueued_object_does_not_change_the_stored_job(backend: Backend) -> None:
    data: dict[str, Any] = {"items": [1, 2], "meta": {"k": "v"}}
    job_id = enqueue_id(backend, data=data)
    data["items"].append(3)
    data["meta"]["k"] = "changed"
    assert get(backend, job_id).data == {"items": [1, 2], "meta": {"k": "v"}}


def test_mutating_a_claimed_payload_does_not_change_the_stored_job(backend: Backend) -> None:
    job_id = enqueue_id(backend, data={"items": [1, 2]})
    handle = claim_one(backend)
    handle.data["items"].append(3)
    assert get(backend, job_id).data == {"items": [1, 2]}


def test_mutating_the_claim_or_enqueue_payload_does_not_change_the_handle(
    backend: Backend,
) -> None:
    data: dict[str, Any] = {"items": [1, 2]}
    result = backend.claim_or_enqueue(build_new_job("t", data), "contract")
    assert result.handle is not None
    data["items"].append(3)
    assert result.handle.data == {"items": [1, 2]}
    assert get(backend, result.handle.id).data == {"items": [1, 2]}


def test_instants_on_a_job_are_aware_utc_milliseconds(backend: Backend, clock: FakeClock) -> None:
    clock.advance(0.123456)
    run_at = datetime(2031, 1, 1, 3, 0, 0, 654321, tzinfo=PLUS_TWO)
    job = get(backend, enqueue_id(backend, run_at=run_at))
    assert job.run_at == datetime(2031, 1, 1, 1, 0, 0, 654000, tzinfo=timezone.utc)
    for instant in (job.run_at, job.created_at, job.updated_at):
        assert instant.utcoffset() == timedelta(0)
        assert instant.microsecond % 1000 == 0
    assert job.created_at == clock.now().replace(microsecond=123000)


# -- logs ------------------------------------------------------------------------------------


def messages(backend: Backend, job_id: str) -> list[str]:
    return [entry.message for entry in get(backend, job_id).logs]


def test_logs_from_heartbeat_and_complete_are_stored_in_order(
    backend: Backend, clock: FakeClock
) -> None:
    job_id = enqueue_id(backend)
    handle = claim_one(backend)
    handle.log("one")
    handle.log("two")
    assert handle.heartbeat() == "applied"
    assert messages(backend, job_id) == ["one", "two"]
    clock.advance(1)
    handle.log("three")
    assert handle.complete() == "completed"
    job = get(backend, job_id)
    assert [e.message for e in job.logs] == ["one", "two", "three"]
    assert job.logs[0].at == job.logs[1].at == clock.now() - timedelta(seconds=1)
    assert job.logs[2].at == clock.now()


def test_logs_passed_directly_are_stored_with_their_instants(
    backend: Backend, clock: FakeClock
) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    at = clock.now() - timedelta(seconds=5, microseconds=1500)
    logs = [LogEntry(at, "a"), LogEntry(at, "b")]
    assert backend.heartbeat(handle.id, handle.claim_token, logs=logs) == "applied"
    assert backend.complete(handle.id, handle.claim_token, logs=[LogEntry(at, "c")]) == "completed"
    job = get(backend, handle.id)
    assert [e.message for e in job.logs] == ["a", "b", "c"]
    expected_at = at.replace(microsecond=at.microsecond // 1000 * 1000)
    assert all(e.at == expected_at and e.at.utcoffset() == timedelta(0) for e in job.logs)


def test_logs_accumulate_across_attempts(backend: Backend, clock: FakeClock) -> None:
    job_id = enqueue_id(backend, max_attempts=3)
    first = claim_one(backend)
    first.log("attempt 1")
    first.fail("x", retry_at=clock.now())
    second = claim_one(backend)
    second.log("attempt 2")
    second.release()
    third = claim_one(backend)
    third.log("attempt 3")
    third.fail_fatal("done")
    assert messages(backend, job_id) == ["attempt 1", "attempt 2", "attempt 3"]


def test_logs_from_a_superseding_write_are_kept(backend: Backend) -> None:
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    handle = claim_one(backend)
    enqueue_id(backend, dedupe_key="k", dedupe_scope="pending")
    handle.log("giving way")
    assert handle.release() == "superseded"
    assert messages(backend, handle.id) == ["giving way"]


def test_logs_of_a_stale_write_are_not_stored(backend: Backend, clock: FakeClock) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    assert handle.complete() == "completed"
    late = [LogEntry(clock.now(), "too late")]
    assert backend.heartbeat(handle.id, handle.claim_token, logs=late) == "lease-lost"
    assert backend.complete(handle.id, "stale", logs=late).status == "already-terminal"
    assert backend.fail_fatal(handle.id, handle.claim_token, "x", logs=late) == "already-terminal"
    assert messages(backend, handle.id) == []


def test_a_long_log_message_is_clipped(backend: Backend) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    handle.log("é" * MAX_LOG_MESSAGE_BYTES)
    handle.complete()
    (entry,) = get(backend, handle.id).logs
    assert len(entry.message.encode()) <= MAX_LOG_MESSAGE_BYTES
    assert entry.message.startswith("éé")


def test_only_the_newest_log_entries_are_kept(backend: Backend, clock: FakeClock) -> None:
    enqueue_id(backend)
    handle = claim_one(backend)
    at = clock.now()
    first = [LogEntry(at, f"m{n}") for n in range(MAX_LOG_ENTRIES - 2)]
    assert backend.heartbeat(handle.id, handle.claim_token, logs=first) == "applied"
    more = [LogEntry(at, f"m{n}") for n in range(MAX_LOG_ENTRIES - 2, MAX_LOG_ENTRIES + 3)]
    assert backend.complete(handle.id, handle.claim_token, logs=more) == "completed"
    stored = messages(backend, handle.id)
    assert len(stored) == MAX_LOG_ENTRIES
    assert stored[0] == "m3"
    assert stored[-1] == f"m{MAX_LOG_ENTRIES + 2}"


# -- the shared size budget ------------------------------------------------------------------


def payload_of_size(size: int) -> dict[str, str]:
    """A payload whose portable size (what ``build_new_job`` measures) is ``size``."""
    data = {"blob": "x" * (size - check_payload({"blob": ""}))}
    assert check_payload(data) == size
    return data


def test_a_payload_at_the_size_budget_is_accepted_by_every_store(
    backend: Backend, clock: FakeClock
) -> None:
    # The budget covers the payload, the type and the key (stored twice: key and slot).
    new = build_new_job("t", payload_of_size(MAX_PAYLOAD_BYTES - 1 - 2), dedupe_key="k")
    backend.check_size(new)
    job_id = backend.enqueue(new).job_id
    assert job_id is not None
    handle = claim_one(backend)
    assert len(handle.data["blob"]) == len(new.data["blob"])
    assert handle.fail_fatal("r" * MAX_FAIL_REASON_BYTES) == "failed-terminal"
    assert backend.retry(job_id)


def test_a_payload_at_the_budget_fits_with_a_long_type_and_dedupe_key(backend: Backend) -> None:
    """The budget promises that a payload one store accepts, every store accepts; the
    job's type and dedupe key must not push it over on any of them."""
    type_, key = "t" * MAX_TYPE_BYTES, "k" * MAX_DEDUPE_KEY_BYTES
    size = MAX_PAYLOAD_BYTES - len(type_) - 2 * len(key)
    new = build_new_job(type_, payload_of_size(size), dedupe_key=key)
    backend.check_size(new)
    assert backend.enqueue(new).job_id is not None
    with pytest.raises(DocumentTooLargeError):
        build_new_job(type_, payload_of_size(size + 1), dedupe_key=key)


def test_overlong_types_and_keys_are_value_errors() -> None:
    with pytest.raises(ValueError, match="job type"):
        build_new_job("t" * (MAX_TYPE_BYTES + 1), {})
    with pytest.raises(ValueError, match="dedupe_key"):
        build_new_job("t", {}, dedupe_key="k" * (MAX_DEDUPE_KEY_BYTES + 1))


def test_a_payload_over_the_budget_is_refused_before_any_store_sees_it(
    backend: Backend,
) -> None:
    with pytest.raises(DocumentTooLargeError):
        build_new_job("t", payload_of_size(MAX_PAYLOAD_BYTES + 1))
    assert backend.count_jobs() == 0
