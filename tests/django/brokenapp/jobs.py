from __future__ import annotations

import durabl_django
from durabl import Job, JobContext


@durabl_django.job("declared-before-the-error")
def fine(job: Job[object], ctx: JobContext) -> None:
    pass


raise RuntimeError("boom while importing the jobs module")
