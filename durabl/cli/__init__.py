"""The ``durabl`` command line: ``python -m durabl COMMAND``.

Each subcommand is a ``configure_*`` function that adds its parser and sets ``run`` to a
function ``(args) -> exit code``. Exit codes: 0 ok, 1 an error (one line on stderr, no
traceback), 2 a usage error (with the command's own usage line when argparse finds it).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from durabl.cli.args import positive_int_arg, positive_seconds_arg
from durabl.cli.common import (
    URL_ENV,
    Sub,
    UsageError,
    add_json_option,
    add_url_option,
    command_parser,
    examples,
    one_line,
    open_store,
    print_json,
    store_errors,
    store_url,
)
from durabl.model.exceptions import DurablError
from durabl.model.options import DEFAULT_VISIBILITY_TIMEOUT

Command = Callable[[argparse.Namespace], int]
__all__ = ["URL_ENV", "build_parser", "main", "one_line"]


@contextmanager
def library_logging(verbose: bool) -> Iterator[None]:
    """Verbose: durabl's log lines on stderr. Otherwise quiet: the demo's failures are on
    purpose and the summary reports them. The logger's level is restored afterwards."""
    log = logging.getLogger("durabl")
    previous = log.level
    if verbose:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
    else:
        log.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        log.setLevel(previous)
        if verbose:
            log.removeHandler(handler)


# -- demo -------------------------------------------------------------------------------------
def configure_demo(sub: Sub) -> None:
    from durabl.cli.demo import DEFAULT_DEMO_URL, DEFAULT_JOBS, DEFAULT_SECONDS

    p = command_parser(
        sub,
        "demo",
        "run a few hundred jobs through a queue, with live progress",
        "Enqueue a few hundred jobs of three types (dedupe, delays, priorities, "
        "retries, fatal errors, a crashed worker recovered by the reaper), process them, "
        "and print per-type stats. Exit 0 when every job ended, 1 on the time limit.",
    )
    p.add_argument("--url", default=DEFAULT_DEMO_URL, help="backend URL (default: %(default)s)")
    p.add_argument(
        "--jobs",
        type=positive_int_arg,
        default=DEFAULT_JOBS,
        help="enqueue calls (default: %(default)s)",
    )
    p.add_argument(
        "--seconds",
        type=positive_seconds_arg,
        default=DEFAULT_SECONDS,
        help="time limit (default: %(default)g)",
    )
    p.add_argument("--no-progress", action="store_true", help="print only the final report")
    p.add_argument("-v", "--verbose", action="store_true", help="show durabl's log on stderr")
    p.set_defaults(run=run_demo_command)


def run_demo_command(args: argparse.Namespace) -> int:
    from durabl.cli.demo import run_demo

    with library_logging(args.verbose):
        return run_demo(
            args.url,
            jobs=args.jobs,
            seconds=args.seconds,
            progress=not args.no_progress,
            out=sys.stdout,
            err=sys.stderr,
        )


# -- reap -------------------------------------------------------------------------------------
def configure_reap(sub: Sub) -> None:
    p = command_parser(
        sub,
        "reap",
        "one recovery sweep over jobs whose worker stopped heartbeating",
        "Return jobs whose lease expired to pending (or fail them 'stalled' "
        "when they have no attempts left), once, and report what was done. --json prints "
        '{"reaped": n, "recovered": n, "stalled": n, "superseded": n, '
        '"visibility_timeout": s}.',
        "durabl reap --url sqlite:///jobs.db",
        "DURABL_URL=postgresql://app@db/app durabl reap --visibility-timeout 600",
    )
    add_url_option(p)
    add_json_option(p)
    p.add_argument(
        "--visibility-timeout",
        type=positive_seconds_arg,
        default=DEFAULT_VISIBILITY_TIMEOUT,
        help="seconds without a heartbeat before a lease counts as expired "
        "(default: %(default)g; use your workers' value)",
    )
    p.set_defaults(run=run_reap_command)


def run_reap_command(args: argparse.Namespace) -> int:
    url = store_url(args)
    recovered = stalled = superseded = 0
    with store_errors(url):
        backend = open_store(url)
        try:
            backend.startup()
            while True:  # one sweep, in batches while they come back full
                report = backend.reap(args.visibility_timeout)
                recovered += report.recovered
                stalled += report.stalled
                superseded += report.superseded
                if not report.saturated or not report.handled:
                    break
        finally:
            backend.close()
    total = recovered + stalled + superseded
    if args.json:
        counts = {"recovered": recovered, "stalled": stalled, "superseded": superseded}
        print_json({"reaped": total, **counts, "visibility_timeout": args.visibility_timeout})
        return 0
    print(
        f"reaped {total} job(s) with a lease older than {args.visibility_timeout:g} s: "
        f"{recovered} pending again, {stalled} failed as stalled, {superseded} superseded"
    )
    return 0


