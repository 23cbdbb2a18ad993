"""Settings of the durabl example shop: a plain Django project plus ``durabl_django``.

Both stores are SQLite files next to this project (``SHOP_DATA_DIR`` moves them): Django's
own database, ``db.sqlite3``, and durabl's jobs, ``durabl.sqlite3``. ``DURABL_URL`` points
the jobs somewhere else, for example ``mongodb://localhost:27017/shop``.
"""

from __future__ import annotations

import os
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
DATA_DIR = Path(os.environ.get("SHOP_DATA_DIR", BASE_DIR)).resolve()

# An example: never use this key, or DEBUG = True, in production.
SECRET_KEY = "django-insecure-durabl-example-shop-not-a-secret"
DEBUG = True
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "durabl_django",
    "orders",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "shop.urls"

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

WSGI_APPLICATION = "shop.wsgi.application"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": DATA_DIR / "db.sqlite3",
    }
}

# durabl: the jobs live in their own SQLite file, shared by `runserver` (which enqueues)
# and `runworkers` (which runs them). An absolute path: sqlite:////abs/path/durabl.sqlite3.
DURABL = {
    "URL": os.environ.get("DURABL_URL", f"sqlite:///{DATA_DIR / 'durabl.sqlite3'}"),
    "VISIBILITY_TIMEOUT": 60,
    "SHUTDOWN_TIMEOUT": 10,
    "ADMIN_LAG_THRESHOLD": 30,
}

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Show what the jobs do in the runworkers terminal.
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "{asctime} {levelname:<7} {name}: {message}", "style": "{"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "orders": {"handlers": ["console"], "level": "INFO"},
        "durabl": {"handlers": ["console"], "level": "INFO"},
    },
}
