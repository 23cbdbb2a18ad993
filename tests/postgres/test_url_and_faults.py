"""URLs of the PostgreSQL store, and what a caller sees when the server is out of reach:
one BackendUnavailableError line, within 10 s, without the password."""

from __future__ import annotations

import time
import uuid
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg_pool import ConnectionPool

from durabl import BackendUnavailableError
from durabl.stores.postgres import PostgresJobQueue
from durabl.stores.postgres.connection import parse_url, redact_url
from tests.contract.support import enqueue_id


def test_from_url_reads_the_store_options_and_passes_the_rest_to_libpq() -> None:
    store = PostgresJobQueue.from_url(
        "postgres://app:pw@db1:5433/app?table=jobs_a&prepare_threshold=none&sslmode=disable"
    )
    assert store.table == "jobs_a"
    conninfo, options = parse_url(store.url or "")
    params = psycopg.conninfo.conninfo_to_dict(conninfo)
    assert params["host"] == "db1" and params["port"] == "5433" and params["dbname"] == "app"
    assert params["sslmode"] == "disable" and params["connect_timeout"] == "5"
    assert "table" not in params and options["prepare_threshold"] == "none"
    assert "pw" not in repr(store)


def test_the_constructor_reads_the_urls_store_options_unless_a_keyword_says_otherwise() -> None:
    url = "postgresql://app@db1/app?listen_notify=false&safety_poll_interval=2.5"
    store = PostgresJobQueue(url)
    assert (store.listen_notify, store.safety_poll_interval) == (False, 2.5)
    chosen = PostgresJobQueue(url, safety_poll_interval=7.0)
    assert (chosen.listen_notify, chosen.safety_poll_interval) == (False, 7.0)
    with pytest.raises(ValueError, match="listen_notify"):
        PostgresJobQueue("postgresql://app@db1/app?listen_notify=maybe")


def test_connect_timeout_is_taken_like_every_store_and_the_url_wins() -> None:
    def timeout_of(store: PostgresJobQueue) -> str:
        conninfo, _ = parse_url(store.url or "")
        return psycopg.conninfo.conninfo_to_dict(conninfo)["connect_timeout"]

    assert timeout_of(PostgresJobQueue.from_url("postgresql://h/db", connect_timeout=7.2)) == "8"
    assert timeout_of(PostgresJobQueue.from_url("postgresql://h/db", connect_timeout=0.5)) == "2"
    given = PostgresJobQueue.from_url("postgresql://h/db?connect_timeout=9", connect_timeout=3)
    assert timeout_of(given) == "9"
    with pytest.raises(ValueError, match="connect_timeout"):
        PostgresJobQueue.from_url("postgresql://h/db", connect_timeout=0)


@pytest.mark.parametrize(
    "url", ["mysql://h/db", "postgresql://h:notaport/db", "postgresql://h/db#frag", "nourl"]
)
def test_a_malformed_url_is_a_value_error(url: str) -> None:
    with pytest.raises(ValueError):
        PostgresJobQueue(url)


def test_a_bad_store_option_in_the_url_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="pool_max_size"):
        PostgresJobQueue.from_url("postgresql://h/db?pool_max_size=many")
    with pytest.raises(ValueError, match="no options"):
        PostgresJobQueue.from_url("postgresql://h/db", collection="x")


def test_url_or_pool_but_not_both() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        PostgresJobQueue()


def test_redact_url_hides_only_the_password() -> None:
    assert redact_url("postgresql://u:s3cret@h:5/db") == "postgresql://u:***@h:5/db"
    assert redact_url("postgresql://u@h/db") == "postgresql://u@h/db"


def unavailable(url: str) -> str:
    store = PostgresJobQueue(url, table="durabl_t_unreachable")
    started = time.monotonic()
    try:
        with pytest.raises(BackendUnavailableError) as info:
            store.startup()
    finally:
        store.close()
    assert time.monotonic() - started < 10
    message = str(info.value)
    assert "\n" not in message and "s3cret" not in message
    return message


def test_a_refused_connection_is_one_clear_line_within_10_s() -> None:
    message = unavailable("postgresql://postgres:s3cret@127.0.0.1:1/test")
    assert "PostgreSQL unavailable at postgresql://postgres:***@127.0.0.1:1/test" in message
    assert "refused" in message.lower()


def test_an_unroutable_host_gives_up_within_10_s() -> None:
    # 10.255.255.1 swallows packets: libpq's connect timeout (here 2 s) ends the wait.
    unavailable("postgresql://postgres:s3cret@10.255.255.1:5432/test?connect_timeout=2")


def with_path(url: str, user: str | None = None, database: str | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc
    if user is not None:
        netloc = f"{user}@{netloc.rpartition('@')[2]}"
    return urlunsplit(parts._replace(netloc=netloc, path=f"/{database or parts.path[1:]}"))


def test_a_missing_database_is_one_clear_line(pg_url: str) -> None:
    message = unavailable(with_path(pg_url, database="durabl_no_such_db"))
    assert "durabl_no_such_db" in message and "does not exist" in message


def test_a_missing_permission_is_backend_unavailable(pg_url: str) -> None:
    role = "durabl_test_reader"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        if not exists:
            conn.execute(f"CREATE ROLE {role} LOGIN")  # type: ignore[arg-type]
        conn.execute(f"REVOKE CREATE ON SCHEMA public FROM {role}")  # type: ignore[arg-type]
    message = unavailable(with_path(pg_url, user=role))
    assert "permission denied" in message


def test_a_callers_pool_is_used_and_left_open(pg_url: str) -> None:
    pool: ConnectionPool[psycopg.Connection[tuple[object, ...]]] = ConnectionPool(
        pg_url, min_size=1, max_size=2, kwargs={"autocommit": True}, open=True
    )
    table = "durabl_t_callerpool"
    store = PostgresJobQueue(pool=pool, table=table)
    try:
        job_id = enqueue_id(store)
        assert store.claim("t")[0].id == job_id
        store.close()
        assert not pool.closed
    finally:
        from tests.conftest import drop_postgres_tables

        drop_postgres_tables(table)
        pool.close()


def test_a_dropped_connection_is_retried_and_nothing_is_applied_twice(pg_url: str) -> None:
    from tests.conftest import drop_postgres_tables

    name = f"durabl_kill_{uuid.uuid4().hex[:8]}"
    store = PostgresJobQueue(f"{pg_url}?application_name={name}", table=f"durabl_t_{name[12:]}")
    try:
        store.startup()
        job_id = enqueue_id(store)
        handle = store.claim("t")[0]
        # Kill every server connection of this store's pool: the next operation finds its
        # pooled connection dead and runs again on a fresh one.
        with psycopg.connect(pg_url, autocommit=True) as conn:
            killed = conn.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE application_name = %s",
                (name,),
            ).fetchone()
        assert killed is not None and killed[0] >= 1
        assert store.heartbeat(handle.id, handle.claim_token) == "applied"
        assert store.complete(handle.id, handle.claim_token) == "completed"
        assert store.complete(handle.id, handle.claim_token) == "completed"  # its receipt
        job = store.get_job(job_id)
        assert job is not None and job.status == "completed" and job.attempts == 1
    finally:
        store.close()
        drop_postgres_tables(store.table)
