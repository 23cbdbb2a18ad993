"""SQLite-specific behaviour: the versioned schema, connections per thread, the payload
codec, one-statement batch claims, lock waits, and claims racing across threads and
processes on one file."""

from __future__ import annotations

import gc
import json
import math
import os
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import given, settings

from durabl import (
    BackendUnavailableError,
    DedupeScopeConflictError,
    DurablError,
    Job,
    JobContext,
    JobQueue,
    MongoJobQueue,
    SchemaTooNewError,
    SqliteJobQueue,
)
from durabl.model.job import JobResult
from durabl.model.options import RECEIPTS_KEPT, build_new_job
from durabl.model.payload import INT64_MAX, INT64_MIN
from durabl.stores.sqlite import codec, schema, writes
from durabl.testing import FakeClock, wait_until
from tests.conftest import make_mongomock_backend

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def path(tmp_path: Path) -> str:
    return str(tmp_path / "jobs.sqlite3")


@pytest.fixture
def store(path: str, clock: FakeClock) -> Iterator[SqliteJobQueue]:
    backend = SqliteJobQueue(path, clock=clock)
    backend.startup()
    yield backend
    backend.close()


def add(backend: SqliteJobQueue, type: str = "t", data: Any = None, **options: Any) -> str:
    new = build_new_job(type, {} if data is None else data, now=backend.now(), **options)
    job_id = backend.enqueue(new).job_id
    assert job_id is not None
    return job_id


def raw(path: str) -> sqlite3.Connection:
    """A plain connection of our own to the same file."""
    return sqlite3.connect(path, isolation_level=None, check_same_thread=False)


# -- construction -----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["", ":memory:", "file::memory:?cache=shared"])
def test_a_database_file_path_is_required(bad: str) -> None:
    with pytest.raises(ValueError):
        SqliteJobQueue(bad)


def test_options_are_validated(path: str) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        SqliteJobQueue(path, synchronous="SOMETIMES")
    with pytest.raises(ValueError, match="busy_timeout"):
        SqliteJobQueue(path, busy_timeout=-1)
    assert SqliteJobQueue(Path(path), synchronous="full").path == path


# -- schema -----------------------------------------------------------------------------------


def test_startup_creates_the_versioned_schema_with_its_indexes(store: SqliteJobQueue) -> None:
    with raw(store.path) as conn:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
        version = conn.execute("SELECT value FROM durabl_meta WHERE key = 'schema_version'")
        assert int(version.fetchone()[0]) == schema.latest_version() == 17
        assert {
            "durabl_schedules",
            "durabl_subscriptions",
            "durabl_signals",
            "durabl_paused_types",
        } <= names
        partial = dict(
            conn.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
            )
        )
    assert {"durabl_meta", "durabl_jobs", "durabl_logs", "durabl_receipts"} <= names
    for slot in ("live", "pending", "active"):
        sql = partial[f"durabl_dedupe_{slot}"]
        assert sql.startswith("CREATE UNIQUE INDEX") and f"WHERE {slot}_slot IS NOT NULL" in sql
    assert "WHERE status = 'pending'" in partial["durabl_claim"]
    assert "WHERE status = 'active'" in partial["durabl_lease"]
    assert "WHERE status = 'pending'" in partial["durabl_pending_run_at"]


def test_operations_before_startup_create_the_schema_first(path: str, clock: FakeClock) -> None:
    backend = SqliteJobQueue(path, clock=clock)
    try:
        job_id = add(backend, dedupe_key="k")
        assert backend.enqueue(build_new_job("t", {}, dedupe_key="k")).job_id is None
        assert backend.get_job(job_id) is not None
    finally:
        backend.close()


def test_startups_racing_on_a_new_file_all_succeed(path: str) -> None:
    errors: list[BaseException] = []
    backends = [SqliteJobQueue(path) for _ in range(8)]
    barrier = threading.Barrier(len(backends))

    def start(backend: SqliteJobQueue) -> None:
        barrier.wait()
        try:
            backend.startup()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=start, args=(b,)) for b in backends]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert errors == []
    assert backends[0].count_jobs() == 0
    for backend in backends:
        backend.close()


