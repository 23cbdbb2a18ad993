"""Push pickup on the real server: LISTEN/NOTIFY wakes a worker without waiting for its poll
(every processor here polls only every 30 s, so a pickup within seconds proves the push),
routes by type, fires at a future job's ``run_at``, survives ``pg_terminate_backend`` on
its connection, and stops its thread on shutdown."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from psycopg import sql

from durabl import Job, JobContext, JobEvent, JobQueue
from durabl.model.reports import PickupMode
from durabl.stores.postgres import PostgresJobQueue
from durabl.stores.postgres.listener import THREAD_NAME, parse_payload
from durabl.stores.postgres.schema import Tables
from durabl.testing import wait_until
from tests.conftest import drop_postgres_tables, postgres_table, require_postgres

POLL = 30.0  # far longer than any wait below: only a push can explain a quick pickup
PICKUP = 5.0  # generous bound on a pushed pickup (2 busy cores, other suites running)


@pytest.fixture
def table() -> Iterator[str]:
    name = postgres_table()
    yield name
    drop_postgres_tables(name)


@pytest.fixture
def server() -> str:
    return require_postgres()


class Rig:
    """A worker queue on its own store (push on) and a producer store on another pool."""

    def __init__(self, server: str, table: str) -> None:
        self.events: list[JobEvent] = []
        self.store = PostgresJobQueue(server, table=table)
        self.producer = PostgresJobQueue(server, table=table, listen_notify=False)
        self.queue = JobQueue(self.store, on_job_event=self.events.append)
        self.source = JobQueue(self.producer)
        self.ran: dict[str, threading.Event] = {}
        self.lock = threading.Lock()

    def done(self, job_id: str) -> threading.Event:
        with self.lock:
            return self.ran.setdefault(job_id, threading.Event())

    def handler(self, job: Job[Any], ctx: JobContext) -> None:
        self.done(job.id).set()

    def listening(self) -> bool:
        return self.queue.is_healthy().pickup == "push"

    def close(self) -> None:
        self.queue.shutdown(timeout=5)
        self.store.close()
        self.producer.close()


@pytest.fixture
def rig(server: str, table: str) -> Iterator[Rig]:
    rig = Rig(server, table)
    yield rig
    rig.close()


def listener_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_payload_names_the_type_and_the_delay() -> None:
    assert parse_payload("0:emails") == ("emails", 0.0)
    assert parse_payload("1500:a:b") == ("a:b", 1.5)
    assert parse_payload("-3:x") == ("x", 0.0)
    assert parse_payload("") == (None, 0.0)
    assert parse_payload("emails") == (None, 0.0)


def test_channel_fits_the_servers_limit_for_long_table_names() -> None:
    long = Tables("s" * 40 + "." + "t" * 40)
    assert len(long.channel) <= 63
    assert long.channel != Tables("s" * 40 + "." + "t" * 39 + "u").channel
    assert Tables("durabl_jobs").channel == "durabl_jobs"


def test_push_is_on_by_default_and_can_be_turned_off(server: str, table: str) -> None:
    on = PostgresJobQueue(server, table=table)
    off = PostgresJobQueue.from_url(f"{server}?listen_notify=false&table={table}")
    assert on.supports_push and on.push_unavailable() is None
    assert not off.supports_push
    assert "listen_notify=False" in (off.push_unavailable() or "")
    on.close()
    off.close()


def test_the_safety_poll_interval_is_a_url_option(server: str, table: str) -> None:
    store = PostgresJobQueue.from_url(f"{server}?safety_poll_interval=12.5&table={table}")
    assert store.safety_poll_interval == 12.5
    store.close()
    with pytest.raises(ValueError, match="safety_poll_interval"):
        PostgresJobQueue.from_url(f"{server}?safety_poll_interval=soon&table={table}")
    with pytest.raises(ValueError, match="safety_poll_interval"):
        PostgresJobQueue.from_url(f"{server}?safety_poll_interval=0&table={table}")


def test_a_job_enqueued_by_another_process_is_picked_up_without_waiting_for_the_poll(
    rig: Rig, server: str, table: str
) -> None:
    rig.queue.process("t", rig.handler, poll_interval=POLL)
    assert wait_until(rig.listening, timeout=PICKUP)
    code = (
        "import sys; from durabl import JobQueue; "
        "from durabl.stores.postgres import PostgresJobQueue; "
        "store = PostgresJobQueue(sys.argv[1], table=sys.argv[2], listen_notify=False); "
        "print(JobQueue(store).enqueue('t', {'from': 'child'})); store.close()"
    )
    child = subprocess.run(
        [sys.executable, "-c", code, server, table],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    job_id = child.stdout.strip()
    assert rig.done(job_id).wait(PICKUP), "the notify did not wake the worker"
    assert rig.queue.is_healthy().details["notifications"] >= 1


class Recorder:
    """A stand-in for the queue: the listener's calls, as they come."""

    def __init__(self, types: frozenset[str]) -> None:
        self.types = types
        self.due: list[tuple[str, int]] = []
        self.modes: list[str] = []
        self.changed = threading.Condition()

    def push_types(self) -> frozenset[str]:
        return self.types

    def push_due(self, type: str, count: int) -> None:
        with self.changed:
            self.due.append((type, count))
            self.changed.notify_all()

    def push_mode(self, mode: PickupMode, reason: str) -> None:
        with self.changed:
            self.modes.append(mode)
            self.changed.notify_all()

    def push_closing(self) -> bool:
        return False

    def emit(self, event: JobEvent) -> None:
        pass

    def wait_for(self, predicate: Callable[[], bool], timeout: float = PICKUP) -> bool:
        with self.changed:
            return self.changed.wait_for(predicate, timeout)


