"""The cheap per-run primitives: Flag (a lazily built event) and claim handles made by
copying the claimed snapshot."""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime, timezone

from durabl import Job, MemoryBackend
from durabl.model.job import handle_for
from durabl.model.sync import Flag


def test_a_flag_set_before_anyone_waits_is_seen_at_once() -> None:
    flag = Flag()
    assert not flag.is_set()
    assert flag.wait(0) is False
    flag.set()
    assert flag.is_set()
    assert flag.wait(0) is True
    assert flag.wait() is True


def test_a_flag_wakes_every_waiter_when_set() -> None:
    flag = Flag()
    waiting = threading.Barrier(9)
    woke: list[bool] = []

    def waiter() -> None:
        waiting.wait()
        woke.append(flag.wait(10.0))

    threads = [threading.Thread(target=waiter, name=f"waiter-{n}") for n in range(8)]
    for thread in threads:
        thread.start()
    waiting.wait()
    flag.set()
    for thread in threads:
        thread.join(10.0)
    assert woke == [True] * 8


def test_flags_set_while_waiters_arrive_never_leave_one_hanging() -> None:
    # Many rounds of a set() racing the first wait(): the waiter must always return True
    # well before its timeout.
    for _ in range(300):
        flag = Flag()
        result: list[bool] = []
        thread = threading.Thread(target=lambda f=flag, r=result: r.append(f.wait(5.0)))
        thread.start()
        flag.set()
        thread.join(5.0)
        assert result == [True]


def _job() -> Job[dict[str, int]]:
    at = datetime(2026, 1, 1, tzinfo=timezone.utc)
    return Job(id="j1", type="t", data={"n": 1}, status="active", run_at=at, created_at=at,
               updated_at=at, attempts=1)  # fmt: skip


def test_a_handle_carries_every_field_of_its_snapshot_and_gives_it_back() -> None:
    job = _job()
    handle = handle_for(job, "tok", MemoryBackend())
    for f in dataclasses.fields(Job):
        assert getattr(handle, f.name) == getattr(job, f.name)
    assert handle.claim_token == "tok"
    assert handle.as_job() == job
    assert type(handle.as_job()) is Job
    handle.log("buffered")  # each handle has its own log buffer
    assert handle_for(job, "tok2", MemoryBackend())._take_logs() == []


def test_a_replaced_handle_gives_its_own_values_to_the_handler() -> None:
    handle = handle_for(_job(), "tok", MemoryBackend())
    changed = dataclasses.replace(handle, data={"n": 2})
    assert changed.as_job().data == {"n": 2}
    assert handle.as_job().data == {"n": 1}
