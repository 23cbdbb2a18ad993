"""Placeholder models for the admin.

Jobs live in durabl's store, not in Django's database, so nothing here has a table: the
models exist so that the admin has something to hang its pages on (an app-index entry per
page) and so that Django creates the permissions the pages check:

- ``durabl_django.view_job``: browse jobs and the queue overview (staff only);
- ``durabl_django.retry_job``: retry failed jobs, and run delayed pending jobs now;
- ``durabl_django.cancel_job``: cancel pending or active jobs;
- ``durabl_django.delete_job``: delete jobs that are not running.

The admin never queries these models.
"""

from __future__ import annotations

from django.db import models


class Job(models.Model):
    """A durabl job. Its admin entry is the failed-jobs list."""

    id: models.CharField[str, str] = models.CharField(primary_key=True, max_length=64)

    class Meta:
        managed = False
        default_permissions = ("view", "delete")
        permissions = (
            ("retry_job", "Can retry failed jobs"),
            ("cancel_job", "Can cancel pending or active jobs"),
        )
        verbose_name = "job"
        verbose_name_plural = "failed jobs"

    def __str__(self) -> str:
        return str(self.id)


class PendingJob(Job):
    """The pending-jobs page (read-only)."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = "pending job"
        verbose_name_plural = "pending jobs"


class ActiveJob(Job):
    """The active-jobs page (read-only)."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = "active job"
        verbose_name_plural = "active jobs"


class CompletedJob(Job):
    """The completed-jobs page (read-only)."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = "completed job"
        verbose_name_plural = "completed jobs"


class SupersededJob(Job):
    """The superseded-jobs page."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = "superseded job"
        verbose_name_plural = "superseded jobs"


class CancelledJob(Job):
    """The cancelled-jobs page (shown once the store knows the status)."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = "cancelled job"
        verbose_name_plural = "cancelled jobs"


class JobSchedule(Job):
    """The schedules page."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = "schedule"
        verbose_name_plural = "schedules"


class WorkerProcess(Job):
    """The workers page (from durabl's workers registry)."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = "worker"
        verbose_name_plural = "workers"


class EventSubscription(Job):
    """The events page (the event subscriptions kept in the store)."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = "event subscription"
        verbose_name_plural = "events"


class QueueOverview(Job):
    """The per-type queue overview page."""

    class Meta:
        proxy = True
        default_permissions = ()
        verbose_name = "queue overview"
        verbose_name_plural = "queue overview"
