"""One campaign run: a store, a workload, one fault, the history, the verdict.

:func:`execute` starts ``workers`` worker processes and a producer over a fresh database
of ``store``, injects the fault once work flows, lets the producer finish and the store
settle, drains the workers (SIGTERM), reads every job back, and checks the history
(:mod:`tests.chaos.checker`). Its :class:`Result` says how many jobs were acknowledged,
lost and completed twice, what broke which rule, how long the workers took to complete a
job again after the fault ended (each process, and the first of any), and what the workers
logged from the fault's start to the end of the run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from durabl import JobQueue, backend_from_url
from durabl.testing import wait_until
from tests.chaos import checker
from tests.chaos.checker import StoredJob
from tests.chaos.history import Fault, History
from tests.chaos.proc import TICK, TYPES
from tests.chaos.stores import Store, Target

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Config:
    store: str
    fault: str
    seed: int
    #: Enqueues a second, and the most the producer makes.
    rate: float = 10.0
    jobs: int = 10_000
    workers: int = 2
    threads: int = 2
    visibility_timeout: float = 2.0
    work: float = 0.2
    schedule_every: float = 1.0
    #: Seconds of work before the fault.
    lead: float = 1.0
    #: Seconds a ``failCommand`` fault lasts.
    fail_for: float = 2.0
    #: Seconds the producer goes on after the fault ended (longer while a worker alive
    #: through it has completed nothing since, up to ``tail_max``).
    tail: float = 1.5
    tail_max: float = 45.0
    #: Seconds the store gets to finish every acknowledged job once production ends.
    settle: float = 90.0


class Worker:
    """One ``tests.chaos.proc worker`` subprocess: its history file and its log."""

    def __init__(self, run: Run, n: int, *, partitioned: bool = False) -> None:
        self.n = n
        target = run.target
        url = target.worker_url
        prefix: tuple[str, ...] = ()
        if partitioned and target.partition_url is not None:
            url, prefix = target.partition_url, target.partition_prefix
        self.history = run.directory / f"worker-{n}.jsonl"
        self.log = run.directory / f"worker-{n}.log"
        self.out = run.directory / f"worker-{n}.out"
        config = run.config
        command = [
            *prefix,
            *(sys.executable, "-m", "tests.chaos.proc", "worker"),
            *("--url", url, "--history", str(self.history)),
            *("--visibility-timeout", str(config.visibility_timeout)),
            *("--threads", str(config.threads), "--work", str(config.work)),
            *("--schedule-every", str(config.schedule_every)),
        ]
        with open(self.out, "wb") as out, open(self.log, "ab") as log:
            self.popen = subprocess.Popen(
                command, cwd=ROOT, stdout=out, stderr=log, stdin=subprocess.DEVNULL
            )
        self.pid = self.popen.pid
        self.died: float | None = None

    def busy(self) -> bool:
        """Whether a handler of this process is running (started, not ended)."""
        open_runs: set[tuple[str, int]] = set()
        try:
            lines = self.history.read_text(encoding="utf-8").splitlines()
        except OSError:
            return False
        for line in lines:
            if '"e": "start"' in line or '"e": "end"' in line:
                try:
                    event = json.loads(line)
                except json.JSONDecodeError:
                    continue
                run = (event["job"], event["att"])
                if event["e"] == "start":
                    open_runs.add(run)
                else:
                    open_runs.discard(run)
        return bool(open_runs)

    def ready(self) -> bool:
        if self.popen.poll() is not None:
            tail = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise AssertionError(f"worker {self.n} exited with {self.popen.returncode}: {tail}")
        return self.out.exists() and "ready" in self.out.read_text()

    def signal(self, signum: int) -> None:
        if self.popen.poll() is None:
            self.popen.send_signal(signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.popen.wait(10)
        self.died = time.time()

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (a drain), then SIGKILL past ``timeout``."""
        if self.popen.poll() is None:
            self.signal(signal.SIGCONT)  # a stopped process cannot drain
            self.signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        if self.died is None:
            self.died = time.time()


