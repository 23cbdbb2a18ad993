"""The workers page's placeholder proxy (a content type only)."""

# ruff: noqa: RUF012
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("durabl_django", "0003_cancel_permission")]

    operations = [
        migrations.CreateModel(
            name="WorkerProcess",
            fields=[],
            options={
                "verbose_name": "worker",
                "verbose_name_plural": "workers",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("durabl_django.job",),
        ),
    ]
