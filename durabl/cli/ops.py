"""The operator's commands: ``stats``, ``jobs``, ``show``, ``retry``, ``cancel``, ``delete``,
``prune``, ``schedules`` and ``health``. Each opens the store named by ``--url`` (or
``$DURABL_URL``), does its work through the public :class:`durabl.JobQueue`, prints a table
(or ``--json``) and closes the store. Those that only read need a store that is there and
set up: they never create or migrate one."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Callable
from dataclasses import fields
from datetime import timedelta
from typing import Any

from durabl.cli.args import positive_int_arg, positive_seconds_arg
from durabl.cli.common import (
    CommandError,
    Sub,
    UsageError,
    opened,
    plain,
    print_json,
    print_table,
    store_parser,
)
from durabl.cli.controls import add_schedule_actions, run_schedule_action
from durabl.model.activity import total_stats
from durabl.model.job import FAILURE_KINDS, STATUSES, Job
from durabl.model.reports import QueueStats
from durabl.runtime.queue import JobQueue

#: ``retry --all`` prints a progress line on stderr every this many jobs.
PROGRESS_EVERY = 500
#: ``jobs`` counts the jobs its ``--limit`` left out up to this many ("50 of 10000+").
COUNT_AT_MOST = 10_000
JOB_COLUMNS = ("id", "type", "status", "attempts", "failure_kind", "run_at", "updated_at")
#: ``jobs --waiting``: what each job waits for instead of a failure kind it cannot have.
WAITING_COLUMNS = tuple("waiting_for" if c == "failure_kind" else c for c in JOB_COLUMNS)
JOB_FIELDS = (
    "id",
    "type",
    "status",
    "attempts",
    "max_attempts",
    "failure_kind",
    "run_at",
    "updated_at",
    "created_at",
    "priority",
    "dedupe_key",
    "fail_reason",
)


def job_summary(job: Job[Any]) -> dict[str, Any]:
    return {name: getattr(job, name, None) for name in JOB_FIELDS}


def stats_fields(stats: QueueStats) -> dict[str, Any]:
    return {f.name: plain(getattr(stats, f.name)) for f in fields(stats)}


# -- stats ------------------------------------------------------------------------------------
def configure_stats(sub: Sub) -> None:
    p = store_parser(
        sub,
        "stats",
        "job counts by status and the oldest pending lag, per type",
        "Count the jobs of each type by status, with the lag of the oldest due pending job "
        "and whether the type is paused (a paused type is listed even with no jobs). --json "
        "prints the QueueStats fields (of --type, or of every type with a 'types' object by "
        "type and a 'paused_types' list).",
        "durabl stats --url sqlite:///jobs.db",
        "DURABL_URL=postgresql://app@db/app durabl stats --type welcome-email --json",
    )
    p.add_argument("--type", metavar="T", help="only this job type")
    p.set_defaults(run=run_stats)


def run_stats(args: argparse.Namespace) -> int:
    with opened(args, read_only=True) as queue:
        if args.type:
            rows = {args.type: queue.get_stats(args.type)}
            total = rows[args.type]
        else:  # one read for every type, added up for the total
            rows = queue.stats_by_type()
            total = total_stats(rows.values())
    if args.json:
        out = stats_fields(total)
        if not args.type:
            out["types"] = {t: stats_fields(s) for t, s in rows.items()}
            out["paused_types"] = [t for t, s in rows.items() if s.paused]
        print_json(out)
        return 0
    columns = ("type", *STATUSES_SHOWN, "oldest_pending_lag", "paused")
    table = [{"type": t, **stats_fields(s)} for t, s in rows.items()]
    if not args.type:
        table.append({"type": "(all)", **stats_fields(total), "paused": ""})
    print_table(table, columns)
    return 0


STATUSES_SHOWN = tuple(f.name for f in fields(QueueStats) if f.type in ("int", int))


# -- jobs -------------------------------------------------------------------------------------
def configure_jobs(sub: Sub) -> None:
    p = store_parser(
        sub,
        "jobs",
        "list jobs by status, type, failure kind or search text",
        "List jobs, newest first for failed ones; times are UTC. When --limit cuts the "
        "list short, a last line says how many jobs match (on stderr with --json). --json "
        "prints a list of objects with id, type, status, attempts, max_attempts, "
        "failure_kind, run_at, updated_at and more.",
        "durabl jobs --status failed",
        "durabl jobs --status failed --kind stalled --type report --limit 20 --json",
        "durabl jobs --search order:42",
        "durabl jobs --parent 6f1c0e9b2a7d4c1e8f3b5a9d0c2e4f6a",
        "durabl jobs --waiting --type approve-order",
    )
    p.add_argument("--status", choices=STATUSES, help="only jobs in this status")
    p.add_argument("--type", metavar="T", help="only this job type")
    p.add_argument("--kind", choices=FAILURE_KINDS, help="only failed jobs of this failure kind")
    p.add_argument("--search", metavar="Q", help="a job id, or a prefix of the dedupe key")
    p.add_argument("--parent", metavar="ID", help="only the children of this job")
    p.add_argument(
        "--waiting",
        action="store_true",
        help="only jobs suspended in a sleep, a signal wait or a gather (not yet due), with "
        "what each waits for",
    )
    p.add_argument(
        "--limit",
        type=positive_int_arg,
        default=50,
        metavar="N",
        help="at most N (default: 50); a last line says how many were left out",
    )
    p.set_defaults(run=run_jobs)


def run_jobs(args: argparse.Namespace) -> int:
    filters = {
        "status": args.status,
        "type": args.type,
        "failure_kind": args.kind,
        "search": args.search,
        "parent_id": args.parent,
        "waiting": args.waiting,
    }
    selection = {k: v for k, v in filters.items() if v}
    with opened(args, read_only=True) as queue:
        jobs = queue.list_jobs(limit=args.limit, **selection)
        total, at_most = len(jobs), max(COUNT_AT_MOST, args.limit + 1)
        if total == args.limit:  # maybe more: count them, up to a bound
            total = queue.count_jobs(at_most=at_most, **selection)
    rows = [job_summary(job) for job in jobs]
    if args.waiting:
        for row, job in zip(rows, jobs, strict=True):
            row["waiting_for"] = job.waiting_for
    if args.json:
        print_json(rows)
    else:
        print_table(rows, WAITING_COLUMNS if args.waiting else JOB_COLUMNS)
    if total > len(jobs):  # on stderr under --json, which stays a list
        note = left_out(len(jobs), total, counted_all=total < at_most)
        print(note, file=sys.stderr if args.json else sys.stdout)
    return 0


def left_out(shown: int, total: int, *, counted_all: bool) -> str:
    """The line under a list cut short by ``--limit``: how many, and how to see more."""
    if counted_all:
        return f"({shown} of {total} jobs shown; --limit {total} shows them all)"
    return (
        f"({shown} of {total}+ jobs shown; raise --limit, or narrow the list with --status, "
        "--type, --kind or --search)"
    )


# -- retry / cancel / delete ------------------------------------------------------------------
def configure_retry(sub: Sub) -> None:
    p = store_parser(
        sub,
        "retry",
        "send failed jobs back to pending (by id, or --all matching a filter)",
        "Return terminal-failed jobs to pending with their attempts reset. A job is left "
        "alone when it is not failed or another job holds its dedupe key. --json prints "
        '{"retried": n}. Exit 1 when none of the ids given could be retried.',
        "durabl retry 6650c3e2a1f0b2d4c8e9a001 6650c3e2a1f0b2d4c8e9a002",
        "durabl retry --all --type report --kind stalled",
    )
    p.add_argument("job_ids", nargs="*", metavar="ID")
    p.add_argument("--all", action="store_true", help="every failed job matching --type/--kind")
    p.add_argument("--type", metavar="T", help="with --all: only this job type")
    p.add_argument("--kind", choices=FAILURE_KINDS, help="with --all: only this failure kind")
    p.set_defaults(run=run_retry)


def run_retry(args: argparse.Namespace) -> int:
    if bool(args.job_ids) == bool(args.all):
        raise UsageError("give job ids or --all (with --type/--kind), not both or neither")
    if (args.type or args.kind) and not args.all:
        raise UsageError("--type and --kind select jobs for --all")
    with opened(args) as queue:
        if args.all:
            retried = retry_all(queue, args.type, args.kind)
            missed: list[str] = []
        else:
            results = {job_id: queue.retry(job_id) for job_id in dict.fromkeys(args.job_ids)}
            retried = sum(results.values())
            missed = [job_id for job_id, ok in results.items() if not ok]
    print_outcome(args, "retried", retried, missed, " (not failed, missing, or dedupe key in use)")
    return 1 if args.job_ids and not retried else 0


def retry_all(queue: JobQueue, type: str | None, kind: str | None) -> int:
    """Retry every failed job matching the filter in one store operation; a progress line
    first when there are many."""
    selection: dict[str, Any] = {k: v for k, v in (("type", type), ("failure_kind", kind)) if v}
    total = queue.count_jobs(status="failed", **selection)
    if total > PROGRESS_EVERY:
        print(f"retrying {total} failed job(s)...", file=sys.stderr, flush=True)
    return queue.retry_matching(**selection)


def configure_delete(sub: Sub) -> None:
    p = store_parser(
        sub,
        "delete",
        "remove jobs that are not running",
        "Delete jobs by id (an active job is left alone). --json prints "
        '{"deleted": n}. Exit 1 when none of them could be deleted.',
        "durabl delete 6650c3e2a1f0b2d4c8e9a001",
    )
    p.add_argument("job_ids", nargs="+", metavar="ID")
    p.set_defaults(run=lambda args: per_job(args, "delete", "deleted"))


def configure_cancel(sub: Sub) -> None:
    p = store_parser(
        sub,
        "cancel",
        "cancel pending or running jobs",
        "Cancel jobs by id: a pending job ends 'cancelled' at once; a running one is asked "
        "to stop (its handler's ctx.signal aborts within a heartbeat). --json prints "
        '{"cancelled": n}. Exit 1 when none of them could be cancelled.',
        "durabl cancel 6650c3e2a1f0b2d4c8e9a001",
    )
    p.add_argument("job_ids", nargs="+", metavar="ID")
    p.add_argument("--reason", help="recorded on the job")
    p.set_defaults(run=lambda args: per_job(args, "cancel", "cancelled", reason=args.reason))


def per_job(args: argparse.Namespace, method: str, done: str, **options: Any) -> int:
    with opened(args) as queue:
        act = getattr(queue, method)
        results = {job_id: bool(act(job_id, **options)) for job_id in dict.fromkeys(args.job_ids)}
    count = sum(results.values())
    missed = [job_id for job_id, ok in results.items() if not ok]
    print_outcome(args, done, count, missed)
    return 0 if count else 1


def print_outcome(
    args: argparse.Namespace, done: str, count: int, missed: list[str] | None = None, why: str = ""
) -> None:
    """What a command did to jobs: ``--json`` ``{done: count, "not_<done>": missed}``
    (``missed`` None: no such key); else ``<done> <count> job(s)``, then the jobs missed
    (``why``: the reasons, after ``not <done>``)."""
    if args.json:
        print_json({done: count} if missed is None else {done: count, f"not_{done}": missed})
        return
    print(f"{done} {count} job(s)")
    if missed:
        print(f"not {done}{why}: {', '.join(missed)}")


# -- prune ------------------------------------------------------------------------------------
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def duration_arg(text: str) -> timedelta:
    """``7d``, ``12h``, ``30m``, ``90s`` or a number of seconds, above 0."""
    match = DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(
            f"expected a duration such as 7d, 12h, 30m or seconds, got {text!r}"
        )
    if float(match.group(1)) <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return timedelta(seconds=float(match.group(1)) * UNITS[match.group(2)])


def configure_prune(sub: Sub) -> None:
    p = store_parser(
        sub,
        "prune",
        "delete finished jobs older than a duration",
        "Delete completed, superseded and cancelled jobs that finished more than "
        "--older-than ago (failed ones too with --status failed). --json prints "
        '{"pruned": n}.',
        "durabl prune --older-than 7d",
        "durabl prune --older-than 30d --status failed --status completed",
    )
    p.add_argument("--older-than", type=duration_arg, required=True, metavar="DURATION")
    p.add_argument(
        "--status",
        action="append",
        choices=STATUSES,
        dest="statuses",
        help="prune jobs in this status (repeat; default: completed, superseded, cancelled)",
    )
    p.set_defaults(run=run_prune)


def run_prune(args: argparse.Namespace) -> int:
    options: dict[str, Any] = {"older_than": args.older_than}
    if args.statuses:
        options["statuses"] = tuple(args.statuses)
    with opened(args) as queue:
        pruned = queue.prune(**options)
    print_outcome(args, "pruned", pruned)
    return 0


# -- schedules --------------------------------------------------------------------------------
def configure_schedules(sub: Sub) -> None:
    p = store_parser(
        sub,
        "schedules",
        "the stored schedules with their next and last tick",
        "List every schedule in the store: name, job type, cron or interval, time zone, "
        "the next tick, the last job it enqueued and whether it is paused. Times are UTC, "
        "whatever the schedule's time zone. 'pause NAME' and 'resume NAME' stop and restart "
        "its ticks (the ticks missed meanwhile are skipped); 'run NAME' enqueues one job "
        "now without moving the next tick. Exit 1 when no schedule has that NAME.",
        "durabl schedules",
        "durabl schedules --json",
        "durabl schedules pause nightly-report",
        "durabl schedules run nightly-report",
    )
    add_schedule_actions(p)
    p.set_defaults(run=run_schedules)


def run_schedules(args: argparse.Namespace) -> int:
    if args.action:
        return run_schedule_action(args)
    with opened(args, read_only=True) as queue:
        schedules = queue.list_schedules()
    rows = [plain(s) for s in schedules]
    if args.json:
        print_json(rows)
    else:
        shown = [{**vars_of(s), "rule": s.cron or f"every {s.every:g} s"} for s in schedules]
        print_table(
            shown,
            (
                "name",
                "type",
                "rule",
                "timezone",
                "next_run_at",
                "last_run_at",
                "last_job_id",
                "paused",
            ),
        )
    return 0


def vars_of(value: Any) -> dict[str, Any]:
    return {f.name: getattr(value, f.name) for f in fields(value)}


# -- health -----------------------------------------------------------------------------------
def configure_health(sub: Sub) -> None:
    p = store_parser(
        sub,
        "health",
        "exit 0 when the store answers (and the lag is under --max-lag), else 1",
        "Check that the store answers and, with --max-lag, that the oldest due pending job "
        "has waited less than that many seconds; a paused type's jobs are left out (they "
        "wait by decision: their lag is not an alarm). Exit 1 with the reason when unhealthy "
        "(a store that is not there or not set up is unhealthy; nothing is created): for a "
        "liveness probe or a cron alert.",
        "durabl health",
        "durabl health --max-lag 60 --json",
    )
    p.add_argument("--max-lag", type=positive_seconds_arg, metavar="S")
    p.add_argument("--type", metavar="T", help="only this job type's lag")
    p.set_defaults(run=run_health)


def run_health(args: argparse.Namespace) -> int:
    try:
        with opened(args, read_only=True) as queue:
            if args.type:
                stats = queue.get_stats(args.type)
            else:  # a paused type's jobs wait by decision: its lag is no alarm
                stats = total_stats(queue.lag_alarms().values())
    except CommandError as exc:
        return report_health(args, False, str(exc), None)
    if stats.paused:
        reason = f"store answers; {args.type} is paused (its lag is not an alarm)"
        return report_health(args, True, reason, stats.oldest_pending_lag)
    lag = stats.oldest_pending_lag
    if args.max_lag is not None and lag > args.max_lag:
        return report_health(
            args, False, f"oldest pending job waited {lag:.1f} s (max {args.max_lag:g} s)", lag
        )
    return report_health(args, True, f"store answers; oldest pending lag {lag:.1f} s", lag)


def report_health(args: argparse.Namespace, ok: bool, reason: str, lag: float | None) -> int:
    if args.json:
        print_json({"healthy": ok, "reason": reason, "oldest_pending_lag": lag})
    elif ok:
        print(f"healthy: {reason}")
    else:
        print(f"durabl health: unhealthy: {reason}", file=sys.stderr)
    return 0 if ok else 1


def commands() -> tuple[Callable[[Sub], None], ...]:
    """The operator commands."""
    from durabl.cli.show import configure_show

    found: list[Callable[[Sub], None]] = [
        configure_stats,
        configure_jobs,
        configure_show,
        configure_retry,
    ]
    found += [configure_cancel, configure_delete, configure_prune]
    found += [configure_schedules, configure_health]
    return tuple(found)
