"""The ``wire`` fixture: a scripted replica-set primary and a store on the real driver."""

from __future__ import annotations

from collections.abc import Iterator

import pymongo.common
import pytest
from mockupdb import MockupDB

from tests.wire.server import Wire


@pytest.fixture(scope="session")
def primary() -> Iterator[MockupDB]:
    server = Wire.primary()
    yield server
    server.stop()


@pytest.fixture
def wire(primary: MockupDB, monkeypatch: pytest.MonkeyPatch) -> Iterator[Wire]:
    # After a lost reply or a state-change error the driver re-checks the server, at most
    # every MIN_HEARTBEAT_INTERVAL (0.5 s); pymongo's own tests shorten it the same way.
    monkeypatch.setattr(pymongo.common, "MIN_HEARTBEAT_INTERVAL", 0.02)
    wire = Wire(primary)
    yield wire
    wire.close()
