"""A mongodb+srv:// URL whose name does not resolve is BackendUnavailableError, fast, and
never shows the URL's password."""

from __future__ import annotations

import time
from typing import Any

import dns.resolver
import pytest
from pymongo.errors import ConfigurationError

from durabl import BackendUnavailableError, JobQueue, backend_from_url
from durabl.stores.mongo import factory

# .invalid never resolves (RFC 2606). A short DNS lifetime bounds the wait on a machine
# whose resolver does not answer at all.
URL = "mongodb+srv://app:s3cret@no-such-cluster.durabl.invalid/app"


def test_an_srv_name_that_does_not_resolve_is_unavailable() -> None:
    backend = backend_from_url(URL, connectTimeoutMS=5000)
    started = time.monotonic()
    try:
        with pytest.raises(BackendUnavailableError) as info:
            JobQueue(backend).enqueue("t", {})
    finally:
        backend.close()
    assert time.monotonic() - started < 10
    message = str(info.value)
    assert "no-such-cluster.durabl.invalid" in message and "DNS" in message
    assert "s3cret" not in message and "s3cret" not in str(info.value.__cause__)


def test_an_srv_lookup_failing_when_the_client_is_made_is_unavailable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """pymongo before 4.11 resolves the name in ``MongoClient()`` itself."""

    def client(*args: Any, **kwargs: Any) -> Any:
        raise ConfigurationError("The DNS query name does not exist") from dns.resolver.NXDOMAIN()

    monkeypatch.setattr(factory, "MongoClient", client)
    with pytest.raises(BackendUnavailableError) as info:
        backend_from_url(URL)
    message = str(info.value)
    assert "mongodb+srv://app:***@no-such-cluster.durabl.invalid/app" in message
    assert "s3cret" not in message


def test_other_configuration_errors_stay_value_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    def client(*args: Any, **kwargs: Any) -> Any:
        raise ConfigurationError("Only one TXT record is supported")

    monkeypatch.setattr(factory, "MongoClient", client)
    with pytest.raises(ValueError, match="not a usable MongoDB URL"):
        backend_from_url(URL)


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("mongodb+srv://app:s3cret@h.example/app?x=1", "mongodb+srv://app:***@h.example/app?x=1"),
        ("mongodb://u:p%40ss@a:1,b:2/db", "mongodb://u:***@a:1,b:2/db"),
        ("mongodb://u@h/db", "mongodb://u@h/db"),
        ("mongodb://h/db?authSource=admin", "mongodb://h/db?authSource=admin"),
    ],
)
def test_redact_url_hides_only_the_password(url: str, shown: str) -> None:
    assert factory.redact_url(url) == shown
