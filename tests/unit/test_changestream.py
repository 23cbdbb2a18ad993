"""Push pickup: the change-stream watcher against a scripted stream, on a fake clock.

mongomock has no ``watch()``, so the watcher's logic is driven here step by step
(``poll_once()``) with a scripted fake stream; the real server is exercised by
``tests/integration/test_changestream_real.py``.
"""

from __future__ import annotations

import logging
import queue as queue_module
import threading
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import mongomock
import pytest
from bson import ObjectId
from pymongo.errors import (
    AutoReconnect,
    ConnectionFailure,
    CursorNotFound,
    ExecutionTimeout,
    NetworkTimeout,
    NotPrimaryError,
    OperationFailure,
    ServerSelectionTimeoutError,
)

from durabl import DurablError, JobEvent, JobQueue, MemoryBackend, MongoJobQueue
from durabl.model.clock import SYSTEM_CLOCK, Clock
from durabl.model.options import DEFAULT_POLL_INTERVAL, build_new_job
from durabl.model.reports import PickupMode
from durabl.stores.base import PushListener, PushSource
from durabl.stores.mongo.changestream import (
    PROJECTED_FIELDS,
    PushSettings,
    claimable_pipeline,
    classify,
    frees_a_slot,
)
from durabl.stores.mongo.pushreads import WatcherReads
from durabl.stores.mongo.routing import TimerQueue
from durabl.stores.mongo.watcher import Watcher
from durabl.testing import FakeClock, wait_until

UTC = timezone.utc


# -- fakes ------------------------------------------------------------------------------------
class FakeListener:
    """Records what the watcher asks of the queue."""

    def __init__(self, types: Iterable[str] = ("a",)) -> None:
        self.types = frozenset(types)
        self.due: list[tuple[str, int]] = []
        self.modes: list[tuple[PickupMode, str]] = []
        self.events: list[JobEvent] = []
        self.closing = False

    def push_types(self) -> frozenset[str]:
        return self.types

    def push_due(self, type: str, count: int) -> None:
        self.due.append((type, count))

    def push_mode(self, mode: PickupMode, reason: str) -> None:
        self.modes.append((mode, reason))

    def push_closing(self) -> bool:
        return self.closing

    def emit(self, event: JobEvent) -> None:
        self.events.append(event)

    @property
    def kinds(self) -> list[str]:
        return [e.kind for e in self.events]

    def take_due(self) -> list[tuple[str, int]]:
        due, self.due = self.due, []
        return due


class ScriptedStream:
    """A change stream replaying a script: an event (dict), ``None`` (an empty getMore,
    which moves the post-batch token on), or an exception (raised by that read). The
    watcher's first read is its probe, part of opening the stream."""

    def __init__(self, *script: Any, name: str = "s") -> None:
        self.script: deque[Any] = deque(script)
        self.name = name
        self.reads = 0
        self.closed = False
        self._alive = True
        self._token: dict[str, Any] | None = {"_data": f"{name}-open"}

    @property
    def resume_token(self) -> Mapping[str, Any] | None:
        return self._token

    @property
    def alive(self) -> bool:
        return self._alive and not self.closed

    def try_next(self) -> Mapping[str, Any] | None:
        self.reads += 1
        if self.closed or not self.script:
            return None
        item = self.script.popleft()
        if isinstance(item, BaseException):
            raise item
        if item is None:
            self._token = {"_data": f"{self.name}-pbrt-{self.reads}"}
            return None
        self._token = item["_id"]
        if item.get("operationType") == "invalidate":
            self._alive = False
        return dict(item)

    def close(self) -> None:
        self.closed = True


class StreamFactory:
    """``open_stream``: hands out scripted streams, or raises scripted errors, and records
    how each was opened (``(resume_after, start_after)``)."""

    def __init__(self, *outcomes: ScriptedStream | BaseException) -> None:
        self.outcomes: deque[ScriptedStream | BaseException] = deque(outcomes)
        self.calls: list[tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]] = []
        self.opened: list[ScriptedStream] = []

    def __call__(
        self, resume_after: Mapping[str, Any] | None, start_after: Mapping[str, Any] | None
    ) -> ScriptedStream:
        self.calls.append((resume_after, start_after))
        outcome = self.outcomes.popleft() if self.outcomes else ScriptedStream(name="idle")
        if isinstance(outcome, BaseException):
            raise outcome
        self.opened.append(outcome)
        return outcome


class FakeStore:
    """The reads the watcher makes: updated jobs by id, next future run_at by type, and
    the types waiting on the keys of jobs that freed a slot (``held``: what it answers)."""

    def __init__(self) -> None:
        self.jobs: dict[Any, tuple[str, datetime, str]] = {}
        self.lookups: list[list[Any]] = []
        self.discoveries: list[tuple[str, datetime]] = []
        self.fail_lookup = False
        self.held: dict[str, int] = {}
        self.freed: list[tuple[list[Any], list[str]]] = []
        self.fail_waiting = False

    def waiting(self, ids: Sequence[Any], types: Sequence[str]) -> dict[str, int]:
        self.freed.append((list(ids), list(types)))
        if self.fail_waiting:
            raise DurablError("MongoDB unavailable during change-stream freed keys")
        return {t: n for t, n in self.held.items() if t in types}

    def lookup(self, ids: Sequence[Any]) -> list[tuple[str, datetime]]:
        self.lookups.append(list(ids))
        if self.fail_lookup:
            raise DurablError("MongoDB unavailable during change-stream lookup")
        found = [self.jobs[i] for i in ids if i in self.jobs]
        return [(t, at) for t, at, status in found if status == "pending"]

    def next_run_at(self, type: str, after: datetime) -> datetime | None:
        self.discoveries.append((type, after))
        times = [at for t, at, st in self.jobs.values() if t == type and st == "pending"]
        later = [at for at in times if at > after]
        return min(later) if later else None


_tokens = iter(range(1, 1_000_000))


def _token() -> dict[str, str]:
    return {"_data": f"ev-{next(_tokens)}"}


def insert(
    type: str, run_at: datetime, job_id: Any = None, status: str = "pending"
) -> dict[str, Any]:
    return {
        "_id": _token(),
        "operationType": "insert",
        "documentKey": {"_id": job_id or f"job-{next(_tokens)}"},
        "fullDocument": {"type": type, "status": status, "run_at": run_at},
    }


def update(job_id: Any, *, slot_freed: bool = False) -> dict[str, Any]:
    """An update as projected (``slot_freed``: a keyed job left active)."""
    removed = ["claim_token", "concurrency_slot"] if slot_freed else ["claim_token"]
    return {
        "_id": _token(),
        "operationType": "update",
        "documentKey": {"_id": job_id},
        "updateDescription": {"removedFields": removed},
    }


