"""What every library's measurement shares: timing records, paced producers, subprocesses,
and reading SQLite settings.

Times are wall-clock ``time.time()`` values, because a job may be enqueued in one process
and run in another on the same machine. A handler records when it started and when it
ended, plus the enqueue time its payload carries (0.0 when there is none).
"""

from __future__ import annotations

import contextlib
import os
import signal
import sqlite3
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

BENCH_DIR = Path(__file__).resolve().parent.parent
ROOT = BENCH_DIR.parent

NOOP = "noop"  # the job type / task name every library runs
POLL_INTERVAL = 0.05  # seconds: the idle polling interval given to every library
IN_PROCESS = "in-process"
OTHER_PROCESS = "other process"
SYNCHRONOUS_NAMES = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
STOP_GRACE = 5.0  # seconds a subprocess gets after SIGTERM before SIGKILL


class Skip(Exception):
    """A library cannot be measured here (not installed, not ready); the row says why."""


# -- what a measurement returns ----------------------------------------------------------
@dataclass(frozen=True)
class Measured:
    """One row's numbers. ``None`` means "not measured in this scenario"."""

    jobs_per_s: float | None = None
    wall_s: float | None = None
    p50_ms: float | None = None
    p99_ms: float | None = None
    journal_mode: str = "?"
    synchronous: str = "?"


@dataclass(frozen=True)
class Record:
    enqueued_at: float  # producer's time.time() carried by the payload; 0.0 if none
    started: float  # handler start, time.time()
    ended: float  # handler end, time.time()


def throughput_of(records: Sequence[Record], jobs: int, began: float) -> tuple[float, float]:
    """(jobs/s from the first handler start to the last handler end, wall s since
    ``began``). Raises TimeoutError when fewer than ``jobs`` handlers ran."""
    if len(records) < jobs:
        raise TimeoutError(f"only {len(records)} of {jobs} jobs ran before the timeout")
    first = min(r.started for r in records)
    last = max(r.ended for r in records)
    return jobs / max(last - first, 1e-9), last - began


def latency_of(records: Sequence[Record], count: int) -> tuple[float, float]:
    """(p50, p99) of enqueue -> handler start, in milliseconds."""
    if len(records) < count:
        raise TimeoutError(f"only {len(records)} of {count} jobs ran before the timeout")
    samples = sorted((r.started - r.enqueued_at) * 1000.0 for r in records)
    cuts = statistics.quantiles(samples, n=100, method="inclusive")
    return cuts[49], cuts[98]


# -- recording handler runs --------------------------------------------------------------
class Recorder:
    """Records from handlers running in this process; ``wait`` returns once ``expected``
    runs are in (or at the timeout, with what there is)."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self._lock = threading.Lock()
        self._records: list[Record] = []
        self._done = threading.Event()

    def record(self, enqueued_at: float, started: float) -> None:
        ended = time.time()
        with self._lock:
            self._records.append(Record(enqueued_at, started, ended))
            if len(self._records) >= self.expected:
                self._done.set()

    def wait(self, timeout: float) -> list[Record]:
        self._done.wait(timeout)
        with self._lock:
            return list(self._records)


_sink: IO[str] | None = None


def append_record(directory: str, enqueued_at: float, started: float) -> None:
    """For handlers in worker processes: one line per run, one file per process."""
    global _sink
    ended = time.time()
    if _sink is None:
        _sink = open(Path(directory) / f"records-{os.getpid()}.txt", "a", encoding="ascii")  # noqa: SIM115
    _sink.write(f"{enqueued_at!r} {started!r} {ended!r}\n")
    _sink.flush()


def read_records(directory: Path) -> list[Record]:
    records: list[Record] = []
    for path in directory.glob("records-*.txt"):
        for line in path.read_text(encoding="ascii").splitlines():
            parts = line.split()
            if len(parts) == 3:  # a line still being written is skipped until it is whole
                records.append(Record(*(float(p) for p in parts)))
    return records


def wait_for_records(
    directory: Path,
    expected: int,
    timeout: float,
    check: Callable[[], None] = lambda: None,
) -> list[Record]:
    """Poll the record files until ``expected`` runs are in or ``timeout`` passes.
    ``check`` runs on each round and may raise (e.g. when a worker process died)."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        records = read_records(directory)
        if len(records) >= expected or time.monotonic() >= deadline:
            return records
        check()
        pause.wait(0.05)


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while not condition():
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not after {timeout:g}s")
        pause.wait(0.02)


