"""pytest-django setup for tests/django only.

The settings module is chosen here (not in pyproject.toml) so the rest of the suite never
sees Django. Every test gets a fresh database of its own as its durabl store through
``settings.DURABL``, which also proves that ``override_settings`` reconfigures the queue:
a mongomock database, and for the tests marked ``on_real_mongo`` (a module's
``pytestmark`` or one test's mark) a database on the real MongoDB server as well
(``tests.conftest.require_mongo()``: ``MONGO_URL``, else the SecantusDB wire server),
dropped after the test. Those run as ``test_x[mongomock]`` and ``test_x[mongodb]``, so
``-k mongodb`` is the real-server lane.
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser
    from django.test import Client

from tests.mongo_database import drop_database, fresh_database_url

SETTINGS_MODULE = "tests.django.settings"
ROOT = Path(__file__).resolve().parents[2]
ON_REAL_MONGO = "on_real_mongo"
STORES = ("mongomock", "mongodb")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"{ON_REAL_MONGO}: run on the real MongoDB server too (durabl_store[mongodb])",
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", SETTINGS_MODULE)
    import django
    from django.apps import apps

    if not apps.ready:
        django.setup()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``durabl_store`` over both stores for the tests marked ``on_real_mongo``."""
    marked = metafunc.definition.get_closest_marker(ON_REAL_MONGO) is not None
    if marked and "durabl_store" in metafunc.fixturenames:
        metafunc.parametrize("durabl_store", STORES, indirect=True)


@pytest.fixture
def real_mongo_url() -> Iterator[str]:
    """A database of this test's own on the real MongoDB server, dropped after it."""
    url = fresh_database_url("durabl_django")
    yield url
    drop_database(url)


@pytest.fixture(autouse=True)
def durabl_store(request: pytest.FixtureRequest, settings: Any) -> Iterator[str]:
    """A database of its own for each test (``settings`` undoes it after): mongomock, or
    a database on the real MongoDB server for ``durabl_store[mongodb]``."""
    if getattr(request, "param", "mongomock") == "mongodb":
        url = request.getfixturevalue("real_mongo_url")
    else:
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


@pytest.fixture
def superuser(django_user_model: Any) -> AbstractBaseUser:
    """A superuser: every permission the admin's views check."""
    user: AbstractBaseUser = django_user_model.objects.create_superuser("root", password="pw")
    return user


@pytest.fixture
def csrf_client(superuser: AbstractBaseUser) -> Client:
    """A logged-in superuser whose POSTs must carry a CSRF token, as a browser's do."""
    from django.test import Client  # Django's settings are configured by now

    client = Client(enforce_csrf_checks=True)
    client.force_login(superuser)
    return client


def django_env(**extra: str) -> dict[str, str]:
    """The environment of a ``python -m django ... --settings`` subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["DJANGO_SETTINGS_MODULE"] = SETTINGS_MODULE
    env.update(extra)
    return env


def django_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "django", *args, "--settings", SETTINGS_MODULE]