def test_a_later_migration_upgrades_a_file_in_place_once(
    path: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    v1 = SqliteJobQueue(path, clock=clock)
    keyed = add(v1, data={"v": 1}, dedupe_key="k")
    plain = add(v1, data={"v": 2})
    v1.close()

    applied: list[int] = []

    def add_a_column(conn: sqlite3.Connection) -> None:
        applied.append(1)
        conn.execute("ALTER TABLE durabl_jobs ADD COLUMN tenant TEXT")

    later = schema.latest_version() + 1
    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, (later, add_a_column)])
    v2 = SqliteJobQueue(path, clock=clock)
    v2.startup()
    again = SqliteJobQueue(path, clock=clock)
    again.startup()
    try:
        assert applied == [1]
        with raw(path) as conn:
            assert conn.execute("SELECT value FROM durabl_meta").fetchone()[0] == str(later)
            columns = {row[1] for row in conn.execute("PRAGMA table_info(durabl_jobs)")}
        assert "tenant" in columns
        assert {j.id for j in again.list_jobs()} == {keyed, plain}
        assert again.enqueue(build_new_job("t", {}, dedupe_key="k")).job_id is None
        assert [h.id for h in again.claim("t", limit=5)] == [keyed, plain]
    finally:
        v2.close()
        again.close()