def invalidate() -> dict[str, Any]:
    return {"_id": _token(), "operationType": "invalidate"}


class Rig:
    """A watcher wired to fakes, on a fake clock; ``sleeps`` records backoff waits."""

    def __init__(
        self,
        *outcomes: ScriptedStream | BaseException,
        types: Iterable[str] = ("a",),
        settings: PushSettings | None = None,
        clock: FakeClock | None = None,
    ) -> None:
        self.clock = clock or FakeClock()
        self.listener = FakeListener(types)
        self.factory = StreamFactory(*outcomes)
        self.store = FakeStore()
        self.sleeps: list[float] = []
        self.watcher = Watcher(
            self.factory,
            self.listener,
            clock=self.clock,
            lookup=self.store.lookup,
            next_run_at=self.store.next_run_at,
            waiting=self.store.waiting,
            settings=settings or PushSettings(),
            sleep=self.sleeps.append,
        )

    @property
    def now(self) -> datetime:
        return self.clock.now()

    def step(self, times: int = 1) -> None:
        for _ in range(times):
            assert self.watcher.poll_once()

    def connect(self) -> None:
        """First step: open the stream (and its resync), then forget what that did."""
        self.step()
        assert self.watcher.state == "push"
        self.listener.due.clear()
        self.store.discoveries.clear()


def _error(event: JobEvent) -> BaseException:
    assert event.error is not None
    return event.error


# -- the pipeline ----------------------------------------------------------------------------
def _walk(value: Any) -> Iterable[str]:
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield str(key)
            yield from _walk(item)
    elif isinstance(value, list):
        for item in value:
            yield from _walk(item)
    elif isinstance(value, str):
        yield value


def test_pipeline_projects_scheduling_fields_and_never_the_payload() -> None:
    pipeline = claimable_pipeline()
    assert [next(iter(stage)) for stage in pipeline] == ["$match", "$project"]
    projection = pipeline[-1]["$project"]
    assert projection == dict.fromkeys(PROJECTED_FIELDS, 1)  # inclusion only: nothing else
    assert set(projection) == {
        "operationType",
        "documentKey",
        "fullDocument.type",
        "fullDocument.status",
        "fullDocument.run_at",
        "updateDescription.removedFields",  # field names only: no values
    }
    assert "_id" not in projection  # the resume token stays untouched
    names = list(_walk(pipeline))
    assert not [n for n in names if n == "data" or n.endswith(".data") or "data." in n]
    assert not [n for n in projection if n.startswith("updateDescription.updatedFields")]


def test_pipeline_filters_only_on_the_event_itself() -> None:
    """No stage reads a looked-up document, so resuming from any token stays possible."""
    match = claimable_pipeline()[0]["$match"]
    fields = [n for n in _walk(match) if not n.startswith("$") and "." in n]
    for name in fields:
        assert name.startswith(("fullDocument.", "updateDescription.")), name
    # fullDocument is filtered only for inserts and replacements (taken from the oplog).
    insert_clause = match["$or"][0]
    assert insert_clause["operationType"] == {"$in": ["insert", "replace"]}


def test_pipeline_passes_what_can_make_a_job_claimable_and_drops_payloads() -> None:
    """The pipeline run by mongomock's aggregate over change events as the server shapes
    them: what passes, and that only scheduling fields come out."""
    now = datetime(2030, 1, 1, tzinfo=UTC)
    secret = {"card": "4111 1111 1111 1111"}

    def event(n: str, op: str, **fields: Any) -> dict[str, Any]:
        return {
            "_id": {"_data": n},
            "operationType": op,
            "clusterTime": 1,
            "ns": {"db": "app", "coll": "durabl_jobs"},
            **fields,
        }

    def doc(status: str) -> dict[str, Any]:
        return {"_id": 1, "type": "mail", "status": status, "run_at": now, "data": secret}

    def upd(*removed: str, **updated: Any) -> dict[str, Any]:
        return {"updatedFields": updated, "removedFields": list(removed)}

    lease = ("claim_token", "heartbeat_at", "claimed_at", "lease_owner")

    events = [
        event("enqueue", "insert", documentKey={"_id": 1}, fullDocument=doc("pending")),
        event("inline-claim", "insert", documentKey={"_id": 2}, fullDocument=doc("active")),
        event("claim", "update", documentKey={"_id": 1}, updateDescription=upd(status="active")),
        event(
            "heartbeat", "update", documentKey={"_id": 1}, updateDescription=upd(heartbeat_at=now)
        ),
        event("coalesce", "update", documentKey={"_id": 1}, updateDescription=upd(data=secret)),
        event(
            "complete", "update", documentKey={"_id": 1}, updateDescription=upd(status="completed")
        ),
        event(
            "complete-keyed",  # a job with a concurrency key ended: its slot is freed
            "update",
            documentKey={"_id": 3},
            updateDescription=upd(*lease, "concurrency_slot", status="completed", result=secret),
        ),
        event(
            "retry",
            "update",
            documentKey={"_id": 1},
            updateDescription=upd(
                *lease, status="pending", run_at=now, fail_reason="boom", data=secret
            ),
        ),
        event(
            "retry-keyed",
            "update",
            documentKey={"_id": 3},
            updateDescription=upd(*lease, "concurrency_slot", status="pending", run_at=now),
        ),
        event("reschedule", "update", documentKey={"_id": 1}, updateDescription=upd(run_at=now)),
        event("replace", "replace", documentKey={"_id": 1}, fullDocument=doc("pending")),
        event("delete", "delete", documentKey={"_id": 1}),
        event("drop", "drop"),
        event("invalidate", "invalidate"),
    ]
    col: Any = mongomock.MongoClient(tz_aware=True)["cs"]["events"]
    col.insert_many(events)
    out = list(col.aggregate(claimable_pipeline()))
    assert [e["_id"]["_data"] for e in out] == [
        "enqueue",
        "complete-keyed",
        "retry",
        "retry-keyed",
        "reschedule",
        "replace",
        "invalidate",
    ]
    freed = [e["_id"]["_data"] for e in out if frees_a_slot(e)]
    assert freed == ["complete-keyed", "retry-keyed"]
    for e in out:
        assert set(e) <= {"_id", *(name.split(".")[0] for name in PROJECTED_FIELDS)}
        assert set(e.get("updateDescription", {})) <= {"removedFields"}
        assert set(e.get("fullDocument", {})) <= {"type", "status", "run_at"}
        assert "card" not in repr(e)