def test_a_notify_for_a_type_nobody_processes_here_wakes_nothing(server: str, table: str) -> None:
    store = PostgresJobQueue(server, table=table)
    store.startup()
    recorder = Recorder(frozenset({"t"}))
    watcher = store.open_push(recorder)
    watcher.start()
    try:
        assert recorder.wait_for(lambda: recorder.modes == ["push"])
        assert recorder.wait_for(lambda: ("t", 0) in recorder.due)  # the resync on connect
        recorder.due.clear()
        JobQueue(store).enqueue("other", {})
        JobQueue(store).enqueue("t", {})  # committed after the other: notified after it
        assert recorder.wait_for(lambda: bool(recorder.due))
        assert recorder.due == [("t", 1)], "only the processed type was woken"
        assert watcher.notifications == 2, "both notifications arrived"
    finally:
        assert watcher.stop(5)
        store.close()


def test_a_run_that_frees_a_key_notifies_the_types_with_due_jobs_held_on_it(
    server: str, table: str
) -> None:
    """Ending an active run of a keyed job notifies each type with a due job pending on
    that key (the jobs held back on it may start now), whatever ended it; ending a run
    without a key notifies nothing."""
    store = PostgresJobQueue(server, table=table, listen_notify=False)
    queue = JobQueue(store)
    later = store.now() + timedelta(minutes=5)
    for type, key, run_at in [
        ("a", "k", None),
        ("a", "k", None),
        ("b", "k", None),
        ("c", "k", later),  # held on the key too, but not due: no notify for it
        ("d", "other", None),
        ("f", "other", None),
        ("e", None, None),
    ]:
        queue.enqueue(type, {}, concurrency_key=key, run_at=run_at)
    channel = Tables(table).channel
    marker = 0

    def notified(write: Callable[[], object]) -> set[str]:
        """The payloads that the write's commit sent (up to a marker sent after it)."""
        nonlocal marker
        marker += 1
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
            write()
            conn.execute("SELECT pg_notify(%s, %s)", (channel, f"marker-{marker}"))
            payloads: set[str] = set()
            for notify in conn.notifies(timeout=PICKUP):
                if notify.payload == f"marker-{marker}":
                    return payloads
                payloads.add(notify.payload)
        raise AssertionError("the marker never came")

    def claim(type: str) -> Any:
        (handle,) = store.claim(type, limit=1, lease_owner="test")
        return handle

    first_a = claim("a")
    assert notified(first_a.complete) == {"0:a", "0:b"}  # completion
    assert notified(claim("e").complete) == set()  # no key: nothing
    assert notified(lambda: claim("b").fail_fatal("no")) == {"0:a"}  # failure
    # Back to pending (a release, a retry, the reaper): its own notify, and the key's.
    released = notified(lambda: claim("d").release(run_at=later))
    assert "0:f" in released and {p.split(":")[1] for p in released} == {"d", "f"}
    store.close()


def test_a_future_job_is_picked_up_at_its_run_at(rig: Rig) -> None:
    rig.queue.process("t", rig.handler, poll_interval=POLL)
    assert wait_until(rig.listening, timeout=PICKUP)
    delay = 1.0
    started = time.monotonic()
    job_id = rig.source.enqueue("t", {}, run_at=rig.producer.now() + timedelta(seconds=delay))
    assert rig.done(job_id).wait(delay + PICKUP), "the timer did not fire"
    waited = time.monotonic() - started
    assert waited >= delay - 0.05, f"picked up before its run_at ({waited:.3f}s)"


@pytest.mark.parametrize("one_by_one", [True, False])
def test_a_job_made_due_by_run_now_elsewhere_is_picked_up_at_once(
    rig: Rig, one_by_one: bool
) -> None:
    rig.queue.process("t", rig.handler, poll_interval=POLL)
    assert wait_until(rig.listening, timeout=PICKUP)
    job_id = rig.source.enqueue("t", {}, delay=3600) or ""
    if one_by_one:
        assert rig.source.run_now(job_id) is True
    else:
        assert rig.source.run_now_matching(type="t") == 1
    assert rig.done(job_id).wait(PICKUP), "run_now sent no notify"