@dataclass
class Result:
    store: str
    fault: str
    seed: int
    jobs: int = 0
    enqueue_errors: int = 0
    lost: int = 0
    doubled: int = 0
    #: Runs beyond the first of a job (leases lost: at-least-once at work).
    reruns: int = 0
    violations: list[str] = field(default_factory=list)
    episode: dict[str, Any] = field(default_factory=dict)
    #: Seconds from the fault's end to the first completion by any worker.
    recovery: float | None = None
    #: Seconds from the fault's end to the producer's first acknowledged enqueue after it.
    enqueue_recovery: float | None = None
    #: Per worker process alive through the fault: seconds to its first completion after
    #: the fault's end (None: it completed nothing after it).
    recovery_by_worker: dict[str, float | None] = field(default_factory=dict)
    log_lines: int = 0
    tracebacks: int = 0
    log_sample: list[str] = field(default_factory=list)
    seconds: float = 0.0
    directory: str = ""

    def summary(self) -> str:
        recovery = "-" if self.recovery is None else f"{self.recovery:.1f}s"
        enqueue = "-" if self.enqueue_recovery is None else f"{self.enqueue_recovery:.1f}s"
        return (
            f"{self.store}/{self.fault} seed={self.seed}: jobs={self.jobs} lost={self.lost} "
            f"doubled={self.doubled} reruns={self.reruns} recovery={recovery} "
            f"enqueue-recovery={enqueue} "
            f"log={self.log_lines} tracebacks={self.tracebacks} "
            f"violations={len(self.violations)} ({self.seconds:.0f}s)"
        )


class Run:
    """The processes and files of one run (what a fault acts on)."""

    def __init__(self, config: Config, store: Store, directory: Path) -> None:
        self.config = config
        self.store = store
        self.directory = directory
        self.target: Target = store.fresh()
        self.workers: list[Worker] = []
        self.retired: list[Worker] = []

    def start_workers(self) -> None:
        partitioned = self.config.fault == "partition"
        self.workers = [
            Worker(self, n, partitioned=partitioned and n == 0) for n in range(self.config.workers)
        ]
        if not wait_until(lambda: all(w.ready() for w in self.workers), 60, interval=0.1):
            raise AssertionError("the workers were not ready within 60 s")

    def victim(self) -> Worker:
        """The worker a fault hits: the first, once it is running a job (a fault that
        catches no job proves less), or after 5 s whatever it does."""
        worker = self.workers[0]
        wait_until(worker.busy, 5.0, interval=0.02)
        return worker

    def respawn(self, dead: Worker) -> None:
        """Start a worker in place of ``dead`` (a supervisor's restart)."""
        self.retired.append(dead)
        n = len(self.workers) + len(self.retired) - 1
        fresh = Worker(self, n)
        self.workers[self.workers.index(dead)] = fresh

    def all_workers(self) -> Iterator[Worker]:
        yield from self.retired
        yield from self.workers


def stored(job: Any) -> StoredJob:
    def epoch(instant: datetime | None) -> float | None:
        return None if instant is None else instant.timestamp()

    return StoredJob(
        id=job.id,
        type=job.type,
        status=job.status,
        created_at=job.created_at.timestamp(),
        finished_at=epoch(job.finished_at),
        run_at=job.run_at.timestamp(),
        dedupe_key=job.dedupe_key,
        completed_attempts=sum(1 for a in job.attempt_history if a.outcome == "completed"),
        failure_kind=job.failure_kind,
        attempts_ended=len(job.attempt_history),
    )


def _settled(reader: JobQueue) -> bool:
    # Ticks keep coming while the scheduler runs, so pending ticks never reach zero; but an
    # active tick that a killed worker held is only reaped once its lease runs out: wait
    # for that too, or the drain that follows leaves it active.
    try:
        return reader.count_jobs(type=TICK, status="active") == 0 and all(
            reader.count_jobs(type=type, status=status) == 0
            for type in TYPES
            if type != TICK
            for status in ("pending", "active")
        )
    except Exception:  # the store may still be coming back: ask again
        return False


