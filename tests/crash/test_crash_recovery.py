"""Processes die; jobs do not get lost. Real subprocesses over one store shared between
them: a SQLite file; tables of their own on the PostgreSQL server (skipped with one line
when none answers; failed under ``DURABL_REQUIRE_POSTGRES=1``); a database of their own on
the MongoDB server (``MONGO_URL``, else the session's SecantusDB wire server; see
``tests.conftest.require_mongo``). The wire server is slow, so the MongoDB runs use fewer
jobs and a longer lease (:func:`scale`, :func:`lease`)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from durabl import JobQueue, backend_from_url
from tests.conftest import drop_postgres_tables, postgres_table, require_postgres
from tests.mongo_database import drop_database, fresh_database_url

pytest.importorskip("durabl.stores.sqlite", reason="the SQLite backend is not available")

ROOT = Path(__file__).resolve().parents[2]
VT = 1.0  # the workers' visibility timeout: a killed worker's job is back within ~1.5 s
# On the MongoDB wire server (a Python server on a shared machine) one renewal can take
# longer than a second-long lease allows, which would lose leases no test meant to lose.
MONGO_VT = 3.0


def is_mongo(url: str) -> bool:
    return url.startswith(("mongodb://", "mongodb+srv://"))


def lease(url: str) -> float:
    """The visibility timeout the worker processes of a test on ``url`` use."""
    return MONGO_VT if is_mongo(url) else VT


def scale(url: str, count: int, on_mongo: int) -> int:
    """``count`` jobs, or ``on_mongo`` on MongoDB (the wire server takes ~15 enqueues/s)."""
    return on_mongo if is_mongo(url) else count


class Proc:
    """One ``tests.crash.proc`` subprocess and its log."""

    def __init__(self, role: str, url: str, log: Path, *extra: str) -> None:
        self.log = log
        self.popen = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.crash.proc",
                role,
                "--url",
                url,
                "--log",
                str(log),
                "--visibility-timeout",
                str(lease(url)),
                *extra,
            ],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []

    def wait_for_line(self, predicate: Any, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines():
                if predicate(line):
                    return line
            if self.popen.poll() is not None:
                raise AssertionError(f"process exited early: {self.stderr()}")
            time.sleep(0.02)
        raise AssertionError(f"timed out waiting in {self.log.name}: {self.lines()[-5:]}")

    def stderr(self) -> str:
        if self.popen.poll() is None:
            return ""
        return self.popen.stderr.read().decode() if self.popen.stderr else ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(sig)

    def stop(self) -> None:
        self.kill(signal.SIGKILL)
        self.popen.wait(10)
        if self.popen.stderr:
            self.popen.stderr.close()


def with_query(url: str, **query: str) -> str:
    """``url`` with ``query`` added to its query string."""
    extra = "&".join(f"{key}={value}" for key, value in query.items())
    return f"{url}{'&' if '?' in url else '?'}{extra}"


@pytest.fixture(params=["sqlite", "postgres", "mongodb"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The store every process of one test shares: a SQLite file, PostgreSQL tables of the
    test's own (its connections named after them), or a MongoDB database of its own; the
    last two are dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'jobs.sqlite3'}"
        return
    if request.param == "mongodb":
        database = fresh_database_url("durabl_crash")
        yield database
        drop_database(database)
        return
    server = require_postgres()
    table = postgres_table()
    yield with_query(server, table=table, application_name=table)
    drop_postgres_tables(table)


@pytest.fixture
def queue(url: str) -> Iterator[JobQueue]:
    """This process's view of the shared store (no workers of its own)."""
    q = JobQueue(backend_from_url(url))
    yield q
    q.backend.close()


@pytest.fixture
def procs() -> Iterator[list[Proc]]:
    started: list[Proc] = []
    yield started
    for proc in started:
        proc.stop()


def spawn(procs: list[Proc], role: str, url: str, log: Path, *extra: str) -> Proc:
    proc = Proc(role, url, log, *extra)
    procs.append(proc)
    return proc


