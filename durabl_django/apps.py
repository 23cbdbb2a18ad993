"""The Django app: ``INSTALLED_APPS = [..., "durabl_django"]``."""

from __future__ import annotations

from django.apps import AppConfig
from django.core.signals import setting_changed


class DurablConfig(AppConfig):
    name = "durabl_django"
    label = "durabl_django"
    verbose_name = "Durabl"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        """Register the checks and the settings receiver, import every app's ``jobs``
        module, and configure durabl's global queue. Connects nothing, starts no thread,
        and never raises for a bad setting (``manage.py check`` reports it)."""
        from durabl_django import checks
        from durabl_django.registry import autodiscover
        from durabl_django.runtime import configure, on_setting_changed, use_declared_jobs
        from durabl_django.workers import declared_jobs

        checks.register()
        use_declared_jobs(declared_jobs)
        setting_changed.connect(on_setting_changed, dispatch_uid="durabl_django.settings")
        autodiscover()
        configure()