def test_the_store_reads_which_types_have_due_jobs_held_on_the_freed_keys() -> None:
    backend = MongoJobQueue(mongomock.MongoClient(tz_aware=True)["cs_reads"])
    queue = JobQueue(backend)
    later = backend.now() + timedelta(minutes=5)
    for type, key, run_at in [
        ("a", "k", None),
        ("a", "k", None),
        ("b", "k", None),
        ("c", "k", later),  # held on the key too, but not due
        ("d", "other", None),
        ("f", "other", None),
        ("e", None, None),
    ]:
        queue.enqueue(type, {}, concurrency_key=key, run_at=run_at)
    ended = []
    for type in ("a", "d", "e"):
        (handle,) = backend.claim(type, limit=1, lease_owner="test")
        handle.complete()
        ended.append(ObjectId(handle.id))
    reads = WatcherReads(backend.store)
    assert reads.waiting(ended, ["a", "b", "c", "d", "e", "f"]) == {"a": 1, "b": 1, "f": 1}
    assert reads.waiting(ended, ["b", "e"]) == {"b": 1}  # only the types asked about
    assert reads.waiting(ended[2:], ["a", "b", "f"]) == {}  # a job without a key
    backend.close()


# -- error rules -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("error", "kind"),
    [
        (AutoReconnect("connection reset"), "resumable"),
        (NotPrimaryError("not primary"), "resumable"),
        (NetworkTimeout("timed out"), "resumable"),
        (ServerSelectionTimeoutError("no primary"), "resumable"),
        (ConnectionFailure("refused"), "resumable"),
        (CursorNotFound("cursor id 42 not found", 43), "resumable"),
        (ExecutionTimeout("operation exceeded time limit", 50), "resumable"),
        (
            OperationFailure("stepped down", 189, {"errorLabels": ["ResumableChangeStreamError"]}),
            "resumable",
        ),
        (OperationFailure("history lost", 286), "token-lost"),
        (OperationFailure("resume token was not found", 280), "token-lost"),
        (OperationFailure("invalid resume token", 260), "token-lost"),
        (OperationFailure("not authorized on app to execute command", 13), "fatal"),
        (OperationFailure("$changeStream not supported", 40573), "fatal"),
        (ValueError("a bug"), "fatal"),
    ],
)
def test_errors_are_classified_like_the_driver_does(error: BaseException, kind: str) -> None:
    assert classify(error) == kind


# -- batching and routing ----------------------------------------------------------------------
def test_due_notifications_are_batched_for_the_window_then_routed_at_once() -> None:
    rig = Rig(ScriptedStream(name="s"))
    rig.connect()
    stream = rig.factory.opened[0]
    stream.script.extend([insert("a", rig.now), insert("a", rig.now)])
    rig.step(2)
    assert rig.listener.due == []  # collecting
    rig.clock.advance(0.05)
    rig.step()
    assert rig.listener.due == []
    rig.clock.advance(0.05)
    rig.step()
    assert rig.listener.take_due() == [("a", 2)]  # one wake-up for the whole batch
    stream.script.append(insert("a", rig.now))
    rig.step()
    rig.clock.advance(0.1)
    rig.step()
    assert rig.listener.take_due() == [("a", 1)]


def test_the_batch_window_is_configurable() -> None:
    rig = Rig(ScriptedStream(), settings=PushSettings(batch_window=0.5))
    rig.connect()
    rig.factory.opened[0].script.append(insert("a", rig.now))
    rig.step()
    rig.clock.advance(0.4)
    rig.step()
    assert rig.listener.due == []
    rig.clock.advance(0.1)
    rig.step()
    assert rig.listener.due == [("a", 1)]


def test_only_types_this_process_handles_are_routed() -> None:
    rig = Rig(ScriptedStream(), types=("a", "c"))
    rig.connect()
    rig.factory.opened[0].script.extend(
        [insert("b", rig.now), insert("a", rig.now), insert("c", rig.now), insert("b", rig.now)]
    )
    rig.step(4)
    rig.clock.advance(0.1)
    rig.step()
    assert rig.listener.due == [("a", 1), ("c", 1)]
    # Future jobs of other types take no timer either.
    rig.factory.opened[0].script.append(insert("b", rig.now + timedelta(seconds=5)))
    rig.step()
    assert len(rig.watcher.timers) == 0


def test_events_the_server_should_have_filtered_are_ignored() -> None:
    rig = Rig(ScriptedStream())
    rig.connect()
    rig.factory.opened[0].script.extend(
        [
            insert("a", rig.now, status="active"),
            {"_id": _token(), "operationType": "delete", "documentKey": {"_id": 1}},
        ]
    )
    rig.step(2)
    rig.clock.advance(1)
    rig.step()
    assert rig.listener.due == []


def test_updates_are_looked_up_once_per_batch_and_routed_by_their_type() -> None:
    rig = Rig(ScriptedStream(), types=("a", "b"))
    rig.connect()
    rig.store.jobs = {
        1: ("a", rig.now, "pending"),  # retried now
        2: ("b", rig.now + timedelta(seconds=10), "pending"),  # retried later
        3: ("a", rig.now, "active"),  # claimed meanwhile
    }
    rig.factory.opened[0].script.extend([update(1), update(2), update(3), update(4)])
    rig.step(4)
    assert rig.store.lookups == []
    rig.clock.advance(0.1)
    rig.step()
    assert rig.store.lookups == [[1, 2, 3, 4]]
    assert rig.listener.take_due() == [("a", 1)]
    rig.clock.advance(10)
    rig.step()
    assert rig.listener.take_due() == [("b", 1)]


def test_a_failed_lookup_polls_every_type_instead() -> None:
    rig = Rig(ScriptedStream(), types=("a", "b"))
    rig.connect()
    rig.store.fail_lookup = True
    rig.factory.opened[0].script.append(update(1))
    rig.step()
    rig.clock.advance(0.1)
    rig.step()
    assert rig.listener.due == [("a", 0), ("b", 0)]  # 0: every free slot


def test_too_many_updates_in_one_batch_poll_every_type() -> None:
    rig = Rig(ScriptedStream(), settings=PushSettings(max_lookup=2))
    rig.connect()
    rig.factory.opened[0].script.extend([update(1), update(2), update(3)])
    rig.step(3)
    rig.clock.advance(0.1)
    rig.step()
    assert rig.store.lookups == [[1, 2]]
    assert rig.listener.due == [("a", 0)]


