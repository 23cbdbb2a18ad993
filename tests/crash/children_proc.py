"""A worker process for the child-job tests: ``python -m tests.crash.children_proc --url U
--log L``. It runs the plain type ``leaf`` (returns ``job.data["n"] * 2``): the children
an orchestration of another process started. Its log gets ``ready`` once it processes and
``ended <job id>`` as each child's handler returns; every line is flushed at once."""

from __future__ import annotations

import argparse
import sys
import threading
from typing import Any

from durabl import Job, JobContext, JobQueue, backend_from_url
from tests.crash.proc import Log

TYPE = "leaf"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--log", required=True)
    args = parser.parse_args(argv)
    log = Log(args.log)
    queue = JobQueue(backend_from_url(args.url), visibility_timeout=3.0)

    def leaf(job: Job[Any], ctx: JobContext) -> int:
        log.write(f"ended {job.id}")
        return int(job.data["n"]) * 2

    queue.process(TYPE, leaf, concurrency=2, poll_interval=0.1)
    queue.install_signal_handlers(timeout=5.0)
    log.write("ready")
    while queue.draining is None:
        threading.Event().wait(0.05)
    queue.draining.result()
    return 0


if __name__ == "__main__":
    sys.exit(main())
