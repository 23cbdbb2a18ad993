"""A scheduler process for the schedule tests: ``python -m tests.crash.scheduler_proc ...``.

Declares one schedule (``durabl.schedule``), starts the scheduler and writes ``ready`` to
its log; runs until killed, or drains on SIGTERM and writes ``stopped``.
"""

from __future__ import annotations

import argparse
import sys
import threading

import durabl
from durabl import JobQueue, backend_from_url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--every", type=float, default=1.0)
    parser.add_argument("--catch-up", default="latest")
    args = parser.parse_args(argv)
    durabl.schedule("tick", "tick", every=args.every, catch_up=args.catch_up)
    queue = JobQueue(backend_from_url(args.url))
    queue.start_scheduler()
    queue.install_signal_handlers(timeout=1.0)
    with open(args.log, "a", buffering=1, encoding="utf-8") as log:
        log.write("ready\n")
        while queue.draining is None:
            threading.Event().wait(0.05)
        queue.draining.result()
        log.write("stopped\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
