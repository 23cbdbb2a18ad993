"""Shared fixtures: a fake clock and a backend per store.

The ``backend`` fixture of the contract suite runs over every store: mongomock and the
in-memory backend always; a real MongoDB server: ``MONGO_URL`` when set, else the
SecantusDB wire server started for the session (skipped with one line when neither can be
had, failed instead under ``DURABL_REQUIRE_MONGO=1`` or ``CI=true``); PostgreSQL at
``DURABL_TEST_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``), each
test on tables of its own, skipped with one line when no server answers (failed instead
when ``DURABL_REQUIRE_POSTGRES=1``). Where that server does not answer (and it is not
required), a throwaway server is started from the machine's PostgreSQL binaries.

Under pytest-xdist (``make test`` runs ``-n``) the controller decides both servers once,
before the workers start, and hands their URLs to the workers: one wire server (and at
most one throwaway PostgreSQL) for the whole run, stopped by the controller at its end.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import mongomock
import pytest

from durabl import JobQueue, MemoryBackend, MongoJobQueue, SqliteJobQueue
from durabl.testing import FakeClock

_real_mongo: dict[str, Any] = {}


def _docker_answers() -> bool:
    """Whether a Docker engine listens (a plain socket probe: docker-py leaks a socket
    when the engine is missing, which ``filterwarnings = error`` would turn into a failure)."""
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return True  # a remote engine: let testcontainers try
    path = host[len("unix://") :]
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        probe.connect(path)
    except OSError:
        return False
    finally:
        probe.close()
    return True


REQUIRE_MONGO = "DURABL_REQUIRE_MONGO"


def mongo_required() -> bool:
    """Whether a missing MongoDB server fails the tests that need one instead of skipping
    them: ``DURABL_REQUIRE_MONGO=1``, and always in CI (``CI=true``)."""
    return os.environ.get(REQUIRE_MONGO) == "1" or os.environ.get("CI") == "true"


def real_mongo_url() -> str | None:
    """A real MongoDB server for this session, or None (the reason is in ``_real_mongo``).

    ``MONGO_URL`` wins (a real ``mongod`` replica set). Otherwise the SecantusDB wire server
    of the ``test`` extra is started on a free port (:mod:`tests.mongo_server`), and stopped
    at the end of the session; ``DURABL_TEST_MONGO_WIRE=0`` turns that off, and then a Docker
    engine, if one answers, runs ``mongo:7`` (testcontainers)."""
    if "url" in _real_mongo:
        return _real_mongo["url"]  # type: ignore[no-any-return]
    url = os.environ.get("MONGO_URL") or None
    if url is None and os.environ.get("DURABL_TEST_MONGO_WIRE", "1") != "0":
        from tests.mongo_server import NoServerError, WireServer

        try:
            server = WireServer.start()
        except NoServerError as exc:
            _real_mongo["reason"] = f"no MongoDB wire server: {exc}"
        else:
            _real_mongo["server"] = server
            url = server.url
    if url is None and _docker_answers():
        try:
            url = _start_replica_set()
        except Exception as exc:
            _real_mongo["reason"] = f"testcontainers could not start MongoDB: {exc}"
            url = None
    elif url is None and "reason" not in _real_mongo:
        _real_mongo["reason"] = (
            "no real MongoDB: MONGO_URL is unset, the wire server is off and no Docker engine "
            "answers"
        )
    _real_mongo["url"] = url
    return url


def require_mongo() -> str:
    """The URL of the real MongoDB server; skips the test with one line when there is none
    (fails it under ``DURABL_REQUIRE_MONGO=1`` or in CI)."""
    url = real_mongo_url()
    if url is None:
        reason = _real_mongo.get("reason", "no real MongoDB")
        if mongo_required():
            pytest.fail(f"{reason} ({REQUIRE_MONGO}=1 or CI=true)")
        pytest.skip(reason)
    return url


def _start_replica_set() -> str:
    """A single-node replica set in Docker (change streams and transactions need one)."""
    from pymongo import MongoClient
    from testcontainers.core.container import DockerContainer
    from testcontainers.core.waiting_utils import wait_for_logs

    container = DockerContainer("mongo:7", command="--replSet rs0 --bind_ip_all", ports=[27017])
    container.start()
    _real_mongo["container"] = container
    wait_for_logs(container, "Waiting for connections", timeout=60)
    host = container.get_container_host_ip()
    port = int(container.get_exposed_port(27017))
    client: MongoClient[dict[str, Any]] = MongoClient(host, port, directConnection=True)
    try:
        client.admin.command(
            "replSetInitiate", {"_id": "rs0", "members": [{"_id": 0, "host": "127.0.0.1:27017"}]}
        )
        client.admin.command("ping")
    finally:
        client.close()
    return f"mongodb://{host}:{port}/?directConnection=true"


#: ``config.workerinput`` key: the servers the xdist controller decided, for its workers.
SHARED_SERVERS = "durabl_servers"
#: What a worker takes over of ``_real_mongo`` and ``_postgres`` (the handles stay behind).
_SHARED_KEYS = ("url", "reason")


def pytest_sessionstart(session: pytest.Session) -> None:
    """Under xdist: the controller decides the servers before its workers start (this
    hook runs before xdist's, which starts them); each worker takes the controller's.

    The wire server takes a large share of a core and a throwaway PostgreSQL an initdb:
    one each for the run, not one per worker. Every test already works in a database
    (MongoDB) or on tables (PostgreSQL) of its own, so the workers share them safely."""
    config = session.config
    workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
    if workerinput is not None:
        shared = workerinput.get(SHARED_SERVERS)
        if shared is not None:
            _real_mongo.update(shared["mongo"])
            _postgres.update(shared["postgres"])
    elif config.pluginmanager.has_plugin("dsession"):  # xdist's controller: tests go to workers
        real_mongo_url()
        postgres_unavailable()


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """xdist, for each worker it starts: the servers decided in :func:`pytest_sessionstart`."""
    node.workerinput[SHARED_SERVERS] = {
        "mongo": {key: _real_mongo[key] for key in _SHARED_KEYS if key in _real_mongo},
        "postgres": {key: _postgres[key] for key in _SHARED_KEYS if key in _postgres},
    }


#: Under xdist (``make test``: ``--dist loadscope --no-loadscope-reorder``) each module goes
#: to one worker, in collection order: the directories of real processes, servers and
#: faults, whose modules take half a minute to two minutes, go first, so that no worker
#: starts one of those while the others have run out of work; then the rest, in many small
#: modules that even out the workers' ends. A serial run keeps pytest's own order.
LONG_MODULES_FIRST = ("chaos", "crash", "integration", "e2e", "postgres", "cli", "django", "docs")


@pytest.hookimpl(trylast=True)  # the final order: after the plugins that reorder items
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not hasattr(config, "workerinput"):
        return
    rank = {directory: n for n, directory in enumerate(LONG_MODULES_FIRST)}

    def directory_rank(item: pytest.Item) -> int:
        parts = item.nodeid.split("/")
        return (
            rank.get(parts[1], len(rank)) if parts[0] == "tests" and len(parts) > 2 else len(rank)
        )

    items.sort(key=directory_rank)  # stable: each directory keeps its own order


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    container = _real_mongo.get("container")
    if container is not None:
        container.stop()
    wire_server = _real_mongo.pop("server", None)
    if wire_server is not None:
        wire_server.stop()
    server = _postgres.pop("server", None)
    if server is not None:
        server.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def make_mongomock_backend(clock: FakeClock | None = None) -> MongoJobQueue:
    db = mongomock.MongoClient(tz_aware=True)["durabl_test"]
    return MongoJobQueue(db, clock=clock)


def make_real_mongo_backend(clock: FakeClock | None = None) -> MongoJobQueue:
    url = require_mongo()
    from pymongo import MongoClient

    client: MongoClient[dict[str, Any]] = MongoClient(url, tz_aware=True)
    db = client[f"durabl_test_{uuid.uuid4().hex[:8]}"]
    return MongoJobQueue(db, clock=clock, owns_client=True)


def make_sqlite_backend(clock: FakeClock | None = None) -> SqliteJobQueue:
    """A fresh file in a directory of its own (removed by ``cleanup_backend``)."""
    directory = tempfile.mkdtemp(prefix="durabl-test-")
    return SqliteJobQueue(os.path.join(directory, "jobs.sqlite3"), clock=clock)


POSTGRES_URL = os.environ.get(
    "DURABL_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test"
)
REQUIRE_POSTGRES = "DURABL_REQUIRE_POSTGRES"
_postgres: dict[str, Any] = {}


def postgres_unavailable() -> str | None:
    """Why the PostgreSQL tests cannot run (None: a server answers); decided once.

    The server at ``DURABL_TEST_POSTGRES_URL`` first. When it does not answer and
    ``DURABL_REQUIRE_POSTGRES=1`` is unset, a throwaway server from the machine's
    PostgreSQL binaries (see :mod:`tests.postgres.server`; stopped at the end of the session);
    ``DURABL_TEST_POSTGRES_FALLBACK=0`` turns that off."""
    if "reason" not in _postgres:
        _postgres["url"] = POSTGRES_URL
        _postgres["reason"] = _probe_postgres(POSTGRES_URL)
        fallback = os.environ.get("DURABL_TEST_POSTGRES_FALLBACK", "1") != "0"
        if _postgres["reason"] is not None and fallback and not postgres_required():
            from tests.postgres.server import NoServerError, ThrowawayServer

            try:
                server = ThrowawayServer.start()
            except NoServerError as exc:
                _postgres["reason"] += f"; no throwaway server either: {exc}"
            else:
                _postgres["server"] = server
                _postgres["url"] = server.url
                _postgres["reason"] = _probe_postgres(server.url)
    return _postgres["reason"]  # type: ignore[no-any-return]


def _probe_postgres(url: str) -> str | None:
    try:
        import psycopg

        psycopg.connect(url, connect_timeout=3).close()
    except Exception as exc:  # ImportError, or any connection failure
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return f"no PostgreSQL at DURABL_TEST_POSTGRES_URL: {first}"
    return None


def postgres_required() -> bool:
    return os.environ.get(REQUIRE_POSTGRES) == "1"


def require_postgres() -> str:
    """The URL of the server the PostgreSQL tests use; skips the test with one line when
    there is none (fails it under ``DURABL_REQUIRE_POSTGRES=1``)."""
    reason = postgres_unavailable()
    if reason is not None:
        if postgres_required():
            pytest.fail(f"{reason} ({REQUIRE_POSTGRES}=1)")
        pytest.skip(reason)
    return postgres_url()


def postgres_url() -> str:
    """The server's URL: ``DURABL_TEST_POSTGRES_URL``, or the throwaway server's."""
    postgres_unavailable()
    return _postgres["url"]  # type: ignore[no-any-return]


def postgres_table() -> str:
    """A fresh table name for one test (``cleanup_backend`` and the fixtures drop it)."""
    return f"durabl_t_{uuid.uuid4().hex[:10]}"


def make_postgres_backend(clock: FakeClock | None = None) -> Any:
    """A store on tables of its own (``durabl_t_<random>``; dropped by ``cleanup_backend``)."""
    url = require_postgres()
    from durabl.stores.postgres import PostgresJobQueue

    return PostgresJobQueue(url, table=postgres_table(), clock=clock)


def drop_postgres_tables(prefix: str) -> None:
    """Drop every table whose name starts with ``prefix`` (a test's and its siblings')."""
    import psycopg

    with psycopg.connect(postgres_url(), autocommit=True) as conn:
        names = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
            "AND left(tablename, length(%s)) = %s",
            (prefix, prefix),
        ).fetchall()
        if names:
            tables = ", ".join('"' + name + '"' for (name,) in names)
            conn.execute(f"DROP TABLE IF EXISTS {tables} CASCADE")  # type: ignore[arg-type]


BACKENDS = ["mongomock", "memory", "sqlite", "mongodb", "postgres"]


def make_backend(kind: str, clock: FakeClock | None = None) -> Any:
    if kind == "mongomock":
        return make_mongomock_backend(clock)
    if kind == "memory":
        return MemoryBackend(clock=clock)
    if kind == "mongodb":
        return make_real_mongo_backend(clock)
    if kind == "sqlite":
        return make_sqlite_backend(clock)
    if kind == "postgres":
        return make_postgres_backend(clock)
    raise ValueError(kind)


def cleanup_backend(backend: Any) -> None:
    if isinstance(backend, MongoJobQueue) and not backend.store.mock:
        backend.db.client.drop_database(backend.db.name)
    backend.close()
    if type(backend).__name__ == "PostgresJobQueue" and backend.table.startswith("durabl_t_"):
        drop_postgres_tables(backend.table)
    if isinstance(backend, SqliteJobQueue) and os.path.basename(
        os.path.dirname(backend.path)
    ).startswith("durabl-test-"):
        shutil.rmtree(os.path.dirname(backend.path), ignore_errors=True)


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[Any]:
    """Every store, on a fake clock."""
    store = make_backend(request.param, clock)
    store.startup()
    yield store
    cleanup_backend(store)


@pytest.fixture(params=["mongomock", "mongodb"])
def mongo_backend(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[MongoJobQueue]:
    """The MongoDB backend: on mongomock, and on a real server when one is reachable."""
    store = make_backend(request.param, clock)
    store.startup()
    yield store
    cleanup_backend(store)


@pytest.fixture
def queue(backend: Any, clock: FakeClock) -> Iterator[JobQueue]:
    q = JobQueue(backend, visibility_timeout=30, clock=clock)
    yield q
    q.shutdown(timeout=2)


def pytest_report_header(config: pytest.Config) -> str:
    if os.environ.get("MONGO_URL"):
        return "real MongoDB: MONGO_URL"
    if config.pluginmanager.has_plugin("dsession"):
        return "real MongoDB: the SecantusDB wire server, one for every worker (MONGO_URL unset)"
    return (
        "real MongoDB: the SecantusDB wire server, started when a test first asks (MONGO_URL unset)"
    )


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """One line per distinct skip reason, with its count (``-rs`` would list every test)."""
    reasons: dict[str, int] = {}
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = getattr(report, "longrepr", None)
        reason = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else "skipped"
        reason = str(reason).removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    for reason, count in sorted(reasons.items(), key=lambda item: -item[1]):
        terminalreporter.write_line(f"skipped {count}: {reason}")
