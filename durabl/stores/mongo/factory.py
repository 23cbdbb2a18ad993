"""MongoJobQueue from a URL."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit

from pymongo import MongoClient
from pymongo.errors import ConfigurationError, InvalidName, InvalidURI
from pymongo.write_concern import WriteConcern

from durabl.model.exceptions import BackendUnavailableError, DurablError
from durabl.stores.mongo.retry import is_dns_failure

DEFAULT_DATABASE = "durabl"

S = TypeVar("S")

_mock_lock = threading.Lock()
_mock_client: Any = None


def mongomock_client() -> Any:
    """One mongomock client per process: two clients would not share data."""
    global _mock_client
    with _mock_lock:
        if _mock_client is None:
            try:
                import mongomock
            except ImportError as exc:
                raise DurablError(
                    "mongomock:// needs the mongomock package (pip install 'durabl[test]')"
                ) from exc
            _mock_client = mongomock.MongoClient(tz_aware=True)
        return _mock_client


def redact_url(url: str) -> str:
    """``url`` with its password, if any, replaced by ``***`` (for messages and logs)."""
    scheme, sep, rest = url.partition("://")
    netloc_end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    userinfo, at, hosts = rest[:netloc_end].rpartition("@")
    if not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}{sep}{user}:***@{hosts}{rest[netloc_end:]}"


def _database_from_path(url: str) -> str | None:
    path = urlsplit(url).path.lstrip("/")
    return unquote(path) or None


def _mock_database(url: str) -> str | None:
    """``mongomock:///app``, ``mongomock://host/app`` or plain ``mongomock://app``."""
    parts = urlsplit(url)
    return unquote(parts.path.lstrip("/")) or unquote(parts.netloc) or None


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
    scheme = url.split("://", 1)[0].lower()
    if scheme == "mongomock":
        db_name = database or _mock_database(url) or DEFAULT_DATABASE
        if client_options:
            raise ValueError(f"mongomock:// takes no client options: {sorted(client_options)}")
        try:
            return make(
                mongomock_client()[db_name],
                collection,
                use_change_streams=use_change_streams,
                clock_skew_allowance=clock_skew_allowance,
                write_concern=write_concern,
            )
        except InvalidName as exc:
            raise ValueError(f"not a usable database or collection name: {exc}") from exc
    if connect_timeout is not None:  # the store-neutral bound on reaching the server
        ms = max(int(connect_timeout * 1000), 1)
        client_options.setdefault("serverSelectionTimeoutMS", ms)
        client_options.setdefault("connectTimeoutMS", ms)
    elif "serverselectiontimeoutms" not in url.lower():
        # pymongo waits 30 s for a server by default: a worker, ``manage.py reap`` or an
        # admin page would hang that long on an unreachable host before saying so.
        client_options.setdefault("serverSelectionTimeoutMS", int(SERVER_SELECTION_TIMEOUT * 1000))
    try:
        # connect=False: no socket and no monitor thread until the first operation, so a
        # backend can be built at import or in AppConfig.ready() for free.
        client_options.setdefault("connect", False)
        client: MongoClient[dict[str, Any]] = MongoClient(url, tz_aware=True, **client_options)
    except ConfigurationError as exc:
        if is_dns_failure(exc):  # pymongo before 4.11 resolves mongodb+srv:// names here
            raise BackendUnavailableError(
                f"MongoDB unavailable: the DNS lookup for {redact_url(url)} failed: {exc}"
            ) from exc
        raise ValueError(f"not a usable MongoDB URL: {exc}") from exc
    except (InvalidURI, ValueError) as exc:
        raise ValueError(f"not a usable MongoDB URL: {exc}") from exc
    db_name = database or _database_from_path(url) or DEFAULT_DATABASE
    try:
        return make(
            client[db_name],
            collection,
            use_change_streams=use_change_streams,
            clock_skew_allowance=clock_skew_allowance,
            owns_client=True,
            write_concern=write_concern,
        )
    except InvalidName as exc:
        client.close()
        raise ValueError(f"not a usable database or collection name: {exc}") from exc
    except Exception:  # e.g. an unacknowledged write concern in the URL: nothing to keep
        client.close()
        raise
