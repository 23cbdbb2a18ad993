"""Cost per job: count the store operations durabl spends, and compare them with the design.

The design promises, per job in steady state: ONE claim and ONE terminal write (heartbeats
only for runs longer than the heartbeat interval); one write per enqueue; and an idle
process polls once per type per poll interval, not once per worker thread. Writes are
counted per statement: the terminal writes of a completer batch travel in one
``bulk_write``, and a separate row says how many commands carried them.

This is a report, not a test: it always exits 0 unless something raises. ``--check`` makes
it exit 1 when a per-job cost exceeds its budget, for CI.

Operations are counted two ways (``--store``, see :mod:`cost_stores`):

* mongomock: ``backend.col`` is replaced by a proxy that forwards every attribute to the
  real collection and counts each method call.
* a MongoDB server (``--url``, else ``MONGO_URL``, else the SecantusDB wire server started
  for the run): pymongo command monitoring counts every command the client sends, so every
  count is a wire round trip, in a throwaway database that is dropped afterwards.

Run: ``.venv/bin/python bench/cost_per_job.py [--check] [--jobs N]
[--store mongomock|mongodb|both] [--url URL]`` (``make bench``).
"""

from __future__ import annotations

import sys
from pathlib import Path

# Runnable straight from a checkout (``python bench/cost_per_job.py``), installed or not.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable, Iterator  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from importlib.metadata import version  # noqa: E402
from typing import Any  # noqa: E402

import cost_stores  # noqa: E402
import pymongo  # noqa: E402
from cost_report import (  # noqa: E402
    Report,
    budget_row,
    command_line,
    info_row,
    print_report,
    range_row,
    terminal_rows,
)
from opcount import (  # noqa: E402
    CLAIM,
    CLAIM_EMPTY,
    HEARTBEAT,
    PAUSES,
    REGISTRY,
    TERMINAL,
    TRANSITION,
    Counts,
    Store,
)

import durabl  # noqa: E402
from durabl import Job, JobContext, JobEvent, JobQueue  # noqa: E402
from durabl.model.pauses import PAUSED_TYPES_REFRESH  # noqa: E402
from durabl.testing import wait_until  # noqa: E402

NO_OP_TYPE = "bench-noop"
WAIT_TIMEOUT = 30.0  # seconds; a scenario that needs longer is broken, not slow
IDLE_WINDOW = 2.0  # the idle scenario's fixed observation window, seconds
IDLE_POLL_INTERVAL = 0.2