def test_a_future_job_stored_before_the_worker_started_is_picked_up_at_its_run_at(
    rig: Rig,
) -> None:
    delay = 1.5
    job_id = rig.source.enqueue("t", {}, run_at=rig.producer.now() + timedelta(seconds=delay))
    started = time.monotonic()
    rig.queue.process("t", rig.handler, poll_interval=POLL)
    assert rig.done(job_id).wait(delay + PICKUP), "the read-back timer did not fire"
    assert time.monotonic() - started < delay + PICKUP


def test_a_debounced_job_is_picked_up_at_its_pushed_run_at(rig: Rig) -> None:
    rig.queue.process("t", rig.handler, poll_interval=POLL)
    assert wait_until(rig.listening, timeout=PICKUP)
    started = time.monotonic()
    job_id = rig.source.enqueue("t", {}, dedupe_key="k", debounce=0.5) or ""
    # The first notify says "due in 0.5 s"; the pushes move the job past that timer, and
    # the listener must read the new run_at back when the timer finds nothing due.
    for _ in range(3):
        time.sleep(0.3)  # the burst's pace (real time is what is tested), not a wait
        last = time.monotonic()
        assert rig.source.enqueue("t", {}, dedupe_key="k", debounce=0.5) is None
    assert rig.done(job_id).wait(0.5 + PICKUP), "the pushed run_at was never picked up"
    assert time.monotonic() - last >= 0.5 - 0.05, "picked up before its pushed run_at"
    assert time.monotonic() - started < 0.9 + 0.5 + PICKUP


def terminate(server: str, pid: int) -> bool:
    with psycopg.connect(server, autocommit=True) as admin:
        row = admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
    return bool(row and row[0])


def test_a_terminated_listener_reconnects_and_nothing_is_lost(rig: Rig, server: str) -> None:
    rig.queue.process("t", rig.handler, poll_interval=POLL)
    assert wait_until(rig.listening, timeout=PICKUP)
    first = rig.source.enqueue("t", {"n": 1})
    assert rig.done(first).wait(PICKUP)
    pid = rig.queue.is_healthy().details["backend_pid"]
    assert isinstance(pid, int)
    assert terminate(server, pid)
    # While it is down, a job committed now has nobody listening for it; the reconnect's
    # resync wakes the processor, so it is picked up without waiting for the 30 s poll.
    during = rig.source.enqueue("t", {"n": 2})

    def reconnected() -> bool:
        details = rig.queue.is_healthy().details
        return details["reconnects"] >= 1 and details["backend_pid"] not in (None, pid)

    assert wait_until(reconnected, timeout=PICKUP), rig.queue.is_healthy()
    assert rig.listening()
    assert rig.done(during).wait(PICKUP), "the job enqueued while disconnected was lost"
    after = rig.source.enqueue("t", {"n": 3})
    assert rig.done(after).wait(PICKUP), "pickup does not work after the reconnect"
    kinds = [e.kind for e in rig.events]
    assert kinds.count("changestream-connected") >= 2
    assert "changestream-error" in kinds
    assert wait_until(lambda: rig.producer.get_stats().completed == 3, timeout=PICKUP)


def test_shutdown_joins_the_listener_thread_and_closes_its_connection(
    rig: Rig, server: str
) -> None:
    before = len(listener_threads())
    rig.queue.process("t", rig.handler, poll_interval=POLL)
    assert wait_until(rig.listening, timeout=PICKUP)
    assert len(listener_threads()) == before + 1
    pid = rig.queue.is_healthy().details["backend_pid"]
    started = time.monotonic()
    rig.queue.shutdown(timeout=5)
    assert time.monotonic() - started < 2.0, "stop() waited out a timeout"
    assert len(listener_threads()) == before
    assert [e.kind for e in rig.events].count("changestream-closed") == 1
    with psycopg.connect(server, autocommit=True) as admin:
        row = admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))
        assert row.fetchone() == (0,), "the listener's connection is still open"


def test_a_store_on_a_callers_pool_listens_on_a_connection_of_its_own(
    server: str, table: str
) -> None:
    from psycopg_pool import ConnectionPool

    pool: ConnectionPool[Any] = ConnectionPool(server, kwargs={"autocommit": True}, open=True)
    store = PostgresJobQueue(pool=pool, table=table)
    producer = PostgresJobQueue(server, table=table, listen_notify=False)
    ran = threading.Event()
    queue = JobQueue(store)
    try:
        queue.process("t", lambda job, ctx: ran.set(), poll_interval=POLL)
        assert wait_until(lambda: queue.is_healthy().pickup == "push", timeout=PICKUP)
        JobQueue(producer).enqueue("t", {})
        assert ran.wait(PICKUP)
    finally:
        queue.shutdown(timeout=5)
        producer.close()
        pool.close()
