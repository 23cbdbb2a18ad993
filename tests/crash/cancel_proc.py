"""A worker process for test_cancel_process: runs type ``slow`` on the store a backend URL
names, with a short heartbeat; each run writes ``started <id>`` to the log, waits on its
signal, then writes ``aborted <reason>`` and gives up. Stops on SIGTERM."""

from __future__ import annotations

import signal
import sys
import threading
from typing import Any

from durabl import JobContext, JobQueue, backend_from_url


def main(argv: list[str]) -> int:
    url, log, interval = argv[0], argv[1], float(argv[2])
    queue = JobQueue(backend_from_url(url), visibility_timeout=30)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def write(line: str) -> None:
        with open(log, "a", encoding="utf-8") as out:
            out.write(line + "\n")

    def handler(job: Any, ctx: JobContext) -> None:
        write(f"started {job.id}")
        ctx.signal.wait(30)
        write(f"aborted {ctx.signal.reason}")
        ctx.signal.raise_if_aborted()

    queue.process("slow", handler, poll_interval=0.05, heartbeat_interval=interval)
    stop.wait(60)
    queue.shutdown(timeout=5)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
