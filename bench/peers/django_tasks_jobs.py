"""The no-op task that django-tasks' ``db_worker`` runs. Imported only by processes whose
Django settings are configured (see django_tasks_peer.py): defining a task validates it
against the configured backend."""

from __future__ import annotations

import os
import time

from peers.common import append_record

try:
    from django.tasks import task  # Django 6+
except ImportError:
    from django_tasks import task  # the backport


@task()  # type: ignore[untyped-decorator,unused-ignore]
def noop(enqueued_at: float) -> None:
    append_record(os.environ["BENCH_RECORDS"], enqueued_at, time.time())
