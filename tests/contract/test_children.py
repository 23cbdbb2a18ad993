"""Child jobs on every store: a fan-out of 1,000 children gathered by one parent and woken
once by the last child's write (nothing else makes it due: the store's clock stands
still), a tree of one type on a pool of one thread, a crash between creating children
and journaling them, a failed child returned to its parent, the gather's timeout, a
cancel's cascade (of one job, or of a ``cancel_matching``: a parent's children cancelled,
the parent of cancelled children woken), listing by parent, and a child finished by
another process's queue waking its parent (by push where the store has it)."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from durabl import (
    Child,
    FatalJobError,
    Job,
    JobEvent,
    JobQueue,
    MongoJobQueue,
    Orchestrator,
    WaitTimeout,
)
from durabl.model.children import GATHER_RECHECK
from durabl.orchestrator import OrchestrationContext
from durabl.runtime.run import ManagedRun
from durabl.stores.base import Backend
from durabl.testing import FakeClock, wait_until
from tests.contract.support import second_view

VT = 30.0


@pytest.fixture
def events() -> list[JobEvent]:
    return []


@pytest.fixture
def q(backend: Backend, clock: FakeClock, events: list[JobEvent]) -> Iterator[JobQueue]:
    queue = JobQueue(backend, visibility_timeout=VT, clock=clock, on_job_event=events.append)
    yield queue
    queue.shutdown(timeout=30)


def declare(q: JobQueue, type: str, body: Any) -> Any:
    """An orchestration run by ``q.run_pending()`` (no threads); its handler."""
    orch = Orchestrator(q)
    orch.define(type, body, start=False)
    handler = orch.definitions[type].handler
    q.register(type, handler)
    return handler


def get(q: JobQueue, job_id: str) -> Job[Any]:
    job = q.get_job(job_id)
    assert job is not None
    return job


def square(job: Job[Any], ctx: Any) -> int:
    if job.data.get("fail"):
        raise FatalJobError(f"image {job.data['image']} is broken")
    return int(job.data["image"]) ** 2


def fan_out(
    n: int, runs: list[str], timeout: float | None = None, out: dict[str, Any] | None = None
) -> Any:
    """A parent of ``n`` children (the second fails); what it gathered goes to ``out``
    (a body's return value is not kept on its job)."""
    out = {} if out is None else out

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        runs.append("run")
        children = [Child("square", {"image": i, "fail": i == 1}) for i in range(n)]
        ids = octx.start_children("fan-out", children)
        done = octx.gather("fan-in", ids, timeout=timeout)
        runs.append("gathered")
        out["ids"] = [j.id for j in done] == ids
        out["sum"] = sum(j.result or 0 for j in done)
        out["statuses"] = sorted({j.status for j in done})
        out["failures"] = [(j.fail_reason or "")[:32] for j in done if j.status == "failed"]

    return body


def test_a_thousand_children_gathered_by_one_parent_woken_once(
    q: JobQueue, backend: Backend, events: list[JobEvent]
) -> None:
    """Children run on a pool of four threads; the parent waits on its own pool. The
    store's clock never moves, so only a child's write can make the parent due.
    (The two MongoDB test doubles, mongomock and the SecantusDB wire server, read every
    document for each claim and each count, a quarter second apiece at a thousand jobs:
    a hundred children there, a thousand on every other store; ``DURABL_FULL_FANOUT=1``
    runs a thousand there too, with the wait stretched to match.)"""
    full = os.environ.get("MONGO_URL") or os.environ.get("DURABL_FULL_FANOUT")
    n = 100 if isinstance(backend, MongoJobQueue) and not full else 1000
    runs: list[str] = []
    finished = threading.Event()
    q.add_event_sink(
        lambda e: finished.set() if e.type == "fan" else None, kinds=["completed", "failed"]
    )
    orch = Orchestrator(q)
    result: dict[str, Any] = {}
    orch.define("fan", fan_out(n, runs, out=result), concurrency=1, poll_interval=0.05)
    q.process("square", square, concurrency=4, poll_interval=0.05)
    parent = q.enqueue("fan", {}) or ""
    slow = isinstance(backend, MongoJobQueue) and n == 1000  # a test double's full scans
    assert finished.wait(1500 if slow else 120), f"the parent did not finish: {get(q, parent)}"
    assert get(q, parent).status == "completed"
    assert result["ids"] is True  # in the order started
    assert result["sum"] == sum(i * i for i in range(n)) - 1
    assert result["statuses"] == ["completed", "failed"]
    assert result["failures"] == ["FatalJobError: image 1 is broken"]
    assert runs == ["run", "run", "gathered"]  # suspended once, woken once
    assert q.count_jobs(parent_id=parent) == n
    woken = [e for e in events if e.kind == "woken" and e.job_id == parent]
    assert len(woken) >= 1 and woken[0].extra == {"children": "fan-in"}


def test_a_waiting_parent_is_pending_not_due_and_its_children_are_listed_by_parent(
    q: JobQueue, clock: FakeClock
) -> None:
    runs: list[str] = []
    declare(q, "fan", fan_out(3, runs))
    parent = q.enqueue("fan", {}) or ""
    other = q.enqueue("square", {"image": 9}) or ""
    assert q.run_pending("fan") == 1
    job = get(q, parent)
    assert (job.status, job.attempts, job.waiting_for) == ("pending", 0, "children:fan-in")
    assert job.run_at > clock.now()
    children = q.list_jobs(parent_id=parent)
    assert sorted(c.data["image"] for c in children) == [0, 1, 2]
    assert {c.parent_id for c in children} == {parent}
    assert sorted(c.parent_step or "" for c in children) == [f"fan-out#{i}" for i in range(3)]
    assert other not in {c.id for c in children}
    assert q.count_jobs(parent_id=parent, status="pending") == 3
    assert q.list_jobs(parent_id=other) == []
    assert get(q, other).parent_id is None
    with pytest.raises(TypeError):
        q.list_jobs(parent_id=7)
    q.register("square", square)
    assert q.run_pending("square") == 4  # the three children (and the other job)
    assert get(q, parent).waiting_for is None  # due now: the last child woke it
    assert q.run_pending("fan") == 1
    assert get(q, parent).status == "completed"
    assert runs == ["run", "run", "gathered"]


def test_the_recheck_finds_children_that_ended_without_a_wake(
    q: JobQueue, backend: Backend, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A child's process died between its terminal write and the wake (here: the wake
    does nothing): the parent's gather looks again within GATHER_RECHECK."""
    runs: list[str] = []
    declare(q, "fan", fan_out(2, runs))
    parent = q.enqueue("fan", {}) or ""
    assert q.run_pending("fan") == 1
    monkeypatch.setattr(q, "child_ended", lambda parent_id: None)
    q.register("square", square)
    assert q.run_pending("square") == 2
    assert get(q, parent).waiting_for == "children:fan-in"
    clock.advance(GATHER_RECHECK)
    assert q.run_pending("fan") == 1
    assert get(q, parent).status == "completed"


def test_a_tree_of_one_type_runs_to_the_end_on_a_pool_of_one_thread(q: JobQueue) -> None:
    """Every node waits for its children without holding the one thread."""
    finished = threading.Event()

    def node(job: Job[Any], octx: OrchestrationContext) -> None:
        depth = job.data["depth"]
        if depth:
            ids = octx.start_children("split", [Child("tree", {"depth": depth - 1})] * 2)
            children = octx.gather("join", ids)
            assert [child.status for child in children] == ["completed"] * 2
        if job.data.get("root"):
            finished.set()

    Orchestrator(q).define("tree", node, concurrency=1, poll_interval=0.05)
    root = q.enqueue("tree", {"depth": 3, "root": True}) or ""
    assert finished.wait(60), "the tree did not finish on one thread"
    assert wait_until(lambda: get(q, root).status == "completed", timeout=10)
    assert q.count_jobs(type="tree", status="completed") == 15  # 1 + 2 + 4 + 8 nodes


class WorkerKilled(Exception):
    """Stands for the worker's process dying where it is raised."""


@pytest.mark.parametrize("created", [3, 2])
def test_a_crash_between_creating_children_and_journaling_them_creates_them_once(
    q: JobQueue,
    backend: Backend,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
    created: int,
) -> None:
    """The worker dies after the store created ``created`` of the three children (all of
    them, or the first chunk of a longer list) and before their ids were journaled; the
    reaper hands the parent back, and its next run finds them and creates only the rest."""
    runs: list[str] = []
    handler = declare(q, "fan", fan_out(3, runs))
    parent = q.enqueue("fan", {}) or ""
    start_once = q.start_children_once

    def create_then_die(parent_id: str, step: str, children: Any, known: Any) -> list[str]:
        start_once(parent_id, step, children[:created], known)
        raise WorkerKilled("killed with the children created, their ids not journaled")

    monkeypatch.setattr(q, "start_children_once", create_then_die)
    (handle,) = backend.claim("fan", limit=1, lease_owner="doomed")
    with pytest.raises(WorkerKilled):
        handler.run_managed(ManagedRun(handle, handler, q))
    monkeypatch.setattr(q, "start_children_once", start_once)
    assert [e["kind"] for e in get(q, parent).journal] == ["bootstrap", "spawn"]
    first = {c.id for c in q.list_jobs(parent_id=parent)}
    assert len(first) == created
    clock.advance(VT + getattr(backend, "clock_skew_allowance", 0) + 1)
    assert backend.reap(VT).recovered == 1
    assert q.run_pending("fan") == 1
    children = q.list_jobs(parent_id=parent)
    assert len(children) == 3 and first <= {c.id for c in children}
    assert sorted(c.parent_step or "" for c in children) == [f"fan-out#{i}" for i in range(3)]
    journaled = next(e for e in get(q, parent).journal if e["kind"] == "children")
    assert sorted(journaled["result"]) == sorted(c.id for c in children)


def test_a_failed_child_is_returned_to_its_parent_which_decides(q: JobQueue) -> None:
    result: dict[str, Any] = {}
    declare(q, "fan", fan_out(2, [], out=result))
    q.register("square", square)
    parent = q.enqueue("fan", {}) or ""
    q.run_pending()
    assert get(q, parent).status == "completed"
    assert result["statuses"] == ["completed", "failed"]
    assert result["failures"] == ["FatalJobError: image 1 is broken"]
    assert result["sum"] == 0


def test_the_gather_timeout_raises_wait_timeout(q: JobQueue, clock: FakeClock) -> None:
    caught: list[str] = []

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        ids = octx.start_children("fan-out", [Child("square", {"image": 2})])
        try:
            octx.gather("fan-in", ids, timeout=60)
        except WaitTimeout as exc:
            caught.append(str(exc))

    declare(q, "fan", body)
    parent = q.enqueue("fan", {}) or ""
    assert q.run_pending("fan") == 1
    assert get(q, parent).waiting_for == "children:fan-in"
    clock.advance(59)
    assert q.run_pending("fan") == 0
    clock.advance(1)
    assert q.run_pending("fan") == 1
    assert get(q, parent).status == "completed"
    assert len(caught) == 1 and "fan-in" in caught[0]


def test_an_uncaught_wait_timeout_fails_the_parent_at_once(q: JobQueue, clock: FakeClock) -> None:
    declare(q, "fan", fan_out(1, [], timeout=5))
    parent = q.enqueue("fan", {}, max_attempts=5) or ""
    q.run_pending("fan")
    clock.advance(5)
    q.run_pending("fan")
    job = get(q, parent)
    assert (job.status, job.failure_kind) == ("failed", "fatal")
    assert "WaitTimeout" in (job.fail_reason or "")


def test_cancelling_a_parent_cancels_its_live_children_and_theirs(q: JobQueue) -> None:
    def node(job: Job[Any], octx: OrchestrationContext) -> None:
        if job.data["depth"]:
            kids = [Child("tree", {"depth": job.data["depth"] - 1}) for _ in range(2)]
            octx.gather("join", octx.start_children("split", kids))

    declare(q, "tree", node)
    root = q.enqueue("tree", {"depth": 2}) or ""
    q.run_pending("tree", limit=2)  # the root and one child suspend; one child is pending
    children = q.list_jobs(parent_id=root)
    assert len(children) == 2
    grandchildren = [g for c in children for g in q.list_jobs(parent_id=c.id)]
    assert len(grandchildren) == 2
    done = q.enqueue("square", {"image": 1}) or ""
    assert q.cancel(root) is True
    for job_id in [root, *(c.id for c in children), *(g.id for g in grandchildren)]:
        assert get(q, job_id).status == "cancelled"
    assert get(q, done).status == "pending"


def test_a_child_cancelled_alone_wakes_its_waiting_parent(q: JobQueue) -> None:
    result: dict[str, Any] = {}
    declare(q, "fan", fan_out(1, [], out=result))
    parent = q.enqueue("fan", {}) or ""
    q.run_pending("fan")
    (child,) = q.list_jobs(parent_id=parent)
    assert q.cancel(child.id) is True
    assert get(q, parent).waiting_for is None
    assert q.run_pending("fan") == 1
    assert result["statuses"] == ["cancelled"]


def test_a_child_finished_by_another_process_wakes_the_parent(
    q: JobQueue, backend: Backend, clock: FakeClock
) -> None:
    """The children run in another process's queue (another store object over the same
    database); the store's clock stands still, so only the wake their last terminal
    write sent can make the parent due. Where the store has push, the parent's worker
    polls once a minute: push, not its poll, brings it the wake."""
    finished = threading.Event()
    runs: list[str] = []
    body = fan_out(3, runs)

    def parent_body(job: Job[Any], octx: OrchestrationContext) -> None:
        body(job, octx)
        finished.set()

    poll = 60 if backend.supports_push else 0.05
    Orchestrator(q).define("fan", parent_body, concurrency=1, poll_interval=poll)
    parent = q.enqueue("fan", {}) or ""
    assert wait_until(lambda: get(q, parent).waiting_for == "children:fan-in", timeout=10)
    other = JobQueue(second_view(backend, clock), visibility_timeout=VT, clock=clock)
    try:
        other.register("square", square)
        assert other.run_pending("square") == 3
        assert finished.wait(10), "the other process's child did not wake the parent"
    finally:
        if other.backend is not backend:
            other.shutdown(timeout=2)
    assert runs == ["run", "run", "gathered"]


def test_cancel_matching_a_waiting_parent_cancels_its_live_children_not_finished_ones(
    q: JobQueue, backend: Backend
) -> None:
    declare(q, "fan", fan_out(3, []))
    parent = q.enqueue("fan", {}) or ""
    q.run_pending("fan")
    q.register("square", square)
    assert q.run_pending("square", limit=1) == 1  # one child completed
    (running,) = backend.claim("square", limit=1, lease_owner="elsewhere")  # one running
    other = q.enqueue("square", {"image": 7}) or ""  # a job of the children's type
    assert q.cancel_matching(type="fan", reason="stop the album") == 1
    assert get(q, parent).status == "cancelled"
    children = {c.status: c for c in q.list_jobs(parent_id=parent)}
    assert sorted(children) == ["active", "cancelled", "completed"]
    assert children["cancelled"].fail_reason == "stop the album"
    assert running.heartbeat() == "cancel-requested"
    assert get(q, other).status == "pending"


def test_cancel_matching_a_running_parent_cancels_the_children_it_started(
    q: JobQueue, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent is active (its worker created the children and has not gathered yet):
    it is asked to stop, and its children are cancelled at once."""
    handler = declare(q, "fan", fan_out(2, []))
    parent = q.enqueue("fan", {}) or ""
    start_once = q.start_children_once

    def create_then_die(parent_id: str, step: str, children: Any, known: Any) -> list[str]:
        start_once(parent_id, step, children, known)
        raise WorkerKilled("stopped while running, its children created")

    monkeypatch.setattr(q, "start_children_once", create_then_die)
    (handle,) = backend.claim("fan", limit=1, lease_owner="running")
    with pytest.raises(WorkerKilled):
        handler.run_managed(ManagedRun(handle, handler, q))
    assert get(q, parent).status == "active"
    assert q.count_jobs(parent_id=parent, status="pending") == 2
    assert q.cancel_matching(status="active") == 1
    assert handle.heartbeat() == "cancel-requested"
    assert q.count_jobs(parent_id=parent, status="cancelled") == 2


def test_cancel_matching_every_live_child_wakes_the_waiting_parent_once(
    q: JobQueue, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    result: dict[str, Any] = {}
    runs: list[str] = []
    declare(q, "fan", fan_out(3, runs, out=result))
    parent = q.enqueue("fan", {}) or ""
    q.run_pending("fan")
    made_due: list[str] = []
    run_now = backend.run_now

    def spy(job_id: str) -> bool:
        made_due.append(job_id)
        return run_now(job_id)

    monkeypatch.setattr(backend, "run_now", spy)
    first, *_ = q.list_jobs(parent_id=parent)
    assert q.cancel_matching(search=first.id) == 1  # two children left: still waiting
    assert get(q, parent).waiting_for == "children:fan-in" and made_due == []
    assert q.cancel_matching(parent_id=parent, reason="not needed") == 2
    assert made_due == [parent]
    assert get(q, parent).waiting_for is None  # due now
    assert q.run_pending("fan") == 1
    assert get(q, parent).status == "completed"
    assert result["statuses"] == ["cancelled"]
    assert runs == ["run", "run", "gathered"]


def test_cancel_matching_children_by_type_wakes_each_waiting_parent(q: JobQueue) -> None:
    results: list[dict[str, Any]] = [{}, {}]
    declare(q, "fan", fan_out(1, [], out=results[0]))
    declare(q, "album", fan_out(2, [], out=results[1]))
    parents = [q.enqueue("fan", {}) or "", q.enqueue("album", {}) or ""]
    q.run_pending()
    assert q.cancel_matching(type="square") == 3
    assert [get(q, p).waiting_for for p in parents] == [None, None]
    assert q.run_pending() == 2
    assert [r["statuses"] for r in results] == [["cancelled"], ["cancelled"]]


def test_cancel_matching_outside_any_family_reads_at_most_thrice_touching_no_family(
    q: JobQueue, backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neither parents nor children: the cancel is what it was (pending cancelled, active
    asked, terminal left), the waiting family of another type untouched, at the cost of at
    most three reads whatever the number of jobs."""
    declare(q, "fan", fan_out(2, []))
    parent = q.enqueue("fan", {}) or ""
    q.run_pending("fan")
    done = q.enqueue("plain", {"n": -1}) or ""
    (finished,) = backend.claim("plain", limit=1, lease_owner="elsewhere")
    finished.complete()
    plain = [q.enqueue("plain", {"n": n}) or "" for n in range(20)]
    (active,) = backend.claim("plain", limit=1, lease_owner="elsewhere")
    reads: list[list[str]] = []
    find_jobs = backend.find_jobs

    def counted(*args: Any) -> list[Any]:
        found = find_jobs(*args)
        reads.append([job.id for job in found])
        return found

    monkeypatch.setattr(backend, "find_jobs", counted)
    # The other type's gathering parent is looked at (its children are live: no wake).
    for name in ("cancel_children", "run_now"):
        monkeypatch.setattr(backend, name, lambda *a, name=name: pytest.fail(f"{name}{a}"))
    assert q.cancel_matching(type="plain") == 20
    assert len(reads) <= 3
    assert not set(plain) & {job_id for read in reads for job_id in read}  # none read
    monkeypatch.undo()
    assert [get(q, job_id).status for job_id in plain].count("cancelled") == 19
    assert active.heartbeat() == "cancel-requested"
    assert get(q, done).status == "completed"
    assert get(q, parent).waiting_for == "children:fan-in"
    assert q.count_jobs(parent_id=parent, status="pending") == 2
