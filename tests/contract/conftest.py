"""Fixtures of the contract suite only."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.contract.support import close_views


@pytest.fixture(autouse=True)
def _close_second_views() -> Iterator[None]:
    """Close every extra store object a test opened over its store (see ``second_view``)."""
    yield
    close_views()
