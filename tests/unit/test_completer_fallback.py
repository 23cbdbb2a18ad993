"""When a batch of completions fails to be written, the completer writes each one again on
its own: that write must carry everything the batch would have (every field of the
``Completion``: the handler's result, its logs), so the two paths cannot drift apart."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

import pytest

from durabl import MemoryBackend
from durabl.model.job import JobResult, LogEntry
from durabl.model.options import build_new_job
from durabl.runtime.completer import Completer
from durabl.stores.base import Completion
from durabl.testing import FakeClock


class Owner:
    """A handed-over run, reduced to what the completer calls back."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.results: list[JobResult | Exception] = []
        self.reported = threading.Event()

    def completion_written(self, result: JobResult | Exception, duration: float) -> None:
        self.results.append(result)
        self.reported.set()

    def write_outcome(self) -> None:
        raise AssertionError("a completion is written by the completer, not by its run")


def test_the_write_on_its_own_passes_every_field_of_the_completion(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = MemoryBackend(clock=clock)
    backend.enqueue(build_new_job("t", {}, now=clock.now()))
    (handle,) = backend.claim("t")
    completion = Completion(
        handle.id, handle.claim_token, (LogEntry(clock.now(), "done"),), {"total": 3}
    )
    real_complete = backend.complete
    alone: list[dict[str, Any]] = []

    def batch_fails(batch: Sequence[Completion]) -> list[JobResult]:
        raise ConnectionError("the batch could not be written")

    def complete(job_id: str, token: str, **kwargs: Any) -> JobResult:
        alone.append({"job_id": job_id, "token": token, **kwargs})
        return real_complete(job_id, token, **kwargs)

    monkeypatch.setattr(backend, "complete_many", batch_fails)
    monkeypatch.setattr(backend, "complete", complete)
    completer: Completer[Owner] = Completer(backend, "durabl-completer-t")
    owner = Owner(handle.id)
    try:
        completer.submit(owner, completion, 0.0)
        assert owner.reported.wait(5)
    finally:
        assert completer.close(5)
    assert owner.results == [JobResult("completed")]
    assert alone == [{f.name: getattr(completion, f.name) for f in fields(completion)}]
    job = backend.get_job(handle.id)
    assert job is not None
    assert (job.status, job.result, [e.message for e in job.logs]) == (
        "completed",
        {"total": 3},
        ["done"],
    )
