"""What durabl's write concern costs an enqueue: ``w: 1`` against ``{w: "majority", j: true}``.

```
MONGO_URL='mongodb://localhost:27017/?replicaSet=rs0' .venv/bin/python bench/write_concern_cost.py
.venv/bin/python bench/write_concern_cost.py --jobs 200 --rounds 5
```

Each write concern gets a store of its own (one client, one throwaway database, dropped at
the end); the rounds take the concerns in turn, so a server that slows down or warms up
during the run weighs on each alike. A round enqueues ``--jobs`` jobs one after another
from one thread and times each call. Printed per concern: enqueues per second (the median
of the rounds) and the latency of one enqueue (p50, p95, over every round), in
milliseconds. Without ``MONGO_URL`` the script starts the test suite's wire server
(SecantusDB, see ``tests/mongo_server.py``) and says so; the URL is never printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from typing import Any

from pymongo import MongoClient
from pymongo.write_concern import WriteConcern

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from durabl import MongoJobQueue
from durabl.model.options import build_new_job
from durabl.stores.mongo.store import DURABLE_WRITE_CONCERN

CONCERNS = {
    "w: 1": WriteConcern(w=1),
    "w: 1, j: true": WriteConcern(w=1, j=True),
    'w: "majority", j: true (durabl\'s default)': DURABLE_WRITE_CONCERN,
}


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def one_round(store: MongoJobQueue, jobs: int) -> tuple[float, list[float]]:
    """Enqueues per second and each enqueue's latency (ms) for ``jobs`` enqueues."""
    latencies: list[float] = []
    start = time.perf_counter()
    for i in range(jobs):
        before = time.perf_counter()
        store.enqueue(build_new_job("bench", {"i": i}))
        latencies.append((time.perf_counter() - before) * 1000)
    return jobs / (time.perf_counter() - start), latencies


def measure(url: str, jobs: int, rounds: int) -> dict[str, tuple[float, float, float]]:
    client: MongoClient[dict[str, Any]] = MongoClient(url, tz_aware=True)
    name = f"durabl_bench_wc_{uuid.uuid4().hex[:8]}"
    stores = {
        label: MongoJobQueue(client[name], f"jobs_{n}", write_concern=concern)
        for n, (label, concern) in enumerate(CONCERNS.items())
    }
    rates: dict[str, list[float]] = {label: [] for label in stores}
    latencies: dict[str, list[float]] = {label: [] for label in stores}
    try:
        for store in stores.values():
            store.startup()
            one_round(store, min(jobs, 10))  # warm the connection and the collection
        for _ in range(rounds):
            for label, store in stores.items():
                rate, each = one_round(store, jobs)
                rates[label].append(rate)
                latencies[label] += each
    finally:
        client.drop_database(name)
        client.close()
    return {
        label: (
            statistics.median(rates[label]),
            percentile(latencies[label], 0.50),
            percentile(latencies[label], 0.95),
        )
        for label in stores
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", type=int, default=100, help="enqueues per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    url = os.environ.get("MONGO_URL")
    server = None
    if not url:
        from tests.mongo_server import NoServerError, WireServer

        try:
            server = WireServer.start()
        except NoServerError as exc:
            print(f"skipped: MONGO_URL is unset and {exc}")
            return 0
        url = server.url
        print("server: the SecantusDB wire server (MONGO_URL unset): a Python server")
    try:
        results = measure(url, args.jobs, args.rounds)
    finally:
        if server is not None:
            server.stop()
    print(f"{args.rounds} rounds of {args.jobs} sequential enqueues per write concern")
    print(f"{'write concern':45} {'enqueues/s':>11} {'p50 ms':>8} {'p95 ms':>8}")
    for label, (rate, p50, p95) in results.items():
        print(f"{label:45} {rate:11.1f} {p50:8.2f} {p95:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
