"""Throughput and pickup latency on SQLite: durabl next to Huey and django-tasks.

Every library gets a fresh SQLite file in its own temporary directory for each scenario:

* throughput: N no-op jobs are enqueued up front, then 1, 4 and 8 workers (threads, or
  processes for django-tasks' ``db_worker``) run them. jobs/s counts from the first handler
  start to the last handler end; wall s from the moment the workers were started (or, for
  django-tasks, the backlog was committed under running workers) to the last handler end.
* pickup latency: idle workers (4); a producer enqueues one job at a time at a steady rate,
  each payload carrying ``time.time()``; the handler measures enqueue -> start. The
  producer runs in the workers' process or in a second process (``python -c``).

Each library keeps its own way of working; only idle polling is set alike (0.05 s), and
the journal mode and ``synchronous`` each one ran with are printed: read back from the file
or the library's own connection, except durabl's ``synchronous``, which is the value its
connections are told to use (``SqliteJobQueue``'s default). A library
that is not installed or fails prints "skipped: ..." / "failed: ..." in its row; the run
still exits 0.

Run: ``.venv/bin/python bench/throughput.py [--quick] [--jobs N] [--only LIB] [--repeat K]``
(``make bench``). ``--repeat K`` runs every row K times and prints the medians: a single
run of 2000 no-op jobs takes a fifth of a second and moves by 10-20 % from one run to the
next on a shared machine.

``--store postgres`` runs the same measurements on the PostgreSQL server at
``DURABL_BENCH_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``):
durabl's ``PostgresJobQueue`` next to Procrastinate, django-tasks-db on PostgreSQL and a
raw ``FOR UPDATE SKIP LOCKED`` claim + ack loop (the ceiling), at 1 and 4 workers, with
the latency producer in another process. Each library works in a schema of its own,
dropped afterwards.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Runnable straight from a checkout (``python bench/throughput.py``), installed or not.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import logging  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import shlex  # noqa: E402
import sqlite3  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from dataclasses import dataclass  # noqa: E402

from peers.common import IN_PROCESS, OTHER_PROCESS, POLL_INTERVAL, Library, Measured, Skip  # noqa: E402
from peers.django_tasks_peer import DjangoTasks  # noqa: E402
from peers.django_tasks_pg_peer import DjangoTasksPostgres  # noqa: E402
from peers.durabl_peer import Durabl, DurablObserved  # noqa: E402
from peers.durabl_pg_peer import DurablPostgres  # noqa: E402
from peers.huey_peer import HueyLibrary  # noqa: E402
from peers.procrastinate_peer import Procrastinate  # noqa: E402
from peers.raw_skip_locked_peer import RawSkipLocked  # noqa: E402

THROUGHPUT_WORKERS = (1, 4, 8)
LATENCY_WORKERS = 4
CHOICES = ("durabl", "durabl-observed", "huey", "django-tasks")
PG_THROUGHPUT_WORKERS = (1, 4)
PG_CHOICES = ("durabl", "procrastinate", "django-tasks", "raw")


# -- what to run ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Scenario:
    kind: str  # "throughput" or "latency"
    workers: int
    producer: str = ""  # latency: IN_PROCESS or OTHER_PROCESS

    @property
    def label(self) -> str:
        return "throughput" if self.kind == "throughput" else f"latency, producer {self.producer}"


def throughput_scenarios() -> list[Scenario]:
    return [Scenario("throughput", n) for n in THROUGHPUT_WORKERS]


def plan(only: list[str]) -> list[tuple[Library, list[Scenario]]]:
    both = [
        Scenario("latency", LATENCY_WORKERS, IN_PROCESS),
        Scenario("latency", LATENCY_WORKERS, OTHER_PROCESS),
    ]
    every: dict[str, list[tuple[Library, list[Scenario]]]] = {
        "durabl": [(Durabl(), [*throughput_scenarios(), *both])],
        # The same, with durabl.metrics and durabl.tracing installed: their cost, same run.
        "durabl-observed": [
            (DurablObserved(sampled), throughput_scenarios()) for sampled in (None, 1.0, 0.1)
        ],
        "huey": [
            # Like for like with durabl (synchronous=NORMAL), then as Huey ships (SQLite's
            # default synchronous): the difference is one fsync per dequeue.
            (HueyLibrary("NORMAL"), [*throughput_scenarios(), *both]),
            (HueyLibrary(None), throughput_scenarios()),
        ],
        # Workers are processes: the producer is always another process.
        "django-tasks": [
            (
                DjangoTasks(),
                [*throughput_scenarios(), Scenario("latency", LATENCY_WORKERS, OTHER_PROCESS)],
            )
        ],
    }
    return [entry for name in CHOICES if not only or name in only for entry in every[name]]


def plan_postgres(only: list[str]) -> list[tuple[Library, list[Scenario]]]:
    """The PostgreSQL run: 1 and 4 workers, the latency producer in another process."""
    throughput = [Scenario("throughput", n) for n in PG_THROUGHPUT_WORKERS]
    latency = [Scenario("latency", LATENCY_WORKERS, OTHER_PROCESS)]
    every: dict[str, list[tuple[Library, list[Scenario]]]] = {
        "durabl": [(DurablPostgres(), [*throughput, *latency])],
        "procrastinate": [(Procrastinate(), [*throughput, *latency])],
        "django-tasks": [(DjangoTasksPostgres(), [*throughput, *latency])],
        "raw": [(RawSkipLocked(), throughput), (RawSkipLocked(batch=32), throughput)],
    }
    return [entry for name in PG_CHOICES if not only or name in only for entry in every[name]]


# -- results ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    library: str
    scenario: str
    workers: str
    measured: Measured | None = None
    note: str = ""  # "skipped: ..." or "failed: ..."

    def cells(self, sqlite: bool = True) -> tuple[str, ...]:
        m = self.measured or Measured(journal_mode="", synchronous="")
        return (
            self.library,
            self.scenario,
            self.workers,
            _num(m.jobs_per_s, 0),
            _num(m.wall_s, 2),
            _num(m.p50_ms, 1),
            _num(m.p99_ms, 1),
            *((m.journal_mode, m.synchronous) if sqlite else ()),
            self.note,
        )


def _num(value: float | None, digits: int) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


HEADERS = (
    "library",
    "scenario",
    "workers",
    "jobs/s",
    "wall s",
    "p50 ms",
    "p99 ms",
    "journal_mode",
    "synchronous",
    "note",
)
SQLITE_HEADERS = ("journal_mode", "synchronous")


def render_table(rows: list[Row], sqlite: bool = True) -> str:
    headers = HEADERS if sqlite else tuple(h for h in HEADERS if h not in SQLITE_HEADERS)
    cells = [row.cells(sqlite) for row in rows]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]

    def line(values: tuple[str, ...]) -> str:
        return "| " + " | ".join(v.ljust(w) for v, w in zip(values, widths, strict=True)) + " |"

    rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    return "\n".join([line(headers), rule, *(line(c) for c in cells)])


# -- running ---------------------------------------------------------------------------------
def workers_label(library: Library, n: int) -> str:
    return f"{n} {library.unit}{'' if n == 1 else 'es' if library.unit == 'process' else 's'}"


def run_scenario(
    library: Library, scenario: Scenario, jobs: int, latency_jobs: int, rate: float
) -> Measured:
    with tempfile.TemporaryDirectory(prefix="durabl-bench-", ignore_cleanup_errors=True) as tmp:
        workdir = Path(tmp)
        if scenario.kind == "throughput":
            timeout = max(60.0, jobs / 20)
            return library.throughput(workdir, jobs, scenario.workers, timeout)
        timeout = latency_jobs / rate + 60.0
        return library.latency(
            workdir, latency_jobs, rate, scenario.workers, scenario.producer, timeout
        )


def run_library(
    library: Library,
    scenarios: list[Scenario],
    args: argparse.Namespace,
    versions: dict[str, str],
) -> list[Row]:
    try:
        versions[library.name.split(" ")[0]] = library.version()
    except Skip as exc:
        progress(f"{library.name}: skipped: {exc}")
        return [Row(library.name, "all", "-", note=f"skipped: {exc}")]
    rows: list[Row] = []
    for scenario in scenarios:
        workers = workers_label(library, scenario.workers)
        progress(f"{library.name}: {scenario.label}, {workers} ...")
        began = time.perf_counter()
        try:
            measured = median_of(
                [
                    run_scenario(library, scenario, args.jobs, args.latency_jobs, args.rate)
                    for _ in range(args.repeat)
                ]
            )
        except Skip as exc:
            rows.append(Row(library.name, scenario.label, workers, note=f"skipped: {exc}"))
        except Exception as exc:
            if args.verbose:
                traceback.print_exc()
            note = f"failed: {type(exc).__name__}: {exc}".replace("\n", " ")[:160]
            rows.append(Row(library.name, scenario.label, workers, note=note))
        else:
            rows.append(Row(library.name, scenario.label, workers, measured))
        progress(
            f"  {' '.join(rows[-1].cells()[3:7])} {rows[-1].note} "
            f"({time.perf_counter() - began:.1f}s)"
        )
    return rows


def median_of(runs: list[Measured]) -> Measured:
    """One row from repeated runs of a scenario: the median of each number."""
    if len(runs) == 1:
        return runs[0]

    def middle(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return statistics.median(known) if known else None

    return Measured(
        middle([r.jobs_per_s for r in runs]),
        middle([r.wall_s for r in runs]),
        middle([r.p50_ms for r in runs]),
        middle([r.p99_ms for r in runs]),
        runs[-1].journal_mode,
        runs[-1].synchronous,
    )


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def command_line() -> str:
    exe = sys.executable
    try:
        exe = os.path.relpath(exe)
    except ValueError:
        pass
    return shlex.join([exe, *sys.argv])


def cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=2000, help="throughput jobs (default 2000)")
    parser.add_argument("--latency-jobs", type=int, default=200, help="latency jobs (default 200)")
    parser.add_argument(
        "--rate", type=float, default=20.0, help="latency enqueues per second (default 20)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="a fast sanity run: --jobs 300 --latency-jobs 50"
    )
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="sqlite (default: vs Huey, django-tasks) or postgres (vs Procrastinate, "
        "django-tasks-db, a raw SKIP LOCKED loop)",
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=sorted({*CHOICES, *PG_CHOICES}),
        help="run only this library (repeatable)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run every row this many times and print the medians (default 1)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="print tracebacks")
    args = parser.parse_args(argv)
    if args.quick:
        args.jobs, args.latency_jobs = 300, 50
    if args.jobs < 1 or args.latency_jobs < 2 or args.rate <= 0 or args.repeat < 1:
        parser.error("--jobs must be >= 1, --latency-jobs >= 2, --rate > 0, --repeat >= 1")
    choices = PG_CHOICES if args.store == "postgres" else CHOICES
    if args.only and not set(args.only) <= set(choices):
        parser.error(f"--only with --store {args.store}: one of {', '.join(choices)}")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")

    began = time.perf_counter()
    versions: dict[str, str] = {}
    rows: list[Row] = []
    if args.store == "postgres":
        entries = plan_postgres(args.only or [])
        for library, scenarios in entries:
            rows += run_library(library, scenarios, args, versions)
        report_postgres(rows, entries, versions, args, began)
        return 0
    entries = plan(args.only or [])
    for library, scenarios in entries:
        rows += run_library(library, scenarios, args, versions)

    print("durabl throughput and pickup latency on SQLite, next to Huey and django-tasks\n")
    print(render_table(rows))
    print(f"\ncommand: {command_line()}")
    print(
        f"machine: {platform.system()} {platform.machine()}, {cpus()} CPUs (nproc), "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version} "
        "(every library uses the standard library's sqlite3)"
    )
    print("versions: " + "; ".join(f"{name} {v}" for name, v in versions.items()))
    print(
        f"throughput: {args.jobs} no-op jobs enqueued up front; jobs/s = jobs / (last handler "
        "end - first handler start); wall s = from starting the workers (django-tasks: from "
        "committing the backlog under running workers) to the last handler end."
    )
    if args.repeat > 1:
        print(f"each row: the median of {args.repeat} runs")
    print(
        f"latency: {args.latency_jobs} jobs at {args.rate:g}/s, {LATENCY_WORKERS} idle workers, "
        "enqueue -> handler start, time.time() on both sides."
    )
    print(f"idle polling ({POLL_INTERVAL:g}s for every library):")
    seen: set[str] = set()
    for library, _ in entries:
        if type(library).__name__ not in seen:
            seen.add(type(library).__name__)
            print(f"  {library.name.split(' ')[0]}: {library.polling}")
    print(f"took {time.perf_counter() - began:.0f}s")
    return 0


def report_postgres(
    rows: list[Row],
    entries: list[tuple[Library, list[Scenario]]],
    versions: dict[str, str],
    args: argparse.Namespace,
    began: float,
) -> None:
    from peers.pg import local_server, redacted, server_facts

    print(
        "durabl throughput and pickup latency on PostgreSQL, next to Procrastinate, "
        "django-tasks-db and a raw SKIP LOCKED loop\n"
    )
    print(render_table(rows, sqlite=False))
    print(f"\ncommand: {command_line()}")
    try:
        server = server_facts()
    except Exception as exc:  # the rows already say why
        server = f"server not reachable ({type(exc).__name__})"
    print(
        f"machine: {platform.system()} {platform.machine()}, {cpus()} CPUs (nproc), "
        f"Python {platform.python_version()}; server: {server} at {redacted()}"
        + (", on the same machine" if local_server() else "")
    )
    print("versions: " + "; ".join(f"{name} {v}" for name, v in versions.items()))
    print(
        f"throughput: {args.jobs} no-op jobs enqueued up front; jobs/s = jobs / (last handler "
        "end - first handler start); wall s = from starting the workers (django-tasks: from "
        "committing the backlog under running workers) to the last handler end."
    )
    if args.repeat > 1:
        print(f"each row: the median of {args.repeat} runs")
    print(
        f"latency: {args.latency_jobs} jobs at {args.rate:g}/s from another process, "
        f"{LATENCY_WORKERS} idle workers, enqueue -> handler start, time.time() on both sides."
    )
    print("settings:")
    seen: set[str] = set()
    for library, _ in entries:
        if type(library).__name__ not in seen:
            seen.add(type(library).__name__)
            print(f"  {library.name}: {library.polling}")
        if isinstance(library, DurablPostgres) and library.committed_s:
            seen_at = ", ".join(f"{n} workers {s:.2f}s" for n, s in library.committed_s)
            print(f"  durabl: every completion committed (seen by a 20 ms poll) at: {seen_at}")
    print(f"took {time.perf_counter() - began:.0f}s")


if __name__ == "__main__":
    sys.exit(main())