def test_a_version_1_file_upgrades_and_keeps_its_jobs_and_receipts(
    path: str, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A file written by the first release: its completions left receipt rows, not tokens.
    with monkeypatch.context() as patch:
        patch.setattr(schema, "MIGRATIONS", schema.MIGRATIONS[:1])
        old = SqliteJobQueue(path, clock=clock)
        old.startup()
        old.close()
    token = "release-1-token"
    with raw(path) as conn:  # the rows release 1 wrote: two jobs, one completed
        v1_columns = {r[1] for r in conn.execute("PRAGMA table_info(durabl_jobs)")}
        now = codec.to_ms(clock.now())
        rows = [writes.new_row(build_new_job("t", {"n": n}), now + n) for n in (1, 2)]
        for row in rows:
            row = {k: v for k, v in row.items() if k in v1_columns}
            conn.execute(
                f"INSERT INTO durabl_jobs ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                tuple(row.values()),
            )
        done, waiting = rows[0]["id"], rows[1]["id"]
        conn.execute(
            "UPDATE durabl_jobs SET status = 'completed', attempts = 1, "
            "finished_at = updated_at WHERE id = ?",
            (done,),
        )
        conn.execute(
            "INSERT INTO durabl_receipts (job_id, token, op, result, n) "
            "VALUES (?, ?, 'complete', 'completed', 1)",
            (done, token),
        )
    clock.advance(1)
    new = SqliteJobQueue(path, clock=clock)
    try:
        # A completion repeated across the upgrade is still answered from its receipt.
        assert new.complete(done, token) == "completed"
        assert new.complete(done, "another-token") == JobResult("already-terminal", "completed")
        (later,) = new.claim("t", limit=5)
        assert later.id == waiting and later.data == {"n": 2}
        assert new.complete(later.id, later.claim_token) == "completed"
        assert new.complete(later.id, later.claim_token) == "completed"  # from done_token
        assert new.get_stats("t").completed == 2
        with raw(path) as conn:
            receipts = conn.execute("SELECT count(*) FROM durabl_receipts").fetchone()[0]
        assert receipts == 1  # completions now answer from the row, not a receipt
    finally:
        new.close()


def test_a_failed_migration_leaves_the_file_at_its_old_version(
    path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    SqliteJobQueue(path).startup()
    current = schema.latest_version()

    def broken(conn: sqlite3.Connection) -> None:
        conn.execute("CREATE TABLE half_done (x)")
        conn.execute("THIS IS NOT SQL")

    monkeypatch.setattr(schema, "MIGRATIONS", [*schema.MIGRATIONS, (current + 1, broken)])
    with pytest.raises(DurablError, match=f"migration {current + 1}"):
        SqliteJobQueue(path).startup()
    with raw(path) as conn:
        assert conn.execute("SELECT value FROM durabl_meta").fetchone()[0] == str(current)
        tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master")}
    assert "half_done" not in tables


def test_a_file_written_by_a_newer_durabl_is_refused(path: str) -> None:
    SqliteJobQueue(path).startup()
    with raw(path) as conn:
        conn.execute("UPDATE durabl_meta SET value = '99' WHERE key = 'schema_version'")
    newer = SqliteJobQueue(path)
    with pytest.raises(DurablError, match="newer durabl"):
        newer.startup()
    with pytest.raises(SchemaTooNewError):
        newer.count_jobs()  # every operation starts up first, and refuses too


def test_a_file_that_is_not_a_database_is_a_durabl_error(path: str) -> None:
    Path(path).write_bytes(b"this is not a SQLite file" * 100)
    with pytest.raises(DurablError) as info:
        SqliteJobQueue(path).startup()
    assert isinstance(info.value.__cause__, sqlite3.DatabaseError)


def test_a_file_that_cannot_be_opened_is_unavailable(tmp_path: Path) -> None:
    backend = SqliteJobQueue(tmp_path / "missing-dir" / "jobs.sqlite3")
    with pytest.raises(BackendUnavailableError):
        backend.startup()


# -- connections ------------------------------------------------------------------------------


def test_the_file_is_in_wal_mode_with_the_asked_synchronous(path: str) -> None:
    backend = SqliteJobQueue(path, synchronous="FULL", busy_timeout=7)
    backend.startup()
    with raw(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with backend._db.connection() as conn:
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] == 7000
        assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    backend.close()


def _connection_in_thread(backend: SqliteJobQueue) -> sqlite3.Connection:
    seen: list[sqlite3.Connection] = []

    def use() -> None:
        backend.count_jobs()
        with backend._db.connection() as conn:
            seen.append(conn)

    thread = threading.Thread(target=use)
    thread.start()
    thread.join(10)
    return seen[0]


def test_each_thread_has_its_own_connection(store: SqliteJobQueue) -> None:
    with store._db.connection() as first:
        pass
    with store._db.connection() as again:
        pass
    other = _connection_in_thread(store)
    assert first is again
    assert other is not first


def test_a_finished_threads_connection_is_closed_when_another_opens(
    store: SqliteJobQueue,
) -> None:
    gone = _connection_in_thread(store)
    _connection_in_thread(store)
    with pytest.raises(sqlite3.ProgrammingError):
        gone.execute("SELECT 1")


def test_close_closes_every_threads_connection_and_the_backend_can_reopen(
    store: SqliteJobQueue,
) -> None:
    opened = threading.Event()
    closed = threading.Event()
    results: list[int] = []
    connections: list[sqlite3.Connection] = []

    def worker() -> None:
        store.count_jobs()
        with store._db.connection() as conn:
            connections.append(conn)
        opened.set()
        closed.wait(10)
        results.append(store.count_jobs())  # a fresh connection after close()

    thread = threading.Thread(target=worker)
    thread.start()
    assert opened.wait(10)
    with store._db.connection() as mine:
        pass
    add(store)
    store.close()
    for conn in (mine, connections[0]):
        with pytest.raises(sqlite3.ProgrammingError):
            conn.execute("SELECT 1")
    closed.set()
    thread.join(10)
    assert results == [1]
    assert store.count_jobs() == 1


def test_a_backend_dropped_without_close_closes_its_connections(path: str) -> None:
    backend = SqliteJobQueue(path)
    backend.startup()
    with backend._db.connection() as conn:
        pass
    del backend
    gc.collect()
    with pytest.raises(sqlite3.ProgrammingError):
        conn.execute("SELECT 1")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_opens_its_own_connection_and_leaves_the_parents_alone(
    store: SqliteJobQueue,
) -> None:
    add(store, data={"who": "parent"})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads (3.12+)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child process
        code = 1
        try:
            add(store, data={"who": "child"})
            store.close()
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert sorted(j.data["who"] for j in store.list_jobs()) == ["child", "parent"]


# -- payload codec ----------------------------------------------------------------------------

_text = st.text(st.characters(exclude_categories=["Cs"]), max_size=12)
_keys = st.one_of(
    _text.filter(lambda k: "\x00" not in k),
    st.sampled_from(["$b", "$d", "$f", "$o", "$", "$x", "", "a.b", "$o.x"]),
)
_offsets = st.builds(
    lambda minutes: timezone(timedelta(minutes=minutes)), st.integers(-23 * 60, 23 * 60)
)
_datetimes = st.datetimes(
    min_value=datetime(1900, 1, 1),
    max_value=datetime(2200, 1, 1),
    timezones=st.one_of(st.none(), st.just(timezone.utc), _offsets),
)
_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(INT64_MIN, INT64_MAX),
    st.floats(),
    _text,
    st.binary(max_size=16),
    _datetimes,
)
portable = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(_keys, children, max_size=4),
    ),
    max_leaves=16,
)


