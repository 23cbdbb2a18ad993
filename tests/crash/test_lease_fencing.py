"""A worker paused past its lease (SIGSTOP: a long GC pause, a frozen VM, a laptop lid)
wakes up to find its job reaped, run elsewhere and completed. Its late writes are fenced:
its outcome is not recorded, the job is completed once, by the other process, and the
job's record shows the lease the paused worker lost. Real subprocesses over each store the
crash tests share (:func:`tests.crash.test_crash_recovery.url`).

Two ways the paused worker learns it: with the lease everyone uses, its own deadline has
passed when it wakes, so it does not even try to write; with a lease longer than the
reaper's (a worker and a reaper configured differently), it believes it still holds the
job and sends its completion, which the store refuses on the claim token.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from durabl import JobQueue
from tests.crash.test_crash_recovery import Proc, ended, procs, queue, spawn, url, wait_until

__all__ = ["procs", "queue", "url"]  # fixtures, shared with the crash tests

pytestmark = pytest.mark.slow


def owner(proc: Proc) -> str:
    return proc.wait_for_line(lambda line: line.startswith("owner ")).split()[1]


@pytest.mark.parametrize(
    ("paused_lease", "refused_by"),
    [(None, "its own deadline"), (60.0, "the store")],
    ids=["same-lease", "longer-lease"],
)
def test_a_paused_worker_past_its_lease_is_fenced_and_the_job_completes_once(
    url: str,
    tmp_path: Path,
    queue: JobQueue,
    procs: list[Proc],
    paused_lease: float | None,
    refused_by: str,
) -> None:
    release = tmp_path / "release"
    job_id = queue.enqueue("t", {"hold": True}, max_attempts=3) or ""
    # One worker thread: while it holds the job its poller has no free slot, so the process
    # touches the store only to renew (and not at all with the 60 s lease: the first
    # renewal would come 20 s in). A process paused mid-write could hold a SQLite lock.
    extra = ["--concurrency", "1", "--hold-until", str(release)]
    if paused_lease is not None:
        extra += ["--visibility-timeout", str(paused_lease)]
    paused = spawn(procs, "worker", url, tmp_path / "paused.log", *extra)
    paused_owner = owner(paused)
    paused.wait_for_line(lambda line: line == f"start {job_id}")
    # A run's start also refreshes the workers registry (its entry turns active): stop the
    # process only once that write is in, so the stop cannot land inside it (on SQLite a
    # process stopped mid-write keeps the file's write lock, and nobody else could write).
    wait_until(
        lambda: any(w.pid == paused.popen.pid and w.active == 1 for w in queue.list_workers()),
        30,
    )
    paused.kill(signal.SIGSTOP)

    rescuer = spawn(procs, "worker", url, tmp_path / "rescuer.log", "--reaper")
    rescuer_owner = owner(rescuer)
    # The reaper gives the job back once the lease (plus the store's clock-skew allowance)
    # has passed without a renewal; the rescuer runs it to the end.
    wait_until(lambda: getattr(queue.get_job(job_id), "status", None) == "completed", 120)
    rescuer.wait_for_line(lambda line: line == f"completed {job_id}")

    release.touch()
    paused.kill(signal.SIGCONT)
    lost = paused.wait_for_line(lambda line: line.startswith(f"lease-lost {job_id} "))
    op = lost.split()[2]
    if refused_by == "the store":
        # It thought it still held the job: its completion went out and was refused.
        assert op == "complete", lost
    else:
        assert op in ("deadline", "heartbeat"), lost
    # Its handler runs to the end too (after the lease-lost line when the worker saw its own
    # deadline first: the two lines come from different threads).
    paused.wait_for_line(lambda line: line == f"end {job_id}")
    assert f"completed {job_id}" not in paused.lines()

    job = queue.get_job(job_id)
    assert job is not None
    assert (job.status, job.attempts) == ("completed", 2)
    assert job.result == {"pid": rescuer.popen.pid}  # the rescuer's, not written over
    first, second = job.attempt_history
    assert (first.number, first.worker, first.outcome) == (1, paused_owner, "lease-lost")
    assert (second.number, second.worker, second.outcome) == (2, rescuer_owner, "completed")
    assert ended(rescuer.lines())[job_id] == 1
    assert queue.get_stats().active == 0
    # The paused worker carries on: with the rescuer gone, it runs the next job itself.
    rescuer.kill(signal.SIGTERM)
    assert rescuer.popen.wait(30) == 0
    later = queue.enqueue("t", {"n": 1}) or ""
    paused.wait_for_line(lambda line: line == f"completed {later}", timeout=60)