# -- migrate ----------------------------------------------------------------------------------
def configure_migrate(sub: Sub) -> None:
    p = command_parser(
        sub,
        "migrate",
        "create or upgrade the store's schema (out of band, before processes start)",
        "Create the store's tables and indexes, or apply the migrations an "
        "older schema needs (PostgreSQL: under its advisory lock, safe while workers "
        "start), and print what was done. With --check, only report, creating nothing (a "
        "missing SQLite file is a pending setup): exit 1 when a migration is pending. Exit "
        "1 with one line on stderr when the store cannot be reached. --json prints "
        '{"url", "check", "pending", "before", "after", "latest", "message", "missing"}.',
        "durabl migrate --url postgresql://app@db/app",
        "durabl migrate --check   # with $DURABL_URL set",
    )
    add_url_option(p)
    p.add_argument(
        "--check",
        action="store_true",
        help="report whether a migration is pending (exit 1) without applying it",
    )
    add_json_option(p)
    p.set_defaults(run=run_migrate_command)


def run_migrate_command(args: argparse.Namespace) -> int:
    from durabl.cli.migrate import run_migrate

    url = store_url(args)
    with store_errors(url):
        return run_migrate(url, check=args.check, out=sys.stdout, as_json=args.json)


# -- lint-orchestrations ----------------------------------------------------------------------
def configure_lint_orchestrations(sub: Sub) -> None:
    p = command_parser(
        sub,
        "lint-orchestrations",
        "flag calls in orchestration bodies whose results differ between runs",
        "Read the Python files given (directories are searched for *.py), find "
        "the bodies registered with define(), and report direct calls in them that read "
        "the clock, draw random numbers or ids, or do I/O outside an octx.step(...). "
        "Exit 0 when clean, 1 on findings or unreadable files, 2 on a usage error.",
    )
    p.add_argument("paths", nargs="+", metavar="PATH", help="a Python file or a directory")
    p.set_defaults(run=run_lint_orchestrations)


def run_lint_orchestrations(args: argparse.Namespace) -> int:
    from durabl.orchestrator.lint import count_bodies, lint_source, python_files

    try:
        files = list(python_files(args.paths))
    except FileNotFoundError as exc:
        print(
            f"durabl lint-orchestrations: error: no such file or directory: {exc}", file=sys.stderr
        )
        return 2
    findings = bodies = 0
    broken = False
    for path in files:
        try:
            with open(path, encoding="utf-8") as f:
                source = f.read()
            found = lint_source(source, path)
            bodies += count_bodies(source)
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError) as exc:
            print(f"{path}: cannot check: {one_line(exc)}", file=sys.stderr)
            broken = True
            continue
        for finding in found:
            print(finding)
        findings += len(found)
    summary = f"{findings} finding(s) in {bodies} orchestration body(ies), {len(files)} file(s)"
    print(summary, file=sys.stderr if findings else sys.stdout)
    return 1 if findings or broken else 0


# -- main -------------------------------------------------------------------------------------
def commands() -> tuple[Callable[[Sub], None], ...]:
    from durabl.cli.controls import configure_pause, configure_paused, configure_resume
    from durabl.cli.events import configure_events
    from durabl.cli.ops import commands as operator_commands
    from durabl.cli.signals import configure_signal
    from durabl.cli.worker import configure_worker
    from durabl.cli.workers import configure_workers

    return (
        configure_worker,
        *operator_commands(),
        configure_pause,
        configure_resume,
        configure_paused,
        configure_signal,
        configure_workers,
        configure_events,
        configure_migrate,
        configure_reap,
        configure_demo,
        configure_lint_orchestrations,
    )


def build_parser() -> argparse.ArgumentParser:
    from durabl import __version__

    parser = argparse.ArgumentParser(
        prog="durabl",
        description="durabl: a durable job queue. Store commands take --url URL "
        f"(default: ${URL_ENV}) and --json (worker: --url only); exit codes: 0 ok, "
        "1 an error, 2 a usage error.",
        epilog=examples(
            "durabl worker myapp.jobs --url sqlite:///jobs.db",
            "durabl jobs --status failed",
            "durabl retry --all --kind stalled",
            "durabl COMMAND --help",
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"durabl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for configure in commands():
        configure(sub)
    return parser


def parse(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace:
    """``parser.parse_args``, except that an unknown option is reported with the usage of
    its command (argparse would print the top-level usage, which lists no options)."""
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        command: argparse.ArgumentParser = args.command_parser
        command.error(f"unrecognized arguments: {' '.join(unknown)}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code."""
    parser = build_parser()
    try:
        args = parse(parser, argv)
    except SystemExit as exc:  # argparse: 2 on a usage error, 0 after --help
        return exc.code if isinstance(exc.code, int) else 2
    run: Command = args.run
    try:
        return run(args)
    except UsageError as exc:
        print(f"durabl {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except (DurablError, ValueError) as exc:
        print(f"durabl {args.command}: error: {one_line(exc)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `durabl jobs --json | head`: the reader left, not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
