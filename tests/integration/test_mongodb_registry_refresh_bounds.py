"""While MongoDB cannot be reached, a refresh of a queue's registry entry (and a prune of
long-gone entries) gives up after ``REGISTRY_REFRESH_TIMEOUT``, and a reading of the
server's clock after ``SERVER_TIME_TIMEOUT``, whatever the URL's server selection timeout:
the presence thread that makes them also removes the entry at shutdown, and must not be
held up meanwhile. Each used to wait a whole server selection (5 s here).

On a private SecantusDB wire server, stopped by the test (the session's server is shared).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta, timezone

import pytest

from durabl import JobQueue, MongoJobQueue
from durabl.model.exceptions import BackendUnavailableError
from durabl.model.workers import WorkerInfo
from durabl.runtime.presence import Presence
from durabl.stores.mongo.store import REGISTRY_REFRESH_TIMEOUT, SERVER_TIME_TIMEOUT
from tests.conftest import mongo_required
from tests.mongo_server import NoServerError, WireServer

#: Thread scheduling on a busy two-core machine.
SLACK = 0.3
#: The selection timeout the store's URL sets: what an unbounded refresh would wait.
SELECTION_TIMEOUT_MS = 5000


@pytest.fixture
def down() -> Iterator[MongoJobQueue]:
    """A store that registered a worker, then lost its server."""
    try:
        server = WireServer.start()
    except NoServerError as exc:
        if mongo_required():
            pytest.fail(str(exc))
        pytest.skip(str(exc))
    url = server.url.replace("/?", f"/refresh?serverSelectionTimeoutMS={SELECTION_TIMEOUT_MS}&")
    store = MongoJobQueue.from_url(url)
    try:
        store.startup()
        store.upsert_worker(info(datetime.now(timezone.utc)))
    except BaseException:
        store.close()
        server.stop()
        raise
    server.stop()
    try:
        yield store
    finally:
        store.close()


def info(now: datetime) -> WorkerInfo:
    return WorkerInfo("w-1", "host", 1, {"report": 1}, now, now, 1, 10.0)


def timed(action: Callable[[], object]) -> tuple[float, BaseException | None]:
    """How long ``action`` took, and what it raised."""
    started = time.monotonic()
    try:
        action()
    except BaseException as exc:
        return time.monotonic() - started, exc
    return time.monotonic() - started, None


def test_mongodb_registry_refresh_gives_up_within_its_bound(down: MongoJobQueue) -> None:
    took, error = timed(lambda: down.upsert_worker(info(datetime.now(timezone.utc))))
    assert isinstance(error, BackendUnavailableError), error
    assert took <= REGISTRY_REFRESH_TIMEOUT + SLACK, f"the refresh took {took:.2f} s"


def test_mongodb_registry_prune_gives_up_within_its_bound(down: MongoJobQueue) -> None:
    cutoff = datetime.now(timezone.utc) - timedelta(hours=1)
    took, error = timed(lambda: down.prune_workers(cutoff))
    assert isinstance(error, BackendUnavailableError), error
    assert took <= REGISTRY_REFRESH_TIMEOUT + SLACK, f"the prune took {took:.2f} s"


def test_a_presence_refresh_while_the_server_is_down_fails_within_its_bound(
    down: MongoJobQueue,
) -> None:
    presence = Presence(
        down, processors=list, active=lambda: 0, default_interval=10.0, clock=JobQueue(down).clock
    )
    took, error = timed(presence.beat)
    assert error is None  # logged, not raised
    assert presence.failures.failing
    # The server's clock (read first, bounded as well: it used to wait a server selection
    # too), then the refresh, which fails: no prune after it.
    limit = SERVER_TIME_TIMEOUT + REGISTRY_REFRESH_TIMEOUT + SLACK
    assert took <= limit, f"the refresh took {took:.2f} s"
