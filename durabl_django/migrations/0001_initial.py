"""Placeholder models for the admin: no tables (``managed=False`` and proxies), only
content types and the view/delete/retry permissions."""

# ruff: noqa: RUF012
from django.db import migrations, models


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.CharField(max_length=64, primary_key=True, serialize=False)),
            ],
            options={
                "verbose_name": "job",
                "verbose_name_plural": "failed jobs",
                "permissions": (("retry_job", "Can retry failed jobs"),),
                "managed": False,
                "default_permissions": ("view", "delete"),
            },
        ),
        migrations.CreateModel(
            name="ActiveJob",
            fields=[],
            options={
                "verbose_name": "active job",
                "verbose_name_plural": "active jobs",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("durabl_django.job",),
        ),
        migrations.CreateModel(
            name="PendingJob",
            fields=[],
            options={
                "verbose_name": "pending job",
                "verbose_name_plural": "pending jobs",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("durabl_django.job",),
        ),
        migrations.CreateModel(
            name="QueueOverview",
            fields=[],
            options={
                "verbose_name": "queue overview",
                "verbose_name_plural": "queue overview",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("durabl_django.job",),
        ),
    ]