def test_a_freed_key_wakes_the_types_waiting_on_it_once_per_batch() -> None:
    rig = Rig(ScriptedStream(), types=("a", "b", "c"))
    rig.connect()
    rig.store.held = {"b": 2, "c": 1}  # b waits on both freed keys, c on one
    rig.factory.opened[0].script.extend(
        [update(1, slot_freed=True), update(2), update(3, slot_freed=True)]
    )
    rig.step(3)
    assert rig.store.freed == []
    rig.clock.advance(0.1)
    rig.step()
    assert rig.store.freed == [([1, 3], ["a", "b", "c"])]  # only the updates that freed one
    assert rig.listener.take_due() == [("b", 2), ("c", 1)]
    rig.factory.opened[0].script.append(update(4))
    rig.step()
    rig.clock.advance(0.1)
    rig.step()
    assert len(rig.store.freed) == 1  # nothing freed: nothing read


def test_a_freed_slot_of_a_job_retried_later_also_sets_its_timer() -> None:
    rig = Rig(ScriptedStream(), types=("a",))
    rig.connect()
    rig.store.jobs = {1: ("a", rig.now + timedelta(seconds=10), "pending")}
    rig.store.held = {"a": 1}
    rig.factory.opened[0].script.append(update(1, slot_freed=True))
    rig.step()
    rig.clock.advance(0.1)
    rig.step()
    assert rig.listener.take_due() == [("a", 1)]  # the job held on its key
    rig.clock.advance(10)
    rig.step()
    assert rig.listener.take_due() == [("a", 1)]  # the retried job itself


def test_a_failed_read_of_the_jobs_held_on_freed_keys_polls_every_type() -> None:
    rig = Rig(ScriptedStream(), types=("a", "b"))
    rig.connect()
    rig.store.fail_waiting = True
    rig.factory.opened[0].script.append(update(1, slot_freed=True))
    rig.step()
    rig.clock.advance(0.1)
    rig.step()
    assert rig.listener.due == [("a", 0), ("b", 0)]


# -- timers ------------------------------------------------------------------------------------
def test_a_future_job_wakes_its_type_at_its_run_at() -> None:
    rig = Rig(ScriptedStream(), types=("a", "b"))
    rig.connect()
    start = rig.now
    rig.factory.opened[0].script.extend(
        [insert("a", start + timedelta(seconds=30)), insert("b", start + timedelta(seconds=45))]
    )
    rig.step(2)
    assert len(rig.watcher.timers) == 2
    rig.clock.advance(29.9)
    rig.step()
    assert rig.listener.due == []
    rig.clock.advance(0.1)
    rig.step()
    assert rig.listener.take_due() == [("a", 1)]
    rig.clock.advance(14.9)
    rig.step()
    assert rig.listener.due == []
    rig.clock.advance(0.1)
    rig.step()
    assert rig.listener.take_due() == [("b", 1)]
    assert len(rig.watcher.timers) == 0


def test_jobs_due_at_the_same_instant_share_one_timer_but_count() -> None:
    rig = Rig(ScriptedStream())
    rig.connect()
    at = rig.now + timedelta(seconds=5)
    rig.factory.opened[0].script.extend([insert("a", at), insert("a", at)])
    rig.step(2)
    assert len(rig.watcher.timers) == 1
    rig.clock.advance(5)
    rig.step()
    assert rig.listener.due == [("a", 1)]  # the claim reads ahead while claims come back full


def test_the_timer_budget_keeps_the_nearest_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    rig = Rig(ScriptedStream(), settings=PushSettings(timer_capacity=3))
    rig.connect()
    start = rig.now
    seconds = [50, 10, 40, 30, 20, 60]
    with caplog.at_level(logging.WARNING, logger="durabl.stores.mongo.watcher"):
        rig.factory.opened[0].script.extend(
            [insert("a", start + timedelta(seconds=s)) for s in seconds]
        )
        rig.step(len(seconds))
    timers = rig.watcher.timers
    assert len(timers) == 3 and timers.dropped == 3
    assert timers.next_at() == start + timedelta(seconds=10)
    warnings = [r for r in caplog.records if "future wake-ups" in r.getMessage()]
    assert len(warnings) == 1
    assert rig.watcher.status().details["timers_dropped"] == 3
    rig.clock.advance(30)
    rig.step()
    assert rig.listener.take_due() == [("a", 3)]


def test_timer_queue_drops_the_farthest_entry() -> None:
    timers = TimerQueue(capacity=2)
    t0 = datetime(2030, 1, 1, tzinfo=UTC)
    assert timers.add(t0 + timedelta(seconds=2), "a") is None
    assert timers.add(t0 + timedelta(seconds=2), "a") is None  # duplicate
    assert timers.add(t0 + timedelta(seconds=3), "b") is None
    assert timers.add(t0 + timedelta(seconds=9), "c") == (t0 + timedelta(seconds=9), "c")
    assert timers.add(t0 + timedelta(seconds=1), "d") == (t0 + timedelta(seconds=3), "b")
    assert timers.pop_due(t0 + timedelta(seconds=2)) == [
        (t0 + timedelta(seconds=1), "d"),
        (t0 + timedelta(seconds=2), "a"),
    ]
    assert len(timers) == 0 and timers.next_at() is None


def test_very_long_delays_neither_overflow_nor_spin() -> None:
    """A run_at far beyond what a timer could wait (threading's TIMEOUT_MAX, or 24.8
    days in JavaScript) is just an entry: each step costs one read, never a wait."""
    rig = Rig(ScriptedStream())
    rig.connect()
    start = rig.now
    far = datetime(9999, 12, 31, 23, 59, tzinfo=UTC)
    month = start + timedelta(days=30)
    rig.factory.opened[0].script.extend([insert("a", far), insert("a", month)])
    rig.step(2)
    stream = rig.factory.opened[0]
    reads = stream.reads
    rig.step(100)
    assert stream.reads == reads + 100  # one read per step: no busy loop, no sleep
    assert rig.listener.due == []
    rig.clock.advance(timedelta(days=30))
    rig.step()
    assert rig.listener.take_due() == [("a", 1)]
    assert rig.watcher.timers.next_at() == far
    rig.step(10)
    assert rig.listener.due == []