def wait_until(predicate: Any, timeout: float = 60, interval: float = 0.05) -> None:
    """Poll another process's effects (no event crosses a process boundary)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(interval)


def settled(queue: JobQueue) -> bool:
    stats = queue.get_stats()  # one snapshot: two calls could straddle a reaped job
    return stats.pending + stats.active == 0


def ended(lines: list[str]) -> Counter[str]:
    return Counter(line.split()[1] for line in lines if line.startswith("end "))


@pytest.mark.parametrize(("max_attempts", "outcome"), [(3, "completed"), (1, "failed")])
def test_sigkill_mid_handler_then_another_process_recovers_the_job(
    url: str,
    tmp_path: Path,
    queue: JobQueue,
    procs: list[Proc],
    max_attempts: int,
    outcome: str,
) -> None:
    stuck = queue.enqueue("t", {"hang": True}, max_attempts=max_attempts) or ""
    others = [queue.enqueue("t", {"n": n}) or "" for n in range(20)]

    doomed = spawn(procs, "worker", url, tmp_path / "a.log", "--hang", "--concurrency", "4")
    doomed.wait_for_line(lambda line: line == f"start {stuck}")
    doomed.kill()
    doomed.popen.wait(10)
    job = queue.get_job(stuck)
    assert job is not None and job.status == "active"  # its worker is dead, the lease is not

    rescuer = spawn(procs, "worker", url, tmp_path / "b.log", "--reaper")
    wait_until(lambda: settled(queue))

    job = queue.get_job(stuck)
    assert job is not None and job.status == outcome
    if outcome == "completed":
        assert job.attempts == 2  # the killed run counted
        assert ended(rescuer.lines())[stuck] == 1
    else:
        assert job.failure_kind == "stalled"
    runs = ended(doomed.lines()) + ended(rescuer.lines())
    assert all(runs[job_id] >= 1 for job_id in others)
    assert queue.get_stats().completed == len(others) + (outcome == "completed")


def test_sigterm_drains_and_another_process_finishes_the_job(
    url: str, tmp_path: Path, queue: JobQueue, procs: list[Proc]
) -> None:
    job_id = queue.enqueue("t", {"hang": True}) or ""
    draining = spawn(
        procs, "worker", url, tmp_path / "a.log", "--hang", "--shutdown-timeout", "0.5"
    )
    draining.wait_for_line(lambda line: line == f"start {job_id}")
    # The job may start before the signal handlers are in place ("ready"): a SIGTERM
    # then would kill the process instead of draining it.
    draining.wait_for_line(lambda line: line == "ready")
    sent = time.monotonic()
    draining.kill(signal.SIGTERM)
    # The claim comes back within the 0.5 s grace period plus the release write (bounded
    # at 1 s), seen from here while the process is still draining.
    try:
        wait_until(lambda: getattr(queue.get_job(job_id), "status", None) == "pending", 10, 0.01)
    except AssertionError:  # say what the draining process did (a slow release, say)
        draining.popen.wait(10)
        raise AssertionError(
            f"not released: {queue.get_job(job_id)!r}; log {draining.lines()[-8:]}; "
            f"stderr {draining.stderr()[-2000:]}"
        ) from None
    released_after = time.monotonic() - sent
    assert released_after < 0.5 + 1.0 + 0.5, released_after
    assert draining.popen.wait(10) == 0, draining.stderr()
    assert time.monotonic() - sent < 5
    assert "drained" in draining.lines()
    assert queue.get_stats().active == 0, "the drain left a claim active"
    job = queue.get_job(job_id)
    assert job is not None and (job.status, job.attempts) == ("pending", 0)  # released

    finisher = spawn(procs, "worker", url, tmp_path / "b.log")
    wait_until(lambda: (queue.get_job(job_id) or job).status == "completed")
    assert ended(finisher.lines())[job_id] == 1
    done = queue.get_job(job_id)
    assert done is not None and done.attempts == 1


def test_two_workers_and_a_producer_with_a_killed_and_restarted_worker(
    url: str, tmp_path: Path, queue: JobQueue, procs: list[Proc]
) -> None:
    queue.startup()
    # Paced over about 8 s (12 s on MongoDB), so that each restarted worker still finds work
    # to be killed in (flat out, fast workers can drain everything before the last restart).
    count, rate = scale(url, 2000, 60), scale(url, 250, 5)
    producer = spawn(
        procs,
        "producer",
        url,
        tmp_path / "producer.log",
        *("--jobs", str(count), "--rate", str(rate), "--keys", "20"),
    )
    steady = spawn(procs, "worker", url, tmp_path / "w1.log", "--reaper", "--work", "0.01")
    victim = spawn(procs, "worker", url, tmp_path / "w2.log", "--work", "0.01")
    victim.wait_for_line(lambda line: line.startswith("start "))

    live_violations: list[str] = []

    def check_live_keys() -> None:
        # One query is one consistent snapshot of the file.
        live: dict[str, list[tuple[str, str]]] = {}
        for job in queue.list_jobs(limit=10_000):
            if job.status in ("pending", "active"):
                live.setdefault(job.dedupe_key or "", []).append(
                    (job.status, job.dedupe_scope or "")
                )
        for key, jobs in live.items():
            statuses = Counter(status for status, _ in jobs)
            scopes = {scope for _, scope in jobs}
            if (
                len(scopes) > 1
                or ("pending+active" in scopes and len(jobs) > 1)
                or statuses["pending"] > 1
                or statuses["active"] > 1
            ):
                live_violations.append(f"{key}: {jobs}")

    # Kill the victim mid-run a few times, restarting it each time.
    logs = [victim]
    for round_ in range(3):
        check_live_keys()
        victim.kill()
        victim.popen.wait(10)
        victim = spawn(procs, "worker", url, tmp_path / f"w2-{round_}.log", "--work", "0.01")
        logs.append(victim)
        victim.wait_for_line(lambda line: line.startswith("start "))

    producer.wait_for_line(lambda line: line == "produced", timeout=120)
    accepted = [
        line.split()[2]
        for line in producer.lines()
        if line.startswith("enqueued ") and line.split()[2] != "-"
    ]

    def settled() -> bool:
        check_live_keys()
        stats = queue.get_stats()
        return stats.pending + stats.active == 0

    wait_until(settled, timeout=180, interval=0.2)
    assert live_violations == []

    jobs = {job.id: job for job in queue.list_jobs(limit=10_000)}
    assert set(jobs) == set(accepted), "every accepted job is stored, and nothing else"
    killed_claims = {
        line.split()[1]
        for proc in logs[:-1]
        for line in proc.lines()
        if line.startswith("claimed ")
    }
    # Each job ended in one terminal state: completed, or - only when a killed worker held
    # it while a pending follower waited on its key - superseded by that follower, which
    # then completed. Nothing failed and nothing was lost.
    superseded = {job_id for job_id, job in jobs.items() if job.status == "superseded"}
    assert {job.status for job in jobs.values()} <= {"completed", "superseded"}
    # (A killed worker's claim can commit on a server and the process die before it logs
    # "claimed": so a superseded job need not appear in a killed log, but never in a
    # surviving worker's claims.)
    survivor_claims = {
        line.split()[1]
        for proc in (steady, logs[-1])
        for line in proc.lines()
        if line.startswith("claimed ")
    }
    assert superseded.isdisjoint(survivor_claims)
    for job_id in superseded:
        old = jobs[job_id]
        assert old.dedupe_scope == "pending"
        assert any(
            j.dedupe_key == old.dedupe_key
            and j.status == "completed"
            and j.created_at > old.created_at
            for j in jobs.values()
        ), f"superseded job {job_id} has no completed follower"
    assert queue.get_stats().completed + len(superseded) == len(accepted)
    # Completed exactly once: one completion in each job's record (a killed run that reached
    # its handler's end never wrote one, or its job would not have run again).
    completions = {
        job_id: sum(attempt.outcome == "completed" for attempt in job.attempt_history)
        for job_id, job in jobs.items()
    }
    assert {job_id for job_id, n in completions.items() if n != 1} == superseded
    assert all(completions[job_id] == 0 for job_id in superseded)
    runs = ended(steady.lines())
    for proc in logs:
        runs += ended(proc.lines())
    assert set(runs) | superseded == set(accepted), "every accepted job's work was done"
    # A job may run twice only if a killed worker ran it first (at-least-once), never else.
    assert {job_id for job_id, n in runs.items() if n > 1} <= killed_claims
    # No job is charged more attempts than its handler began, except by a kill between a
    # claim for an idle thread (charged at the claim, unlike a read-ahead claim, which the
    # reaper refunds) and its handler's first line: at most one attempt per job, and only
    # a few jobs per kill (the claims in flight when the process died).
    starts: Counter[str] = Counter()
    for proc in [steady, *logs]:
        starts += Counter(line.split()[1] for line in proc.lines() if line.startswith("start "))
    unstarted = {job_id: job.attempts - starts[job_id] for job_id, job in jobs.items()}
    charged = {job_id: n for job_id, n in unstarted.items() if n > 0}
    assert max(charged.values(), default=0) <= 1, charged
    assert len(charged) <= 3 * 8, charged  # 3 kills; generous: 2 idle threads per claim


def test_sigkill_charges_no_attempt_to_jobs_read_ahead_that_never_started(
    url: str, tmp_path: Path, queue: JobQueue, procs: list[Proc]
) -> None:
    ids = [queue.enqueue("t", {"n": n}, max_attempts=1) or "" for n in range(scale(url, 3000, 200))]
    into_backlog = scale(url, 100, 30)
    doomed = spawn(procs, "worker", url, tmp_path / "a.log", "--concurrency", "2", "--work", "0.02")

    # Handlers of 20 ms keep a read-ahead claim waiting for tens of milliseconds: far longer
    # than it takes from seeing one to the kill, so the kill lands while one waits.
    def read_ahead_waiting() -> bool:
        # Kill once the worker is well into the backlog and holds a claim whose run has not
        # begun (a read-ahead claim): without one there would be nothing to test. "began"
        # (the run's ``started`` event) comes before its start is recorded, so a claim
        # without it cannot have had its attempt charged.
        lines = doomed.lines()
        claimed = {line.split()[1] for line in lines if line.startswith("claimed ")}
        began = {line.split()[1] for line in lines if line.startswith("began ")}
        return len(began) >= into_backlog and bool(claimed - began)

    def frozen_with_one_waiting() -> bool:
        # The worker is stopped (SIGSTOP) and looked at again before the kill: on a busy
        # machine the claim seen waiting may start before a kill sent right after seeing it.
        if not read_ahead_waiting():
            return False
        doomed.popen.send_signal(signal.SIGSTOP)
        if read_ahead_waiting():
            return True
        doomed.popen.send_signal(signal.SIGCONT)
        return False

    wait_until(frozen_with_one_waiting, timeout=30, interval=0.005)
    doomed.kill()
    doomed.popen.wait(10)
    lines = doomed.lines()
    claimed = {line.split()[1] for line in lines if line.startswith("claimed ")}
    began = Counter(line.split()[1] for line in lines if line.startswith("began "))
    waiting = claimed - set(began)
    assert waiting, "no claim was waiting for a worker when the process died: nothing tested"

    backend = queue.backend

    def recovered() -> bool:
        backend.recover_stuck_jobs(lease(url))
        return queue.get_stats().active == 0

    wait_until(recovered, timeout=30, interval=0.1)
    jobs = {job_id: queue.get_job(job_id) for job_id in ids}
    for job_id, job in jobs.items():
        assert job is not None, f"job {job_id} is lost"
        assert job.attempts <= began[job_id], (job_id, job.status, job.attempts)
        if job.status == "failed":
            assert job.failure_kind == "stalled" and began[job_id], job_id
    # Every read-ahead claim that never reached its handler is back, its attempt unused.
    assert all(jobs[job_id].status == "pending" for job_id in waiting)  # type: ignore[union-attr]
