"""A worker process for the flow control tests: ``python -m tests.crash.flow_proc ...``.

Runs ``--threads`` worker threads for type ``flow`` whose handler holds each job for
``--hold`` seconds and logs ``run <n> <key> <start> <end>`` (wall-clock seconds, the same
clock in every process of the machine); writes ``ready`` to its log, drains on SIGTERM.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time
from typing import Any

from durabl import JobQueue, backend_from_url


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--hold", type=float, default=0.02)
    args = parser.parse_args(argv)
    queue = JobQueue(backend_from_url(args.url))
    pause = threading.Event()
    lock = threading.Lock()
    log = open(args.log, "a", buffering=1, encoding="utf-8")  # noqa: SIM115 - lives as the process

    def handler(job: Any, ctx: Any) -> None:
        start = time.time()
        pause.wait(args.hold)  # the work: time for another process to try the same key
        end = time.time()
        with lock:  # each run inside its claim: after the claim, before the completion
            log.write(f"run {job.data['n']} {job.data['key']} {start:.6f} {end:.6f}\n")

    queue.process("flow", handler, concurrency=args.threads, poll_interval=0.05)
    queue.install_signal_handlers(timeout=5.0)
    with log:
        log.write("ready\n")
        while queue.draining is None:
            threading.Event().wait(0.05)
        queue.draining.result()
        log.write("stopped\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
