"""Fixtures of the MongoDB fault tests: the server (its ``mongodb`` parameter names the
lane ``make test-mongo`` selects), a fail point turned off after each test, and a database
of the test's own, dropped after."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest
from pymongo import MongoClient

from tests.conftest import require_mongo
from tests.integration.mongo_faults import FailPoint, client_url


@pytest.fixture(params=["mongodb"])
def server(request: pytest.FixtureRequest) -> str:
    """The server's URL (the parameter names the lane: ``make test-mongo`` selects it)."""
    return require_mongo()


@contextlib.contextmanager
def fail_point_held(server: str) -> Iterator[None]:
    """The server's fail point for this test alone, meanwhile.

    A server has one ``failCommand`` fail point, and every test sets it for the same
    ``appName``: two such tests at once (xdist workers, or two sessions on one
    ``MONGO_URL``) would set, and turn off, each other's. An exclusive lock on a file
    named after the server makes the other wait; the kernel releases it if a process dies."""
    key = hashlib.sha256(urlsplit(server).netloc.encode()).hexdigest()[:16]
    path = os.path.join(tempfile.gettempdir(), f"durabl-fail-point-{key}.lock")
    with open(path, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture
def fail_point(server: str) -> Iterator[FailPoint]:
    """Set up before the test's worker and views (each test names it first), so it is
    torn down after them: no client of this test's ``appName`` outlives the lock."""
    with fail_point_held(server):
        point = FailPoint(server)
        try:
            yield point
        finally:
            point.close()  # off, pass or fail


@pytest.fixture
def database(server: str) -> Iterator[str]:
    name = f"durabl_faults_{uuid.uuid4().hex[:8]}"
    yield name
    client: MongoClient[dict[str, Any]] = MongoClient(client_url(server))
    try:
        client.drop_database(name)
    finally:
        client.close()
