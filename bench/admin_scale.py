"""The admin at scale: fill a SQLite store with many jobs, then time the store queries the
admin makes and each admin page (through Django's test client), median of several runs.

    .venv/bin/python bench/admin_scale.py                 # 1,000,000 jobs (fill cached in /tmp)
    .venv/bin/python bench/admin_scale.py --jobs 20000    # a quick run
    .venv/bin/python bench/admin_scale.py --bar 200 --repeat 5 --refill

Exits 1 when a page's median is over ``--bar`` ms. The filled file is kept under /tmp
(named by the job count) so a rerun skips the fill; ``--refill`` rebuilds it. The file has
no statistics (``sqlite_stat1``), as an application's own file seldom has: the query
plans must not need them. ``--analyze`` runs ``ANALYZE`` after the fill (a file of its own).
``--postgres URL`` fills (by COPY, once) and times a table ``durabl_admin_scale_<jobs>`` in
that database instead.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import random
import sqlite3
import statistics
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TYPES = ("email", "report", "webhook", "thumbnail", "billing")
# status, share of the jobs
MIX = (
    ("completed", 0.80),
    ("failed", 0.06),
    ("pending", 0.10),
    ("active", 0.01),
    ("cancelled", 0.03),
)
KINDS = ("retries-exhausted", "fatal", "stalled", "interrupted")
SPAN_MS = 7 * 24 * 3600 * 1000  # timestamps over the last week
BATCH = 50_000


COLUMNS = (
    "id, type, data, status, priority, run_at, attempts, max_attempts, dedupe_key, "
    "created_at, updated_at, finished_at, fail_reason, failure_kind, backoff, "
    "backoff_delay, backoff_max_delay, lease_owner, heartbeat_at, claimed_at"
)
INSTANTS = (5, 9, 10, 11, 18, 19)  # the columns above that hold epoch milliseconds


def job_rows(jobs: int) -> Iterator[list[tuple[Any, ...]]]:
    """``jobs`` rows of a realistic mix (instants in epoch ms), in batches of BATCH."""
    rng = random.Random(17)
    now_ms = int(time.time() * 1000)
    statuses = [s for s, _ in MIX]
    weights = [w for _, w in MIX]
    made = 0
    while made < jobs:
        rows = []
        for _ in range(min(BATCH, jobs - made)):
            made += 1
            created = now_ms - int(SPAN_MS * (1 - made / jobs)) - rng.randint(0, 60_000)
            status = rng.choices(statuses, weights)[0]
            updated = min(now_ms, created + rng.randint(10, 120_000))
            finished = updated if status in ("completed", "failed", "cancelled") else None
            failed = status == "failed"
            active = status == "active"
            rows.append(
                (
                    uuid.UUID(int=rng.getrandbits(128)).hex,
                    rng.choice(TYPES),
                    json.dumps({"n": made}),
                    status,
                    rng.choice((0, 0, 0, 10)),
                    created,
                    rng.randint(1, 3) if status != "pending" else 0,
                    3,
                    f"key-{made}" if made % 4 == 0 else None,
                    created,
                    updated,
                    finished,
                    f"ValueError: bad row {made}\nTraceback ..." if failed else None,
                    rng.choice(KINDS) if failed else None,
                    "exponential",
                    1.0,
                    300.0,
                    "bench-worker" if active else None,
                    updated if active else None,
                    updated if active else None,
                )
            )
        yield rows


def fill_sqlite(path: Path, jobs: int, analyze: bool) -> None:
    """``jobs`` rows of a realistic mix, written with executemany in big transactions."""
    from durabl.stores.sqlite import SqliteJobQueue

    path.unlink(missing_ok=True)
    store = SqliteJobQueue(str(path))
    store.startup()
    store.close()
    conn = sqlite3.connect(path)
    insert = f"INSERT INTO durabl_jobs ({COLUMNS}) VALUES ({', '.join('?' * 20)})"
    for rows in job_rows(jobs):
        with conn:
            conn.executemany(insert, rows)
    if analyze:
        conn.execute("ANALYZE")
    conn.close()


def postgres_filled(url: str, table: str, jobs: int) -> bool:
    import psycopg

    with psycopg.connect(url) as conn:
        found = conn.execute("SELECT to_regclass(%s)", (table,)).fetchone()
        if found is None or found[0] is None:
            return False
        row = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        return row is not None and row[0] == jobs


def fill_postgres(url: str, table: str, jobs: int) -> None:
    """The same rows as :func:`fill_sqlite`, by COPY into a table of their own."""
    from datetime import datetime, timezone

    import psycopg

    from durabl.stores.postgres import PostgresJobQueue

    with psycopg.connect(url, autocommit=True) as conn:
        # The jobs table and every table named after it (logs, receipts, meta, ...).
        names = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND (tablename = %s OR tablename LIKE %s)",
            (table, table + "\\_%"),
        ).fetchall()
        for (name,) in names:
            conn.execute(f'DROP TABLE IF EXISTS "{name}" CASCADE')
    store = PostgresJobQueue(f"{url}?table={table}")
    store.startup()
    store.close()

    def instant(ms: int | None) -> datetime | None:
        return None if ms is None else datetime.fromtimestamp(ms / 1000, timezone.utc)

    with psycopg.connect(url) as conn:
        with conn.cursor() as cur, cur.copy(f"COPY {table} ({COLUMNS}) FROM STDIN") as copy:
            for rows in job_rows(jobs):
                for row in rows:
                    values = list(row)
                    for n in INSTANTS:
                        values[n] = instant(values[n])
                    copy.write_row(values)
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"VACUUM ANALYZE {table}")


def median_ms(action: Callable[[], Any], repeat: int) -> float:
    action()  # warm the caches once
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def setup_django(url: str) -> Any:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django.settings")
    os.environ["DURABL_TEST_URL"] = url  # read by the test settings at import
    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from django.test import Client

    call_command("migrate", verbosity=0, run_syncdb=True)
    user = User.objects.create_superuser("bench", "bench@example.com", "x")
    client = Client()
    client.force_login(user)
    return client


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--bar", type=float, default=200.0, help="ms a page may take")
    parser.add_argument("--refill", action="store_true")
    parser.add_argument("--analyze", action="store_true", help="SQLite: ANALYZE after the fill")
    parser.add_argument(
        "--postgres",
        metavar="URL",
        help="fill and time a PostgreSQL table instead (e.g. postgresql://postgres@127.0.0.1/test)",
    )
    args = parser.parse_args()

    start = time.perf_counter()
    if args.postgres:
        from durabl.stores.postgres import PostgresJobQueue

        table = f"durabl_admin_scale_{args.jobs}"
        if args.refill or not postgres_filled(args.postgres, table, args.jobs):
            fill_postgres(args.postgres, table, args.jobs)
            print(f"filled {args.jobs:,} jobs in {time.perf_counter() - start:.1f} s: {table}")
        url = f"{args.postgres}?table={table}"
        store: Any = PostgresJobQueue(url)
        name = "PostgreSQL"
    else:
        from durabl.stores.sqlite import SqliteJobQueue, schema

        # One file per schema version: a file migrated by newer code is refused by older.
        stats = "_stats" if args.analyze else ""
        version = schema.latest_version()
        path = Path(f"/tmp/durabl_admin_scale_{args.jobs}_v{version}{stats}.sqlite3")
        if args.refill or not path.exists():
            fill_sqlite(path, args.jobs, args.analyze)
            print(f"filled {args.jobs:,} jobs in {time.perf_counter() - start:.1f} s: {path}")
        url = f"sqlite:///{path}"
        store = SqliteJobQueue(str(path))
        name = "SQLite" + (" (ANALYZEd)" if args.analyze else " (no statistics)")
    store.startup()  # applies new migrations (indexes) to a cached file
    job_id = store.list_jobs(status="failed", limit=1)[0].id
    queries: list[tuple[str, Callable[[], Any]]] = []
    for status in ("pending", "active", "completed", "failed", "cancelled"):
        queries.append(
            (
                f"list_jobs(status={status}, limit=50)",
                lambda s=status: store.list_jobs(status=s, limit=50),
            )
        )
        queries.append(
            (f"count_jobs(status={status})", lambda s=status: store.count_jobs(status=s))
        )
    queries += [
        (
            "list_jobs(failed, order=-updated_at)",
            lambda: store.list_jobs(status="failed", order="-updated_at", limit=50),
        ),
        (
            "list_jobs(completed, order=finished_at)",
            lambda: store.list_jobs(status="completed", order="finished_at", limit=50),
        ),
        (
            "list_jobs(pending, order=run_at)",
            lambda: store.list_jobs(status="pending", order="run_at", limit=50),
        ),
        (
            "list_jobs(pending, order=-run_at)",
            lambda: store.list_jobs(status="pending", order="-run_at", limit=50),
        ),
        (
            "list_jobs(failed, type=email)",
            lambda: store.list_jobs(status="failed", type="email", limit=50),
        ),
        ("get_stats(None)", lambda: store.get_stats(None)),
        ("get_stats(email)", lambda: store.get_stats("email")),
        ("get_job", lambda: store.get_job(job_id)),
    ]
    if "among_newest" in inspect.signature(store.list_jobs).parameters:  # (A/B runs)
        queries.append(
            (
                "list_jobs(completed, order=type, among 50k)",
                lambda: store.list_jobs(
                    status="completed", order="type", limit=50, among_newest=50_000
                ),
            )
        )
    if hasattr(store, "read_activity"):  # absent before the overview's reads (A/B runs)
        from durabl.model.activity import ActivityWindow

        queries[-1:-1] = [
            ("stats_by_type()", store.stats_by_type),
            (
                "read_activity(last hour, every type)",
                lambda: store.read_activity(ActivityWindow(store.now()), store.job_types()),
            ),
        ]
    print(f"\n{name}, {args.jobs:,} jobs, median of {args.repeat}")
    print(f"{'store query':<44} {'ms':>9}")
    for label, action in queries:
        print(f"{label:<44} {median_ms(action, args.repeat):9.1f}")
    store.close()

    client = setup_django(url)
    pages = [("overview", "/admin/durabl_django/queueoverview/")]
    for status, model in (
        ("failed", "job"),
        ("pending", "pendingjob"),
        ("active", "activejob"),
        ("completed", "completedjob"),
        ("cancelled", "cancelledjob"),
    ):
        pages.append((f"{status} list", f"/admin/durabl_django/{model}/"))
    from django.urls import reverse

    pages.append(("job page", reverse("admin:durabl_django_job_detail", args=[job_id])))
    # What a user does on a long list: search it (an id prefix, one broad character, error
    # text), sort it by a column, narrow it to a date range.
    pages += [
        ("completed list, search id prefix", f"/admin/durabl_django/completedjob/?q={job_id[:4]}"),
        ("completed list, search 1 character", "/admin/durabl_django/completedjob/?q=a"),
        ("failed list, search error text", "/admin/durabl_django/job/?q=bad+row+4242"),
        ("failed list, search text every error has", "/admin/durabl_django/job/?q=ValueError"),
        (
            "cancelled list, sorted by -created_at",
            "/admin/durabl_django/cancelledjob/?o=-created_at",
        ),
        # No index serves these: a list of over 50,000 sorts its last 50,000.
        ("failed list, sorted by attempts", "/admin/durabl_django/job/?o=attempts"),
        ("completed list, sorted by type", "/admin/durabl_django/completedjob/?o=type"),
        (
            "completed list, sorted by -created_at, p. 500",
            "/admin/durabl_django/completedjob/?o=-created_at&p=500",
        ),
        ("pending list, sorted by priority", "/admin/durabl_django/pendingjob/?o=priority"),
        (
            "completed list, sorted by finish, oldest",
            "/admin/durabl_django/completedjob/?o=finished_at",
        ),
        ("failed list, sorted by failure, oldest", "/admin/durabl_django/job/?o=finished_at"),
        ("pending list, sorted by run at", "/admin/durabl_django/pendingjob/?o=run_at"),
        (
            "pending list, sorted by -run at, page 400",
            "/admin/durabl_django/pendingjob/?o=-run_at&p=400",
        ),
        ("completed list, past 24 hours", "/admin/durabl_django/completedjob/?d=24h"),
    ]
    over = []
    print(f"\n{'admin page':<44} {'ms':>9}")
    for label, url in pages:

        def get(url: str = url) -> None:
            response = client.get(url)
            assert response.status_code == 200, (
                url,
                response.status_code,
                response.get("Location"),
            )

        ms = median_ms(get, args.repeat)
        flag = "  OVER" if ms > args.bar else ""
        print(f"{label:<44} {ms:9.1f}{flag}")
        if ms > args.bar:
            over.append(label)
    if over:
        print(f"\nover {args.bar:g} ms: {', '.join(over)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