def expected(value: Any) -> Any:
    """What a BSON round trip gives back for a portable value."""
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        value = value.astimezone(timezone.utc)
        return value.replace(microsecond=value.microsecond // 1000 * 1000)
    if isinstance(value, dict):
        return {k: expected(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [expected(v) for v in value]
    return value


def same(got: Any, want: Any) -> bool:
    """Equal with the same kinds all the way down: True is not 1, 1.0 is not 1, nan is nan,
    -0.0 is not 0.0, dict keys in the same order, datetimes aware UTC."""
    if isinstance(want, bool) or want is None:
        return got is want
    if isinstance(want, float):
        if not isinstance(got, float):
            return False
        if math.isnan(want):
            return math.isnan(got)
        return got == want and math.copysign(1, got) == math.copysign(1, want)
    if isinstance(want, int):
        return isinstance(got, int) and not isinstance(got, bool) and got == want
    if isinstance(want, datetime):
        return isinstance(got, datetime) and got == want and got.utcoffset() == timedelta(0)
    if isinstance(want, dict):
        return (
            isinstance(got, dict)
            and list(got) == list(want)
            and all(same(got[k], want[k]) for k in want)
        )
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(same(g, w) for g, w in zip(got, want, strict=True))
        )
    return type(got) is type(want) and got == want


@settings(max_examples=300, deadline=None, database=None)
@given(portable)
def test_codec_round_trips_every_portable_value(value: Any) -> None:
    text = codec.encode_payload(value)
    json.loads(text, parse_constant=lambda name: pytest.fail(f"non-standard JSON {name}"))
    assert same(codec.decode_payload(text), expected(value))


@pytest.fixture(scope="module")
def pair(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, Any]]:
    sqlite_store = SqliteJobQueue(tmp_path_factory.mktemp("pair") / "jobs.sqlite3")
    mongo_store = make_mongomock_backend()
    sqlite_store.startup()
    mongo_store.startup()
    yield sqlite_store, mongo_store
    sqlite_store.close()
    mongo_store.close()


@settings(max_examples=150, deadline=None, database=None)
@given(portable)
def test_a_payload_comes_back_from_sqlite_as_from_mongomock(
    pair: tuple[SqliteJobQueue, MongoJobQueue], value: Any
) -> None:
    back = []
    for backend in pair:
        job_id = backend.enqueue(build_new_job("t", value)).job_id
        assert job_id is not None
        job = backend.get_job(job_id)
        assert job is not None
        back.append(job.data)
    from_sqlite, from_mongo = back
    assert same(from_sqlite, expected(value))
    assert same(from_mongo, expected(value))


def test_user_dicts_that_look_like_tags_come_back_unchanged(store: SqliteJobQueue) -> None:
    tricky = {
        "$b": "not bytes",
        "nested": {"$d": 5},
        "list": [{"$o": {"$f": "nan"}}, {"$f": "inf"}],
        "plain": {"b": b"\x00", "d": datetime(2031, 1, 1, tzinfo=timezone.utc)},
    }
    job = store.get_job(add(store, data=tricky))
    assert job is not None and same(job.data, tricky)


def test_naive_datetimes_are_taken_as_utc(store: SqliteJobQueue) -> None:
    job = store.get_job(add(store, data={"at": datetime(2031, 1, 2, 3, 4, 5, 678999)}))
    assert job is not None
    assert job.data["at"] == datetime(2031, 1, 2, 3, 4, 5, 678000, tzinfo=timezone.utc)


def test_a_datetime_with_no_utc_equivalent_is_a_type_error_and_nothing_is_stored(
    store: SqliteJobQueue,
) -> None:
    edge = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=2)))  # before year 1 in UTC
    with pytest.raises(TypeError):
        store.enqueue(build_new_job("t", {"at": edge}))
    assert store.count_jobs() == 0


# -- claiming ---------------------------------------------------------------------------------


