"""Counting a MongoDB store's operations, by kind, for the cost-per-job benchmark.

Two ways to observe the same thing:

* :class:`CountingCollection` stands in for a collection (mongomock or pymongo): it forwards
  every attribute and counts each method call;
* :class:`CommandCounter` is a pymongo ``CommandListener`` that counts the commands a
  client sends to a real server.

Both classify what they see into the same categories (a claim, an empty claim, a terminal
write, a heartbeat, a read, ...) in one thread-safe :class:`OpCounter`. Both see the live
workers registry (``<collection>_workers``) too, and count its operations apart: a queue
writes it once per ``process()`` call and per heartbeat interval, never per job or poll.

A category counts write *statements*: a ``bulk_write`` (or a server ``update`` command)
that carries five updates counts five, each by what its own update sets;
:attr:`Counts.commands` says how many round trips carried them.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast

import mongomock
import pymongo
from pymongo import DeleteMany, DeleteOne, InsertOne, monitoring
from pymongo.collection import Collection
from pymongo.errors import BulkWriteError, PyMongoError

from durabl import MongoJobQueue

# -- what one store operation was ---------------------------------------------------------
INSERT = "insert"
INSERT_REJECTED = "insert-rejected"  # a dedupe slot was taken (duplicate key)
CLAIM = "claim"  # findAndModify that returned a job
CLAIM_EMPTY = "claim-empty"  # findAndModify that found nothing: a poll
CLAIM_ERROR = "claim-error"  # findAndModify that raised (a blocked dedupe follower)
TERMINAL = "terminal-write"  # status -> completed / failed / superseded
TRANSITION = "transition-write"  # status -> pending (retry scheduled, release)
HEARTBEAT = "heartbeat"  # lease renewal
UPDATE_OTHER = "update-other"  # e.g. a coalesced payload replacement
UPDATE_REJECTED = "update-rejected"
DELETE = "delete"
READ = "read"  # find, find_one, count, aggregate, distinct, getMore
REGISTRY = "worker-registry"  # any operation on the live workers registry (per process)
PAUSES = "paused-types"  # a read of the paused types (per process, every few seconds)
OTHER = "other"  # hello, endSessions, index management, ...

#: The registry's collection is the jobs collection's name plus this.
REGISTRY_SUFFIX = "_workers"
#: The paused types' collection is the jobs collection's name plus this.
PAUSES_SUFFIX = "_paused_types"
#: The collections beside the jobs whose every command counts as one category.
SIDE_CATEGORIES = {REGISTRY_SUFFIX: REGISTRY, PAUSES_SUFFIX: PAUSES}

WRITE_CATEGORIES = frozenset(
    {
        INSERT,
        INSERT_REJECTED,
        CLAIM,
        CLAIM_EMPTY,
        CLAIM_ERROR,
        TERMINAL,
        TRANSITION,
        HEARTBEAT,
        UPDATE_OTHER,
        UPDATE_REJECTED,
        DELETE,
    }
)
TERMINAL_STATUSES = frozenset({"completed", "failed", "superseded"})
READ_METHODS = frozenset(
    {"find", "find_one", "count_documents", "estimated_document_count", "distinct", "aggregate"}
)
READ_COMMANDS = frozenset({"find", "getMore", "aggregate", "count", "distinct"})


def classify_update(update: object) -> str:
    """A lifecycle write by what it sets: terminal, back to pending, renewal, other."""
    if not isinstance(update, Mapping):
        return UPDATE_OTHER
    fields = update.get("$set") or {}
    status = fields.get("status") if isinstance(fields, Mapping) else None
    if status in TERMINAL_STATUSES:
        return TERMINAL
    if status is not None:
        return TRANSITION
    if isinstance(fields, Mapping) and "heartbeat_at" in fields:
        return HEARTBEAT
    return UPDATE_OTHER


def job_type_of(query: object) -> str | None:
    if isinstance(query, Mapping):
        value = query.get("type")
        if isinstance(value, str):
            return value
    return None


# -- counting -----------------------------------------------------------------------------
@dataclass(frozen=True)
class Counts:
    """What a counter saw since its last reset."""

    raw: Mapping[str, int]  # calls per method name (mongomock) or command name (server)
    categories: Mapping[str, int]  # statements per category
    claim_queries_by_type: Mapping[str, int]
    #: Per category, the calls or commands that carried at least one of its statements
    #: (one bulk of 20 terminal writes: categories 20, commands 1).
    commands: Mapping[str, int]

    def __getitem__(self, category: str) -> int:
        return self.categories.get(category, 0)

    def commands_of(self, category: str) -> int:
        """Calls or commands that carried statements of ``category``."""
        return self.commands.get(category, 0)

    @property
    def writes(self) -> int:
        return sum(n for cat, n in self.categories.items() if cat in WRITE_CATEGORIES)

    @property
    def reads(self) -> int:
        return self[READ]

    def raw_summary(self) -> str:
        return ", ".join(f"{name}={n}" for name, n in sorted(self.raw.items())) or "none"


class OpCounter:
    """Thread-safe counts of store operations, by raw name and by category."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._raw: Counter[str] = Counter()
        self._categories: Counter[str] = Counter()
        self._claims_by_type: Counter[str] = Counter()
        self._commands: Counter[str] = Counter()

    def record(self, raw: str, category: str, job_type: str | None = None) -> None:
        """One call or command that carried one statement."""
        self.record_statements(raw, [category], job_type)

    def record_statements(
        self, raw: str, categories: Sequence[str], job_type: str | None = None
    ) -> None:
        """One call or command that carried a statement of each of ``categories``."""
        with self._lock:
            self._raw[raw] += 1
            self._categories.update(categories)
            self._commands.update(set(categories))
            for category in categories:
                if job_type is not None and category in (CLAIM, CLAIM_EMPTY, CLAIM_ERROR):
                    self._claims_by_type[job_type] += 1

    def reset(self) -> None:
        with self._lock:
            self._raw.clear()
            self._categories.clear()
            self._claims_by_type.clear()
            self._commands.clear()

    def snapshot(self) -> Counts:
        with self._lock:
            return Counts(
                dict(self._raw),
                dict(self._categories),
                dict(self._claims_by_type),
                dict(self._commands),
            )