# -- producers ---------------------------------------------------------------------------
def produce_paced(count: int, rate: float, enqueue: Callable[[float], object]) -> None:
    """Enqueue ``count`` jobs at a steady ``rate`` per second; each carries its enqueue
    time (``time.time()``)."""
    pause = threading.Event()
    began = time.perf_counter()
    for i in range(count):
        delay = began + i / rate - time.perf_counter()
        if delay > 0:
            pause.wait(delay)
        enqueue(time.time())


def python_c(module: str, function: str, *args: str) -> list[str]:
    """``python -c`` running ``peers.<module>.<function>(*args)`` in another process."""
    code = f"import sys; from peers.{module} import {function}; {function}(*sys.argv[1:])"
    return [sys.executable, "-c", code, *args]


def child_env(extra: Mapping[str, str] | None = None, path: Sequence[Path] = ()) -> dict[str, str]:
    """This environment, with ``path`` + bench/ + the checkout on PYTHONPATH."""
    env = dict(os.environ)
    entries = [str(p) for p in (*path, BENCH_DIR, ROOT)]
    if env.get("PYTHONPATH"):
        entries.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(entries)
    env.update(extra or {})
    return env


class Processes:
    """Subprocesses of one measurement, each logging to a file; leaving the block (or
    ``stop_all``) ends every one still running: SIGTERM, then SIGKILL after a grace."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self._running: list[tuple[subprocess.Popen[bytes], str, Path]] = []

    def __enter__(self) -> Processes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_all()

    def start(self, name: str, args: list[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
        log = self.logs / f"{name}.log"
        with open(log, "wb") as out:
            proc = subprocess.Popen(
                args,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.logs,
            )
        self._running.append((proc, name, log))
        return proc

    def name_of(self, proc: subprocess.Popen[bytes]) -> str:
        return next(name for p, name, _ in self._running if p is proc)

    def log_text(self, proc: subprocess.Popen[bytes]) -> str:
        log = next(log for p, _, log in self._running if p is proc)
        try:
            return log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, proc: subprocess.Popen[bytes]) -> str:
        """The last line of its output: the exception, when it died of one."""
        lines = self.log_text(proc).strip().splitlines()
        return lines[-1].strip() if lines else "(no output)"

    def check_alive(self) -> None:
        """Raise when a subprocess has exited with an error."""
        for proc, name, _ in self._running:
            code = proc.poll()
            if code not in (None, 0):
                raise RuntimeError(f"{name} exited with {code}: {self.tail(proc)}")

    def finish(self, proc: subprocess.Popen[bytes], timeout: float) -> None:
        """Wait for ``proc`` to exit by itself; raise if it fails or takes too long."""
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{self.name_of(proc)} did not finish within {timeout:g}s") from None
        if code != 0:
            raise RuntimeError(f"{self.name_of(proc)} exited with {code}: {self.tail(proc)}")

    def stop_all(self) -> None:
        running = [proc for proc, _, _ in self._running if proc.poll() is None]
        for proc in running:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for proc in running:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(STOP_GRACE)


# -- SQLite settings ---------------------------------------------------------------------
def file_journal_mode(path: Path) -> str:
    """The journal mode stored in the file (WAL persists in the header): read on a
    connection of our own after the library has set it."""
    with contextlib.closing(sqlite3.connect(path)) as conn:
        return str(conn.execute("PRAGMA journal_mode").fetchone()[0]).upper()


def synchronous_name(value: Any) -> str:
    """``PRAGMA synchronous`` returns a number; the docs use names."""
    try:
        return SYNCHRONOUS_NAMES.get(int(value), str(value))
    except (TypeError, ValueError):
        return str(value).upper()


# -- what throughput.py asks of each library ---------------------------------------------
class Library:
    """One library under test. ``unit`` says what a worker is (a thread or a process)."""

    name: str = "?"
    unit: str = "thread"
    #: How its idle polling was set, for the notes under the table.
    polling: str = ""

    def version(self) -> str:
        """Its version; raises Skip when it cannot run here."""
        raise NotImplementedError

    def throughput(self, workdir: Path, jobs: int, workers: int, timeout: float) -> Measured:
        """Enqueue ``jobs`` no-op jobs into a fresh file, then run them on ``workers``."""
        raise NotImplementedError

    def latency(
        self, workdir: Path, count: int, rate: float, workers: int, producer: str, timeout: float
    ) -> Measured:
        """Idle workers; ``count`` jobs enqueued at ``rate``/s by a producer in this process
        (IN_PROCESS) or in another one (OTHER_PROCESS): p50/p99 of enqueue -> start."""
        raise NotImplementedError
