"""queue.add_event_sink: sinks beside on_job_event, in order, optionally of some kinds."""

from __future__ import annotations

import dataclasses
import logging
import threading
from typing import Any

import pytest

from durabl import EVENT_KINDS, JobEvent, JobQueue, MemoryBackend


def fails(job: Any, ctx: Any) -> None:
    raise ValueError("no")


def test_sinks_follow_on_job_event_in_the_order_added_and_remove_cleanly() -> None:
    seen: list[str] = []
    q = JobQueue(MemoryBackend(), on_job_event=lambda e: seen.append(f"main:{e.kind}"))
    remove_first = q.add_event_sink(lambda e: seen.append(f"first:{e.kind}"))
    q.add_event_sink(lambda e: seen.append(f"second:{e.kind}"))
    q.register("t", lambda job, ctx: None)
    q.enqueue("t", {})
    q.run_pending()
    assert seen == [
        "main:claimed",
        "first:claimed",
        "second:claimed",
        "main:started",
        "first:started",
        "second:started",
        "main:completed",
        "first:completed",
        "second:completed",
    ]
    seen.clear()
    remove_first()
    remove_first()  # idempotent
    q.enqueue("t", {})
    q.run_pending()
    assert [s for s in seen if s.startswith("first")] == []
    assert "second:completed" in seen


def test_a_sink_of_some_kinds_gets_only_those() -> None:
    outcomes: list[str] = []
    every: list[str] = []
    q = JobQueue(MemoryBackend())
    q.add_event_sink(lambda e: outcomes.append(e.kind), kinds={"completed", "failed"})
    q.register("ok", lambda job, ctx: None)
    q.register("bad", fails)
    q.enqueue("ok", {})
    q.enqueue("bad", {}, max_attempts=1)
    q.run_pending("ok")
    q.run_pending("bad")
    assert outcomes == ["completed", "failed"]
    q.add_event_sink(lambda e: every.append(e.kind))  # and one of every kind beside it
    q.enqueue("ok", {})
    q.run_pending("ok")
    assert outcomes == ["completed", "failed", "completed"]
    assert every == ["claimed", "started", "completed"]


def test_no_event_is_built_for_a_kind_no_sink_takes() -> None:
    q = JobQueue(MemoryBackend())
    assert not q.listens("claimed") and not q.listens("completed")
    remove = q.add_event_sink(lambda e: None, kinds=("completed",))
    assert q.listens("completed") and not q.listens("claimed")
    remove_all = q.add_event_sink(lambda e: None)
    assert q.listens("claimed")
    remove_all()
    assert not q.listens("claimed") and q.listens("completed")
    remove()
    assert not q.listens("completed")
    assert JobQueue(MemoryBackend(), on_job_event=lambda e: None).listens("claimed")


@pytest.mark.parametrize(
    ("kinds", "error", "message"),
    [
        ({"completed", "finished"}, ValueError, "unknown event kind(s) 'finished'"),
        ("completed", TypeError, "not the string 'completed'"),
    ],
)
def test_bad_kinds_are_refused_at_the_call(
    kinds: Any, error: type[Exception], message: str
) -> None:
    q = JobQueue(MemoryBackend())
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        q.add_event_sink(lambda e: None, kinds=kinds)
    assert not q.listens("completed")  # nothing was added


def test_a_sink_must_be_callable() -> None:
    with pytest.raises(TypeError, match="an event sink must be callable"):
        JobQueue(MemoryBackend()).add_event_sink("print")  # type: ignore[arg-type]


def test_a_failing_sink_is_logged_and_the_next_still_gets_the_event(
    caplog: pytest.LogCaptureFixture,
) -> None:
    got: list[str] = []

    def broken(event: JobEvent) -> None:
        raise RuntimeError("statsd is down")

    q = JobQueue(MemoryBackend())
    q.add_event_sink(broken, kinds=["completed"])
    q.add_event_sink(lambda e: got.append(e.kind), kinds=["completed"])
    q.register("t", lambda job, ctx: None)
    job_id = q.enqueue("t", {}) or ""
    with caplog.at_level(logging.ERROR):
        q.run_pending()
    assert got == ["completed"]
    assert "statsd is down" in caplog.text
    job = q.get_job(job_id)
    assert job is not None and job.status == "completed"


def test_sinks_added_while_runs_emit_are_safe() -> None:
    """Adding and removing sinks from other threads while a worker pool emits: every
    sink sees whole events, and one kept throughout sees every outcome exactly once."""
    q = JobQueue(MemoryBackend())
    kept: list[str] = []
    lock = threading.Lock()
    all_seen = threading.Event()
    ids = {q.enqueue("t", {}) for _ in range(300)}

    def keep(event: JobEvent) -> None:
        with lock:
            kept.append(event.job_id or "")
            if len(kept) == len(ids):
                all_seen.set()

    q.add_event_sink(keep, kinds={"completed"})
    stop = threading.Event()

    def churn() -> None:
        while not stop.is_set():
            q.add_event_sink(lambda e: None, kinds={"claimed"})()

    churners = [threading.Thread(target=churn, name=f"churn-{n}") for n in range(2)]
    for t in churners:
        t.start()
    try:
        q.process("t", lambda job, ctx: None, concurrency=4, poll_interval=0.01)
        assert all_seen.wait(30)
    finally:
        stop.set()
        for t in churners:
            t.join()
        q.shutdown(5)
    assert sorted(kept) == sorted(ids)


def test_every_kind_the_runtime_sends_is_a_known_kind() -> None:
    assert {"claimed", "completed", "failed", "shutdown-released", "dead-lettered"} <= EVENT_KINDS


def test_job_event_is_a_frozen_dataclass_with_keyword_defaults() -> None:
    event = JobEvent("completed", "t", "id-1", duration=0.5, attempt=1)
    assert (event.kind, event.type, event.job_id, event.duration, event.attempt) == (
        "completed",
        "t",
        "id-1",
        0.5,
        1,
    )
    assert event.terminal is None and event.error is None and event.extra == {}
    assert JobEvent("x").extra is not JobEvent("x").extra  # a fresh mapping each
    assert event == JobEvent(kind="completed", type="t", job_id="id-1", duration=0.5, attempt=1)
    with pytest.raises(dataclasses.FrozenInstanceError):
        event.kind = "failed"  # type: ignore[misc]
    changed = dataclasses.replace(event, kind="failed", terminal=True)
    assert (changed.kind, changed.terminal, changed.job_id) == ("failed", True, "id-1")
    assert [f.name for f in dataclasses.fields(JobEvent)][:3] == ["kind", "type", "job_id"]
    assert "duration=0.5" in repr(event)


def test_started_comes_from_the_running_thread_between_claimed_and_the_outcome() -> None:
    seen: list[tuple[str, str]] = []
    handler_thread: list[str] = []
    q = JobQueue(MemoryBackend())
    q.add_event_sink(lambda e: seen.append((e.kind, threading.current_thread().name)))

    def handler(job: Any, ctx: Any) -> None:
        handler_thread.append(threading.current_thread().name)

    q.register("t", handler)
    job_id = q.enqueue("t", {})
    q.run_pending()
    assert [kind for kind, _ in seen] == ["claimed", "started", "completed"]
    assert seen[1][1] == handler_thread[0]
    job = q.get_job(job_id or "")
    assert job is not None and job.attempts == 1
