"""Jobs of the test app, autodiscovered by durabl_django.

``touch`` creates the file named in its payload (so a test in another process can see that
the job ran); ``slow`` also writes ``<path>.started`` first, then sleeps ``seconds``;
``two-steps`` is an orchestration whose second step writes the file named in its payload.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import durabl_django
from durabl import Job, JobContext, OrchestrationContext

RAN: list[Any] = []


@durabl_django.job("welcome-email", concurrency=4, poll_interval=0.2)
def welcome_email(job: Job[Any], ctx: JobContext) -> None:
    RAN.append(("welcome-email", job.data))


@durabl_django.job("touch", poll_interval=0.2)
def touch(job: Job[Any], ctx: JobContext) -> None:
    Path(job.data["path"]).write_text(job.id)


@durabl_django.job("slow", concurrency=2, poll_interval=0.2)
def slow(job: Job[Any], ctx: JobContext) -> None:
    Path(job.data["path"] + ".started").write_text(job.id)
    time.sleep(job.data["seconds"])  # deliberately deaf to ctx.signal: a stubborn handler
    Path(job.data["path"]).write_text(job.id)


@durabl_django.orchestration("two-steps", poll_interval=0.2, step_timeout=30)
def two_steps(job: Job[Any], octx: OrchestrationContext) -> None:
    greeting = octx.step("greet", lambda keys, signal: f"hello {job.data['name']}")
    octx.step("write", lambda keys, signal: Path(job.data["path"]).write_text(greeting))
    octx.log(f"wrote {greeting!r}")