def test_a_batch_claim_is_one_statement_and_returns_claim_order(
    store: SqliteJobQueue, clock: FakeClock
) -> None:
    ids = {p: add(store, data={"p": p}, priority=p) for p in (5, -1, 3, 0, 9, 2)}
    clock.advance(1)
    statements: list[str] = []
    with store._db.connection() as conn:
        conn.set_trace_callback(statements.append)
    try:
        handles = store.claim("t", limit=4, lease_owner="me")
    finally:
        with store._db.connection() as conn:
            conn.set_trace_callback(None)
    assert [h.id for h in handles] == [ids[p] for p in (-1, 0, 2, 3)]
    assert len({h.claim_token for h in handles}) == 4
    # A read finds that something is due; then one write transaction, one UPDATE.
    begin = statements.index("BEGIN IMMEDIATE")
    assert all(
        s.lstrip().upper().startswith(("BEGIN", "SELECT", "COMMIT")) for s in statements[:begin]
    )
    # (The claim reads the type's rate limit first: flow control, durabl.model.flow.)
    after = [s for s in statements[begin + 1 :] if "durabl_rate_limits" not in s]
    assert [s for s in statements if "UPDATE" in s.upper()] == [after[0]]
    assert statements[-1] == "COMMIT"


def test_an_idle_claim_never_takes_the_write_lock(store: SqliteJobQueue, clock: FakeClock) -> None:
    add(store, delay=60)  # pending, not due
    statements: list[str] = []
    with store._db.connection() as conn:
        conn.set_trace_callback(statements.append)
    try:
        assert store.claim("t", limit=4) == []
    finally:
        with store._db.connection() as conn:
            conn.set_trace_callback(None)
    assert "BEGIN IMMEDIATE" not in statements
    assert not [s for s in statements if "UPDATE" in s.upper()]


def test_a_claimed_handle_carries_the_jobs_earlier_logs(
    store: SqliteJobQueue, clock: FakeClock
) -> None:
    add(store, max_attempts=3)
    first = store.claim("t")[0]
    first.log("first try")
    assert first.fail("x", retry_at=clock.now()) == "retry-scheduled"
    (second,) = store.claim("t")
    assert [e.message for e in second.logs] == ["first try"]


def test_two_objects_on_one_file_share_dedupe_and_scope_checks(path: str, clock: FakeClock) -> None:
    first, second = SqliteJobQueue(path, clock=clock), SqliteJobQueue(path, clock=clock)
    try:
        add(first, dedupe_key="k")
        assert second.enqueue(build_new_job("t", {}, dedupe_key="k")).job_id is None
        with pytest.raises(DedupeScopeConflictError):
            second.enqueue(build_new_job("t", {}, dedupe_key="k", dedupe_scope="pending"))
        (handle,) = second.claim("t")
        assert first.complete(handle.id, handle.claim_token) == "completed"
        assert second.complete(handle.id, handle.claim_token) == "completed"  # its receipt
    finally:
        first.close()
        second.close()


def test_receipts_are_bounded_per_job(store: SqliteJobQueue) -> None:
    job_id = add(store, max_attempts=3)
    for _ in range(RECEIPTS_KEPT + 5):
        (handle,) = store.claim("t")
        assert handle.release() == "released"
    with raw(store.path) as conn:
        kept = conn.execute("SELECT count(*) FROM durabl_receipts WHERE job_id = ?", (job_id,))
        assert kept.fetchone()[0] == RECEIPTS_KEPT
    assert handle.release() == "released"  # the newest receipt is still there


def test_deleting_a_job_deletes_its_logs_and_receipts(store: SqliteJobQueue) -> None:
    job_id = add(store)
    (handle,) = store.claim("t")
    handle.log("hello")
    assert handle.release() == "released"  # a release leaves a receipt row
    (handle,) = store.claim("t")
    assert handle.complete() == "completed"
    with raw(store.path) as conn:
        assert conn.execute("SELECT count(*) FROM durabl_receipts").fetchone()[0] == 1
    assert store.delete(job_id)
    with raw(store.path) as conn:
        for table in ("durabl_logs", "durabl_receipts"):
            assert conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0] == 0


def test_search_takes_like_wildcards_literally_and_is_case_sensitive(
    store: SqliteJobQueue,
) -> None:
    percent = add(store, dedupe_key="50%_off")
    add(store, dedupe_key="50xyoff")
    add(store, dedupe_key="User:1")
    assert [j.id for j in store.list_jobs(search="50%_")] == [percent]
    assert store.count_jobs(search="%") == 0
    assert store.count_jobs(search="user:") == 0
    assert store.count_jobs(search="User:") == 1


# -- locks ------------------------------------------------------------------------------------


