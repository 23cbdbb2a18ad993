"""The faults, one per run: each ``inject(run)`` does its harm, waits as long as the fault
lasts, undoes it, and returns the episode (its start and end, and the processes it hit).

Which faults apply to which store is in :data:`FAULTS`; ``run`` is the campaign's
:class:`tests.chaos.campaign.Run` (its workers, its store, its lease).
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tests.chaos.history import Fault
from tests.chaos.stores import MongoStore, PgBouncerStore, PostgresStore, Store

if TYPE_CHECKING:
    from tests.chaos.campaign import Run


def _pause(seconds: float) -> None:
    threading.Event().wait(seconds)  # the fault's duration: nothing to wait on


def sigkill_worker(run: Run) -> Fault:
    """SIGKILL one worker mid-run; a supervisor starts another a moment later."""
    victim = run.victim()
    t0 = time.time()
    victim.kill()
    run.respawn(victim)
    return Fault("sigkill-worker", t0, t0, (victim.pid,))


def sigstop_worker(run: Run) -> Fault:
    """SIGSTOP one worker past its lease (a VM paused), then SIGCONT: its jobs were given
    to others meanwhile, and what it writes on waking must be fenced."""
    victim = run.victim()
    t0 = time.time()
    victim.signal(signal.SIGSTOP)
    _pause(run.config.visibility_timeout * 1.5 + 1.0)
    victim.signal(signal.SIGCONT)
    return Fault("sigstop-worker", t0, time.time(), (victim.pid,))


def _postgres(store: Store) -> PostgresStore:
    if isinstance(store, PgBouncerStore):
        return store.postgres
    assert isinstance(store, PostgresStore)
    return store


def pg_restart(mode: str) -> Callable[[Run], Fault]:
    def inject(run: Run) -> Fault:
        t0 = time.time()
        _postgres(run.store).server.restart(mode)
        return Fault(f"db-restart-{mode}", t0, time.time())

    return inject


def pg_kill(run: Run) -> Fault:
    """kill -9 of every server process, down for a second, then a start (crash recovery)."""
    server = _postgres(run.store).server
    t0 = time.time()
    server.kill()
    _pause(1.0)
    server.restart("fast")
    return Fault("db-kill", t0, time.time())


#: Seconds the long outage lasts: long enough for reconnect backoffs to grow.
OUTAGE = 15.0


def db_outage(run: Run) -> Fault:
    """The database stopped (cleanly) for :data:`OUTAGE` seconds, then started: a deploy
    or a failover that takes a while."""
    t0 = time.time()
    if isinstance(run.store, MongoStore):
        run.store.server.halt()
        _pause(OUTAGE)
        run.store.server.launch()
    else:
        server = _postgres(run.store).server
        server.stop_server("fast")
        _pause(OUTAGE)
        server.restart("fast")  # starts it: it is down
    return Fault("db-outage", t0, time.time())


def pg_terminate(run: Run) -> Fault:
    """``pg_terminate_backend`` of every worker connection, three rounds apart."""
    from tests.chaos.stores import WORKER_APP

    server = _postgres(run.store).server
    t0 = time.time()
    ended = 0
    for _ in range(3):
        ended += server.terminate_backends(run.target.database, WORKER_APP)
        _pause(0.5)
    return Fault(f"pg-terminate-backend(x{ended})", t0, time.time())


def partition(run: Run) -> Fault:
    """The link between the worker in its own network namespace and the database goes
    down past the lease, then comes back."""
    store = _postgres(run.store)
    assert store.namespaces is not None
    victim = run.victim()
    t0 = time.time()
    store.namespaces.link(up=False)
    try:
        _pause(run.config.visibility_timeout * 2 + 1.0)
    finally:
        store.namespaces.link(up=True)
    return Fault("partition", t0, time.time(), (victim.pid,))


def bouncer_restart(run: Run) -> Fault:
    assert isinstance(run.store, PgBouncerStore)
    bouncer = run.store.bouncer
    t0 = time.time()
    bouncer.halt()
    _pause(0.5)
    bouncer.start()
    return Fault("pgbouncer-restart", t0, time.time())


def mongo_restart(kill: bool) -> Callable[[Run], Fault]:
    def inject(run: Run) -> Fault:
        assert isinstance(run.store, MongoStore)
        t0 = time.time()
        run.store.server.halt(kill=kill)
        _pause(1.0)
        run.store.server.launch()
        return Fault("db-kill" if kill else "db-restart", t0, time.time())

    return inject


def fail_command(name: str, *answers: dict[str, Any]) -> Callable[[Run], Fault]:
    """``failCommand`` on the wire server for the workers' client only (its appName), on
    every command the workers send, for ``fail_for`` seconds: each of ``answers`` in turn
    for an equal share of it."""

    def inject(run: Run) -> Fault:
        from pymongo import MongoClient

        from tests.chaos.stores import WORKER_APP

        assert isinstance(run.store, MongoStore)
        client: MongoClient[dict[str, Any]] = MongoClient(
            run.store.server.url, serverSelectionTimeoutMS=20_000
        )
        commands = ["find", "findAndModify", "update", "insert", "aggregate", "getMore"]
        try:
            t0 = time.time()
            for data in answers:
                client.admin.command(
                    {
                        "configureFailPoint": "failCommand",
                        "mode": "alwaysOn",
                        "data": {**data, "failCommands": commands, "appName": WORKER_APP},
                    }
                )
                _pause(run.config.fail_for / len(answers))
            client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
            return Fault(f"failCommand-{name}", t0, time.time())
        finally:
            client.close()

    return inject


@dataclass(frozen=True)
class FaultKind:
    name: str
    stores: tuple[str, ...]
    inject: Callable[[Run], Fault]
    #: Why a store cannot have it here (None: it can), decided per run.
    needs: Callable[[Store], str | None] = lambda store: None


def _needs_namespaces(store: Store) -> str | None:
    if isinstance(store, PostgresStore) and store.namespaces is not None:
        return None
    return "no network namespaces here (needs root and a working `ip netns`)"


FAULTS: dict[str, FaultKind] = {
    kind.name: kind
    for kind in (
        FaultKind("sigkill-worker", ("sqlite", "postgres", "pgbouncer", "mongodb"), sigkill_worker),
        FaultKind("sigstop-worker", ("sqlite", "postgres", "pgbouncer", "mongodb"), sigstop_worker),
        FaultKind("db-restart-fast", ("postgres", "pgbouncer"), pg_restart("fast")),
        FaultKind("db-restart-immediate", ("postgres", "pgbouncer"), pg_restart("immediate")),
        FaultKind("db-kill", ("postgres",), pg_kill),
        FaultKind("db-outage", ("postgres", "pgbouncer", "mongodb"), db_outage),
        FaultKind("pg-terminate-backend", ("postgres",), pg_terminate),
        FaultKind("partition", ("postgres",), partition, _needs_namespaces),
        FaultKind("pgbouncer-restart", ("pgbouncer",), bouncer_restart),
        FaultKind("wire-restart", ("mongodb",), mongo_restart(kill=False)),
        FaultKind("wire-kill", ("mongodb",), mongo_restart(kill=True)),
        FaultKind(
            "fail-closeConnection",
            ("mongodb",),
            fail_command("closeConnection", {"closeConnection": True}),
        ),
        FaultKind("fail-91", ("mongodb",), fail_command("91", {"errorCode": 91})),
        FaultKind("fail-10107", ("mongodb",), fail_command("10107", {"errorCode": 10107})),
        FaultKind("fail-11600", ("mongodb",), fail_command("11600", {"errorCode": 11600})),
        # The three state-change answers in one episode (the short campaign's).
        FaultKind(
            "fail-state-change",
            ("mongodb",),
            fail_command("91-10107-11600", *({"errorCode": code} for code in (91, 10107, 11600))),
        ),
    )
}
