"""A worker process for the signal tests: ``python -m tests.crash.signal_proc --url U
--log L --poll-interval S``.

It runs the orchestration ``approve-order``, whose body waits for the signal ``approve``
and returns its data. Its log gets ``ready`` once it processes, ``run <job id>``
each time the body starts (again from the top on each resume), ``got <job id> <data as JSON>`` when
the wait returns, and ``drained`` after SIGTERM's graceful shutdown; every line is flushed
at once, so the parent reads them even after a SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any

from durabl import Job, JobQueue, backend_from_url
from durabl.orchestrator import OrchestrationContext, Orchestrator
from tests.crash.proc import Log

TYPE = "approve-order"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--poll-interval", type=float, required=True)
    args = parser.parse_args(argv)
    log = Log(args.log)
    # Push pickup where the store has it (MongoDB's is asked for): the tests poll rarely.
    push = {"use_change_streams": True} if args.url.startswith("mongodb") else {}
    queue = JobQueue(backend_from_url(args.url, **push), visibility_timeout=3.0)

    def body(job: Job[Any], octx: OrchestrationContext) -> Any:
        log.write(f"run {job.id}")
        signal = octx.wait_for_signal("approval", "approve")
        data = None if signal is None else signal.data
        log.write(f"got {job.id} {json.dumps(data)}")
        return data

    Orchestrator(queue).define(TYPE, body, concurrency=1, poll_interval=args.poll_interval)
    queue.install_signal_handlers(timeout=5.0)
    log.write("ready")
    while queue.draining is None:
        threading.Event().wait(0.05)
    queue.draining.result()
    log.write("drained")
    return 0


if __name__ == "__main__":
    sys.exit(main())