def test_a_write_waits_for_another_connections_write_lock(path: str) -> None:
    backend = SqliteJobQueue(path, busy_timeout=10)
    backend.startup()
    other = raw(path)
    other.execute("BEGIN IMMEDIATE")
    timer = threading.Timer(0.3, lambda: other.execute("COMMIT"))
    started = time.monotonic()
    timer.start()
    try:
        job_id = add(backend)
    finally:
        timer.join()
        other.close()
    assert time.monotonic() - started >= 0.25
    assert backend.get_job(job_id) is not None
    backend.close()


def test_a_lock_held_past_the_busy_timeout_is_unavailable_and_writes_nothing(path: str) -> None:
    backend = SqliteJobQueue(path, busy_timeout=0.05)
    backend.startup()
    add(backend)
    (handle,) = backend.claim("t")
    other = raw(path)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(BackendUnavailableError) as info:
            add(backend)
        assert isinstance(info.value.__cause__, sqlite3.OperationalError)
        started = time.monotonic()
        with pytest.raises(BackendUnavailableError):
            handle.release(timeout=0.2)
        assert time.monotonic() - started < 2.0
        assert backend.count_jobs() == 1  # reads go on in WAL mode
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert handle.release(timeout=0.2) == "released"
    backend.close()


# -- racing claims ----------------------------------------------------------------------------


def test_eight_threads_on_two_objects_claim_each_job_exactly_once(path: str) -> None:
    backends = [SqliteJobQueue(path), SqliteJobQueue(path)]
    ids = {add(backends[0], data={"n": n}) for n in range(300)}
    claimed: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(n: int) -> None:
        backend = backends[n % 2]
        try:
            while True:
                handles = backend.claim("t", limit=1 + n % 4, lease_owner=f"thread-{n}")
                if not handles:
                    if backend.count_jobs(status="pending") == 0:
                        return
                    continue
                for handle in handles:
                    assert handle.complete() == "completed"
                with lock:
                    claimed.extend(h.id for h in handles)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    counts = Counter(claimed)
    assert set(counts) == ids
    assert set(counts.values()) == {1}
    assert backends[1].count_jobs(status="completed") == 300
    for backend in backends:
        backend.close()


WORKER_SCRIPT = """
import sys
from durabl import SqliteJobQueue

backend = SqliteJobQueue(sys.argv[1])
backend.startup()
print("ready", flush=True)
sys.stdin.readline()  # start together
while True:
    handles = backend.claim("t", limit=7, lease_owner=sys.argv[2])
    if not handles:
        if backend.count_jobs(status="pending") == 0:
            break
        continue
    for handle in handles:
        result = handle.complete()
        assert result == "completed", result
        print(handle.id)
backend.close()
"""


def test_three_processes_complete_each_job_exactly_once(path: str) -> None:
    producer = SqliteJobQueue(path)
    ids = {add(producer, data={"n": n}) for n in range(300)}
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER_SCRIPT, path, f"process-{n}"],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(3)
    ]
    for worker in workers:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "ready"
    for worker in workers:
        assert worker.stdin is not None
        worker.stdin.write("go\n")
        worker.stdin.flush()
    completions: Counter[str] = Counter()
    per_process = []
    for worker in workers:
        out, err = worker.communicate(timeout=90)
        assert worker.returncode == 0, err
        completions.update(out.split())
        per_process.append(len(out.split()))
    print("completions per process:", per_process)
    assert set(completions) == ids
    assert set(completions.values()) == {1}
    assert producer.count_jobs(status="completed") == 300
    producer.close()


def test_a_job_queue_runs_jobs_on_worker_threads(path: str) -> None:
    backend = SqliteJobQueue(path)
    queue = JobQueue(backend, visibility_timeout=30)
    seen: list[int] = []

    def handler(job: Job[Any], ctx: JobContext) -> None:
        ctx.log(f"job {job.data['n']}")
        seen.append(job.data["n"])

    try:
        for n in range(40):
            queue.enqueue("t", {"n": n})
        queue.process("t", handler, concurrency=4, poll_interval=0.05)
        assert wait_until(lambda: backend.count_jobs(status="completed") == 40, timeout=30)
    finally:
        queue.shutdown(5)
        backend.close()
    assert sorted(seen) == list(range(40))
    done = backend.list_jobs(status="completed", limit=1)[0]
    assert [e.message for e in done.logs] == [f"job {done.data['n']}"]
