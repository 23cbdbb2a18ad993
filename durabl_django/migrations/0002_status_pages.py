"""Placeholder proxies for the completed, superseded and cancelled lists and the schedules
page: content types only, no tables and no new permissions."""

# ruff: noqa: RUF012
from django.db import migrations


def _proxy(name: str, singular: str, plural: str) -> migrations.CreateModel:
    return migrations.CreateModel(
        name=name,
        fields=[],
        options={
            "verbose_name": singular,
            "verbose_name_plural": plural,
            "proxy": True,
            "default_permissions": (),
            "indexes": [],
            "constraints": [],
        },
        bases=("durabl_django.job",),
    )


class Migration(migrations.Migration):
    dependencies = [("durabl_django", "0001_initial")]

    operations = [
        _proxy("CompletedJob", "completed job", "completed jobs"),
        _proxy("SupersededJob", "superseded job", "superseded jobs"),
        _proxy("CancelledJob", "cancelled job", "cancelled jobs"),
        _proxy("JobSchedule", "schedule", "schedules"),
    ]
