"""The operator's controls: ``durabl pause TYPE``, ``durabl resume TYPE``, ``durabl paused``
and the actions of ``durabl schedules`` (``pause``, ``resume``, ``run`` a schedule NAME).
Each goes through the public :class:`durabl.JobQueue` (:mod:`durabl.runtime.controls`)."""

from __future__ import annotations

import argparse

from durabl.cli.common import CommandError, Sub, UsageError, opened, print_json, store_parser
from durabl.model.exceptions import ScheduleError

#: What ``durabl schedules ACTION NAME`` can do besides listing.
SCHEDULE_ACTIONS = ("pause", "resume", "run")


def configure_pause(sub: Sub) -> None:
    p = store_parser(
        sub,
        "pause",
        "stop every worker of every process from claiming a job type",
        "Pause job type TYPE in the store: no worker of any process claims its jobs until "
        "'durabl resume TYPE' (within a poll interval; running jobs finish). Enqueue keeps "
        'working: the jobs wait, pending, and their lag is no alarm. --json prints {"paused": '
        '"TYPE"}.',
        "durabl pause send-invoice",
    )
    p.add_argument("type", metavar="TYPE")
    p.set_defaults(run=run_pause)


def configure_resume(sub: Sub) -> None:
    p = store_parser(
        sub,
        "resume",
        "let workers claim a paused job type again",
        "Resume job type TYPE: its due jobs are claimed again (at once where the store "
        "pushes). Resuming a type that is not paused changes nothing. --json prints "
        '{"resumed": "TYPE"}.',
        "durabl resume send-invoice",
    )
    p.add_argument("type", metavar="TYPE")
    p.set_defaults(run=run_resume)


def configure_paused(sub: Sub) -> None:
    p = store_parser(
        sub,
        "paused",
        "list the paused job types",
        "Print each paused job type on a line ('durabl stats' marks them too). --json "
        "prints a list.",
        "durabl paused",
    )
    p.set_defaults(run=run_paused)


def run_pause(args: argparse.Namespace) -> int:
    return _switch(args, "paused")


def run_resume(args: argparse.Namespace) -> int:
    return _switch(args, "resumed")


def _switch(args: argparse.Namespace, done: str) -> int:
    with opened(args) as queue:
        try:
            (queue.pause if done == "paused" else queue.resume)(args.type)
        except (TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    if args.json:
        print_json({done: args.type})
    else:
        print(f"{done} {args.type}")
    return 0


def run_paused(args: argparse.Namespace) -> int:
    with opened(args, read_only=True) as queue:
        types = queue.paused_types()
    if args.json:
        print_json(types)
    else:
        for type in types:
            print(type)
    return 0


def add_schedule_actions(p: argparse.ArgumentParser) -> None:
    """``durabl schedules [pause|resume|run NAME]``."""
    p.add_argument(
        "action",
        nargs="?",
        choices=SCHEDULE_ACTIONS,
        help="pause or resume schedule NAME, or run it now (one job, its ticks unmoved)",
    )
    p.add_argument("name", nargs="?", metavar="NAME", help="the schedule's name")


def run_schedule_action(args: argparse.Namespace) -> int:
    """``schedules pause|resume|run NAME``: exit 1 when no schedule has that name."""
    if not args.name:
        raise UsageError(f"durabl schedules {args.action} needs the schedule's NAME")
    with opened(args) as queue:
        try:
            if args.action == "pause":
                queue.pause_schedule(args.name)
                out: dict[str, object] = {"paused": args.name}
            elif args.action == "resume":
                queue.resume_schedule(args.name)
                out = {"resumed": args.name}
            else:
                out = {"ran": args.name, "job_id": queue.run_schedule_now(args.name)}
        except ScheduleError as exc:
            raise CommandError(str(exc)) from None
    if args.json:
        print_json(out)
    elif args.action != "run":
        print(f"{args.action}d schedule {args.name}")
    elif out["job_id"] is None:
        print(f"schedule {args.name}: no job enqueued (its dedupe slot is taken)")
    else:
        print(f"schedule {args.name}: enqueued {out['job_id']}")
    return 0
