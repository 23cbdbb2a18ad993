"""``manage.py reap``: one recovery sweep over jobs whose worker stopped heartbeating."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from durabl import Backend, DurablError, positive_seconds_arg
from durabl_django.conf import durabl_settings
from durabl_django.runtime import get_queue


def cutoff(timeout: float, backend: Backend) -> str:
    """The lease age the sweep took back, as said to the user. A store whose processes may
    read different clocks (a MongoDB server: 2 s by default) adds its clock-skew allowance
    to the visibility timeout, so a lease is taken only past both."""
    allowance = backend.clock_skew_allowance
    skew = f" + {allowance:g} s allowed for clock skew" if allowance else ""
    return f"{timeout:g} s{skew}"


class Command(BaseCommand):
    help = (
        "Return jobs whose lease expired to pending (or fail them 'stalled' when they have "
        "no attempts left), once, and report what was done."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--visibility-timeout",
            type=positive_seconds_arg,
            metavar="S",
            help="seconds without a heartbeat before a lease counts as expired "
            "(default: DURABL['VISIBILITY_TIMEOUT'], the workers' value)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        timeout = options["visibility_timeout"]
        if timeout is None:
            timeout = durabl_settings.seconds("VISIBILITY_TIMEOUT")
        backend = get_queue().backend
        recovered = stalled = superseded = 0
        job_ids: list[str] = []
        try:
            backend.startup()
            while True:  # one sweep, in batches while they come back full
                report = backend.reap(timeout)
                recovered += report.recovered
                stalled += report.stalled
                superseded += report.superseded
                job_ids += report.job_ids
                if not report.saturated or not report.handled:
                    break
        except DurablError as exc:
            raise CommandError(f"reap failed on {backend!r}: {exc}") from exc
        total = recovered + stalled + superseded
        if options["verbosity"] < 1:  # -v 0: a cron job mails nothing when all went well
            return
        self.stdout.write(
            f"reaped {total} job(s) with a lease older than {cutoff(timeout, backend)}: "
            f"{recovered} pending again, {stalled} failed as stalled, {superseded} superseded"
        )
        if options["verbosity"] >= 2 and job_ids:
            self.stdout.write("job ids: " + ", ".join(job_ids))