def _argument(args: tuple[Any, ...], kwargs: Mapping[str, Any], index: int, name: str) -> Any:
    return args[index] if len(args) > index else kwargs.get(name)


def method_category(
    name: str,
    args: tuple[Any, ...],
    kwargs: Mapping[str, Any],
    result: object,
    failed: bool,
) -> tuple[str, str | None]:
    """Category (and job type, for claims) of one collection method call."""
    if name in ("insert_one", "insert_many"):
        return (INSERT_REJECTED if failed else INSERT), None
    if name.startswith("find_one_and_"):
        job_type = job_type_of(_argument(args, kwargs, 0, "filter"))
        if failed:
            return CLAIM_ERROR, job_type
        return (CLAIM_EMPTY if result is None else CLAIM), job_type
    if name in ("update_one", "update_many", "replace_one"):
        if failed:
            return UPDATE_REJECTED, None
        return classify_update(_argument(args, kwargs, 1, "update")), None
    if name.startswith("delete_"):
        return DELETE, None
    if name in READ_METHODS:
        return READ, None
    return OTHER, None


def bulk_categories(requests: object, exc: BaseException | None) -> list[str]:
    """One category per request of a ``bulk_write``: an update by what it sets, as
    :func:`classify_update` would for ``update_one``. pymongo keeps a request's update
    document in ``_doc`` (it has no public accessor). When the bulk raised, requests named
    in a ``BulkWriteError``'s write errors are rejected; any other error rejects them all."""
    ops = list(requests) if isinstance(requests, Sequence) else []
    if exc is None:
        rejected: set[int] = set()
    elif isinstance(exc, BulkWriteError):
        rejected = {e.get("index", -1) for e in exc.details.get("writeErrors") or ()}
    else:
        rejected = set(range(len(ops)))
    categories = []
    for index, op in enumerate(ops):
        if isinstance(op, InsertOne):
            categories.append(INSERT_REJECTED if index in rejected else INSERT)
        elif isinstance(op, (DeleteOne, DeleteMany)):
            categories.append(DELETE)
        elif index in rejected:
            categories.append(UPDATE_REJECTED)
        else:  # UpdateOne, UpdateMany, ReplaceOne (whose document sets no operator)
            categories.append(classify_update(getattr(op, "_doc", None)))
    return categories


