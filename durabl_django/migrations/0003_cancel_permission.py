"""The ``cancel_job`` permission (cancel pending or active jobs from the admin)."""

# ruff: noqa: RUF012
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("durabl_django", "0002_status_pages")]

    operations = [
        migrations.AlterModelOptions(
            name="job",
            options={
                "verbose_name": "job",
                "verbose_name_plural": "failed jobs",
                "permissions": (
                    ("retry_job", "Can retry failed jobs"),
                    ("cancel_job", "Can cancel pending or active jobs"),
                ),
                "managed": False,
                "default_permissions": ("view", "delete"),
            },
        ),
    ]
