"""Fixtures of the MongoDB fault tests: the server (its ``mongodb`` parameter names the
lane ``make test-mongo`` selects), a fail point turned off after each test, and a database
of the test's own, dropped after."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from pymongo import MongoClient

from tests.conftest import require_mongo
from tests.integration.mongo_faults import FailPoint, client_url


@pytest.fixture(params=["mongodb"])
def server(request: pytest.FixtureRequest) -> str:
    """The server's URL (the parameter names the lane: ``make test-mongo`` selects it)."""
    return require_mongo()


@pytest.fixture
def fail_point(server: str) -> Iterator[FailPoint]:
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
