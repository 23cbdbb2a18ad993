"""Pickup latency on a real MongoDB: push (change streams) versus poll.

Enqueue -> handler start, p50/p95/p99/max, for two runs on a fresh database each:

* push: ``MongoJobQueue(use_change_streams=True)``, workers on the default poll interval
  (the 60 s safety net while the stream is up), so pickup is the stream's doing;
* poll: ``use_change_streams=False``, workers polling every ``--poll-interval`` seconds
  (default 5 s, durabl's default).

The producer is a second ``JobQueue`` on its own ``MongoClient`` (with ``--write-concern``):
an enqueue in the workers' own queue would wake them directly and measure nothing. Both
run in this process, so one monotonic clock times them. Jobs go out one at a time, every
``--gap`` seconds (jittered), to idle workers (``--workers`` threads).

Needs ``MONGO_URL``; push needs a replica set or a sharded cluster (a single-node replica
set is fine). Without a reachable server it prints one line and exits 0.

Run: ``MONGO_URL='mongodb://localhost:27017/?replicaSet=rs0' .venv/bin/python
bench/pickup_mongo.py [--jobs 200] [--gap 0.05] [--write-concern majority] [--only push]``
"""

from __future__ import annotations

import sys
from pathlib import Path

# Runnable straight from a checkout (``python bench/pickup_mongo.py``), installed or not.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import math  # noqa: E402
import os  # noqa: E402
import random  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from typing import Any  # noqa: E402

from pymongo import MongoClient  # noqa: E402
from pymongo.errors import PyMongoError  # noqa: E402

from durabl import Job, JobContext, JobQueue, MongoJobQueue  # noqa: E402


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values."""
    rank = math.ceil(q / 100 * len(sorted_values))
    return sorted_values[max(0, min(len(sorted_values), rank) - 1)]


def measure(url: str, mode: str, args: argparse.Namespace) -> list[float]:
    """Latencies in seconds for one mode, on a database made for the run."""
    name = f"durabl_bench_{uuid.uuid4().hex[:8]}"
    workers_client: MongoClient[dict[str, Any]] = MongoClient(url, tz_aware=True)
    producer_client: MongoClient[dict[str, Any]] = MongoClient(
        url, tz_aware=True, w=int(wc) if (wc := args.write_concern).isdigit() else wc
    )
    latencies: list[float] = []
    lock = threading.Lock()
    all_done = threading.Event()

    def handler(job: Job[Any], ctx: JobContext) -> None:
        took = time.perf_counter() - job.data["sent"]
        with lock:
            latencies.append(took)
            if len(latencies) >= args.jobs:
                all_done.set()

    push = mode == "push"
    workers = JobQueue(MongoJobQueue(workers_client[name], use_change_streams=push))
    producer = JobQueue(MongoJobQueue(producer_client[name]))
    try:
        producer.startup()
        workers.process(
            "bench",
            handler,
            concurrency=args.workers,
            poll_interval=None if push else args.poll_interval,
        )
        if push:
            deadline = time.monotonic() + 30
            while workers.is_healthy().pickup != "push":
                if time.monotonic() > deadline:
                    raise RuntimeError(f"push never came up: {workers.is_healthy().reason}")
                threading.Event().wait(0.05)
        threading.Event().wait(1.0)  # let the start-up polls pass
        pause = threading.Event()
        for _ in range(args.jobs):
            producer.enqueue("bench", {"sent": time.perf_counter()})
            pause.wait(args.gap * random.uniform(0.5, 1.5))
        if not all_done.wait(args.poll_interval * 3 + 60):
            raise RuntimeError(f"only {len(latencies)} of {args.jobs} jobs ran")
    finally:
        workers.shutdown(timeout=5)
        producer.shutdown(timeout=5)
        workers_client.drop_database(name)
        workers_client.close()
        producer_client.close()
    return sorted(latencies)


def server_kind(url: str) -> str | None:
    """ "replica set", "sharded" or "standalone"; None (after one line) if unreachable."""
    client: MongoClient[dict[str, Any]] = MongoClient(url, serverSelectionTimeoutMS=3000)
    try:
        hello = client.admin.command("hello")
        version = client.server_info().get("version", "?")
    except PyMongoError as exc:
        print(f"pickup_mongo: no MongoDB answers at MONGO_URL ({exc.__class__.__name__}); skipped")
        return None
    finally:
        client.close()
    kind = "sharded" if hello.get("msg") == "isdbgrid" else "standalone"
    if "setName" in hello:
        kind = "replica set"
    print(f"MongoDB {version}, {kind}")
    return kind


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs per mode (default 200)")
    parser.add_argument("--gap", type=float, default=0.05, help="seconds between enqueues")
    parser.add_argument("--workers", type=int, default=4, help="worker threads (default 4)")
    parser.add_argument(
        "--poll-interval", type=float, default=5.0, help="poll mode's interval (default 5 s)"
    )
    parser.add_argument(
        "--write-concern", default="majority", help="the producer's w: majority (default) or 1"
    )
    parser.add_argument("--only", choices=("push", "poll"), help="measure one mode only")
    args = parser.parse_args()
    url = os.environ.get("MONGO_URL")
    if not url:
        print("pickup_mongo: MONGO_URL is not set (point it at a replica set); skipped")
        return 0
    kind = server_kind(url)
    if kind is None:
        return 0
    modes = [args.only] if args.only else ["push", "poll"]
    if kind == "standalone" and "push" in modes:
        print("push needs a replica set or a sharded cluster: measuring poll only")
        modes = [m for m in modes if m != "push"]
    print(
        f"pickup latency, enqueue -> handler start: {args.jobs} jobs one at a time, "
        f"{args.workers} idle workers, producer w={args.write_concern}"
    )
    print(f"{'mode':<22}{'p50':>9}{'p95':>9}{'p99':>9}{'max':>9}  (ms)")
    for mode in modes:
        label = "push (safety poll 60s)" if mode == "push" else f"poll ({args.poll_interval:g}s)"
        values = measure(url, mode, args)
        cells = [percentile(values, q) * 1000 for q in (50, 95, 99)] + [values[-1] * 1000]
        print(f"{label:<22}" + "".join(f"{c:>9.1f}" for c in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())
