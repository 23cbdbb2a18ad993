"""While MongoDB cannot be reached, the writes a worker makes on its way out keep their
bounds: a bounded release ends within its timeout (pymongo looks for a server only every
half second, so a deadline passed to it as it is overran by up to that much), removing the
registry entry gives up after ``REGISTRY_REMOVAL_TIMEOUT`` whatever the URL's server
selection timeout, and closing the store does not wait for a server at all. Each used to
take a whole server selection timeout (5 s here), or a half second more than its bound.

On a private SecantusDB wire server, stopped by the test (the session's server is shared).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone

import pytest

from durabl import JobQueue, MongoJobQueue
from durabl.model.exceptions import BackendUnavailableError
from durabl.model.job import JobHandle
from durabl.model.workers import WorkerInfo
from durabl.stores.mongo.store import REGISTRY_REMOVAL_TIMEOUT
from tests.conftest import mongo_required
from tests.mongo_server import NoServerError, WireServer

#: Thread scheduling on a busy two-core machine.
SLACK = 0.3
#: The selection timeout the store's URL sets: what an unbounded step would wait.
SELECTION_TIMEOUT_MS = 5000


@dataclass
class DownStore:
    store: MongoJobQueue
    claimed: JobHandle[object]
    worker_id: str


@pytest.fixture
def down() -> Iterator[DownStore]:
    """A store that claimed a job and registered a worker, then lost its server."""
    try:
        server = WireServer.start()
    except NoServerError as exc:
        if mongo_required():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    url = server.url.replace("/?", f"/bounds?serverSelectionTimeoutMS={SELECTION_TIMEOUT_MS}&")
    store = MongoJobQueue.from_url(url)
    try:
        store.startup()
        JobQueue(store).enqueue("report", {})
        (claimed,) = store.claim("report", lease_owner="test")
        now = datetime.now(timezone.utc)
        info = WorkerInfo("w-1", "host", 1, {"report": 1}, now, now, 1, 10.0)
        store.upsert_worker(info)
    except BaseException:
        store.close()
        server.stop()
        raise
    server.stop()
    try:
        yield DownStore(store, claimed, info.id)
    finally:
        store.close()


def timed(action: Callable[[], object]) -> tuple[float, BaseException | None]:
    """How long ``action`` took, and what it raised."""
    started = time.monotonic()
    try:
        action()
    except BaseException as exc:
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


def test_mongodb_bounded_release_ends_within_its_timeout(down: DownStore) -> None:
    handle = down.claimed
    took, error = timed(lambda: down.store.release(handle.id, handle.claim_token, timeout=1.0))
    assert isinstance(error, BackendUnavailableError), error
    assert took <= 1.0 + SLACK / 2, f"a release bounded to 1 s took {took:.2f} s"


def test_mongodb_registry_removal_gives_up_within_its_bound(down: DownStore) -> None:
    took, error = timed(lambda: down.store.delete_worker(down.worker_id))
    assert isinstance(error, BackendUnavailableError), error
    assert took <= REGISTRY_REMOVAL_TIMEOUT + SLACK, f"the removal took {took:.2f} s"


def test_mongodb_close_does_not_wait_for_a_server(down: DownStore) -> None:
    took, error = timed(down.store.close)
    assert error is None
    assert took <= SLACK, f"close() took {took:.2f} s"
