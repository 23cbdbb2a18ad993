"""A scripted MongoDB replica-set primary (mockupdb) and the real driver talking to it.

:class:`Wire` starts a ``MockupDB`` that answers ``hello`` / ``isMaster`` as the primary of
replica set ``rs`` (wire version 21, MongoDB 7.0, with sessions, so retryable writes are
on), builds a real ``MongoClient`` with short timeouts and a ``MongoJobQueue`` over it.
Every other command waits in the server's queue until the test answers it: the test runs a
store call in a thread (:meth:`Wire.start`), takes each request it sends
(:meth:`Wire.receives`) and answers it the way a server would: applied, lost, or failed.

The replies a real server gives to what the store sends live here too (``inserted``,
``updated``, ``found``, ``modified``, ``duplicate_key``, ``failed``), so a test states only
the fault it injects. Nothing sleeps: ``receives`` blocks on mockupdb's queue with a
timeout, and a call's result is awaited on its thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timezone
from typing import Any

from bson import ObjectId
from mockupdb import MockupDB, Request
from pymongo import MongoClient

from durabl import MongoJobQueue
from durabl.model.options import build_new_job
from durabl.stores.mongo import codec

SET_NAME = "rs"
COLLECTION = "jobs"
NAMESPACE = f"durabl.{COLLECTION}"
#: Seconds to wait for the store's next request, or for a call to return.
WAIT = 5.0

#: The state-change errors a replica set answers during a failover or a shutdown, with the
#: label a 4.4+ server adds so the driver repeats a retryable write.
RETRYABLE_ERRORS = {
    "NotWritablePrimary": 10107,
    "PrimarySteppedDown": 189,
    "InterruptedAtShutdown": 11600,
}
#: A command error no retry can fix: the user lost its role.
UNAUTHORIZED = 13


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(microsecond=0)


class Call:
    """A store call running on its own thread; :meth:`result` waits for it."""

    def __init__(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self._value: Any = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(fn, args, kwargs), name="wire-call", daemon=True
        )
        self._thread.start()

    def _run(self, fn: Callable[..., Any], args: Any, kwargs: Any) -> None:
        try:
            self._value = fn(*args, **kwargs)
        except BaseException as exc:
            self._error = exc
        finally:
            self._done.set()

    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(timeout)

    def result(self, timeout: float = WAIT) -> Any:
        if not self._done.wait(timeout):
            raise AssertionError(f"the store call did not return within {timeout} s")
        if self._error is not None:
            raise self._error
        return self._value


def txn(request: Request) -> tuple[Any, Any]:
    """The (session id, transaction number) a retryable write carries."""
    return request.doc.get("lsid"), request.doc.get("txnNumber")


def _flow_control_read(request: Request) -> bool:
    """The rate limit read or the per-key count of active jobs a claim starts with, or
    the read of the paused types a claim makes when its set is old
    (:mod:`durabl.model.pauses`)."""
    name = request.command_name
    doc = request.doc
    if name == "find":
        return doc.get("find") in (f"{COLLECTION}_rate_limits", f"{COLLECTION}_paused_types")
    if name == "aggregate" and doc.get("aggregate") == COLLECTION:
        match = (doc.get("pipeline") or [{}])[0].get("$match", {})
        return "concurrency_key" in match
    return False


def _held_ticks_sweep(request: Request) -> bool:
    """The reaper's look for schedule tick copies left held
    (:meth:`durabl.stores.mongo.schedules.MongoSchedules.sweep_held`)."""
    doc = request.doc
    return (
        request.command_name == "find"
        and doc.get("find") == COLLECTION
        and "schedule_hold" in (doc.get("filter") or {})
    )


def _workers_registry(request: Request) -> bool:
    """A write or read of the live workers registry (durabl.stores.mongo.workers), which a
    queue running processors makes every heartbeat interval, apart from any job."""
    name = request.command_name or ""
    return bool(name) and request.doc.get(name) == f"{COLLECTION}_workers"


class Wire:
    """A scripted primary (shared by the session's tests), one real client, one store."""

    def __init__(self, server: MockupDB) -> None:
        self.server = server
        address = server.address_string
        self.hello = {
            "ismaster": True,
            "isWritablePrimary": True,
            "secondary": False,
            "setName": SET_NAME,
            "hosts": [address],
            "me": address,
            "minWireVersion": 0,
            "maxWireVersion": 21,
            "maxBsonObjectSize": 16 * 1024 * 1024,
            "maxMessageSizeBytes": 48_000_000,
            "maxWriteBatchSize": 100_000,
            "logicalSessionTimeoutMinutes": 30,
        }
        self._responder = server.autoresponds(self._handshake)
        self.client: MongoClient[dict[str, Any]] = MongoClient(
            self.server.uri,
            replicaSet=SET_NAME,
            tz_aware=True,
            serverSelectionTimeoutMS=500,
            connectTimeoutMS=500,
            socketTimeoutMS=3000,
            serverMonitoringMode="poll",
        )
        self.store = MongoJobQueue(self.client["durabl"], COLLECTION)

    def _handshake(self, request: Request) -> bool | None:
        """Answer the monitor's and the store's ``hello`` and the client's goodbye; queue
        everything else for the test."""
        name = (request.command_name or "").lower()
        if name in ("hello", "ismaster"):
            return bool(request.ok(localTime=_now(), **self.hello))
        if name == "endsessions":
            return bool(request.ok())
        if _flow_control_read(request) or _held_ticks_sweep(request):
            # A claim's flow-control reads (durabl.stores.mongo.flow), its read of the
            # paused types, and the reaper's sweep of held tick copies, answered as for a
            # store whose jobs use no concurrency key or rate limit, with no type paused
            # and no tick copy left held.
            ns = f"durabl.{request.doc.get(request.command_name)}"
            return bool(request.ok(cursor={"id": 0, "ns": ns, "firstBatch": []}))
        if _workers_registry(request):
            name = request.command_name
            if name == "find":
                ns = f"durabl.{COLLECTION}_workers"
                return bool(request.ok(cursor={"id": 0, "ns": ns, "firstBatch": []}))
            return bool(request.ok(n=1, nModified=1))
        return None

    def close(self) -> None:
        """Close the client; hang up on whatever the test left unanswered."""
        self.client.close()
        self._responder.cancel()
        while True:
            try:
                self.server.receives(timeout=0).hangup()
            except AssertionError:  # nothing left
                break
            except OSError:  # popped, but its client had already closed the socket
                continue

    @staticmethod
    def primary() -> MockupDB:
        """A scripted server; one serves a whole session (stopping one takes a second)."""
        server = MockupDB()
        server.run()
        return server

    # -- the conversation -----------------------------------------------------------------
    def start(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Call:
        return Call(fn, *args, **kwargs)

    def receives(self, command: str) -> Request:
        """The store's next request, which must be ``command``."""
        request = self.server.receives(timeout=WAIT)
        assert request is not None, "the server stopped"
        assert request.command_name == command, (
            f"expected {command}, got {request.command_name}: {dict(request.doc)}"
        )
        return request

    def refuse_until_done(self, call: Call) -> list[Request]:
        """Hang up on every request until ``call`` gives up: a server that stays down."""
        refused: list[Request] = []
        while not call.done():
            if self.server.got(timeout=0.05):
                request = self.server.receives(timeout=WAIT)
                refused.append(request)
                request.hangup()
        return refused

    def idle(self) -> bool:
        """Whether the store sent nothing more (no stray write after the call)."""
        return not self.server.got(timeout=0.05)

    def claimed(self, token: str, doc: Mapping[str, Any]) -> None:
        """The store remembers ``doc`` as claimed under ``token``, as after its own claim:
        a worker's outcome is written by the backend that claimed the job, which then
        needs no read for the attempt history."""
        self.store._claims.remember(token, doc)

    # -- documents ------------------------------------------------------------------------
    def job(
        self, *, status: str = "pending", token: str | None = None, **options: Any
    ) -> dict[str, Any]:
        """A job document as the store writes it (``token``: active under that claim)."""
        now = _now()
        doc = codec.new_document(build_new_job("email", {"to": "a@example.com"}, **options), now)
        doc["status"] = status
        if token is not None:
            doc.update(
                status="active",
                attempts=1,
                claim_token=token,
                claimed_at=now,
                heartbeat_at=now,
                lease_owner="w1",
            )
        return doc


# -- the replies a primary gives ----------------------------------------------------------
def inserted(request: Request, n: int = 1) -> None:
    request.ok(n=n)


def updated(request: Request, n: int = 1) -> None:
    request.ok(n=n, nModified=n)


def found(request: Request, *docs: Mapping[str, Any]) -> None:
    request.ok(cursor={"id": 0, "ns": NAMESPACE, "firstBatch": list(docs)})


def modified(request: Request, doc: Mapping[str, Any] | None) -> None:
    """findAndModify's answer: the document after the update, or none matched."""
    request.ok(
        value=doc,
        lastErrorObject={"n": 0 if doc is None else 1, "updatedExisting": doc is not None},
    )


def duplicate_key(request: Request, index: str = "_id_") -> None:
    """The write error an insert or update gets from a unique index."""
    message = f"E11000 duplicate key error collection: {NAMESPACE} index: {index}"
    if request.command_name == "findAndModify":
        request.command_err(code=11000, errmsg=message)
    else:
        request.ok(n=0, writeErrors=[{"index": 0, "code": 11000, "errmsg": message}])


def failed(request: Request, code: int) -> None:
    """A command error; the codes of :data:`RETRYABLE_ERRORS` carry the retry label."""
    labels = ["RetryableWriteError"] if code in RETRYABLE_ERRORS.values() else []
    request.command_err(code=code, errmsg=f"error {code}", errorLabels=labels)


def claimed_by(request: Request, doc: Mapping[str, Any]) -> dict[str, Any]:
    """``doc`` as a findAndModify ``request`` leaves it (the claim it makes)."""
    update = request.doc["update"]
    after = {**doc, **update["$set"]}
    after["attempts"] = doc.get("attempts", 0) + update["$inc"]["attempts"]
    return after


def receipt(
    doc: Mapping[str, Any], token: str, op: str, result: str, status: str
) -> dict[str, Any]:
    """What the store finds when it reads a job back after a fenced write applied."""
    return {"_id": doc["_id"], "status": status, "receipts": [{"t": token, "op": op, "r": result}]}


def new_token() -> str:
    return ObjectId().binary.hex()


def iter_requests(wire: Wire, *commands: str) -> Iterator[Request]:
    for command in commands:
        yield wire.receives(command)
