"""The history of a campaign run, written outside the store.

Every process appends to a file of its own, one JSON object a line, flushed at once (so a
SIGKILL loses at most the line being written, which the reader skips). Times are
``time.time()``: one wall clock for every process on the machine, the clock the stores
stamp their rows with too.

Lines, by ``e``:

- ``claim``: the store returned a claim (``job``, ``tok``, ``att``, ``type``, the job's
  ``run_at``); ``t0``/``t1`` when the call was made and when it returned.
- ``beat``: a lease renewal and its result ``r`` (``applied``, ``lease-lost``,
  ``cancel-requested``, or ``error`` when the call raised: it may have been applied).
- ``write``: a fenced write (``op``: ``complete``, ``fail``, ``fail-fatal``, ``release``,
  ``journal``) and its result ``r`` (a ``JobResult`` status, ``applied``/``lease-lost``
  for a journal append, ``error``); a journal append lists the step positions it wrote.
- ``start``/``end``: a handler began / returned (``outcome``: ``returned``, ``aborted``,
  ``raised``), with the claim token of its run when the process saw the claim.
- ``step``: an orchestration step's function ran (``seq``, ``name``).
- ``enqueue``: the producer was acknowledged (``job`` is the new id, or None when a dedupe
  key already covered it); ``enqueue-error``: it was not (the job may exist or not).
- ``fault``: written by the campaign runner: a fault episode (``name``, ``t0``, ``t1``,
  ``pids`` it hit); ``death``: when a worker process was seen dead (killed or exited, at
  ``t``), which ends the runs it left open.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

TERMINAL_RESULTS = frozenset({"completed", "failed-terminal", "cancelled", "superseded"})
TERMINAL_STATUSES = frozenset({"completed", "failed", "superseded", "cancelled"})


class Recorder:
    """Appends history lines to one file; safe to share between threads."""

    def __init__(self, path: Path | str, pid: int) -> None:
        self._file: TextIO = open(path, "a", buffering=1, encoding="utf-8")  # noqa: SIM115
        self._lock = threading.Lock()
        self.pid = pid

    def write(self, event: str, **fields: Any) -> None:
        line = json.dumps({"e": event, "pid": self.pid, **fields}, default=str)
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


@dataclass(frozen=True)
class Claim:
    pid: int
    job: str
    tok: str
    att: int
    t0: float
    t1: float
    #: The job's ``run_at`` as claimed: a tick's instant at its first claim (a retry or
    #: the reaper moves it later).
    run_at: float | None = None


@dataclass(frozen=True)
class Beat:
    pid: int
    job: str
    tok: str
    result: str
    t0: float
    t1: float


@dataclass(frozen=True)
class Write:
    pid: int
    op: str
    job: str
    tok: str
    result: str
    t0: float
    t1: float
    steps: tuple[int, ...] = ()


@dataclass
class Run:
    """One handler run: its start and, when the process lived to see it, its end."""

    pid: int
    job: str
    tok: str | None
    att: int
    type: str
    start: float
    end: float | None = None
    outcome: str | None = None
    ckey: str | None = None
    limit: int | None = None


@dataclass(frozen=True)
class Step:
    pid: int
    job: str
    tok: str | None
    seq: int
    name: str
    t0: float
    t1: float


@dataclass(frozen=True)
class Enqueue:
    job: str | None
    type: str
    key: str | None
    t0: float
    t1: float


@dataclass(frozen=True)
class Fault:
    name: str
    t0: float
    t1: float
    pids: tuple[int, ...] = ()


@dataclass
class History:
    """Every line of a run, by kind."""

    claims: list[Claim] = field(default_factory=list)
    beats: list[Beat] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    enqueues: list[Enqueue] = field(default_factory=list)
    enqueue_errors: int = 0
    faults: list[Fault] = field(default_factory=list)
    #: When each process was seen dead (killed, or exited): its unfinished runs ended then.
    deaths: dict[int, float] = field(default_factory=dict)

    def add(self, line: dict[str, Any]) -> None:
        kind = line["e"]
        pid = int(line.get("pid", 0))
        if kind == "claim":
            self.claims.append(
                Claim(
                    pid,
                    line["job"],
                    line["tok"],
                    line["att"],
                    line["t0"],
                    line["t1"],
                    line.get("run_at"),
                )
            )
        elif kind == "beat":
            self.beats.append(
                Beat(pid, line["job"], line["tok"], line["r"], line["t0"], line["t1"])
            )
        elif kind == "write":
            self.writes.append(
                Write(
                    pid,
                    line["op"],
                    line["job"],
                    line["tok"],
                    line["r"],
                    line["t0"],
                    line["t1"],
                    tuple(line.get("steps", ())),
                )
            )
        elif kind == "start":
            self.runs.append(
                Run(
                    pid,
                    line["job"],
                    line.get("tok"),
                    line["att"],
                    line["type"],
                    line["t"],
                    ckey=line.get("ckey"),
                    limit=line.get("limit"),
                )
            )
        elif kind == "end":
            self._end(pid, line)
        elif kind == "step":
            self.steps.append(
                Step(
                    pid,
                    line["job"],
                    line.get("tok"),
                    line["seq"],
                    line["name"],
                    line["t0"],
                    line["t1"],
                )
            )
        elif kind == "enqueue":
            self.enqueues.append(
                Enqueue(line.get("job"), line["type"], line.get("key"), line["t0"], line["t1"])
            )
        elif kind == "enqueue-error":
            self.enqueue_errors += 1
        elif kind == "death":
            self.deaths[pid] = line["t"]
        elif kind == "fault":
            self.faults.append(
                Fault(line["name"], line["t0"], line["t1"], tuple(line.get("pids", ())))
            )

    def _end(self, pid: int, line: dict[str, Any]) -> None:
        for run in reversed(self.runs):  # the latest open run of that claim in that process
            if (
                run.pid == pid
                and run.job == line["job"]
                and run.att == line["att"]
                and run.end is None
            ):
                run.end = line["t"]
                run.outcome = line["outcome"]
                return

    @classmethod
    def read(cls, paths: list[Path]) -> History:
        """The history in ``paths`` (a line cut short by a kill is skipped)."""
        history = cls()
        for path in sorted(paths):
            if not path.exists():
                continue
            for raw in path.read_text(encoding="utf-8").splitlines():
                try:
                    line = json.loads(raw)
                except json.JSONDecodeError:
                    continue
                history.add(line)
        return history
