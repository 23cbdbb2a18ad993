"""Bad enqueue input is refused at the call site, with a typed error, and writes nothing;
jobs already stored with absurd backoff values still fail and retry cleanly."""

from __future__ import annotations

import dataclasses
import math
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from durabl import JobQueue, QueueStats, validate_enqueue
from durabl.model.options import MAX_BACKOFF_DELAY, BackoffPolicy, build_new_job
from durabl.stores.base import Backend
from durabl.testing import FakeClock
from tests.contract.support import claim_one, get


def assert_nothing_written(queue: JobQueue) -> None:
    assert queue.count_jobs() == 0
    assert queue.list_jobs() == []
    assert queue.get_stats() == QueueStats()


def assert_refused(
    queue: JobQueue, error: type[Exception], match: str, type_: str = "t", **options: Any
) -> None:
    """``enqueue``, ``validate_enqueue`` and ``claim_or_enqueue`` all refuse the same way."""
    with pytest.raises(error, match=match):
        queue.enqueue(type_, {}, **options)
    with pytest.raises(error, match=match):
        validate_enqueue(type_, {}, **options)
    inline = {k: v for k, v in options.items() if k not in ("delay", "run_at")}
    if inline == options:
        with pytest.raises(error, match=match):
            queue.claim_or_enqueue(type_, {}, **inline)
    assert_nothing_written(queue)


# -- durations that cannot produce a datetime -----------------------------------------------
@pytest.mark.parametrize(
    "delay",
    [
        1e12,  # a valid timedelta, but now + it is past the year 9999
        1e15,  # too large for a timedelta at all
        timedelta(days=999_999_999),
        timedelta.max,
    ],
    ids=["1e12", "1e15", "timedelta-huge", "timedelta-max"],
)
def test_a_delay_past_the_last_datetime_is_a_value_error(queue: JobQueue, delay: Any) -> None:
    assert_refused(queue, ValueError, "delay", delay=delay)


def test_a_run_at_outside_the_utc_range_is_a_value_error(queue: JobQueue) -> None:
    late = datetime.max.replace(tzinfo=timezone(-timedelta(hours=5)))  # past 9999 in UTC
    assert_refused(queue, ValueError, "run_at", run_at=late)


def test_the_latest_delay_a_datetime_can_hold_is_accepted(
    queue: JobQueue, clock: FakeClock
) -> None:
    last = datetime(9999, 12, 31, 23, 59, tzinfo=timezone.utc)
    job_id = queue.enqueue("t", {}, delay=(last - clock.now()).total_seconds())
    assert job_id is not None
    assert queue.backend.get_job(job_id) is not None
    assert queue.backend.claim("t") == []


# -- job types and dedupe keys ----------------------------------------------------------------
@pytest.mark.parametrize(
    "bad_type", [" ", " \t\n", "a\x00b", "\x00", "line\nbreak", "tab\there", "del\x7f"]
)
def test_a_blank_or_control_character_job_type_is_refused(queue: JobQueue, bad_type: str) -> None:
    assert_refused(queue, ValueError, "job type", type_=bad_type)


@pytest.mark.parametrize("bad_key", [" ", "\t\n ", "user\x00:1", "\x00"])
def test_a_blank_or_nul_dedupe_key_is_refused(queue: JobQueue, bad_key: str) -> None:
    assert_refused(queue, ValueError, "dedupe_key", dedupe_key=bad_key)


def test_job_types_and_keys_with_inner_spaces_are_still_accepted(queue: JobQueue) -> None:
    assert queue.enqueue("send email", {}, dedupe_key=" user 1 ") is not None
    assert queue.count_jobs() == 1


# -- backoff ----------------------------------------------------------------------------------
def test_a_backoff_cap_below_the_backoff_delay_is_refused(queue: JobQueue) -> None:
    assert_refused(queue, ValueError, "backoff_max_delay", backoff_delay=10, backoff_max_delay=5)


def test_a_fixed_backoff_longer_than_the_default_cap_is_accepted(queue: JobQueue) -> None:
    # A fixed backoff waits backoff_delay and ignores the cap, so the cap check skips it.
    assert queue.enqueue("t", {}, backoff="fixed", backoff_delay=600) is not None


@pytest.mark.parametrize("option", ["backoff_delay", "backoff_max_delay"])
@pytest.mark.parametrize(
    "value",
    [1e15, MAX_BACKOFF_DELAY + 1, timedelta(days=400), -1, math.nan, math.inf],
    ids=["1e15", "bound+1", "400-days", "negative", "nan", "inf"],
)
def test_absurd_backoff_values_are_refused(queue: JobQueue, option: str, value: Any) -> None:
    options: dict[str, Any] = {option: value}
    if option == "backoff_delay":
        options["backoff_max_delay"] = MAX_BACKOFF_DELAY  # refused for itself, not the cap
    assert_refused(queue, ValueError, option, **options)


def test_backoff_values_at_the_bound_are_accepted(queue: JobQueue) -> None:
    job_id = queue.enqueue(
        "t", {}, backoff_delay=MAX_BACKOFF_DELAY, backoff_max_delay=MAX_BACKOFF_DELAY
    )
    assert job_id is not None


