"""What the scheduler costs: store operations while idle, and the time of one pass.

For each store (SQLite file; PostgreSQL when one answers at ``DURABL_TEST_POSTGRES_URL`` or
the default test URL) and 1, 100 and 1,000 schedules:

* idle: every schedule hourly, none due; the real scheduler thread runs for ``--seconds``
  and the script counts the store calls it made (``load_schedules``; nothing else is
  called while nothing is due);
* one pass with every schedule due: the time of ``scheduler.run_once()`` firing them all
  (one compare-and-set transaction with its enqueue per schedule).

Run: ``.venv/bin/python bench/scheduler_cost.py [--seconds S]``.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import os  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from typing import Any  # noqa: E402

from durabl import JobQueue, SqliteJobQueue  # noqa: E402
from durabl.stores.base import BACKEND_OPERATIONS  # noqa: E402

PG_URL = os.environ.get("DURABL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def counting(backend: Any) -> Counter[str]:
    """Count every Backend operation called on ``backend`` from now on."""
    calls: Counter[str] = Counter()
    lock = threading.Lock()
    for name in BACKEND_OPERATIONS:
        if name == "now":
            continue
        method = getattr(backend, name)

        def wrapped(*args: Any, _m: Callable[..., Any] = method, _n: str = name, **kw: Any) -> Any:
            with lock:
                calls[_n] += 1
            return _m(*args, **kw)

        setattr(backend, name, wrapped)
    return calls


@contextmanager
def sqlite_store() -> Iterator[Any]:
    with tempfile.TemporaryDirectory() as directory:
        store = SqliteJobQueue(os.path.join(directory, "bench.sqlite3"))
        yield store
        store.close()


@contextmanager
def postgres_store() -> Iterator[Any]:
    from durabl.stores.postgres import PostgresJobQueue

    table = f"durabl_bench_{uuid.uuid4().hex[:8]}"
    store = PostgresJobQueue(PG_URL, table=table)
    try:
        yield store
    finally:
        store.close()
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for suffix in ("_schedules", "_receipts", "_logs", "_meta", ""):
                conn.execute(f'DROP TABLE IF EXISTS "{table}{suffix}" CASCADE')  # type: ignore[arg-type]


def postgres_answers() -> bool:
    try:
        import psycopg

        psycopg.connect(PG_URL, connect_timeout=2).close()
    except Exception:
        return False
    return True


def measure(make: Callable[[], Any], label: str, count: int, seconds: float) -> None:
    with make() as store:
        queue = JobQueue(store)
        for n in range(count):
            queue.schedule(f"s{n}", "tick", every=3600)
        calls = counting(store)
        queue.start_scheduler()
        time.sleep(seconds)
        queue.shutdown(timeout=5)
        idle = dict(calls)
        queue = JobQueue(store)
        for n in range(count):  # redefined: every second, so all are due a second later
            queue.schedule(f"s{n}", "tick", every=1)
        time.sleep(1.1)
        began = time.perf_counter()
        queue.scheduler.run_once()
        elapsed = time.perf_counter() - began
        fired = store.count_jobs(type="tick")
        print(
            f"| {label} | {count} | {idle} in {seconds:g} s | {elapsed * 1000:.0f} ms "
            f"({fired} jobs) |"
        )


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    print("| store | schedules | store calls while idle | one pass, all due |")
    print("|---|---|---|---|")
    stores: list[tuple[str, Callable[[], Any]]] = [("SQLite", sqlite_store)]
    if postgres_answers():
        stores.append(("PostgreSQL", postgres_store))
    else:
        print(f"(PostgreSQL skipped: nothing answers at {PG_URL})")
    for label, make in stores:
        for count in (1, 100, 1000):
            measure(make, label, count, args.seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main())