# -- resync and discovery ----------------------------------------------------------------------
def test_first_connect_polls_every_type_once_and_reads_back_future_jobs() -> None:
    rig = Rig(ScriptedStream(), types=("a", "b"))
    start = rig.now
    rig.store.jobs = {
        1: ("a", start + timedelta(seconds=10), "pending"),
        2: ("a", start + timedelta(seconds=20), "pending"),
        3: ("b", start - timedelta(seconds=5), "pending"),  # already due: the poll gets it
    }
    rig.step()
    assert rig.factory.calls == [(None, None)]
    assert rig.listener.take_due() == [("a", 0), ("b", 0)]
    assert [t for t, _ in rig.store.discoveries] == ["a", "b"]
    assert rig.watcher.timers.next_at() == start + timedelta(seconds=10)
    # Walking the stored future jobs: when one fires, the next one is read back.
    rig.clock.advance(10)
    rig.step()
    assert rig.listener.take_due() == [("a", 1)]
    rig.store.jobs[1] = ("a", start + timedelta(seconds=10), "active")
    assert rig.watcher.timers.next_at() == start + timedelta(seconds=20)
    rig.clock.advance(10)
    rig.step()
    assert rig.listener.take_due() == [("a", 1)]
    discoveries = len(rig.store.discoveries)
    rig.clock.advance(10)
    rig.step(3)
    assert len(rig.store.discoveries) == discoveries  # nothing more stored: no more reads


def test_a_type_processed_later_gets_its_future_jobs_read_back() -> None:
    rig = Rig(ScriptedStream(), types=("a",))
    rig.connect()
    rig.store.jobs = {1: ("late", rig.now + timedelta(seconds=3), "pending")}
    rig.listener.types = frozenset({"a", "late"})
    rig.step()
    assert [t for t, _ in rig.store.discoveries] == ["late"]
    rig.clock.advance(3)
    rig.step()
    assert rig.listener.due == [("late", 1)]


def test_a_type_added_while_reconnecting_is_read_back_once_push_is_up() -> None:
    first = ScriptedStream(None, AutoReconnect("reset"), name="first")
    rig = Rig(first, ScriptedStream(name="second"))
    rig.connect()
    rig.step()  # the read fails
    rig.store.jobs = {1: ("late", rig.now + timedelta(seconds=3), "pending")}
    rig.listener.types = frozenset({"a", "late"})
    rig.step()  # reconnects (resumed: no resync)
    assert rig.store.discoveries == []
    rig.step()
    assert [t for t, _ in rig.store.discoveries] == ["late"]
    rig.step(3)
    assert len(rig.store.discoveries) == 1  # once


# -- connection, resume and fallback -------------------------------------------------------------
def test_connecting_emits_connected_and_switches_pickup_to_push() -> None:
    rig = Rig(ScriptedStream())
    assert rig.watcher.status().pickup == "poll"
    rig.step()
    assert rig.listener.kinds == ["changestream-connected"]
    assert rig.listener.events[0].extra == {"resumed": False, "attempts": 1}
    assert rig.listener.modes == [("push", "change stream connected")]
    status = rig.watcher.status()
    assert (status.pickup, status.reason) == ("push", "change stream connected")


def test_after_a_resumable_error_the_stream_resumes_after_the_last_token() -> None:
    first = ScriptedStream(name="first")
    second = ScriptedStream(name="second")
    rig = Rig(first, second)
    rig.connect()
    event = insert("a", rig.now)
    first.script.extend([event, AutoReconnect("primary stepped down")])
    rig.step()
    assert rig.watcher.resume_token == event["_id"]
    rig.step()  # the read fails
    assert rig.listener.kinds[-1] == "changestream-error"
    assert isinstance(_error(rig.listener.events[-1]), AutoReconnect)
    assert rig.listener.events[-1].extra["kind"] == "resumable"
    assert rig.listener.modes[-1][0] == "poll"
    assert rig.watcher.status().pickup == "poll"
    assert first.closed
    rig.step()  # reconnects
    assert rig.factory.calls[-1] == (event["_id"], None)
    assert rig.listener.kinds[-1] == "changestream-connected"
    assert rig.listener.events[-1].extra["resumed"] is True
    assert [mode for mode, _ in rig.listener.modes][-2:] == ["poll", "push"]
    assert rig.watcher.status().details["reconnects"] == 1
    # Resumed, not restarted: no resync poll of every type.
    rig.clock.advance(0.1)
    rig.step()
    assert rig.listener.due == [("a", 1)]  # the batch read before the error


def test_the_post_batch_token_of_a_quiet_stream_is_kept() -> None:
    first = ScriptedStream(None, None, CursorNotFound("cursor killed", 43), name="quiet")
    rig = Rig(first, ScriptedStream())
    rig.connect()
    rig.step(2)
    token = first.resume_token
    assert token is not None and "pbrt" in token["_data"]
    rig.step(2)
    assert rig.factory.calls[-1] == (token, None)


def test_a_stream_closed_by_the_server_is_reopened_from_its_token() -> None:
    first = ScriptedStream(name="first")
    rig = Rig(first, ScriptedStream())
    rig.connect()
    first._alive = False
    rig.step()
    assert rig.listener.kinds[-1] == "changestream-error"
    rig.step()
    assert rig.factory.calls[-1] == ({"_data": "first-open"}, None)


def test_reconnects_back_off_then_fall_back_to_polling_and_say_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    down = AutoReconnect("connection refused")
    rig = Rig(
        ScriptedStream(None, AutoReconnect("connection reset")),
        down,
        down,
        down,
        down,
        down,
        ScriptedStream(name="never-used"),
    )
    rig.connect()
    rig.step()  # the read fails
    with caplog.at_level(logging.WARNING, logger="durabl.stores.mongo.watcher"):
        assert not rig.watcher.poll_once()  # five attempts, then give up
    assert len(rig.factory.calls) == 6  # the first open, then five reconnect attempts
    assert len(rig.sleeps) == 4  # backoff between the five attempts
    assert all(0 <= s <= 10 for s in rig.sleeps)
    kinds = rig.listener.kinds
    assert kinds == [
        "changestream-connected",
        "changestream-error",
        *["changestream-error"] * 5,
        "changestream-fallback",
    ]
    assert [e.extra["attempt"] for e in rig.listener.events[1:7]] == [0, 1, 2, 3, 4, 5]
    fallback = rig.listener.events[-1]
    assert _error(fallback) is down
    assert "gave up after 5 failed attempts" in fallback.extra["reason"]
    assert rig.listener.modes[-1][0] == "poll"
    status = rig.watcher.status()
    assert status.pickup == "poll" and "gave up" in status.reason
    assert rig.watcher.state == "fallback"
    assert not rig.watcher.poll_once()
    assert any("falls back to polling" in r.getMessage() for r in caplog.records)


def test_a_flapping_stream_gets_a_fresh_budget_after_each_recovery() -> None:
    down = AutoReconnect("connection refused")
    rig = Rig(
        ScriptedStream(None, AutoReconnect("reset 1")),
        down,
        down,
        down,
        down,
        ScriptedStream(None, AutoReconnect("reset 2")),
        down,
        down,
        down,
        down,
        ScriptedStream(name="healthy"),
    )
    rig.connect()
    rig.step(4)  # fail, four failed attempts then success, fail again, same again
    assert rig.watcher.state == "push"
    assert "changestream-fallback" not in rig.listener.kinds