class CountingCollection:
    """Stands in for a collection: forwards every attribute to ``inner`` and counts each
    public method call (with its category) in ``counter``; a ``bulk_write`` counts one
    statement per request (see :func:`bulk_categories`). With ``category``, every call
    counts as one of that category (the workers registry)."""

    def __init__(self, inner: Any, counter: OpCounter, category: str | None = None) -> None:
        self._inner = inner
        self._counter = counter
        self._category = category

    def __repr__(self) -> str:
        return f"CountingCollection({self._inner!r})"

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name.startswith("_") or not callable(attr):
            return attr
        counter = self._counter
        fixed = self._category
        if fixed is not None:

            def as_fixed(*args: Any, **kwargs: Any) -> Any:
                try:
                    return attr(*args, **kwargs)
                finally:
                    counter.record(name, fixed)

            return as_fixed

        if name == "bulk_write":

            def bulk(*args: Any, **kwargs: Any) -> Any:
                requests = _argument(args, kwargs, 0, "requests")
                try:
                    result = attr(*args, **kwargs)
                except Exception as exc:
                    counter.record_statements(name, bulk_categories(requests, exc))
                    raise
                counter.record_statements(name, bulk_categories(requests, None))
                return result

            return bulk

        def counted(*args: Any, **kwargs: Any) -> Any:
            try:
                result = attr(*args, **kwargs)
            except Exception:
                category, job_type = method_category(name, args, kwargs, None, failed=True)
                counter.record(name, category, job_type)
                raise
            category, job_type = method_category(name, args, kwargs, result, failed=False)
            counter.record(name, category, job_type)
            return result

        return counted


class CommandCounter(monitoring.CommandListener):
    """pymongo command monitoring: counts every command a client sends, by category. An
    ``update`` command counts one statement per entry of its ``updates`` (a bulk of
    ``UpdateOne`` travels as one command of many), each classified by its own ``u``. A
    command on the workers registry's collection counts as :data:`REGISTRY`, one on the
    paused types' as :data:`PAUSES` (:data:`SIDE_CATEGORIES`)."""

    def __init__(self, counter: OpCounter) -> None:
        self._counter = counter
        self._lock = threading.Lock()
        self._pending: dict[tuple[object, int], tuple[str | None, list[object]]] = {}
        #: Commands in flight on a collection of :data:`SIDE_CATEGORIES`, with its category.
        self._registry: dict[tuple[object, int], str] = {}

    @staticmethod
    def _key(event: Any) -> tuple[object, int]:
        return (event.connection_id, event.request_id)

    def started(self, event: monitoring.CommandStartedEvent) -> None:
        command = event.command
        target = command.get(event.command_name)  # the collection, for CRUD commands
        if isinstance(target, str):
            for suffix, category in SIDE_CATEGORIES.items():
                if target.endswith(suffix):
                    with self._lock:
                        self._registry[self._key(event)] = category
                    return
        job_type: str | None = None
        updates: list[object] = []
        if event.command_name == "findAndModify":
            job_type = job_type_of(command.get("query"))
        elif event.command_name == "update":
            updates = [
                u.get("u") if isinstance(u, Mapping) else None for u in command.get("updates") or ()
            ]
        with self._lock:
            self._pending[self._key(event)] = (job_type, updates)

    def _take(self, event: Any) -> tuple[str | None, list[object]]:
        with self._lock:
            return self._pending.pop(self._key(event), (None, []))

    def _on_registry(self, event: Any) -> bool:
        """Count a command on a side collection (True), or say it was none (False)."""
        with self._lock:
            category = self._registry.pop(self._key(event), None)
        if category is None:
            return False
        self._counter.record(event.command_name, category)
        return True

    def succeeded(self, event: monitoring.CommandSucceededEvent) -> None:
        if self._on_registry(event):
            return
        job_type, updates = self._take(event)
        name = event.command_name
        reply = event.reply
        rejected = bool(reply.get("writeErrors"))
        if name == "update" and updates:
            failed = {e.get("index") for e in reply.get("writeErrors") or ()}
            categories = [
                UPDATE_REJECTED if i in failed else classify_update(u)
                for i, u in enumerate(updates)
            ]
            self._counter.record_statements(name, categories)
            return
        if name == "insert":
            category = INSERT_REJECTED if rejected else INSERT
        elif name == "findAndModify":
            category = CLAIM_EMPTY if reply.get("value") is None else CLAIM
        elif name == "update":
            category = UPDATE_REJECTED if rejected else UPDATE_OTHER
        elif name == "delete":
            category = DELETE
        elif name in READ_COMMANDS:
            category = READ
        else:
            category = OTHER
        self._counter.record(name, category, job_type)

    def failed(self, event: monitoring.CommandFailedEvent) -> None:
        if self._on_registry(event):
            return
        job_type, updates = self._take(event)
        name = event.command_name
        if name == "update" and updates:
            self._counter.record_statements(f"{name}(failed)", [UPDATE_REJECTED] * len(updates))
            return
        categories = {"findAndModify": CLAIM_ERROR, "insert": INSERT_REJECTED}
        category = categories.get(name, UPDATE_REJECTED if name == "update" else OTHER)
        self._counter.record(f"{name}(failed)", category, job_type)


