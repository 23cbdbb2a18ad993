"""The burn-down harness every contender runs through: P worker processes of T threads each
work through a backlog that is already stored, while this process samples, every slice,
how many jobs are done, what the database weighs, and how much CPU the workers and the
database server burned.

A contender supplies a worker function (run in each spawned process), a way to count what
is done (a shared counter the workers bump after each committed completion, or a query),
and a sampler of the database's sizes. The harness knows nothing of any library.
"""

from __future__ import annotations

import multiprocessing
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

SPAWN = multiprocessing.get_context("spawn")
READY_TIMEOUT = 120.0  # seconds every worker process gets to open its store
STOP_TIMEOUT = 30.0  # seconds a worker gets to shut down after the stop event
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
POLL_S = 0.05  # seconds between reads of the done count (the end is seen this closely)


class Event(Protocol):
    def set(self) -> None: ...
    def wait(self, timeout: float | None = None) -> bool: ...
    def is_set(self) -> bool: ...


@dataclass
class Signals:
    """What the harness shares with its workers: one counter slot per thread (a worker
    adds to the slots of its own threads only, so no slot has two writers), one ready
    flag per process, and the go and stop events."""

    counts: Any  # a ctypes array of int64 in shared memory (lock=False: no lock to take)
    ready: Any  # a ctypes array of bytes in shared memory
    go: Event
    stop: Event

    @classmethod
    def make(cls, processes: int, threads: int) -> Signals:
        return cls(
            counts=SPAWN.Array("q", processes * threads, lock=False),
            ready=SPAWN.Array("b", processes, lock=False),
            go=SPAWN.Event(),
            stop=SPAWN.Event(),
        )


#: A worker: (process index, threads, signals, spec) -> None, run in a spawned process.
#: It opens what it needs, sets ``ready[index]``, waits for ``go``, works until ``stop``
#: (or until the backlog is gone), adding each committed completion to a count slot.
Worker = Callable[[int, int, Signals, Mapping[str, Any]], None]


@dataclass
class Slice:
    t: float  # seconds since go
    done: int  # jobs done so far
    rate: float  # jobs/s over this slice
    stats: dict[str, Any]  # the database's sizes (and more) at the slice's end
    worker_cpu_s: float  # CPU seconds the worker processes used so far
    server_cpu_s: float  # CPU seconds the database server's processes used so far


@dataclass
class BurnResult:
    name: str
    jobs: int
    processes: int
    threads: int
    slice_s: float
    seconds: float  # go -> the last job done
    jobs_per_s: float
    slices: list[Slice] = field(default_factory=list)
    profile: dict[str, Any] | None = None
    notes: list[str] = field(default_factory=list)
    insert_s: float | None = None
    insert_method: str = ""
    settings: dict[str, Any] = field(default_factory=dict)
    final_stats: dict[str, Any] = field(default_factory=dict)

    def sustained(self) -> dict[str, float]:
        """Throughput over the first and the last tenth of the jobs (by when the count
        crossed 10 % and 90 %, interpolated within slices), and their ratio."""
        first = self.jobs * 0.1
        last = self.jobs * 0.9
        t_first = _crossing(self.slices, first)
        t_last = _crossing(self.slices, last)
        first_rate = first / max(t_first, 1e-9)
        last_rate = (self.jobs - last) / max(self.seconds - t_last, 1e-9)
        return {
            "first_tenth_jobs_per_s": first_rate,
            "last_tenth_jobs_per_s": last_rate,
            "last_over_first": last_rate / first_rate,
        }


def _crossing(slices: list[Slice], count: float) -> float:
    """When the done count crossed ``count``: linear within the slice that crossed it."""
    before_t, before_done = 0.0, 0
    for s in slices:
        if s.done >= count:
            span = s.done - before_done
            share = (count - before_done) / span if span else 1.0
            return before_t + share * (s.t - before_t)
        before_t, before_done = s.t, s.done
    return before_t


# -- CPU accounting from /proc ----------------------------------------------------------------
def cpu_seconds(pid: int) -> float:
    """utime + stime of one process (and its waited-for children), 0.0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(v) for v in fields[11:13]) / CLOCK_TICKS


def parent_of(pid: int) -> int | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1])


def descendants(root: int) -> list[int]:
    """``root`` and every process below it (a PostgreSQL postmaster's backends and
    background processes): this server's only, not another server's on the machine."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            parent = parent_of(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, ()))
    return found


