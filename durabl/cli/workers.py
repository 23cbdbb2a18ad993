"""``durabl workers``: the worker processes recorded in the store's live workers registry."""

from __future__ import annotations

import argparse
from typing import Any

from durabl.cli.common import Sub, opened, plain, print_json, print_table, store_parser
from durabl.model.workers import WorkerInfo

COLUMNS = ("id", "state", "host", "pid", "types", "active", "started_at", "last_seen")


def configure_workers(sub: Sub) -> None:
    p = store_parser(
        sub,
        "workers",
        "the worker processes recorded in the store, alive or gone",
        "List every worker process (each queue running processors) recorded in the store: "
        "its id, host and pid, the job types it runs with their concurrency, how many runs "
        "it had at its last refresh, when it started and when it was last seen. A worker "
        "unseen for three heartbeat intervals is shown as gone; one gone for an hour is "
        "removed by the next live worker.",
        "durabl workers",
        "durabl workers --json",
    )
    p.set_defaults(run=run_workers)


def worker_fields(info: WorkerInfo) -> dict[str, Any]:
    """The ``--json`` object of one worker."""
    data: dict[str, Any] = plain(info)
    data["types"] = list(info.types)
    data["state"] = info.state
    return data


def run_workers(args: argparse.Namespace) -> int:
    with opened(args, read_only=True) as queue:
        workers = queue.list_workers()
    if args.json:
        print_json([worker_fields(w) for w in workers])
    else:
        rows = [
            {
                **worker_fields(w),
                "types": ", ".join(f"{t} ({n})" for t, n in sorted(w.concurrency.items())),
                "started_at": w.started_at,
                "last_seen": w.last_seen,
            }
            for w in workers
        ]
        print_table(rows, COLUMNS)
    return 0
