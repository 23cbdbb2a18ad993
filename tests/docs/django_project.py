"""The settings of the Django project a ``needs django`` block runs in (tests.docs.runner).

The project lives in the block's working directory (the current one): the site's SQLite
database and durabl's SQLite store are files there, and an app ``myapp`` that an earlier
block of the group wrote there is installed. With ``needs postgresql`` too (``DURABL_URL``
names a PostgreSQL schema of the block's own), the site's database is that schema and
durabl keeps its jobs there, through ``"django://default"``; with ``needs mongodb``, durabl
keeps them in the MongoDB database ``DURABL_URL`` names.
"""

from __future__ import annotations

import os
from importlib.util import find_spec
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

BASE_DIR = Path.cwd()
SECRET_KEY = "durabl-docs-snippets-not-secret"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast users

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    # django.tasks is Django 6's; on older Django the django-tasks package stands in
    *(["django_tasks"] if find_spec("django.tasks") is None else []),
    "durabl_django",
    *(["myapp"] if (BASE_DIR / "myapp").is_dir() else []),
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
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
STATIC_URL = "/static/"


def _postgres_database(url: str) -> dict[str, Any]:
    """``DATABASES["default"]`` for a ``postgresql://`` URL (its ``options`` kept: the
    runner puts the block's schema on the search path there)."""
    parts = urlsplit(url)
    options = parse_qs(parts.query).get("options")
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": parts.username or "",
        "PASSWORD": parts.password or "",
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "OPTIONS": {"options": options[0]} if options else {},
    }


_URL = os.environ.get("DURABL_URL", "")
if _URL.startswith("postgresql://"):
    DATABASES = {"default": _postgres_database(_URL)}
    DURABL = {"URL": "django://default"}
else:
    DATABASES = {
        "default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "db.sqlite3"}
    }
    DURABL = {"URL": _URL or f"sqlite:///{BASE_DIR / 'durabl.sqlite3'}"}

TASKS = {  # as docs/django.md configures them
    "default": {
        "BACKEND": "durabl_django.tasks.DurablBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"CONCURRENCY": 4, "MAX_ATTEMPTS": 1},
    }
}
