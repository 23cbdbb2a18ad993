"""Server-side fault injection for the MongoDB fault tests: mongod's ``failCommand`` fail
point (which the SecantusDB wire server of the test session implements too), a listener that
shows which commands a client sent and how they ended, and a probe that checks the server
honours a fail point before a test relies on it.

A fail point is global to the server. Each one set here names the ``appName`` of the client
under test (:data:`WORKER_APP`), so the test's own reads and enqueues, made on another
client, never meet it; it is turned off when the test ends, pass or fail.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from pymongo import MongoClient, monitoring
from pymongo.errors import AutoReconnect, OperationFailure, PyMongoError, WriteConcernError

#: The ``appName`` of the worker's client: the only client the fail points apply to.
WORKER_APP = "durabl-fault-worker"

Mode = str | dict[str, int]  # "alwaysOn", "off", or {"times": n}


def with_options(url: str, **options: str) -> str:
    """``url`` with query ``options`` added."""
    extra = "&".join(f"{key}={value}" for key, value in options.items())
    return f"{url}{'&' if '?' in url else '?'}{extra}"


def client_url(url: str) -> str:
    """The test clients' URL: ``serverMonitoringMode=poll``, so after a state-change error
    (91, 10107, 11600) the driver re-selects the server within about 0.5 s instead of
    keeping it out of selection for ~10 s under the streaming monitor (DESIGN-NOTES, "The
    MongoDB wire server"); and server selection waits long enough for that."""
    return with_options(url, serverMonitoringMode="poll", serverSelectionTimeoutMS="20000")


@dataclass(frozen=True)
class Fault:
    """What a fail point does to the command it catches: ``data`` as ``failCommand`` takes
    it (without ``failCommands`` and ``appName``), and how many times."""

    name: str
    data: dict[str, Any]
    times: int = 1

    def __str__(self) -> str:
        return self.name


def error(code: int, times: int) -> Fault:
    """The command is refused with ``code`` before it runs (91 ShutdownInProgress, 10107
    NotWritablePrimary, 11600 InterruptedAtShutdown: what a failover or a restart sends)."""
    return Fault(f"error{code}x{times}", {"errorCode": code}, times)


def dropped(times: int) -> Fault:
    """The connection is closed before the command runs: no reply."""
    return Fault(f"closeConnectionx{times}", {"closeConnection": True}, times)


def blocked(ms: int, times: int) -> Fault:
    """The command waits ``ms`` on the server, then runs normally."""
    return Fault(f"block{ms}msx{times}", {"blockConnection": True, "blockTimeMS": ms}, times)


def applied_then_failed(code: int, *, retryable: bool) -> Fault:
    """The command runs, then its reply carries a write concern error ``code``: the write
    is done, the caller is told otherwise. ``retryable``: labelled ``RetryableWriteError``
    (as mongod labels 91 on a retryable write), so the driver sends it again and the server
    answers from its record of the first."""
    wce: dict[str, Any] = {"code": code, "errmsg": "injected write concern error"}
    if retryable:
        wce["errorLabels"] = ["RetryableWriteError"]
    kind = "retryable" if retryable else "final"
    return Fault(f"writeConcernError{code}-{kind}", {"writeConcernError": wce})


class FailPoint:
    """``configureFailPoint: failCommand`` on the admin database, through a client of its
    own; :meth:`off` at the end of every test (the fixture does it)."""

    def __init__(self, url: str) -> None:
        self.client: MongoClient[dict[str, Any]] = MongoClient(client_url(url))

    def set(self, fault: Fault, commands: list[str], mode: Mode | None = None) -> None:
        data = {**fault.data, "failCommands": commands, "appName": WORKER_APP}
        self.client.admin.command(
            {
                "configureFailPoint": "failCommand",
                "mode": mode if mode is not None else {"times": fault.times},
                "data": data,
            }
        )

    def off(self) -> None:
        self.client.admin.command({"configureFailPoint": "failCommand", "mode": "off"})

    def close(self) -> None:
        try:
            self.off()
        finally:
            self.client.close()


@dataclass
class Wire(monitoring.CommandListener):
    """What a client sent: per command name, how many succeeded and failed, and the
    longest a success took (a blocked command shows here)."""

    succeeded_count: Counter[str] = field(default_factory=Counter)
    failed_count: Counter[str] = field(default_factory=Counter)
    longest: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        pass

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        seconds = event.duration_micros / 1e6
        with self._lock:
            # A write concern error is a reply with ok: 1, a failure to the caller only.
            if "writeConcernError" in event.reply:
                self.failed_count[event.command_name] += 1
            else:
                self.succeeded_count[event.command_name] += 1
            self.longest[event.command_name] = max(
                self.longest.get(event.command_name, 0.0), seconds
            )

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        with self._lock:
            self.failed_count[event.command_name] += 1

    def failures(self, command: str) -> int:
        with self._lock:
            return self.failed_count[command]

    def successes(self, command: str) -> int:
        with self._lock:
            return self.succeeded_count[command]


def worker_client(url: str, wire: Wire) -> MongoClient[dict[str, Any]]:
    """A client the fail points apply to, watched by ``wire``."""
    return MongoClient(client_url(url), tz_aware=True, appname=WORKER_APP, event_listeners=[wire])


# -- does the server honour it? ------------------------------------------------------------
_honoured: dict[tuple[str, str], str | None] = {}


def not_honoured(url: str, fail_point: FailPoint, command: str, fault: Fault) -> str | None:
    """None when the server applies ``fault`` to ``command`` sent by the worker's client
    and leaves other clients alone; else why not, in one line. Decided once per session:
    one direct command on a scratch database, the driver's retries off."""
    key = (command, fault.name)
    if key not in _honoured:
        _honoured[key] = _probe(url, fail_point, command, fault)
    return _honoured[key]


def _probe(url: str, fail_point: FailPoint, command: str, fault: Fault) -> str | None:
    name = f"durabl_probe_{uuid.uuid4().hex[:8]}"
    options = {"retryWrites": "false", "retryReads": "false"}
    probe: MongoClient[dict[str, Any]] = MongoClient(
        with_options(client_url(url), **options), appname=WORKER_APP
    )
    bystander: MongoClient[dict[str, Any]] = MongoClient(with_options(client_url(url), **options))
    try:
        col = probe[name]["probe"]
        col.insert_many([{"_id": n, "v": 0} for n in range(3)])
        fail_point.set(fault, [command], {"times": 1})
        run = _COMMANDS[command]
        try:
            run(bystander[name]["probe"])  # another appName: untouched
        except PyMongoError as exc:
            return f"the fail point on {command} hit another client too: {exc}"
        began = time.monotonic()
        try:
            run(col)
            outcome: BaseException | None = None
        except PyMongoError as exc:
            outcome = exc
        took = time.monotonic() - began
        return _judge(fault, command, outcome, took, col)
    finally:
        fail_point.off()
        probe.drop_database(name)
        probe.close()
        bystander.close()


def _judge(
    fault: Fault, command: str, outcome: BaseException | None, took: float, col: Any
) -> str | None:
    data = fault.data
    what = f"{command} with {fault.name}"
    if "blockConnection" in data:
        ok = outcome is None and took >= data["blockTimeMS"] / 1000 * 0.9
        return None if ok else f"{what} was not held ({took:.2f} s, {outcome!r})"
    if data.get("closeConnection"):
        ok = isinstance(outcome, AutoReconnect)
        return None if ok else f"{what} did not drop the connection ({outcome!r})"
    if "writeConcernError" in data:
        applied = command not in _WRITES or col.count_documents({"v": {"$gt": 0}}) > 0
        ok = isinstance(outcome, WriteConcernError) and applied
        return None if ok else f"{what}: not applied-then-failed ({outcome!r})"
    ok = error_code(outcome) == data["errorCode"]
    return None if ok else f"{what} was not refused with that code ({outcome!r})"


def error_code(exc: BaseException | None) -> int | None:
    """The server's error code in a driver error: an ``OperationFailure``'s, or the reply
    a ``NotPrimaryError`` (a state-change error: 91, 10107, 11600...) carries."""
    if isinstance(exc, OperationFailure):
        return exc.code
    details = getattr(exc, "details", None)
    code = details.get("code") if isinstance(details, dict) else None
    return code if isinstance(code, int) else None


def _get_more(col: Any) -> None:
    cursor: Iterator[Any] = col.find({}, batch_size=1)
    for _ in cursor:  # the second document comes by getMore
        pass


_COMMANDS = {
    "findAndModify": lambda col: col.find_one_and_update({"_id": 0}, {"$inc": {"v": 1}}),
    "update": lambda col: col.update_one({"_id": 1}, {"$inc": {"v": 1}}),
    "insert": lambda col: col.insert_one({"v": 1}),
    "aggregate": lambda col: list(col.aggregate([{"$match": {}}])),
    "getMore": _get_more,
}
_WRITES = {"findAndModify", "update", "insert"}
