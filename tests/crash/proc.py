"""A worker or producer process for the crash tests: ``python -m tests.crash.proc ...``.

Every line it writes to its log is flushed at once, so the parent can read what happened
even after a SIGKILL: ``owner <lease owner>`` first, ``claimed <job id>`` on each claim,
``began <job id>`` when its run begins (the ``started`` event, sent before the run's start is
recorded), ``start <job id>`` when a handler begins, ``end <job id>`` when it returns, ``completed
<job id>`` once its completion is written, ``lease-lost <job id> <op>`` when a run's
outcome is not written because its lease is gone (``op``: ``deadline``, ``heartbeat``,
``complete``...), ``ready`` once it is processing, ``drained`` after a graceful shutdown.

``--hold-until FILE``: a job whose data says ``hold`` waits until FILE exists, deaf to
``ctx.signal`` (a handler stuck in user code, or a process paused under it), then returns
``{"pid": <this process>}``.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
import time
from typing import Any, TextIO

from durabl import Job, JobContext, JobEvent, JobQueue, backend_from_url


class Log:
    def __init__(self, path: str) -> None:
        self._file: TextIO = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()


def worker(args: argparse.Namespace) -> int:
    log = Log(args.log)

    def on_event(event: JobEvent) -> None:
        if event.kind in ("claimed", "completed"):
            log.write(f"{event.kind} {event.job_id}")
        elif event.kind == "started":
            log.write(f"began {event.job_id}")
        elif event.kind == "lease-lost":
            log.write(f"lease-lost {event.job_id} {event.op}")

    queue = JobQueue(
        backend_from_url(args.url),
        visibility_timeout=args.visibility_timeout,
        on_job_event=on_event,
    )

    def handler(job: Job[Any], ctx: JobContext) -> dict[str, int] | None:
        log.write(f"start {job.id}")
        if args.hang and job.data.get("hang"):
            ctx.signal.wait()  # until shutdown or lease loss aborts the run
            ctx.signal.raise_if_aborted()
        elif args.hold_until and job.data.get("hold"):
            while not os.path.exists(args.hold_until):  # another process says when
                threading.Event().wait(0.02)
        else:
            ctx.signal.wait(random.uniform(0, args.work))
        log.write(f"end {job.id}")
        return {"pid": os.getpid()} if job.data.get("hold") else None

    log.write(f"owner {queue.lease_owner}")
    queue.process("t", handler, concurrency=args.concurrency, poll_interval=0.05)
    if args.reaper:
        queue.start_reaper(interval=0.2)
    queue.install_signal_handlers(timeout=args.shutdown_timeout)
    log.write("ready")
    while queue.draining is None:
        threading.Event().wait(0.05)
    queue.draining.result()
    log.write("drained")
    return 0


def producer(args: argparse.Namespace) -> int:
    log = Log(args.log)
    queue = JobQueue(backend_from_url(args.url))
    rng = random.Random(args.seed)
    began = time.monotonic()
    for n in range(args.jobs):
        if args.rate:  # paced, so work keeps arriving while workers are killed
            ahead = began + n / args.rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
        key = rng.randrange(args.keys)
        scope = "pending" if key % 2 else "pending+active"
        job_id = queue.enqueue("t", {"n": n}, dedupe_key=f"k{key}", dedupe_scope=scope)
        log.write(f"enqueued {n} {job_id or '-'}")
    log.write("produced")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["worker", "producer"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--visibility-timeout", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--reaper", action="store_true")
    parser.add_argument("--hold-until", default="", help="see the module's docstring")
    parser.add_argument("--work", type=float, default=0.005)
    parser.add_argument("--shutdown-timeout", type=float, default=1.0)
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--keys", type=int, default=400)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--rate", type=float, default=0.0, help="enqueues per second (0: flat out)")
    args = parser.parse_args(argv)
    return worker(args) if args.role == "worker" else producer(args)


if __name__ == "__main__":
    sys.exit(main())