# -- stores -------------------------------------------------------------------------------
class Store(Protocol):
    label: str
    counter: OpCounter
    #: What the scenario-2 jobs/s figure says about MongoDB (often: nothing).
    timing_note: str

    def new_backend(self) -> MongoJobQueue: ...

    def close(self) -> None: ...


class MongomockStore:
    """A fresh mongomock database per scenario; counts through collection proxies (the
    jobs, the rate limits, the workers registry and the paused types)."""

    label = "mongomock"
    timing_note = "mongomock is serialised and slow: says nothing about MongoDB"

    def __init__(self) -> None:
        self.counter = OpCounter()

    def new_backend(self) -> MongoJobQueue:
        backend = MongoJobQueue(mongomock.MongoClient(tz_aware=True)["bench"])
        backend.startup()
        proxy = CountingCollection(backend.col, self.counter)
        backend.col = cast("Collection[dict[str, Any]]", proxy)
        # The rate limits live in a collection of their own, which a claim of a limited
        # type reads and writes: counted too (the store keeps no public handle on it).
        rates = CountingCollection(backend._rates, self.counter)
        backend._rates = cast("Collection[dict[str, Any]]", rates)
        # The workers registry, as the server's command monitoring sees it too.
        registry = CountingCollection(backend.workers.col, self.counter, category=REGISTRY)
        backend.workers.col = cast("Collection[dict[str, Any]]", registry)
        # The paused types, which a process reads every few seconds (never per job).
        pauses = CountingCollection(backend.pauses.col, self.counter, category=PAUSES)
        backend.pauses.col = cast("Collection[dict[str, Any]]", pauses)
        return backend

    def close(self) -> None:
        pass


class ServerStore:
    """A throwaway database on a MongoDB server; counts through command monitoring, so
    every count is a command that went over the wire (one round trip each)."""

    def __init__(self, url: str) -> None:
        self.counter = OpCounter()
        self.client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(
            url,
            event_listeners=[CommandCounter(self.counter)],
            tz_aware=True,
            serverSelectionTimeoutMS=5000,
        )
        try:
            info = self.client.server_info()
        except PyMongoError as exc:
            self.client.close()
            raise RuntimeError(f"no MongoDB server answered: {exc}") from exc
        protocol = info.get("version", "?")
        if "secantusVersion" in info:  # the SecantusDB wire server (a Python process)
            self.label = f"SecantusDB {info['secantusVersion']} wire server (MongoDB {protocol})"
            self.timing_note = "a Python wire server: says nothing about MongoDB"
        else:
            self.label = f"MongoDB {protocol}"
            self.timing_note = "one process, no-op jobs, this machine and network"
        self.db_name = f"durabl_bench_{uuid.uuid4().hex[:10]}"
        self._collections = 0

    def new_backend(self) -> MongoJobQueue:
        self._collections += 1
        db = self.client[self.db_name]
        backend = MongoJobQueue(db, collection=f"jobs_{self._collections}")
        backend.startup()
        return backend

    def close(self) -> None:
        try:
            self.client.drop_database(self.db_name)
        finally:
            self.client.close()
