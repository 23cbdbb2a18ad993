"""The invariants a campaign run must keep, checked against its history and the store's
final rows. Pure functions: each takes what it needs and returns the violations it found
(empty: the rule held). ``tests/chaos/test_checker.py`` shows each one a history that
breaks it.

Times in the history are the processes' wall clock as each call began (``t0``) and
returned (``t1``), so what the store did happened between the two. Each rule is stated so
that this uncertainty can only hide a violation, never invent one: a lease counts as
expired no earlier than the last renewal that *began* plus the visibility timeout, and as
held no later than the last renewal that *returned* (or might have been applied) plus it.
``SKEW`` allows for the store stamping its rows on a clock of its own (the server's).
"""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone

from tests.chaos.history import TERMINAL_RESULTS, TERMINAL_STATUSES, History, Run

#: Seconds two clocks on one machine may disagree by, as the stores stamp their rows (the
#: server's clock on PostgreSQL; a millisecond resolution on every store).
SKEW = 0.05
#: A ``run_at`` past this is a held tick copy (MongoDB's scheduler outbox), not a tick.
HELD = datetime(9000, 1, 1, tzinfo=timezone.utc).timestamp()


@dataclass(frozen=True)
class Violation:
    rule: str
    job: str | None
    detail: str

    def __str__(self) -> str:
        return f"{self.rule}: job {self.job}: {self.detail}"


@dataclass(frozen=True)
class StoredJob:
    """A job as the store holds it once the run settled (times as epoch seconds)."""

    id: str
    type: str
    status: str
    created_at: float
    finished_at: float | None = None
    run_at: float = 0.0
    dedupe_key: str | None = None
    completed_attempts: int = 0
    failure_kind: str | None = None
    #: The claims the store ended (the length of its attempt history).
    attempts_ended: int = 0


def lost_or_unfinished(history: History, jobs: dict[str, StoredJob]) -> list[Violation]:
    """Every enqueue the producer was acknowledged with an id is in the store, in exactly
    one terminal state, and completed (no handler here ever fails)."""
    found: list[Violation] = []
    for enqueue in history.enqueues:
        if enqueue.job is None:
            continue
        job = jobs.get(enqueue.job)
        if job is None:
            found.append(Violation("lost", enqueue.job, f"acknowledged at {enqueue.t1:.3f}"))
        elif job.status not in TERMINAL_STATUSES:
            found.append(Violation("unfinished", job.id, f"still {job.status}"))
        elif job.status != "completed":
            found.append(Violation("not-completed", job.id, f"{job.status} ({job.failure_kind})"))
    return found


def completed_twice(history: History, jobs: dict[str, StoredJob]) -> list[Violation]:
    """No job's completion was acknowledged to two runs, and the store's attempt history
    shows one completed attempt at most."""
    acknowledged: dict[str, list[str]] = defaultdict(list)
    for write in history.writes:
        if write.op == "complete" and write.result == "completed":
            acknowledged[write.job].append(f"{write.tok} in {write.pid} at {write.t1:.3f}")
    found = [
        Violation("completed-twice", job, "; ".join(runs))
        for job, runs in acknowledged.items()
        if len(runs) > 1
    ]
    found += [
        Violation("completed-twice", job.id, f"{job.completed_attempts} completed attempts stored")
        for job in jobs.values()
        if job.completed_attempts > 1
    ]
    return found


def terminal_at(history: History) -> dict[str, float]:
    """When each job was first acknowledged terminal to a worker (``t1`` of the write)."""
    first: dict[str, float] = {}
    for write in history.writes:
        if write.result in TERMINAL_RESULTS:
            first[write.job] = min(write.t1, first.get(write.job, write.t1))
    return first


def started_after_terminal(
    history: History, jobs: dict[str, StoredJob] | None = None
) -> list[Violation]:
    """No handler started after its job was terminal: acknowledged so to a worker, or
    stamped finished by the store (a write whose reply was lost may still have landed). A
    claim after that would have to take a finished job."""
    terminal = terminal_at(history)
    for job in (jobs or {}).values():
        if job.finished_at is not None and job.status in TERMINAL_STATUSES:
            at = job.finished_at + SKEW
            terminal[job.id] = min(at, terminal.get(job.id, at))
    return [
        Violation(
            "started-after-terminal",
            run.job,
            f"started in {run.pid} at {run.start:.3f}, terminal at {terminal[run.job]:.3f}",
        )
        for run in history.runs
        if run.job in terminal and run.start > terminal[run.job]
    ]


def run_end(run: Run, history: History) -> float:
    """When a run ended: its end line, else its process's death, else never."""
    if run.end is not None:
        return run.end
    return history.deaths.get(run.pid, float("inf"))


