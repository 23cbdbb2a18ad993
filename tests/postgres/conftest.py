"""Fixtures of the PostgreSQL tests: a store on tables of its own (dropped afterwards), on
the real clock unless a test asks for the fake one."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import cleanup_backend, make_postgres_backend, require_postgres


@pytest.fixture
def pg() -> Iterator[Any]:
    """A started PostgresJobQueue on the server's clock."""
    store = make_postgres_backend()
    store.startup()
    yield store
    cleanup_backend(store)


@pytest.fixture
def pg_url() -> str:
    return require_postgres()  # skips (or fails) with one line when no server answers