def test_a_non_resumable_error_while_opening_falls_back_at_once() -> None:
    denied = OperationFailure("not authorized on app to execute command", 13)
    rig = Rig(denied, ScriptedStream())
    assert not rig.watcher.poll_once()
    assert len(rig.factory.calls) == 1 and rig.sleeps == []
    assert rig.listener.kinds == ["changestream-error", "changestream-fallback"]
    assert "cannot be opened" in rig.listener.events[-1].extra["reason"]
    assert rig.listener.events[0].extra["kind"] == "fatal"


def test_a_lost_resume_token_restarts_from_now_and_resyncs() -> None:
    first = ScriptedStream(name="first")
    rig = Rig(first, OperationFailure("history lost", 286), ScriptedStream(name="fresh"))
    rig.connect()
    rig.store.jobs = {1: ("a", rig.now + timedelta(seconds=7), "pending")}
    first.script.append(AutoReconnect("network down for hours"))
    rig.step()
    rig.step()
    assert rig.factory.calls[1] == ({"_data": "first-open"}, None)  # tried to resume
    assert rig.factory.calls[2] == (None, None)  # then started from now
    assert [e.extra.get("kind") for e in rig.listener.events[1:3]] == ["resumable", "token-lost"]
    assert rig.listener.events[-1].extra["resumed"] is False
    assert rig.listener.take_due() == [("a", 0)]  # resync: anything missed gets polled
    assert rig.watcher.timers.next_at() == rig.now + timedelta(seconds=7)


def test_a_history_lost_error_mid_stream_drops_the_token() -> None:
    first = ScriptedStream(None, OperationFailure("history lost", 286), name="first")
    rig = Rig(first, ScriptedStream())
    rig.connect()
    rig.step(2)
    assert rig.factory.calls[-1] == (None, None)
    assert rig.listener.due == [("a", 0)]


def test_invalidate_restarts_after_the_drop_with_start_after() -> None:
    first = ScriptedStream(name="first")
    second = ScriptedStream(None, AutoReconnect("blip"), name="second")
    third = ScriptedStream(name="third")
    rig = Rig(first, second, third, ScriptedStream(name="fourth"))
    rig.connect()
    gone = invalidate()
    first.script.extend([insert("a", rig.now + timedelta(seconds=60)), gone])
    rig.step()
    assert len(rig.watcher.timers) == 1
    rig.step()  # the invalidate
    assert rig.listener.events[-1].extra["kind"] == "invalidate"
    assert "dropped or renamed" in str(_error(rig.listener.events[-1]))
    assert len(rig.watcher.timers) == 0  # those jobs went with the collection
    rig.step()
    assert rig.factory.calls[-1] == (None, gone["_id"])  # resume_after cannot pass it
    assert rig.listener.events[-1].extra["resumed"] is True  # no gap: no resync
    assert rig.listener.due == []
    rig.step(2)  # an error before any event: start after the invalidate again
    assert rig.factory.calls[-1] == (None, gone["_id"])
    event = insert("a", rig.now)
    third.script.extend([event, AutoReconnect("blip")])
    rig.step(3)  # an event seen, an error, a reopen: from now on resume after tokens
    assert rig.factory.calls[-1] == (event["_id"], None)


def test_the_watcher_stops_when_the_queue_shuts_down() -> None:
    rig = Rig(ScriptedStream())
    rig.connect()
    rig.listener.closing = True
    assert not rig.watcher.poll_once()
    rig.watcher.close()
    assert rig.factory.opened[0].closed
    assert rig.listener.kinds[-1] == "changestream-closed"
    assert rig.listener.events[-1].extra == {"reason": "shutdown"}
    rig.watcher.close()
    assert rig.listener.kinds.count("changestream-closed") == 1
    assert rig.watcher.status().reason == "the change stream was closed (shutdown)"


def test_backoff_waits_end_when_the_watcher_is_stopped() -> None:
    listener = FakeListener()
    factory = StreamFactory(*[AutoReconnect("down")] * 10)
    watcher = Watcher(
        factory,
        listener,
        clock=FakeClock(),
        lookup=lambda ids: [],
        next_run_at=lambda t, after: None,
        waiting=lambda ids, types: {},
        settings=PushSettings(retry_backoff=60, retry_backoff_max=60),
    )
    watcher.start()
    assert wait_until(lambda: len(factory.calls) >= 1, timeout=5)
    assert watcher.stop(timeout=5)  # a 0-120 s backoff wait does not hold stop() up
    assert "changestream-fallback" not in listener.kinds
    assert listener.kinds[-1] == "changestream-closed"


# -- the thread ----------------------------------------------------------------------------------
class QueueStream:
    """A stream fed from another thread: each read waits a little, like a getMore."""

    def __init__(self) -> None:
        self.events: queue_module.Queue[dict[str, Any]] = queue_module.Queue()
        self.reads = 0
        self.closed = threading.Event()
        self._token: Mapping[str, Any] = {"_data": "q-open"}

    @property
    def resume_token(self) -> Mapping[str, Any] | None:
        return self._token

    @property
    def alive(self) -> bool:
        return not self.closed.is_set()

    def try_next(self) -> Mapping[str, Any] | None:
        self.reads += 1
        try:
            event = self.events.get(timeout=0.01)
        except queue_module.Empty:
            return None
        self._token = event["_id"]
        return event

    def close(self) -> None:
        self.closed.set()


def test_the_thread_is_named_routes_and_closes_on_stop() -> None:
    stream = QueueStream()
    listener = FakeListener()
    watcher = Watcher(
        lambda resume_after, start_after: stream,
        listener,
        clock=SYSTEM_CLOCK,
        lookup=lambda ids: [],
        next_run_at=lambda t, after: None,
        waiting=lambda ids, types: {},
        settings=PushSettings(batch_window=0.02),
    )
    watcher.start()
    assert wait_until(lambda: watcher.state == "push", timeout=5)
    assert "durabl-changestream" in [t.name for t in threading.enumerate()]
    listener.due.clear()
    stream.events.put(insert("a", datetime.now(UTC)))
    assert wait_until(lambda: ("a", 1) in listener.due, timeout=5)
    assert watcher.stop(timeout=5)
    assert stream.closed.is_set()
    assert listener.kinds.count("changestream-closed") == 1
    assert "durabl-changestream" not in [t.name for t in threading.enumerate()]