def execute(config: Config, store: Store, directory: Path) -> Result:
    """Run ``config`` on ``store``; the files go to ``directory``."""
    from tests.chaos.faults import FAULTS

    began = time.monotonic()
    directory.mkdir(parents=True, exist_ok=False)  # a history of its own, nothing older
    result = Result(config.store, config.fault, config.seed, directory=str(directory))
    run = Run(config, store, directory)
    reader = JobQueue(backend_from_url(run.target.reader_url))
    producer: subprocess.Popen[bytes] | None = None
    fault: Fault | None = None
    try:
        reader.startup()  # the schema, before the workers race to make it
        run.start_workers()
        stop_file = directory / "stop-producing"
        with open(directory / "producer.log", "wb") as producer_log:
            producer = subprocess.Popen(
                [
                    *(sys.executable, "-m", "tests.chaos.proc", "producer"),
                    *("--url", run.target.producer_url),
                    *("--history", str(directory / "producer.jsonl")),
                    *("--jobs", str(config.jobs), "--rate", str(config.rate)),
                    *("--seed", str(config.seed), "--stop-file", str(stop_file)),
                ],
                cwd=ROOT,
                stdout=subprocess.DEVNULL,
                stderr=producer_log,
            )
        time.sleep(config.lead)  # work flows: then the fault
        fault = FAULTS[config.fault].inject(run)
        with open(directory / "faults.jsonl", "a", encoding="utf-8") as faults:
            faults.write(json.dumps({"e": "fault", **asdict(fault)}) + "\n")
        time.sleep(config.tail)
        wait_until(lambda: _every_worker_completed_since(run, fault), config.tail_max, 0.25)
        stop_file.touch()
        producer.wait(timeout=60)
        settled = wait_until(lambda: _settled(reader), config.settle, interval=0.5)
        for worker in run.workers:
            worker.stop()
        jobs = {job.id: stored(job) for job in _read_all(reader)}
        if not settled:
            result.violations.append("settle: acknowledged jobs left unfinished past the bound")
    finally:
        if producer is not None and producer.poll() is None:
            producer.kill()
            producer.wait(10)
        for worker in run.all_workers():
            worker.stop(timeout=5)
        reader.backend.close()
    with open(directory / "jobs.json", "w", encoding="utf-8") as rows:  # for a re-check
        json.dump([asdict(job) for job in jobs.values()], rows)
    with open(directory / "faults.jsonl", "a", encoding="utf-8") as deaths:
        for worker in run.all_workers():
            if worker.died is not None:
                deaths.write(json.dumps({"e": "death", "pid": worker.pid, "t": worker.died}) + "\n")
    history = History.read(sorted(directory.glob("*.jsonl")))
    violations = checker.check(
        history,
        jobs,
        visibility_timeout=config.visibility_timeout,
        tick_type=TICK,
        every=config.schedule_every,
    )
    result.violations += [str(v) for v in violations]
    result.jobs = sum(1 for e in history.enqueues if e.job is not None)
    result.enqueue_errors = history.enqueue_errors
    result.lost = sum(1 for v in violations if v.rule in ("lost", "unfinished"))
    result.doubled = len({v.job for v in violations if v.rule == "completed-twice"})
    result.reruns = len(history.runs) - len({run.job for run in history.runs})
    assert fault is not None
    result.episode = asdict(fault)
    _recovery(result, history, fault, run)
    _logs(result, run, fault)
    result.seconds = time.monotonic() - began
    return result


def _every_worker_completed_since(run: Run, fault: Fault) -> bool:
    """Whether each worker alive now has had a completion acknowledged since the fault."""
    for worker in run.workers:
        try:
            lines = worker.history.read_text(encoding="utf-8").splitlines()
        except OSError:
            return False
        if not any(
            '"r": "completed"' in line and json.loads(line)["t1"] >= fault.t1
            for line in lines
            if line.endswith("}")
        ):
            return False
    return True


def _read_all(reader: JobQueue) -> list[Any]:
    def attempt() -> list[Any]:
        return reader.list_jobs(limit=0)

    for _ in range(20):
        try:
            return attempt()
        except Exception:  # the store coming back after the fault: try again
            time.sleep(1.0)
    return attempt()


def _recovery(result: Result, history: History, fault: Fault, run: Run) -> None:
    completions = sorted(
        (w.t1, w.pid)
        for w in history.writes
        if w.op == "complete" and w.result == "completed" and w.t1 >= fault.t1
    )
    if completions:
        result.recovery = round(completions[0][0] - fault.t1, 3)
    acknowledged = [e.t1 for e in history.enqueues if e.t1 >= fault.t1]
    if acknowledged:
        result.enqueue_recovery = round(min(acknowledged) - fault.t1, 3)
    first: dict[int, float] = {}
    for t, pid in completions:
        first.setdefault(pid, t)
    for worker in run.workers:  # not those the fault killed
        at = first.get(worker.pid)
        result.recovery_by_worker[str(worker.pid)] = None if at is None else round(at - fault.t1, 3)


def _logs(result: Result, run: Run, fault: Fault) -> None:
    """What the workers logged from the fault's start on: lines (a traceback's lines count
    once, with the line that carried it) and tracebacks."""
    sample: list[str] = []
    for worker in run.all_workers():
        if not worker.log.exists():
            continue
        stamped_since_fault = False
        for line in worker.log.read_text(errors="replace").splitlines():
            stamp = line.split(" ", 1)[0]
            try:
                at = float(stamp)
            except ValueError:
                if stamped_since_fault and line.startswith("Traceback"):
                    result.tracebacks += 1
                continue
            stamped_since_fault = at >= fault.t0
            if stamped_since_fault:
                result.log_lines += 1
                if len(sample) < 8:
                    sample.append(line[:300])
    result.log_sample = sample


def write_results(results: list[Result], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps([asdict(r) for r in results], indent=2, default=str) + "\n")


def results_directory() -> Path:
    """Where runs keep their files and results: ``DURABL_CHAOS_DIR``, else a temp dir."""
    chosen = os.environ.get("DURABL_CHAOS_DIR")
    if chosen:
        return Path(chosen)
    import tempfile

    return Path(tempfile.mkdtemp(prefix="durabl-chaos-"))