class Leases:
    """Per claim token, what bounds its lease: when its claim or renewals began and ended."""

    def __init__(self, history: History, visibility_timeout: float) -> None:
        self.vt = visibility_timeout
        self.claimed: dict[str, float] = {}  # claim returned (t1)
        self._began: dict[str, float] = {}  # latest renewal, or the claim, that began
        self._returned: dict[str, float] = {}  # latest that returned or may have applied
        self._released: dict[str, float] = {}  # earliest release that may have applied, began
        for claim in history.claims:
            self.claimed[claim.tok] = claim.t1
            self._began[claim.tok] = claim.t0
            self._returned[claim.tok] = claim.t1
        for beat in history.beats:
            if beat.result in ("applied", "cancel-requested"):
                self._began[beat.tok] = max(self._began.get(beat.tok, beat.t0), beat.t0)
            if beat.result in ("applied", "cancel-requested", "error"):
                self._returned[beat.tok] = max(self._returned.get(beat.tok, beat.t1), beat.t1)
        for write in history.writes:
            # A drain past its grace releases the job of a handler still running (durabl
            # abandons it, never kills it): the lease ends there, and another claim is due.
            if write.op == "release" and write.result in ("released", "error"):
                self._released[write.tok] = min(self._released.get(write.tok, write.t0), write.t0)

    def expired_no_earlier_than(self, token: str) -> float | None:
        """When the lease ran out at the earliest: its last renewal's lease, or the release
        that began before that ended it."""
        began = self._began.get(token)
        if began is None:
            return None
        return min(began + self.vt, self._released.get(token, began + self.vt))

    def held_no_later_than(self, token: str) -> float | None:
        returned = self._returned.get(token)
        return None if returned is None else returned + self.vt


def overlapping_runs(history: History, visibility_timeout: float) -> list[Violation]:
    """Two runs of one job overlap only when the second was claimed after the first's
    lease had expired (a paused, cut-off or slow holder: durabl promises at-least-once,
    and fences the stale run's writes)."""
    leases = Leases(history, visibility_timeout)
    by_job: dict[str, list[Run]] = defaultdict(list)
    for run in history.runs:
        by_job[run.job].append(run)
    found: list[Violation] = []
    for job, runs in by_job.items():
        runs.sort(key=lambda r: r.start)
        for i, first in enumerate(runs):
            first_end = run_end(first, history)
            for second in runs[i + 1 :]:
                if second.start >= first_end:
                    break
                found += _overlap(job, first, second, leases)
    return found


def _overlap(job: str, first: Run, second: Run, leases: Leases) -> list[Violation]:
    where = (
        f"{first.pid}/{first.tok} from {first.start:.3f}, "
        f"{second.pid}/{second.tok} from {second.start:.3f}"
    )
    if first.tok is None or second.tok is None or first.tok == second.tok:
        return [Violation("overlap", job, f"runs of one job overlap, claims unknown: {where}")]
    expired = leases.expired_no_earlier_than(first.tok)
    claimed = leases.claimed.get(second.tok)
    if expired is None or claimed is None:
        return [Violation("overlap", job, f"runs overlap, a claim not recorded: {where}")]
    if claimed < expired - SKEW:
        return [
            Violation(
                "overlap",
                job,
                f"second claim at {claimed:.3f}, first lease live until at least "
                f"{expired:.3f}: {where}",
            )
        ]
    return []


def limit_exceeded(history: History, visibility_timeout: float) -> list[Violation]:
    """No more runs of a concurrency key than its limit held it at once. A run holds its
    key surely from its start until it ended or its lease surely ran out."""
    leases = Leases(history, visibility_timeout)
    by_key: dict[str, list[tuple[float, float, Run]]] = defaultdict(list)
    for run in history.runs:
        if run.ckey is None:
            continue
        end = run_end(run, history)
        if run.tok is not None:
            held = leases.held_no_later_than(run.tok)
            if held is not None:
                end = min(end, held)
        if end > run.start:
            by_key[run.ckey].append((run.start, end, run))
    found: list[Violation] = []
    for key, spans in by_key.items():
        limit = min(run.limit or 1 for _, _, run in spans)
        most, at = most_at_once((start, end) for start, end, _ in spans)
        if most > limit:
            found.append(
                Violation("limit", None, f"key {key}: {most} runs at {at:.3f}, limit {limit}")
            )
    return found


def most_at_once(spans: Iterable[tuple[float, float]]) -> tuple[int, float]:
    """The most spans open at one instant, and that instant (an end and a start at the
    same instant do not overlap)."""
    events = sorted(step for start, end in spans for step in ((start, 1), (end, -1)))
    most, at, now = 0, 0.0, 0
    for instant, step in events:
        now += step
        if now > most:
            most, at = now, instant
    return most, at


