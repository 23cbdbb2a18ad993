"""Waiting for a job to end: the store read again, less often the longer it takes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from durabl.model.clock import Seconds, to_seconds
from durabl.model.job import TERMINAL_STATUSES, Job

#: The first pause between reads, doubled after each read up to :data:`LONGEST_PAUSE`.
FIRST_PAUSE = 0.005
LONGEST_PAUSE = 0.5


def wait_terminal(
    read: Callable[[str], Job[Any] | None], job_id: str, timeout: Seconds | None
) -> Job[Any]:
    """Read job ``job_id`` with ``read`` until it is terminal, as
    :meth:`durabl.JobQueue.wait` describes."""
    limit = None if timeout is None else to_seconds(timeout, "timeout")
    if limit is not None and limit < 0:
        raise ValueError(f"timeout must be >= 0 or None, got {timeout!r}")
    deadline = None if limit is None else time.monotonic() + limit
    pause, idle = FIRST_PAUSE, threading.Event()
    while True:
        job = read(job_id)
        if job is None:
            raise ValueError(f"no job with id {job_id!r}")
        if job.status in TERMINAL_STATUSES:
            return job
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError(f"job {job_id} is still {job.status} after {limit:g} s")
        idle.wait(pause if left is None else min(pause, left))
        pause = min(pause * 2, LONGEST_PAUSE)
