"""A worker process for the pause tests: ``python -m tests.crash.pause_proc --url U
--log L --poll S``. Processes the type ``work`` (each job completes at once), writes
``ready`` to its log once its processor runs, and runs until killed."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from durabl import Job, JobContext, JobQueue, backend_from_url


def work(job: Job[Any], ctx: JobContext) -> str:
    return "done"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--poll", type=float, required=True)
    parser.add_argument("--change-streams", action="store_true", help="MongoDB's push")
    args = parser.parse_args(argv)
    push = {"use_change_streams": True} if args.change_streams else {}
    queue = JobQueue(backend_from_url(args.url, **push), visibility_timeout=10)
    queue.process("work", work, concurrency=2, poll_interval=args.poll)
    with open(args.log, "a", buffering=1, encoding="utf-8") as log:
        log.write("ready\n")
    threading.Event().wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
