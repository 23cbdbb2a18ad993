"""``manage.py runworkers``: run the declared job handlers until SIGTERM/SIGINT."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError, CommandParser

from durabl import ExitDeadline, positive_int_arg, positive_seconds_arg
from durabl_django.conf import durabl_settings
from durabl_django.runtime import get_queue
from durabl_django.schedules import declare_schedules
from durabl_django.workers import Runner, declared_jobs, select


def configured_shutdown_timeout() -> str:
    """The setting's value for ``--help`` (a broken setting is reported by the checks)."""
    try:
        return f"{durabl_settings.seconds('SHUTDOWN_TIMEOUT'):g} s"
    except (ImproperlyConfigured, TypeError, ValueError):
        return "not a valid duration"


class Command(BaseCommand):
    help = (
        "Run the job handlers declared with @durabl_django.job (and the queues of "
        "durabl_django.tasks.DurablBackend) until SIGTERM or SIGINT, then drain: running "
        "jobs get --shutdown-timeout seconds to finish. A second signal stops at once, and "
        "so does a process not exited 2.5 s after the timeout (exit code 1)."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--type",
            action="append",
            dest="types",
            metavar="T",
            help="process only this job type (repeat for several; default: every declared type)",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int_arg,
            metavar="N",
            help="worker threads per type, overriding each declaration's concurrency",
        )
        parser.add_argument(
            "--no-reaper",
            action="store_true",
            help="do not run the reaper (run it in another process, or `manage.py reap` "
            "on a timer)",
        )
        parser.add_argument(
            "--no-scheduler",
            action="store_true",
            help="do not run the scheduler (the schedules of DURABL['SCHEDULES'] and "
            "durabl.schedule; any number of processes may run it)",
        )
        parser.add_argument(
            "--metrics-port",
            type=positive_int_arg,
            metavar="P",
            help="serve Prometheus metrics on http://0.0.0.0:P/metrics (needs prometheus_client)",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=positive_seconds_arg,
            metavar="S",
            help="seconds running jobs get to finish after a signal "
            f"(default: DURABL['SHUTDOWN_TIMEOUT'], now {configured_shutdown_timeout()})",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        specs = declared_jobs()
        if not specs:
            raise CommandError(
                "no job types declared: add @durabl_django.job(...) handlers to a jobs.py "
                "module of an installed app"
            )
        try:
            selected = select(specs, options["types"])
        except KeyError as exc:
            raise CommandError(
                f"unknown job type(s): {exc.args[0]}; known: {', '.join(specs)}"
            ) from None
        if options["concurrency"] is not None:
            selected = [spec.with_concurrency(options["concurrency"]) for spec in selected]
        timeout = options["shutdown_timeout"]
        if timeout is None:
            timeout = durabl_settings.seconds("SHUTDOWN_TIMEOUT")
        scheduler = not options["no_scheduler"]
        if scheduler:
            try:
                declare_schedules()
            except ImproperlyConfigured as exc:
                raise CommandError(str(exc)) from None
        queue = get_queue()
        if queue.immediate:
            raise CommandError(
                f"{queue.backend!r} runs each job inside enqueue(); there is nothing for "
                "runworkers to do (set DURABL['URL'] to a store, or drop DURABL['BACKEND'])"
            )
        if options["metrics_port"]:
            from durabl import metrics

            try:
                metrics.install(queue)
                metrics.serve(options["metrics_port"])
            except (ImportError, OSError) as exc:
                raise CommandError(f"--metrics-port {options['metrics_port']}: {exc}") from None
        runner = Runner(
            queue,
            selected,
            reaper=not options["no_reaper"],
            scheduler=scheduler,
            shutdown_timeout=timeout,
            stdout=self.stdout,
            stderr=self.stderr,
            # The process ends by the timeout plus 2.5 s, whatever holds its exit up.
            exit_deadline=ExitDeadline(
                timeout, name="durabl", stderr=self.stderr, stdout=self.stdout
            ),
        )
        try:
            runner.start()
        except Exception as exc:  # an unreachable store: one line, not a driver traceback
            if runner.exit_deadline is not None:
                runner.exit_deadline.cancel()
            queue.shutdown(timeout=0)
            raise CommandError(
                f"cannot start the workers on {queue.backend!r}: {type(exc).__name__}: {exc}"
            ) from exc
        runner.wait()