# -- scenario helpers ---------------------------------------------------------------------
class Outcomes:
    """The queue's event sink: counts outcomes so a scenario can wait for them."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._kinds: Counter[str] = Counter()

    def __call__(self, event: JobEvent) -> None:
        with self._cond:
            self._kinds[event.kind] += 1
            self._cond.notify_all()

    def wait_for(self, kind: str, n: int, timeout: float = WAIT_TIMEOUT) -> None:
        with self._cond:
            if not self._cond.wait_for(lambda: self._kinds[kind] >= n, timeout):
                raise TimeoutError(
                    f"only {self._kinds[kind]} of {n} {kind!r} events after {timeout:g}s"
                )


def noop(job: Job[Any], ctx: JobContext) -> None:
    return None


@contextmanager
def quiet(logger_name: str) -> Iterator[None]:
    """Silence expected warnings (e.g. deliberate handler failures) for one scenario."""
    target = logging.getLogger(logger_name)
    before = target.level
    target.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        target.setLevel(before)


# -- scenarios ----------------------------------------------------------------------------
def pauses_row(scenario: str, counts: Counts, elapsed: float) -> Any:
    """The reads of the paused types a process makes: its set is refreshed at most every
    ``PAUSED_TYPES_REFRESH`` seconds (and was read at startup), never per job or poll."""
    return range_row(
        scenario,
        "paused-types reads",
        f"<= 1 per {PAUSED_TYPES_REFRESH:g} s (the set refreshed, not per job)",
        counts[PAUSES],
        0,
        elapsed // PAUSED_TYPES_REFRESH + 1,
    )


def scenario_enqueue(store: Store, report: Report, n: int) -> None:
    """(1) enqueue: plain, with a dedupe key, into a taken slot, and coalescing.

    Each part gets its own collection: mongomock's inserts and scans cost time in
    proportion to the collection's size, and the counts must not depend on it.
    """
    counter = store.counter
    queues: list[JobQueue] = []

    def fresh_queue() -> JobQueue:
        queue = JobQueue(store.new_backend())
        queue.startup()
        queues.append(queue)
        return queue

    def keyed(queue: JobQueue, i: int, coalesce: str | None = None) -> str | None:
        return queue.enqueue("bench-keyed", {"i": i}, dedupe_key=f"key-{i}", coalesce=coalesce)

    def run(label: str, enqueue: Callable[[int], str | None], count: int, new_keys: bool) -> Counts:
        counter.reset()
        ids = [enqueue(i) for i in range(count)]
        counts = counter.snapshot()
        if new_keys and None in ids:
            raise RuntimeError(f"{label}: an enqueue returned None")
        if not new_keys and any(ids):
            raise RuntimeError(f"{label}: an enqueue into a taken slot returned an id")
        report.add(label, counts, f"{count} enqueues")
        return counts

    plain_queue = fresh_queue()
    plain = run("1 enqueue", lambda i: plain_queue.enqueue("bench-plain", {"i": i}), n, True)
    report.rows += [
        budget_row("1 enqueue", "writes/enqueue", "1.0", plain.writes / n, 1.0),
        range_row("1 enqueue", "reads/enqueue", "0", plain.reads / n, 0, 0),
    ]

    keyed_queue = fresh_queue()
    dedupe = run("1b enqueue + dedupe key", lambda i: keyed(keyed_queue, i), n, True)
    report.rows += [
        budget_row("1b enqueue + dedupe key", "writes/enqueue", "1.0", dedupe.writes / n, 1.0),
        range_row(
            "1b enqueue + dedupe key", "reads/enqueue", "1.0 (scope check)", dedupe.reads / n, 1, 1
        ),
    ]

    # Enqueues into taken slots: fewer of them, into the first third of the keys above.
    m = max(n // 3, 1)
    taken = run("1c dedupe slot taken", lambda i: keyed(keyed_queue, i), m, False)
    report.rows += [
        info_row(
            "1c dedupe slot taken",
            "writes/enqueue",
            "1 (the rejected insert)",
            taken.writes / m,
        ),
        info_row(
            "1c dedupe slot taken",
            "reads/enqueue",
            "- (own-id check after the duplicate key)",
            taken.reads / m,
        ),
    ]
    coalesced = run(
        "1d coalesce=latest, slot taken",
        lambda i: keyed(keyed_queue, i, coalesce="latest"),
        m,
        False,
    )
    report.rows += [
        info_row(
            "1d coalesce=latest, slot taken",
            "writes/enqueue",
            "2 (rejected insert + payload update)",
            coalesced.writes / m,
        ),
        info_row("1d coalesce=latest, slot taken", "reads/enqueue", "-", coalesced.reads / m),
    ]
    for queue in queues:
        queue.shutdown(timeout=5)


def scenario_backlog(store: Store, report: Report, n: int) -> float:
    """(2) a backlog of no-op jobs drained by concurrency=4; returns jobs/s."""
    outcomes = Outcomes()
    queue = JobQueue(store.new_backend(), on_job_event=outcomes)
    for i in range(n):
        queue.enqueue(NO_OP_TYPE, {"i": i})
    store.counter.reset()
    started = time.perf_counter()
    queue.process(NO_OP_TYPE, noop, concurrency=4, poll_interval=0.05)
    outcomes.wait_for("completed", n)
    elapsed = time.perf_counter() - started
    counts = store.counter.snapshot()
    queue.shutdown(timeout=5)
    scenario = f"2 process backlog (N={n}, c=4)"
    report.add(scenario, counts, f"{n} jobs, {elapsed:.2f}s")
    report.rows += [
        budget_row(scenario, "claims/job", "1.0", counts[CLAIM] / n, 1.05),
        *terminal_rows(scenario, counts, n, "< 1 (one bulk_write per completer batch)"),
        range_row(scenario, "heartbeats/job", "0 (runs are short)", counts[HEARTBEAT] / n, 0, 0),
        range_row(
            scenario, "reads/job", "0 (no rate limit set: none read)", counts.reads / n, 0, 0
        ),
        pauses_row(scenario, counts, elapsed),
        info_row(
            scenario,
            "empty claims (polls)/job",
            f"few; {counts[CLAIM_EMPTY]} in all",
            counts[CLAIM_EMPTY] / n,
        ),
        info_row(
            scenario,
            "findAndModify/job, empty included",
            "~1",
            (counts[CLAIM] + counts[CLAIM_EMPTY]) / n,
        ),
    ]
    return n / elapsed


def scenario_trickle(store: Store, report: Report, n: int) -> None:
    """(2b) jobs arriving one at a time at idle workers (the enqueue wakes the poller)."""
    outcomes = Outcomes()
    counter = store.counter
    queue = JobQueue(store.new_backend(), on_job_event=outcomes)
    counter.reset()
    # A long poll interval so that only the enqueue wake-ups drive claims.
    queue.process(NO_OP_TYPE, noop, concurrency=4, poll_interval=30.0)
    if not wait_until(lambda: counter.snapshot()[CLAIM_EMPTY] >= 1, timeout=WAIT_TIMEOUT):
        raise TimeoutError("the processor never made its first poll")
    counter.reset()
    for i in range(n):
        queue.enqueue(NO_OP_TYPE, {"i": i})
        outcomes.wait_for("completed", i + 1)
    counts = counter.snapshot()
    queue.shutdown(timeout=5)
    scenario = f"2b trickle (N={n}, one at a time, c=4)"
    report.add(scenario, counts, "enqueues included")
    claim_queries = counts[CLAIM] + counts[CLAIM_EMPTY]
    report.rows += [
        budget_row(scenario, "claims/job", "1.0", counts[CLAIM] / n, 1.05),
        *terminal_rows(scenario, counts, n, "1 (each job finishes alone)"),
        info_row(
            scenario,
            "empty claims (polls)/job",
            "- (claim asks for 4, finds 1)",
            counts[CLAIM_EMPTY] / n,
        ),
        info_row(
            scenario,
            "findAndModify/job, empty included",
            "1 claim + the empty one above",
            claim_queries / n,
        ),
    ]


def scenario_long_runs(store: Store, report: Report) -> None:
    """(3) five 1-second runs with a 0.3 s heartbeat interval."""
    jobs, run_for, beat_every = 5, 1.0, 0.3
    outcomes = Outcomes()
    queue = JobQueue(store.new_backend(), on_job_event=outcomes)
    for i in range(jobs):
        queue.enqueue("bench-long", {"i": i})

    def long_run(job: Job[Any], ctx: JobContext) -> None:
        ctx.signal.wait(run_for)

    store.counter.reset()
    queue.process(
        "bench-long", long_run, concurrency=jobs, poll_interval=0.05, heartbeat_interval=beat_every
    )
    outcomes.wait_for("completed", jobs)
    counts = store.counter.snapshot()
    queue.shutdown(timeout=5)
    scenario = f"3 long runs ({jobs} x {run_for:g}s, hb {beat_every:g}s)"
    report.add(scenario, counts)
    report.rows += [
        range_row(scenario, "heartbeats/job", "~3 (2..4)", counts[HEARTBEAT] / jobs, 2, 4),
        budget_row(scenario, "claims/job", "1.0", counts[CLAIM] / jobs, 1.05),
        *terminal_rows(scenario, counts, jobs, "<= 1 (runs ending together share one)"),
    ]


def scenario_retry(store: Store, report: Report, n: int) -> None:
    """(3b) each job fails its first attempt and succeeds on the second."""
    outcomes = Outcomes()
    queue = JobQueue(store.new_backend(), on_job_event=outcomes)
    for i in range(n):
        queue.enqueue("bench-retry", {"i": i}, max_attempts=2, backoff="fixed", backoff_delay=0)

    def flaky(job: Job[Any], ctx: JobContext) -> None:
        if job.attempts == 1:
            raise RuntimeError("first attempt fails on purpose")

    store.counter.reset()
    with quiet("durabl.runtime.reports"):
        queue.process("bench-retry", flaky, concurrency=4, poll_interval=0.05)
        outcomes.wait_for("completed", n)
        counts = store.counter.snapshot()
        queue.shutdown(timeout=5)
    scenario = f"3b one retry per job (N={n})"
    report.add(scenario, counts, "2 attempts per job")
    report.rows += [
        range_row(scenario, "claims/job", "2 (one per attempt)", counts[CLAIM] / n, 2, 2),
        range_row(
            scenario,
            "outcome writes/job",
            "2 (retry-scheduled + completed)",
            (counts[TERMINAL] + counts[TRANSITION]) / n,
            2,
            2,
        ),
        range_row(
            scenario, "reads/job", "1 (attempts, read before the failure)", counts.reads / n, 1, 1
        ),
    ]


def scenario_idle(store: Store, report: Report) -> None:
    """(4) three types at concurrency 8, nothing to do, for a fixed window."""
    types = ["bench-idle-a", "bench-idle-b", "bench-idle-c"]
    concurrency = 8
    queue = JobQueue(store.new_backend())
    queue.startup()
    store.counter.reset()
    started = time.perf_counter()
    for job_type in types:
        queue.process(job_type, noop, concurrency=concurrency, poll_interval=IDLE_POLL_INTERVAL)
    threading.Event().wait(IDLE_WINDOW)  # a fixed observation window, not a synchronisation
    counts = store.counter.snapshot()
    elapsed = time.perf_counter() - started
    queue.shutdown(timeout=5)
    intervals = elapsed / IDLE_POLL_INTERVAL
    scenario = (
        f"4 idle ({len(types)} types x c={concurrency}, poll {IDLE_POLL_INTERVAL:g}s, "
        f"{IDLE_WINDOW:g}s)"
    )
    report.add(scenario, counts, f"{intervals:.1f} intervals")
    for job_type in types:
        queries = counts.claim_queries_by_type.get(job_type, 0)
        report.rows.append(
            budget_row(
                scenario,
                f"claim queries/interval, {job_type} ({queries} in all)",
                f"~1 (not {concurrency})",
                queries / intervals,
                1.5,
            )
        )
    others = counts.writes + counts.reads - counts[CLAIM_EMPTY]
    # A read per poll (such as a rate limit's, for a type that has none) would show here.
    report.rows.append(budget_row(scenario, "other operations", "0", others, 0))
    report.rows.append(pauses_row(scenario, counts, elapsed))
    # The queue's entry in the workers registry: written when a processor starts and once
    # per heartbeat interval (100 s here), whatever the threads and polls.
    report.rows.append(
        range_row(
            scenario,
            "worker-registry operations",
            f"{len(types) + 1} (an entry per process() call + 1 prune)",
            counts[REGISTRY],
            len(types) + 1,
            len(types) + 1,
        )
    )


def run_store(store: Store, jobs: int) -> Report:
    report = Report(store.label)
    scenario_enqueue(store, report, jobs)
    throughput = scenario_backlog(store, report, jobs)
    scenario_trickle(store, report, min(jobs, 100))
    scenario_long_runs(store, report)
    scenario_retry(store, report, min(jobs, 50))
    scenario_idle(store, report)
    report.rows.append(
        info_row("5 throughput", "jobs/s, scenario 2", store.timing_note, throughput, "jobs/s")
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--check", action="store_true", help="exit 1 when a per-job cost exceeds its budget"
    )
    parser.add_argument("--jobs", type=int, default=300, help="jobs per scenario (default 300)")
    parser.add_argument(
        "--store",
        choices=cost_stores.CHOICES,
        help="where to count: mongomock, a MongoDB server, or both (default: mongomock, "
        "plus the server when --url or MONGO_URL names one)",
    )
    parser.add_argument(
        "--url",
        help="the MongoDB server (default: MONGO_URL; with neither, --store mongodb or both "
        "starts secantusd-py, the SecantusDB wire server, for the run)",
    )
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be >= 1")
    url = args.url or os.environ.get("MONGO_URL") or None
    choice = args.store or cost_stores.default_choice(url)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    print("durabl cost per job: store operations per enqueue, per processed job, per idle poll")
    print(f"command: {command_line()}")
    print(
        f"versions: Python {platform.python_version()}, pymongo {pymongo.version}, "
        f"mongomock {version('mongomock')}, durabl {durabl.__version__}; "
        f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs"
    )

    began = time.perf_counter()
    reports: list[Report] = []
    with cost_stores.opened(choice, url) as stores:
        for store in stores:
            reports.append(run_store(store, args.jobs))
            print_report(reports[-1])
    if choice == "mongomock":
        print(
            "\nserver run skipped: --store mongodb (or both) counts commands on a server: "
            "--url or MONGO_URL, else the SecantusDB wire server started for the run"
        )

    over = [(r.store, row) for r in reports for row in r.rows if row.over_budget]
    print(
        f"\nPASS: as expected. CHECK: differs from the expectation. INFO: reported, no "
        f"expectation. Budgets (--check): claims/job <= 1.05, terminal writes/job <= 1.05, "
        f"writes/enqueue <= 1.0, idle claim queries per type per interval <= 1.5, other idle "
        f"operations 0. "
        f"Took {time.perf_counter() - began:.1f}s."
    )
    if over:
        print("Over budget:")
        for label, row in over:
            print(f"  [{label}] {row.scenario}: {row.metric} = {row.measured_text()}")
    if args.check and over:
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
