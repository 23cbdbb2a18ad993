"""Bad input is refused at the call site, before anything is written."""

from __future__ import annotations

import decimal
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from durabl import DocumentTooLargeError, JobQueue
from durabl.model.options import BackoffPolicy, clip_text
from durabl.model.payload import check_payload
from tests.conftest import make_mongomock_backend


@pytest.fixture
def q() -> JobQueue:
    return JobQueue(make_mongomock_backend())


def stored(q: JobQueue) -> int:
    return q.count_jobs()


@pytest.mark.parametrize(
    "data",
    [
        {1, 2},
        {"d": decimal.Decimal("1.5")},
        {"f": object()},
        {1: "int key"},
        {"big": 2**63},
        {"nested": [{"x": lambda: 1}]},
        {"bad\x00key": 1},
        {"s": "\ud800"},
    ],
)
def test_non_bson_payload_is_a_type_error_and_writes_nothing(q: JobQueue, data: Any) -> None:
    with pytest.raises(TypeError):
        q.enqueue("t", data)
    assert stored(q) == 0


@pytest.mark.parametrize(
    "data",
    [
        None,
        {"a": [1, 2.5, "x", None, True, b"bytes"]},
        {"when": datetime(2030, 1, 1, tzinfo=timezone.utc)},
        {"tuple": (1, 2)},
        {"int64": 2**63 - 1},
        "plain string",
    ],
)
def test_portable_payloads_are_accepted(q: JobQueue, data: Any) -> None:
    assert q.enqueue("t", data) is not None


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"dedupe_scope": "everything"}, "dedupe_scope"),
        ({"coalesce": "oldest", "dedupe_key": "k"}, "coalesce"),
        ({"coalesce": "latest"}, "dedupe_key"),
        ({"backoff": "linear"}, "backoff"),
        ({"delay": -1}, "delay"),
        ({"delay": timedelta(seconds=-5)}, "delay"),
        ({"max_attempts": 0}, "max_attempts"),
        ({"max_attempts": 1.5}, "max_attempts"),
        ({"priority": 1.5}, "priority"),
        ({"priority": "1"}, "priority"),
        ({"priority": True}, "priority"),
        ({"dedupe_key": ""}, "dedupe_key"),
        ({"run_at": datetime(2030, 1, 1)}, "timezone-aware"),
        ({"run_at": "tomorrow"}, "run_at"),
        ({"backoff_delay": -1}, "backoff_delay"),
        ({"delay": float("nan")}, "delay"),
    ],
)
def test_bad_options_are_value_errors_and_write_nothing(
    q: JobQueue, options: dict[str, Any], match: str
) -> None:
    with pytest.raises(ValueError, match=match):
        q.enqueue("t", {"x": 1}, **options)
    assert stored(q) == 0


def test_empty_job_type_is_rejected(q: JobQueue) -> None:
    with pytest.raises(ValueError, match="job type"):
        q.enqueue("", {})


def test_oversized_job_is_a_clear_error_naming_the_type(q: JobQueue) -> None:
    with pytest.raises(DocumentTooLargeError, match="'huge-report'") as info:
        q.enqueue("huge-report", {"blob": b"x" * (16 * 1024 * 1024)})
    assert "16 MB" in str(info.value)
    assert stored(q) == 0


def test_oversized_coalesce_leaves_the_stored_payload_alone(q: JobQueue) -> None:
    q.enqueue("t", {"v": 1}, dedupe_key="k")
    with pytest.raises(DocumentTooLargeError):
        q.enqueue("t", {"blob": b"x" * (16 * 1024 * 1024)}, dedupe_key="k", coalesce="latest")
    (job,) = q.list_jobs(status="pending")
    assert job.data == {"v": 1}


def test_exponential_backoff_doubles_and_caps() -> None:
    policy = BackoffPolicy("exponential", 1.0, 10.0)
    no_jitter = lambda: 0.0  # noqa: E731
    assert [policy.delay_for(n, no_jitter) for n in (1, 2, 3, 4, 5, 6)] == [1, 2, 4, 8, 10, 10]
    assert policy.delay_for(1000, no_jitter) == 10.0
    assert policy.delay_for(4, lambda: 1.0) == pytest.approx(8.8)  # jitter adds at most 10 %
    assert policy.delay_for(5, lambda: 1.0) == 10.0  # never past the cap


def test_fixed_backoff_is_constant() -> None:
    policy = BackoffPolicy("fixed", 3.0, 300.0)
    assert {policy.delay_for(n) for n in range(1, 6)} == {3.0}


def test_clip_text_marks_truncation_and_respects_the_byte_budget() -> None:
    text = "é" * 1000
    clipped = clip_text(text, 100)
    assert len(clipped.encode()) <= 100
    assert clipped.endswith("[truncated]")
    assert clip_text("short", 100) == "short"


def test_check_payload_names_the_bad_path() -> None:
    with pytest.raises(TypeError, match=r"\['items'\]\[1\]"):
        check_payload({"items": [1, {2}]})


def test_payload_size_budget_is_the_same_for_every_store() -> None:
    from durabl import MemoryBackend
    from durabl.model.options import MAX_PAYLOAD_BYTES

    too_big = {"blob": b"x" * MAX_PAYLOAD_BYTES}
    for backend in (make_mongomock_backend(), MemoryBackend()):
        with pytest.raises(DocumentTooLargeError):
            JobQueue(backend).enqueue("t", too_big)
        assert JobQueue(backend).enqueue("t", {"blob": b"x" * (MAX_PAYLOAD_BYTES - 64)})


def test_payload_size_matches_bson() -> None:
    import bson

    value = {"a": [1, 2**40, 2.5, "héllo", None, True, b"raw"], "when": datetime(2030, 1, 1)}
    assert check_payload(value) == len(bson.encode({"d": value})) - len(bson.encode({})) - 3
