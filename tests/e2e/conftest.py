"""End-to-end tests: a real browser on the admin, and the example project in subprocesses.

Django is configured with the durabl_django test settings, as in ``tests/django``.
"""

from __future__ import annotations

import os

import pytest

SETTINGS_MODULE = "tests.django.settings"


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS_MODULE)
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()