def store_with_backoff(backend: Backend, kind: str, delay: float, max_delay: float) -> str:
    """A job stored with backoff values that enqueue now refuses (an older release took
    them)."""
    new = build_new_job("t", {}, max_attempts=3)
    new = dataclasses.replace(new, backoff=BackoffPolicy(kind, delay, max_delay))  # type: ignore[arg-type]
    job_id = backend.enqueue(new).job_id
    assert job_id is not None
    return job_id


@pytest.mark.parametrize("kind", ["fixed", "exponential"])
def test_a_stored_job_with_an_absurd_backoff_retries_within_the_bound(
    backend: Backend, clock: FakeClock, kind: str
) -> None:
    job_id = store_with_backoff(backend, kind, 1e15, 1e16)
    handle = claim_one(backend)
    assert handle.fail("boom").status == "retry-scheduled"
    job = get(backend, job_id)
    assert job.status == "pending" and job.fail_reason == "boom"
    assert job.run_at == clock.now() + timedelta(seconds=MAX_BACKOFF_DELAY)


def test_a_managed_run_of_a_job_with_an_absurd_backoff_fails_cleanly(
    queue: JobQueue, clock: FakeClock
) -> None:
    job_id = store_with_backoff(queue.backend, "fixed", 1e15, 1e15)

    def handler(job: Any, ctx: Any) -> None:
        raise RuntimeError("boom")

    queue.register("t", handler)
    assert queue.run_pending("t") == 1
    job = get(queue.backend, job_id)
    assert (job.status, job.attempts) == ("pending", 1)
    assert job.run_at == clock.now() + timedelta(seconds=MAX_BACKOFF_DELAY)


# -- claim_or_enqueue takes exactly the enqueue options ---------------------------------------
@pytest.mark.parametrize("name", ["now", "bogus"])
def test_claim_or_enqueue_names_itself_for_an_unknown_keyword(queue: JobQueue, name: str) -> None:
    options: dict[str, Any] = {name: datetime.now(timezone.utc)}
    with pytest.raises(
        TypeError, match=rf"claim_or_enqueue\(\) got an unexpected keyword argument '{name}'"
    ):
        queue.claim_or_enqueue("t", {}, **options)
    assert_nothing_written(queue)


@pytest.mark.parametrize("name", ["now", "bogus"])
def test_enqueue_names_itself_for_an_unknown_keyword(queue: JobQueue, name: str) -> None:
    with pytest.raises(
        TypeError, match=rf"enqueue\(\) got an unexpected keyword argument '{name}'"
    ):
        queue.enqueue("t", {}, **{name: 1})
    assert_nothing_written(queue)


@pytest.mark.parametrize(
    "options",
    [
        {"delay": 5},
        {"run_at": datetime(2030, 1, 1, tzinfo=timezone.utc)},
        {"concurrency_key": "tenant:1", "concurrency_limit": 1},
        {"connection": object()},
        {"dedupe_key": "k", "debounce": 5},
        {"dedupe_key": "k", "debounce": 5, "debounce_max": 60},
    ],
)
def test_claim_or_enqueue_refuses_what_only_a_later_run_can_honour(
    queue: JobQueue, options: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match=r"claim_or_enqueue\(\) runs the job now"):
        queue.claim_or_enqueue("t", {}, **options)
    assert_nothing_written(queue)


def test_claim_or_enqueue_passes_every_enqueue_option_on(queue: JobQueue) -> None:
    handle = queue.claim_or_enqueue(
        "t",
        {"n": 1},
        priority=4,
        max_attempts=5,
        dedupe_key="k",
        dedupe_scope="pending",
        coalesce="latest",
        backoff="fixed",
        backoff_delay=7,
        backoff_max_delay=9,
        delay=0,
        run_at=None,
    )
    assert handle is not None
    job = get(queue.backend, handle.id)
    assert (job.priority, job.max_attempts, job.dedupe_key, job.dedupe_scope) == (
        4,
        5,
        "k",
        "pending",
    )
    assert (job.backoff, job.backoff_delay, job.backoff_max_delay) == ("fixed", 7, 9)


@pytest.mark.parametrize(
    "options", [{"delay": 5}, {"run_at": datetime(2031, 1, 1, tzinfo=timezone.utc)}]
)
def test_claim_or_enqueue_refuses_to_schedule(queue: JobQueue, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="enqueue"):
        queue.claim_or_enqueue("t", {}, **options)
    assert_nothing_written(queue)


@pytest.mark.parametrize("where", ["process()", "register()", "@durabl.job()"])
def test_a_declaration_names_itself_for_an_unknown_keyword(queue: JobQueue, where: str) -> None:
    import durabl

    calls = {
        "process()": lambda: queue.process("t", lambda job, ctx: None, bogus=1),
        "register()": lambda: queue.register("t", lambda job, ctx: None, bogus=1),
        "@durabl.job()": lambda: durabl.job("t", bogus=1),
    }
    with pytest.raises(TypeError, match=rf"^{re.escape(where)} got an unexpected keyword"):
        calls[where]()
    assert_nothing_written(queue)
