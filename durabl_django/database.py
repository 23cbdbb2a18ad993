"""``DURABL = {"URL": "django://<alias>"}``: the PostgreSQL store on a Django database.

The store is built from the alias's settings (``settings.DATABASES[alias]``) and keeps its
own pool for workers, claims and every other operation. Enqueues go through Django's own
connection for the alias in the calling thread (``connections[alias].connection``), so a
``transaction.atomic(using=alias)`` block covers them: the job exists if and only if the
block commits. Query options after the alias are the store's (``?table=...``,
``&listen_notify=false``, as on a ``postgresql://`` URL).

Nothing here connects when the backend is built: the first enqueue opens Django's
connection, the first other operation the store's pool.
"""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

from django.core.exceptions import ImproperlyConfigured

from durabl import Backend, backend_from_url

SCHEME = "django"
#: Connection parameters Django hands psycopg that are Python objects, not libpq keywords.
NOT_LIBPQ = frozenset({"context", "cursor_factory", "prepare_threshold"})


def split_url(url: str) -> tuple[str, list[tuple[str, str]]]:
    """The alias a ``django://`` URL names and its query options. ``ValueError`` when it
    names none or has a path."""
    parts = urlsplit(url)
    alias = parts.netloc
    if not alias or parts.path not in ("", "/") or parts.fragment:
        raise ValueError(
            f"a django:// URL names one database alias, e.g. 'django://default', got {url!r}"
        )
    try:
        query = parse_qsl(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError as exc:
        raise ValueError(f"malformed query in {url!r}: {exc}") from None
    return alias, query


def alias_problem(url: str) -> str | None:
    """Why ``url`` cannot give a store (unknown alias, not PostgreSQL, psycopg 2), or None.
    Reads settings only: nothing connects."""
    from django.db import connections

    try:
        alias, _ = split_url(url)
    except ValueError as exc:
        return str(exc)
    known = list(connections)
    if alias not in known:
        return (
            f"settings.DURABL['URL'] = {url!r} names the database alias {alias!r}, which "
            f"settings.DATABASES does not define (aliases: {', '.join(known) or 'none'})."
        )
    wrapper = connections[alias]
    if wrapper.vendor != "postgresql":
        return (
            f"settings.DURABL['URL'] = {url!r} needs a PostgreSQL database, but alias "
            f"{alias!r} uses {wrapper.settings_dict.get('ENGINE')!r} ({wrapper.vendor})."
        )
    from django.db.backends.postgresql.psycopg_any import is_psycopg3

    if not is_psycopg3:
        return (
            f"settings.DURABL['URL'] = {url!r}: durabl enqueues through Django's connection, "
            "which needs psycopg 3 (Django is using psycopg2)."
        )
    return None


def postgres_url(alias: str, query: list[tuple[str, str]], connect_timeout: float | None) -> str:
    """A ``postgresql://`` URL for the store's own pool, with the connection parameters
    Django would use for ``alias`` (the password in the part the store redacts)."""
    from django.db import connections

    params: dict[str, Any] = dict(connections[alias].get_connection_params())
    user = params.pop("user", "")
    password = params.pop("password", "")
    host = params.pop("host", "")
    port = params.pop("port", "")
    dbname = params.pop("dbname", "")
    store: list[tuple[str, str]] = []
    threshold = params.get("prepare_threshold")  # Django's default, None: never prepare
    if not any(key == "prepare_threshold" for key, _ in query):
        store.append(("prepare_threshold", "none" if threshold is None else str(threshold)))
    if connect_timeout is not None:
        params["connect_timeout"] = max(int(connect_timeout), 1)
    libpq = [
        (key, str(value))
        for key, value in params.items()
        if key not in NOT_LIBPQ and isinstance(value, (str, int)) and not isinstance(value, bool)
    ]
    login = quote(str(user), safe="")
    if password:
        login += ":" + quote(str(password), safe="")
    netloc = (login + "@" if login else "") + quote(str(host), safe="")
    if port:
        netloc += f":{port}"
    options = urlencode([*libpq, *store, *query])
    return f"postgresql://{netloc}/{quote(str(dbname), safe='')}?{options}"


def django_connection(alias: str) -> object:
    """Django's connection for ``alias`` in the calling thread (opened if need be): the
    psycopg ``Connection`` an enqueue goes through."""
    from django.db import connections

    wrapper = connections[alias]
    wrapper.ensure_connection()
    return wrapper.connection


def backend_for(url: str, *, connect_timeout: float | None = None, **options: Any) -> Backend:
    """The PostgreSQL store for a ``django://alias`` URL (see the module docstring).
    ``ImproperlyConfigured`` for an alias that cannot serve, ``ValueError`` for a bad
    option."""
    problem = alias_problem(url)
    if problem is not None:
        raise ImproperlyConfigured(problem)
    alias, query = split_url(url)
    target = postgres_url(alias, query, connect_timeout)
    provider = functools.partial(django_connection, alias)
    return backend_from_url(target, enqueue_connection=provider, **options)