def schedule_ticks(
    jobs: Sequence[StoredJob], every: float, history: History | None = None
) -> list[Violation]:
    """Every tick from the first to the last made exactly one job (catch-up ``all``). A
    tick's instant is its job's ``run_at`` when first claimed (a retry or the reaper moves
    ``run_at`` on; nothing moves it before the first claim), else the stored one. A copy
    the MongoDB scheduler holds (``run_at`` in the year 9999: a tick whose firing a drain
    interrupted, released by the next scheduler pass; docs/schedules.md) is left out.

    A job whose first claim no worker recorded (the claim committed, its reply was lost,
    the reaper gave it back with ``run_at`` moved on: the store ended more claims than the
    workers recorded) has no known instant: it is left out of the pairs, and may fill one
    of the gaps they leave."""
    first_claimed: dict[str, float] = {}
    recorded: Counter[str] = Counter()
    for claim in history.claims if history else ():
        recorded[claim.job] += 1
        if claim.run_at is not None:
            first_claimed[claim.job] = min(claim.run_at, first_claimed.get(claim.job, claim.run_at))
    counted = [job for job in jobs if job.run_at < HELD]
    unknown = [job for job in counted if history and job.attempts_ended > recorded[job.id]]
    ticks = sorted(
        (first_claimed.get(job.id, job.run_at), job.id) for job in counted if job not in unknown
    )
    found: list[Violation] = []
    gaps: list[Violation] = []
    missing = 0
    for (previous, before), (instant, job) in itertools.pairwise(ticks):
        steps = round((instant - previous) / every)
        if steps == 0:
            found.append(
                Violation("tick-twice", job, f"and {before} for the tick at {instant:.3f}")
            )
        elif steps > 1:
            missing += steps - 1
            gaps.append(
                Violation(
                    "tick-missed", None, f"{steps - 1} ticks after {previous:.3f} made no job"
                )
            )
    if missing > len(unknown):
        found.extend(gaps)
    return found


def dedupe_held(history: History, jobs: Sequence[StoredJob]) -> list[Violation]:
    """Under scope ``pending+active`` a key covers one job at a time: each job of a key was
    created after the one before it finished; and an enqueue refused for its key (None)
    was refused while a job of that key was outstanding."""
    by_key: dict[str, list[StoredJob]] = defaultdict(list)
    for job in jobs:
        if job.dedupe_key is not None:
            by_key[job.dedupe_key].append(job)
    found: list[Violation] = []
    for key, keyed in by_key.items():
        keyed.sort(key=lambda j: j.created_at)
        for before, after in itertools.pairwise(keyed):
            if before.finished_at is None or after.created_at < before.finished_at - SKEW:
                found.append(
                    Violation(
                        "dedupe",
                        after.id,
                        f"key {key}: created at {after.created_at:.3f} while {before.id} was "
                        f"outstanding (finished {before.finished_at})",
                    )
                )
    # A store may stamp ``finished_at`` when its write was first tried (MongoDB: the
    # process's clock, kept across the write's retries), so a job may still have held its
    # key until the write was acknowledged: the last such acknowledgement bounds it.
    written: dict[str, float] = {}
    for write in history.writes:
        written[write.job] = max(write.t1, written.get(write.job, write.t1))
    for enqueue in history.enqueues:
        if enqueue.job is not None or enqueue.key is None:
            continue
        covering = [
            job
            for job in by_key.get(enqueue.key, [])
            if job.created_at <= enqueue.t1 + SKEW
            and (
                job.finished_at is None
                or max(job.finished_at, written.get(job.id, 0.0)) >= enqueue.t0 - SKEW
            )
        ]
        if not covering:
            found.append(
                Violation(
                    "dedupe", None, f"key {enqueue.key} refused at {enqueue.t0:.3f}, no job had it"
                )
            )
    return found


def nothing_stuck(jobs: Iterable[StoredJob]) -> list[Violation]:
    """Once the workers drained, no job is left active."""
    return [Violation("stuck-active", job.id, job.type) for job in jobs if job.status == "active"]


def journaled_step_rerun(history: History) -> list[Violation]:
    """An orchestration step whose result was journaled (acknowledged) never ran again."""
    journaled: dict[tuple[str, int], float] = {}
    for write in history.writes:
        if write.op == "journal" and write.result == "applied":
            for seq in write.steps:
                at = journaled.get((write.job, seq), write.t1)
                journaled[(write.job, seq)] = min(at, write.t1)
    return [
        Violation(
            "step-rerun",
            step.job,
            f"step {step.seq} ({step.name}) ran in {step.pid} at {step.t0:.3f}, journaled at "
            f"{journaled[(step.job, step.seq)]:.3f}",
        )
        for step in history.steps
        if (step.job, step.seq) in journaled and step.t0 > journaled[(step.job, step.seq)]
    ]


def check(
    history: History,
    jobs: dict[str, StoredJob],
    *,
    visibility_timeout: float,
    tick_type: str | None = None,
    every: float = 1.0,
) -> list[Violation]:
    """Every rule, over one settled run."""
    ticks = [job for job in jobs.values() if job.type == tick_type]
    return [
        *lost_or_unfinished(history, jobs),
        *completed_twice(history, jobs),
        *started_after_terminal(history, jobs),
        *overlapping_runs(history, visibility_timeout),
        *limit_exceeded(history, visibility_timeout),
        *(schedule_ticks(ticks, every, history) if tick_type else []),
        *dedupe_held(history, list(jobs.values())),
        *nothing_stuck(jobs.values()),
        *journaled_step_rerun(history),
    ]