class ServerCpu:
    """CPU of one database server's processes (``root`` and its descendants) since the
    start, counting backends that come and go: each pid's last reading is kept after it
    exits (a backend that starts and ends within one slice is missed)."""

    def __init__(self, root: int | None) -> None:
        self.root = root
        self._base: dict[int, float] = {}
        self._last: dict[int, float] = {}
        if root is not None:
            self._base = {pid: cpu_seconds(pid) for pid in descendants(root)}

    def used(self) -> float:
        if self.root is None:
            return 0.0
        for pid in descendants(self.root):
            now = cpu_seconds(pid)
            if now:
                self._last[pid] = now
        return sum(v - self._base.get(pid, 0.0) for pid, v in self._last.items())


# -- the run ----------------------------------------------------------------------------------
def burn(
    name: str,
    worker: Worker,
    spec: Mapping[str, Any],
    *,
    jobs: int,
    processes: int,
    threads: int,
    slice_s: float,
    sample: Callable[[], dict[str, Any]],
    timeout: float,
    done: Callable[[Signals], int] | None = None,
    server_root: int | None = None,
    on_started: Callable[[list[int]], None] | None = None,
) -> BurnResult:
    """Start the workers, wait until each has opened its store, let them go, and sample
    every ``slice_s`` until ``jobs`` are done (``done``: by default the sum of the
    counters). Raises when a worker dies or ``timeout`` passes."""
    signals = Signals.make(processes, threads)
    count = done or (lambda s: sum(s.counts))
    procs = [
        SPAWN.Process(
            target=worker, args=(i, threads, signals, dict(spec)), name=f"{name}-{i}", daemon=True
        )
        for i in range(processes)
    ]
    for p in procs:
        p.start()
    try:
        _wait_ready(procs, signals)
        pids = [p.pid for p in procs if p.pid is not None]
        server = ServerCpu(server_root)
        workers_base = sum(cpu_seconds(pid) for pid in pids)
        slices: list[Slice] = []
        began = time.monotonic()
        signals.go.set()
        if on_started is not None:
            on_started(pids)
        slices.append(Slice(0.0, 0, 0.0, sample(), 0.0, 0.0))
        last_t, last_done = 0.0, 0
        next_at = began + slice_s
        while True:
            # Poll the count finely, so the end is seen within POLL_S; sample per slice.
            time.sleep(POLL_S)  # a fixed cadence: there is no event to wait on
            finished = count(signals)
            now = time.monotonic()
            if finished < jobs and now < next_at:
                continue
            next_at += slice_s
            t = now - began
            stats = {**sample(), "load1": os.getloadavg()[0]}  # the machine's, others' too
            worker_cpu = sum(cpu_seconds(pid) for pid in pids) - workers_base
            rate = (finished - last_done) / max(t - last_t, 1e-9)
            slices.append(Slice(t, finished, rate, stats, worker_cpu, server.used()))
            last_t, last_done = t, finished
            if finished >= jobs:
                break
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"{dead[0].name} exited with {dead[0].exitcode}")
            if t > timeout:
                raise TimeoutError(f"{name}: {finished} of {jobs} done after {t:.0f} s")
        seconds = _finish_time(slices, jobs)
        return BurnResult(
            name=name,
            jobs=jobs,
            processes=processes,
            threads=threads,
            slice_s=slice_s,
            seconds=seconds,
            jobs_per_s=jobs / seconds,
            slices=slices,
        )
    finally:
        signals.stop.set()
        for p in procs:
            p.join(STOP_TIMEOUT)
            if p.is_alive():
                p.kill()
                p.join()


def _finish_time(slices: list[Slice], jobs: int) -> float:
    """When the last job was done, interpolated within the last slice."""
    return _crossing(slices, jobs)


def _wait_ready(procs: list[Any], signals: Signals) -> None:
    deadline = time.monotonic() + READY_TIMEOUT
    while not all(signals.ready):
        for p in procs:
            if p.exitcode is not None:
                raise RuntimeError(f"{p.name} exited with {p.exitcode} before it was ready")
        if time.monotonic() > deadline:
            raise TimeoutError("worker processes not ready")
        time.sleep(0.05)  # child processes starting: nothing to wait on
