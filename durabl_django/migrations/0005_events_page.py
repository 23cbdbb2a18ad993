"""The events page's placeholder proxy (a content type only)."""

# ruff: noqa: RUF012
from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("durabl_django", "0004_workers_page")]

    operations = [
        migrations.CreateModel(
            name="EventSubscription",
            fields=[],
            options={
                "verbose_name": "event subscription",
                "verbose_name_plural": "events",
                "proxy": True,
                "default_permissions": (),
                "indexes": [],
                "constraints": [],
            },
            bases=("durabl_django.job",),
        ),
    ]
