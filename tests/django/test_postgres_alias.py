"""``DURABL = {"URL": "django://<alias>"}``: the PostgreSQL store on a Django database alias.
Enqueues made in Django code go through Django's own connection, so ``transaction.atomic``
covers them (commit: the job; rollback: none), while the store's pool serves everything
else; an alias that is unknown or not PostgreSQL is the check error ``durabl.E011``.

The alias is ``durabl_pg`` of the test settings, on the real server's database (no test
database is created for it), each test on tables of its own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction

import durabl
import durabl_django
from durabl import Job, JobContext, JobQueue
from durabl_django.database import postgres_url
from tests.conftest import drop_postgres_tables, postgres_table, require_postgres
from tests.conftest import postgres_url as server_url

ALIAS = "durabl_pg"


def durabl_check_ids() -> list[str]:
    return [
        m.id or "" for m in checks.run_checks(tags=["durabl"]) if (m.id or "").startswith("durabl.")
    ]


@pytest.fixture
def pg_queue(settings: Any, django_db_blocker: Any) -> Iterator[JobQueue]:
    """The default queue on ``django://durabl_pg`` (tables of its own), with database
    access to that alias allowed."""
    require_postgres()
    server = urlsplit(server_url())  # the throwaway server's, where one was started
    connections.settings[ALIAS].update(
        {
            "HOST": server.hostname or "",
            "PORT": str(server.port or ""),
            "USER": server.username or "",
        }
    )
    table = postgres_table()
    settings.DURABL = {"URL": f"django://{ALIAS}?table={table}&listen_notify=false"}
    with django_db_blocker.unblock():
        queue = durabl_django.get_queue()
        queue.register("t", lambda job, ctx: None)
        try:
            yield queue
        finally:
            connections[ALIAS].close()
            queue.backend.close()
            drop_postgres_tables(table)


def pending(queue: JobQueue) -> list[Any]:
    return [job.data for job in queue.list_jobs(status="pending")]


def test_a_committed_atomic_block_stores_the_job(pg_queue: JobQueue) -> None:
    with transaction.atomic(using=ALIAS):
        job_id = durabl_django.enqueue("t", {"n": 1})
        assert job_id is not None
        assert pending(pg_queue) == []  # the store's pool cannot see it yet
    assert pending(pg_queue) == [{"n": 1}]


def test_a_rolled_back_atomic_block_leaves_no_job(pg_queue: JobQueue) -> None:
    with pytest.raises(RuntimeError), transaction.atomic(using=ALIAS):
        durabl.get_default_queue().enqueue("t", {"n": 1})
        raise RuntimeError("the view failed")
    assert pending(pg_queue) == []
    assert pg_queue.run_pending("t") == 0


def test_a_rolled_back_savepoint_drops_only_its_own_jobs(pg_queue: JobQueue) -> None:
    with transaction.atomic(using=ALIAS):
        durabl_django.enqueue("t", {"n": "outer"})
        with pytest.raises(RuntimeError), transaction.atomic(using=ALIAS):
            durabl_django.enqueue("t", {"n": "inner"})
            raise RuntimeError("roll back the savepoint")
    assert pending(pg_queue) == [{"n": "outer"}]


def test_outside_a_transaction_the_job_is_stored_at_once(pg_queue: JobQueue) -> None:
    durabl_django.enqueue("t", {"n": 1})
    assert pending(pg_queue) == [{"n": 1}]


def test_a_worker_runs_the_job_after_the_commit(pg_queue: JobQueue) -> None:
    ran: list[Any] = []

    def handler(job: Job[Any], ctx: JobContext) -> None:
        ran.append(job.data)

    pg_queue.register("work", handler)
    with transaction.atomic(using=ALIAS):
        durabl_django.enqueue("work", {"n": 1})
        assert pg_queue.run_pending("work") == 0
    assert pg_queue.run_pending("work") == 1
    assert ran == [{"n": 1}]


def test_a_dedupe_conflict_inside_atomic_leaves_the_block_usable(pg_queue: JobQueue) -> None:
    first = durabl_django.enqueue("t", {}, dedupe_key="k")
    with transaction.atomic(using=ALIAS):
        assert durabl_django.enqueue("t", {}, dedupe_key="k") is None
        with connections[ALIAS].cursor() as cursor:
            cursor.execute("SELECT 1")
            assert cursor.fetchone() == (1,)
        second = durabl_django.enqueue("t", {}, dedupe_key="k2")
    assert sorted(j.id for j in pg_queue.list_jobs()) == sorted([first, second])


def test_the_store_keeps_a_pool_of_its_own(pg_queue: JobQueue) -> None:
    durabl_django.enqueue("t", {})
    django_conn = connections[ALIAS].connection
    with transaction.atomic(using=ALIAS):
        durabl_django.enqueue("t", {})
        # A read through the store's pool does not use (or disturb) Django's connection.
        assert pg_queue.count_jobs() == 1
        assert django_conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
    assert pg_queue.count_jobs() == 2


def test_the_alias_settings_become_the_stores_url(settings: Any) -> None:
    saved = dict(connections.settings[ALIAS])
    connections.settings[ALIAS].update(
        {"HOST": "/var/run/postgresql", "PORT": "6543", "USER": "app", "PASSWORD": "s3cr:t/@"}
    )
    connections.settings[ALIAS]["OPTIONS"] = {"sslmode": "prefer"}
    try:
        url = postgres_url(ALIAS, [("table", "jobs")], connect_timeout=3)
    finally:
        connections.settings[ALIAS].clear()
        connections.settings[ALIAS].update(saved)
    info = psycopg.conninfo.conninfo_to_dict(url.split("?", 1)[0])
    assert info == {
        "host": "/var/run/postgresql",
        "port": "6543",
        "user": "app",
        "password": "s3cr:t/@",
        "dbname": saved["NAME"],
    }
    query = dict(p.split("=", 1) for p in url.split("?", 1)[1].split("&"))
    assert query["sslmode"] == "prefer" and query["connect_timeout"] == "3"
    assert query["table"] == "jobs" and query["prepare_threshold"] == "none"
    settings.DURABL = {"URL": f"django://{ALIAS}"}
    backend = durabl_django.get_queue().backend
    assert "s3cr" not in repr(backend)


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("django://default", "django.db.backends.sqlite3"),
        ("django://nosuch", "does not define"),
        ("django://", "names one database alias"),
    ],
)
def test_an_alias_that_is_not_postgresql_is_a_check_error(
    settings: Any, url: str, named: str
) -> None:
    settings.DURABL = {"URL": url}
    found = [m for m in checks.run_checks(tags=["durabl"]) if m.id == "durabl.E011"]
    assert len(found) == 1 and named in found[0].msg
    assert durabl_check_ids() == ["durabl.E011"]
    with pytest.raises(ImproperlyConfigured, match=named):
        durabl_django.enqueue("t", {})


def test_a_postgresql_alias_passes_the_checks(settings: Any) -> None:
    settings.DURABL = {"URL": f"django://{ALIAS}?table=durabl_checked"}
    assert durabl_check_ids() == []
