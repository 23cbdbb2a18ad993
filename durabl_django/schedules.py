"""``settings.DURABL["SCHEDULES"]``: schedules declared in settings, for ``runworkers``.

Each entry is ``name: {"type": ..., "cron": ... | "every": ..., "data": ..., "timezone":
..., "catch_up": ..., <enqueue options>}``, the arguments of :func:`durabl.schedule`.
"""

from __future__ import annotations

from collections.abc import Mapping

from django.core.exceptions import ImproperlyConfigured

import durabl
from durabl_django.conf import SETTING_NAME, durabl_settings


def declare_schedules() -> list[str]:
    """Declare every schedule of the settings with :func:`durabl.schedule` (no I/O); the
    names declared. ``ImproperlyConfigured`` names the entry that is wrong."""
    entries = durabl_settings.SCHEDULES
    if not isinstance(entries, Mapping):
        raise ImproperlyConfigured(f"settings.{SETTING_NAME}['SCHEDULES'] must be a dict")
    for name, entry in entries.items():
        where = f"settings.{SETTING_NAME}['SCHEDULES'][{name!r}]"
        if not isinstance(entry, Mapping) or "type" not in entry:
            raise ImproperlyConfigured(f"{where} must be a dict with a 'type' key")
        options = dict(entry)
        job_type = options.pop("type")
        try:
            durabl.schedule(name, job_type, **options)
        except (TypeError, ValueError) as exc:  # ScheduleError is a ValueError
            raise ImproperlyConfigured(f"{where}: {exc}") from exc
    return list(entries)
