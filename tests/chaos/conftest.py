"""The campaign's servers (started once for the module that needs them, stopped after it)
and a table of every run's result at the end of the session."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.chaos.campaign import Result
from tests.chaos.stores import close_stores

#: Every run's result this session, for the summary at the end.
RESULTS: list[Result] = []


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, Any]]:
    """The stores opened so far, by name (see :func:`tests.chaos.stores.open_store`)."""
    opened: dict[str, Any] = {}
    try:
        yield opened
    finally:
        close_stores(opened)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not RESULTS:
        return
    terminalreporter.section("fault campaign")
    for result in RESULTS:
        terminalreporter.line(result.summary())
