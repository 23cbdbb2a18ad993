"""Settings for the durabl_django tests (pytest-django, and the subprocesses they start).

``DURABL_TEST_URL`` in the environment picks the store: the subprocess tests point it at a
SQLite file they share with the test; in-process tests get a fresh mongomock database each.
"""

from __future__ import annotations

import json
import os
from urllib.parse import urlsplit

SECRET_KEY = "durabl-django-tests-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["testserver", "localhost", "127.0.0.1"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_tasks",
    "durabl_django",
    "tests.django.testapp",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.django.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
# The local PostgreSQL server as a second alias, for the django:// URL tests
# (test_postgres_alias.py). Its test database is never created: those tests use the real
# database, each on tables of its own, and skip where no server answers.
_PG = urlsplit(
    os.environ.get("DURABL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
)
DATABASES["durabl_pg"] = {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": _PG.path.lstrip("/") or "test",
    "USER": _PG.username or "",
    "PASSWORD": _PG.password or "",
    "HOST": _PG.hostname or "",
    "PORT": str(_PG.port or ""),
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast logins
STATIC_URL = "/static/"

DURABL = {"URL": os.environ.get("DURABL_TEST_URL", "mongomock://durabl_tests")}
if "DURABL_TEST_SCHEDULES" in os.environ:  # JSON, for the runworkers schedule test
    DURABL["SCHEDULES"] = json.loads(os.environ["DURABL_TEST_SCHEDULES"])

TASKS = {
    "default": {
        "BACKEND": "durabl_django.tasks.DurablBackend",
        "QUEUES": ["default", "emails"],
    }
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"stderr": {"class": "logging.StreamHandler"}},
    "loggers": {"durabl": {"handlers": ["stderr"], "level": "WARNING"}},
}