def test_the_thread_never_spins_on_a_stream_that_returns_at_once() -> None:
    rig_stream = ScriptedStream(name="instant")
    listener = FakeListener()
    watcher = Watcher(
        lambda resume_after, start_after: rig_stream,
        listener,
        clock=FakeClock(),  # frozen: every step looks instant
        lookup=lambda ids: [],
        next_run_at=lambda t, after: None,
        waiting=lambda ids, types: {},
        settings=PushSettings(batch_window=0.1),
    )
    watcher.start()
    stopper = threading.Event()
    stopper.wait(0.3)
    assert watcher.stop(timeout=5)
    assert rig_stream.reads <= 40  # about one read per 25 ms, not millions


def test_a_sink_may_shut_the_queue_down_from_the_watcher_thread() -> None:
    stream = QueueStream()
    backend = PushMemoryBackend(
        lambda listener: Watcher(
            lambda resume_after, start_after: stream,
            listener,
            clock=SYSTEM_CLOCK,
            lookup=lambda ids: [],
            next_run_at=lambda t, after: None,
            waiting=lambda ids, types: {},
        )
    )
    kinds: list[str] = []
    q: JobQueue

    def sink(event: JobEvent) -> None:
        kinds.append(event.kind)
        if event.kind == "changestream-connected":
            q.shutdown(timeout=1)  # on the watcher's own thread: must not join itself

    q = JobQueue(backend, on_job_event=sink)
    q.process("a", lambda job, ctx: None)
    assert wait_until(lambda: "changestream-closed" in kinds, timeout=5), kinds
    assert wait_until(
        lambda: "durabl-changestream" not in [t.name for t in threading.enumerate()], timeout=5
    )
    assert stream.closed.is_set()


def test_a_bug_in_the_watcher_falls_back_to_polling() -> None:
    class Broken(FakeListener):
        def push_types(self) -> frozenset[str]:
            raise RuntimeError("bug")

    listener = Broken()
    watcher = Watcher(
        lambda resume_after, start_after: ScriptedStream(),
        listener,
        clock=FakeClock(),
        lookup=lambda ids: [],
        next_run_at=lambda t, after: None,
        waiting=lambda ids, types: {},
    )
    watcher.start()
    assert wait_until(lambda: "changestream-closed" in listener.kinds, timeout=5)
    assert listener.kinds == ["changestream-fallback", "changestream-closed"]
    assert listener.modes == [("poll", "the watcher failed: RuntimeError('bug')")]
    assert watcher.stop(timeout=5)


# -- the queue's side: routing, poll intervals, is_healthy --------------------------------------
class PushMemoryBackend(MemoryBackend):
    """An in-memory store that offers push pickup through a given watcher factory."""

    supports_push = True
    safety_poll_interval = 60.0

    def __init__(
        self, make_watcher: Callable[[PushListener], Watcher], *, clock: Clock | None = None
    ) -> None:
        super().__init__(clock=clock)
        self.make_watcher = make_watcher
        self.watchers: list[Watcher] = []

    def open_push(self, listener: PushListener) -> Watcher:
        watcher = self.make_watcher(listener)
        self.watchers.append(watcher)
        return watcher


class StepWatcher(Watcher):
    """Never starts a thread: the test steps it."""

    def start(self) -> None:
        pass


def step_backend(factory: StreamFactory, clock: FakeClock) -> PushMemoryBackend:
    def make(listener: PushListener) -> Watcher:
        return StepWatcher(
            factory,
            listener,
            clock=clock,
            lookup=lambda ids: [],
            next_run_at=lambda t, after: None,
            waiting=lambda ids, types: {},
            sleep=lambda seconds: None,
        )

    return PushMemoryBackend(make, clock=clock)


def test_push_sources_are_recognised_and_other_stores_are_not() -> None:
    assert isinstance(step_backend(StreamFactory(), FakeClock()), PushSource)
    assert not isinstance(MemoryBackend(), PushSource)
    assert isinstance(MongoJobQueue(mongomock.MongoClient()["app"]), PushSource)


def test_default_poll_intervals_follow_the_pickup_mode() -> None:
    clock = FakeClock()
    down = AutoReconnect("down")
    factory = StreamFactory(ScriptedStream(None, AutoReconnect("reset")), *[down] * 5)
    backend = step_backend(factory, clock)
    events: list[JobEvent] = []
    q = JobQueue(backend, clock=clock, on_job_event=events.append)
    try:
        q.process("a", lambda job, ctx: None)
        q.process("b", lambda job, ctx: None, poll_interval=2)
        assert q.is_healthy().pickup == "poll"
        watcher = backend.watchers[0]
        assert len(backend.watchers) == 1  # one watcher per queue
        watcher.poll_once()
        health = q.is_healthy()
        assert health and health.pickup == "push" and health.reason == "change stream connected"
        assert health.processing == ("a", "b")
        assert q.processors["a"].poll_interval == 60.0
        assert q.processors["b"].poll_interval == 2  # chosen by the caller: left alone
        q.process("c", lambda job, ctx: None)
        assert q.processors["c"].poll_interval == 60.0  # registered while push is up
        watcher.poll_once()  # the stream fails: poll at the normal interval meanwhile
        assert q.processors["a"].poll_interval == DEFAULT_POLL_INTERVAL
        watcher.poll_once()  # five reconnects fail: fall back for good
        health = q.is_healthy()
        assert health.pickup == "poll" and "gave up after 5" in health.reason
        assert q.processors["a"].poll_interval == DEFAULT_POLL_INTERVAL
        assert q.processors["c"].poll_interval == DEFAULT_POLL_INTERVAL
        assert [e.kind for e in events if e.kind.startswith("changestream-")][-1] == (
            "changestream-fallback"
        )
    finally:
        q.shutdown(timeout=2)
    assert [e.kind for e in events][-1] == "changestream-closed"
    assert not q.is_healthy()


def test_a_fallback_wakes_processors_waiting_out_the_safety_interval() -> None:
    clock = FakeClock()
    factory = StreamFactory(ScriptedStream(), OperationFailure("unauthorized", 13))
    backend = step_backend(factory, clock)
    q = JobQueue(backend, clock=clock)
    try:
        processor = q.register("a", lambda job, ctx: None)
        q.pickup.route("a")
        watcher = backend.watchers[0]
        watcher.poll_once()
        assert processor.poll_interval == 60.0
        factory.opened[0].script.append(AutoReconnect("reset"))
        watcher.poll_once()
        assert processor._wake.is_set()  # polls now, not after the 60 s wait
    finally:
        q.shutdown(timeout=2)


