"""MongoJobQueue from a URL."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from pymongo import MongoClient
from pymongo.errors import ConfigurationError, InvalidName, InvalidURI
from pymongo.write_concern import WriteConcern

from durabl.model.exceptions import BackendUnavailableError
from durabl.stores.mongo import mongomock_adapter
from durabl.stores.mongo.retry import is_dns_failure

DEFAULT_DATABASE = "durabl"

S = TypeVar("S")


def redact_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for messages and logs)."""
    scheme, sep, rest = url.partition("://")
    netloc_end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    userinfo, at, hosts = rest[:netloc_end].rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{hosts}{rest[netloc_end:]}"


#: Seconds an operation waits for a usable server unless the URL (``serverSelectionTimeoutMS``)
#: or ``connect_timeout`` says otherwise: under 10 s, and long enough for most elections.
SERVER_SELECTION_TIMEOUT = 8.0


def from_url(
    make: Callable[..., S],
    url: str,
    *,
    database: str | None = None,
    collection: str = "durabl_jobs",
    use_change_streams: bool = False,
    clock_skew_allowance: float | None = None,
    connect_timeout: float | None = None,
    write_concern: WriteConcern | None = None,
    **client_options: Any,
) -> S:
    """The store ``make`` (``MongoJobQueue``) builds for ``url``: see
    :meth:`MongoJobQueue.from_url`."""
    client: Any
    if url.split("://", 1)[0].lower() == "mongomock":
        if client_options:
            raise ValueError(f"mongomock:// takes no client options: {sorted(client_options)}")
        client, owns_client = mongomock_adapter.mongomock_client(), False
        database = database or mongomock_adapter.database_in_url(url)
    else:
        client, owns_client = _client(url, connect_timeout, client_options), True
        database = database or unquote(urlsplit(url).path.lstrip("/"))
    try:
        return make(
            client[database or DEFAULT_DATABASE],
            collection,
            use_change_streams=use_change_streams,
            clock_skew_allowance=clock_skew_allowance,
            owns_client=owns_client,
            write_concern=write_concern,
        )
    except Exception as exc:  # e.g. an unacknowledged write concern in the URL
        if owns_client:  # nothing to keep
            client.close()
        if isinstance(exc, InvalidName):
            raise ValueError(f"not a usable database or collection name: {exc}") from exc
        raise


def _client(url: str, connect_timeout: float | None, options: dict[str, Any]) -> MongoClient[Any]:
    if connect_timeout is not None:  # the store-neutral bound on reaching the server
        ms = max(int(connect_timeout * 1000), 1)
        options.setdefault("serverSelectionTimeoutMS", ms)
        options.setdefault("connectTimeoutMS", ms)
    elif "serverselectiontimeoutms" not in url.lower():
        # pymongo waits 30 s for a server by default: a worker, ``manage.py reap`` or an
        # admin page would hang that long on an unreachable host before saying so.
        options.setdefault("serverSelectionTimeoutMS", int(SERVER_SELECTION_TIMEOUT * 1000))
    # connect=False: no socket and no monitor thread until the first operation, so a
    # backend can be built at import or in AppConfig.ready() for free.
    options.setdefault("connect", False)
    try:
        return MongoClient(url, tz_aware=True, **options)
    except ConfigurationError as exc:
        if is_dns_failure(exc):  # pymongo before 4.11 resolves mongodb+srv:// names here
            raise BackendUnavailableError(
                f"MongoDB unavailable: the DNS lookup for {redact_url(url)} failed: {exc}"
            ) from exc
        raise ValueError(f"not a usable MongoDB URL: {exc}") from exc
    except (InvalidURI, ValueError) as exc:
        raise ValueError(f"not a usable MongoDB URL: {exc}") from exc
