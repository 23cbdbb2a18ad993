"""A worker process for the orchestration crash test: ``python -m tests.orchestrator.proc``.

It runs every due ``crashy`` job once, in this process. Each step appends its name to the
log file before returning; the step named by ``--die-in`` ends the process at once
(``os._exit``), as a kill would, after its side effect and before its result is journaled.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from durabl import Job, JobQueue, Orchestrator, backend_from_url
from durabl.model.abort import AbortSignal
from durabl.orchestrator import OrchestrationContext, StepKeys

STEPS = ("create-customer", "create-sub", "sync")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--die-in", default="")
    args = parser.parse_args(argv)
    queue = JobQueue(backend_from_url(args.url), visibility_timeout=1.0)
    orch = Orchestrator(queue)

    def body(job: Job[Any], octx: OrchestrationContext) -> None:
        for name in STEPS:

            def run(keys: StepKeys, signal: AbortSignal, name: str = name) -> str:
                with open(args.log, "a", encoding="utf-8") as log:
                    log.write(f"{name} {keys.idempotency_key}\n")
                if name == args.die_in:
                    os._exit(9)
                return name

            octx.step(name, run)

    orch.define("crashy", body, start=False)
    queue.register("crashy", orch.definitions["crashy"].handler)
    queue.run_pending()
    return 0


if __name__ == "__main__":
    sys.exit(main())