def test_push_wakes_only_processors_with_a_free_slot() -> None:
    clock = FakeClock()
    q = JobQueue(step_backend(StreamFactory(), clock), clock=clock)
    processor = q.register("a", lambda job, ctx: None, concurrency=2)
    q.pickup.push_due("a", 3)
    assert processor._wake.is_set() and processor._enqueued == 3
    processor._wake.clear()
    processor._enqueued = 0
    q.pickup.push_due("a", 0)  # resync: every free slot
    assert processor._wake.is_set() and processor._enqueued == 0
    processor._wake.clear()
    processor._outstanding = 2  # both workers busy
    q.pickup.push_due("a", 1)
    assert not processor._wake.is_set()
    assert processor._maybe_more  # polls again as soon as a run finishes
    q.pickup.push_due("unknown", 1)  # not processed here: nothing to do
    q.shutdown(timeout=2)
    processor._wake.clear()
    processor._outstanding = 0
    q.pickup.push_due("a", 1)
    assert not processor._wake.is_set()  # shutting down: no new claims


def test_a_pending_scope_follower_runs_as_soon_as_its_key_is_free() -> None:
    """No store event announces that a follower became claimable (its key's active run
    ended), so the worker that ran the key polls again at once, poll interval or not."""
    q = JobQueue(MemoryBackend())
    gate = threading.Event()
    ran: list[str] = []

    def handler(job: Any, ctx: Any) -> None:
        ran.append(job.data["n"])
        if job.data["n"] == "first":
            gate.wait(5)

    try:
        q.process("k", handler, concurrency=2, poll_interval=3600)
        q.enqueue("k", {"n": "first"}, dedupe_key="x", dedupe_scope="pending")
        assert wait_until(lambda: ran == ["first"], timeout=5)
        processor = q.processors["k"]
        assert wait_until(lambda: processor.free_slots() == 1, timeout=5)
        polls = processor.polls
        q.enqueue("k", {"n": "follower"}, dedupe_key="x", dedupe_scope="pending")
        assert wait_until(lambda: processor.polls > polls, timeout=5)  # blocked: key busy
        gate.set()
        assert wait_until(lambda: ran == ["first", "follower"], timeout=5)
    finally:
        q.shutdown(timeout=2)


def test_is_healthy_says_why_pickup_polls() -> None:
    memory = JobQueue(MemoryBackend())
    assert memory.is_healthy().reason == "MemoryBackend has no push pickup"
    plain = JobQueue(MongoJobQueue(mongomock.MongoClient(tz_aware=True)["app"]))
    health = plain.is_healthy()
    assert (health.healthy, health.pickup) == (True, "poll")
    assert health.reason == "change streams are off (use_change_streams=False)"
    plain.shutdown(timeout=1)
    assert not plain.is_healthy()


def test_a_queue_end_to_end_picks_up_a_job_enqueued_elsewhere_through_push() -> None:
    """Real threads: another process's enqueue reaches a worker polling every 60 s."""
    stream = QueueStream()
    backend = PushMemoryBackend(
        lambda listener: Watcher(
            lambda resume_after, start_after: stream,
            listener,
            clock=SYSTEM_CLOCK,
            lookup=lambda ids: [],
            next_run_at=lambda t, after: None,
            waiting=lambda ids, types: {},
            settings=PushSettings(batch_window=0.01),
        )
    )
    events: list[JobEvent] = []
    q = JobQueue(backend, on_job_event=events.append)
    ran = threading.Event()
    try:
        q.process("a", lambda job, ctx: ran.set())
        assert wait_until(lambda: q.is_healthy().pickup == "push", timeout=5)
        assert wait_until(lambda: q.processors["a"].polls >= 2, timeout=5)  # start + resync
        assert q.processors["a"].poll_interval == 60.0
        job_id = backend.enqueue(build_new_job("a", {"n": 1})).job_id  # not via q: no wake
        stream.events.put(insert("a", backend.now(), job_id))
        assert ran.wait(5), "the change-stream notification should wake the worker"
    finally:
        q.shutdown(timeout=2)
    assert stream.closed.is_set()
    kinds = [e.kind for e in events]
    assert kinds.count("changestream-connected") == 1
    assert kinds.count("changestream-closed") == 1


# -- MongoJobQueue ---------------------------------------------------------------------------
class HelloDb:
    """A database whose ``hello`` reply is scripted."""

    def __init__(self, reply: Mapping[str, Any] | BaseException, name: str = "app") -> None:
        self.reply = reply
        self.name = name

    def command(self, name: str) -> Mapping[str, Any]:
        assert name == "hello"
        if isinstance(self.reply, BaseException):
            raise self.reply
        return self.reply


def mongo_with_hello(reply: Mapping[str, Any] | BaseException) -> MongoJobQueue:
    backend = MongoJobQueue(mongomock.MongoClient(tz_aware=True)["app"], use_change_streams=True)
    backend.store.mock = False  # startup() now asks the (scripted) server
    backend.db = HelloDb(reply)  # type: ignore[assignment]
    return backend


def test_startup_refuses_a_standalone_server_when_change_streams_are_asked_for() -> None:
    backend = mongo_with_hello({"isWritablePrimary": True, "maxWireVersion": 21})
    with pytest.raises(DurablError, match="standalone"):
        backend.startup()
    assert not backend.supports_push
    with pytest.raises(DurablError, match="use_change_streams=True"):
        backend.open_push(FakeListener())


@pytest.mark.parametrize(
    "reply",
    [
        {"isWritablePrimary": True, "setName": "rs0", "hosts": ["db1:27017"]},
        {"isWritablePrimary": True, "msg": "isdbgrid"},
    ],
    ids=["replica-set", "sharded"],
)
def test_startup_enables_push_on_a_replica_set_or_sharded_cluster(reply: dict[str, Any]) -> None:
    backend = mongo_with_hello(reply)
    backend.startup()
    assert backend.supports_push
    assert isinstance(backend.open_push(FakeListener()), Watcher)


def test_startup_reports_a_failed_hello_clearly() -> None:
    backend = mongo_with_hello(AutoReconnect("connection refused"))
    with pytest.raises(DurablError, match="could not check change-stream support"):
        backend.startup()


def test_push_options_are_validated() -> None:
    db: Any = mongomock.MongoClient()["app"]
    backend = MongoJobQueue(db, safety_poll_interval=30, push_batch_window=0.25)
    assert backend.safety_poll_interval == 30.0
    assert backend.push_settings.batch_window == 0.25
    assert backend.push_settings.await_seconds == 0.25
    with pytest.raises(ValueError, match="safety_poll_interval"):
        MongoJobQueue(db, safety_poll_interval=0)
    with pytest.raises(ValueError, match="batch_window"):
        MongoJobQueue(db, push_batch_window=0)
    with pytest.raises(ValueError, match="max_retries"):
        PushSettings(max_retries=0)
