"""The traceback a failed job keeps (``fail_reason``, shown by ``durabl show`` and the
admin) is the user's: a handler that raises through a helper, under a run hook, on a
worker thread, stores the frames of this file with durabl's folded into
``[N durabl frames hidden]`` lines; ``DURABL_FULL_TRACEBACKS=1`` stores them all."""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

from durabl import Job, JobQueue
from durabl.stores.base import Backend
from durabl.testing import FakeClock, wait_until

HERE = os.path.abspath(__file__)
DURABL_DIR = os.path.dirname(os.path.abspath(__import__("durabl").__file__))


def parse_total(text: str) -> int:
    raise ValueError(f"not a total: {text!r}")


def invoice(job: Job[dict[str, str]], ctx: object) -> None:
    parse_total(job.data["total"])


def timed(job: Job[object], proceed: Callable[[], object]) -> object:
    return proceed()  # the user's own run hook: durabl frames on both sides of it


def stored_failure(backend: Backend, clock: FakeClock) -> str:
    queue = JobQueue(backend, clock=clock)
    queue.add_run_hook(timed)
    try:
        queue.process("invoice", invoice)
        job_id = queue.enqueue("invoice", {"total": "12,50"}, max_attempts=1)
        assert job_id is not None
        queue.processors["invoice"].wake()
        assert wait_until(lambda: queue.get_job(job_id).status == "failed", timeout=30)  # type: ignore[union-attr]
        job = queue.get_job(job_id)
        assert job is not None and job.fail_reason is not None
        return job.fail_reason
    finally:
        queue.shutdown(timeout=5)


def file_lines(reason: str) -> list[str]:
    return [line for line in reason.splitlines() if line.startswith("  File ")]


def test_a_failure_keeps_the_users_frames_and_folds_durabls(
    backend: Backend, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("DURABL_FULL_TRACEBACKS", raising=False)
    reason = stored_failure(backend, clock)
    frames = file_lines(reason)
    assert [line.rsplit(" in ", 1)[1] for line in frames] == ["timed", "invoice", "parse_total"]
    assert all(f'"{HERE}"' in line for line in frames), reason
    assert DURABL_DIR not in reason
    folded = [line for line in reason.splitlines() if line.endswith("durabl frames hidden]")]
    assert len(folded) == 2 and all(line.startswith("  [") for line in folded)
    assert reason.startswith("ValueError: not a total: '12,50'\n")
    assert reason.rstrip().endswith("ValueError: not a total: '12,50'")


def test_durabl_full_tracebacks_keeps_every_frame(
    backend: Backend, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DURABL_FULL_TRACEBACKS", "1")
    reason = stored_failure(backend, clock)
    assert "frames hidden" not in reason
    assert os.path.join(DURABL_DIR, "runtime", "run.py") in reason
    assert os.path.join(DURABL_DIR, "runtime", "hooks.py") in reason
    users = [line.rsplit(" in ", 1)[1] for line in file_lines(reason) if HERE in line]
    assert users == ["timed", "invoice", "parse_total"]
    assert len(file_lines(reason)) > len(users) + 4  # run.py and hooks.py, several times
