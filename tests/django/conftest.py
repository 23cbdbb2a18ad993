"""pytest-django setup for tests/django only.

The settings module is chosen here (not in pyproject.toml) so the rest of the suite never
sees Django. Every test gets a fresh mongomock database as its durabl store through
``settings.DURABL``, which also proves that ``override_settings`` reconfigures the queue.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SETTINGS_MODULE = "tests.django.settings"
ROOT = Path(__file__).resolve().parents[2]


def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS_MODULE)
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()


@pytest.fixture(autouse=True)
def durabl_store(settings: Any) -> Iterator[str]:
    """A mongomock database of its own for each test (``settings`` undoes it after)."""
    url = f"mongomock://durabl_test_{uuid.uuid4().hex[:12]}"
    settings.DURABL = {"URL": url}
    yield url


@pytest.fixture
def queue(durabl_store: str) -> Any:
    """The configured default queue, with the test app's jobs registered (no threads)."""
    import durabl_django
    from durabl_django.workers import declared_jobs

    q = durabl_django.get_queue()
    for spec in declared_jobs().values():
        q.register(spec.type, spec.handler)
    return q


def django_env(**extra: str) -> dict[str, str]:
    """The environment of a ``python -m django ... --settings`` subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
    env.update(extra)
    return env


def django_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "django", *args, "--settings", SETTINGS_MODULE]
