"""A scripted primary for a running queue with push pickup: the change stream and its faults.

:class:`ChangeStreamServer` answers, on the server's own threads, every command a queue with
``use_change_streams=True`` sends while it runs: the store's startup (indexes already
there), claims and completions against a small in-memory set of jobs, the watcher's
look-ups, and the change stream itself: ``aggregate`` with ``$changeStream`` opens a cursor
at the resume token it names (or at the head of the log), ``getMore`` returns the events
logged after the cursor's position, or waits for one until its ``maxTimeMS`` passes, as a
server does. Every reply carries a ``postBatchResumeToken``.

The test says what happens: :meth:`insert` logs a pending job's insert event (and makes the
job claimable), :meth:`invalidate` logs an ``invalidate``, :meth:`fail_next_getmore` and
:meth:`fail_next_open` script the next replies as errors, :meth:`forget_history` makes old
tokens unknown (``ChangeStreamHistoryLost``), :attr:`down` hangs up on every request,
``hello`` included: a server that is gone. Nothing sleeps: held ``getMore`` requests are
answered by one thread that waits on a condition.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from bson import ObjectId
from mockupdb import Request

from durabl.model.clock import as_utc
from durabl.model.options import build_new_job
from durabl.stores.mongo import codec
from durabl.stores.mongo.indexes import INDEXES
from tests.wire.server import COLLECTION, NAMESPACE, Wire, claimed_by

#: Labels a 4.4+ server adds to an error the driver may resume a change stream after.
RESUMABLE_LABEL = "ResumableChangeStreamError"
#: The state-change and network-side errors a getMore meets during a failover or shutdown.
RESUMABLE_STREAM_ERRORS = {
    "HostUnreachable": 6,
    "ShutdownInProgress": 91,
    "NotWritablePrimary": 10107,
    "CursorNotFound": 43,
}
HISTORY_LOST = 286  # ChangeStreamHistoryLost: the oplog no longer holds the token's event
UNAUTHORIZED = 13

Answer = Callable[[Request], object]


def token(seq: int) -> dict[str, str]:
    """The resume token of the ``seq``-th entry of the log (0: before the first)."""
    return {"_data": f"82{seq:016X}"}


def seq_of(resume: Mapping[str, Any]) -> int:
    return int(str(resume["_data"])[2:], 16)


def stream_error(code: int, *, resumable: bool = True) -> Answer:
    """A command error; ``resumable`` adds the label the driver resumes on."""
    labels = [RESUMABLE_LABEL] if resumable else []

    def answer(request: Request) -> object:
        return request.command_err(code=code, errmsg=f"error {code}", errorLabels=labels)

    return answer


def unanswered(request: Request) -> object:
    """Never reply: a connection that silently stops carrying anything (a partition)."""
    return True


def hangup(request: Request) -> object:
    """Drop the connection (the client may already have closed it)."""
    try:
        return request.hangup()
    except OSError:
        return True


@dataclass
class Cursor:
    id: int
    position: int  # seq of the last entry delivered
    closed: bool = False


@dataclass
class Held:
    request: Request
    cursor: Cursor
    deadline: float


@dataclass
class Open:
    """One ``aggregate`` the watcher (or the driver resuming for it) sent."""

    stage: dict[str, Any]
    pipeline: list[dict[str, Any]]
    at: float = field(default_factory=time.monotonic)

    @property
    def resume_after(self) -> Any:
        return self.stage.get("resumeAfter")

    @property
    def start_after(self) -> Any:
        return self.stage.get("startAfter")

    @property
    def fresh(self) -> bool:
        return not ({"resumeAfter", "startAfter", "startAtOperationTime"} & self.stage.keys())


class ChangeStreamServer:
    """Answers a running queue's whole conversation; the test scripts the stream."""

    def __init__(self, wire: Wire) -> None:
        self.wire = wire
        self.down = False
        self._cond = threading.Condition()
        self._log: list[dict[str, Any]] = []  # the change events, in order; seq = index + 1
        self._history_start = 0  # tokens of entries before this seq are gone
        self._invalidated: set[int] = set()  # seqs of invalidate events
        self._cursors: dict[int, Cursor] = {}
        self._ids = itertools.count(1001)
        self._held: list[Held] = []
        self._open_faults: deque[Answer] = deque()
        self._read_faults: deque[Answer] = deque()
        self._find_faults: deque[Answer] = deque()
        #: While set, every ``aggregate`` gets this answer (a stream that cannot reopen).
        self.refuse_opens: Answer | None = None
        #: Jobs a claim can take, by id.
        self.pending: dict[ObjectId, dict[str, Any]] = {}
        #: Per type, when each claim was asked (a poll, or a pushed wake-up).
        self.claims: dict[str, list[float]] = {}
        #: The streams opened, in order (the driver's own resumes included).
        self.opens: list[Open] = []
        #: The error codes the server itself answered an ``aggregate`` with.
        self.refusals: list[int] = []
        self.getmores = 0
        self.finds = 0
        self.refused = 0
        self._closed = False
        self._thread = threading.Thread(target=self._answer_held, name="wire-getmore", daemon=True)
        self._thread.start()
        self._responder = wire.server.autoresponds(self._answer)

    def close(self) -> None:
        self.wire.server.cancel_responder(self._responder)
        with self._cond:
            self._closed = True
            held, self._held = self._held, []
            self._cond.notify_all()
        for entry in held:
            hangup(entry.request)
        self._thread.join(5)

    # -- what the test scripts ------------------------------------------------------------
    def insert(self, type: str, **options: Any) -> str:
        """A pending job of ``type`` written by another process: claimable, and its insert
        event logged. Returns its id."""
        doc = self.job(type, **options)
        with self._cond:
            self.pending[doc["_id"]] = doc
            self._append(
                {
                    "operationType": "insert",
                    "documentKey": {"_id": doc["_id"]},
                    "fullDocument": {k: doc[k] for k in ("type", "status", "run_at")},
                }
            )
        return str(doc["_id"])

    def retried(self, type: str) -> str:
        """A job of ``type`` made pending again (a retry, a release): an update event,
        which names the job but not its type, so the watcher looks it up."""
        doc = self.job(type)
        with self._cond:
            self.pending[doc["_id"]] = doc
            self._append(
                {
                    "operationType": "update",
                    "documentKey": {"_id": doc["_id"]},
                }
            )
        return str(doc["_id"])

    def unannounced(self, type: str) -> str:
        """A pending job no event on this stream announces (written while its events were
        lost, or before the stream started): only a poll finds it."""
        doc = self.job(type)
        with self._cond:
            self.pending[doc["_id"]] = doc
        return str(doc["_id"])

    def invalidate(self) -> dict[str, str]:
        """The jobs collection was dropped: an ``invalidate`` event; returns its token."""
        with self._cond:
            self.pending.clear()
            seq = self._append({"operationType": "invalidate"})
            self._invalidated.add(seq)
        return token(seq)

    def forget_history(self) -> None:
        """The oplog rolled over: every token seen so far is gone."""
        with self._cond:
            self._history_start = len(self._log) + 1

    def fail_next_open(self, *answers: Answer) -> None:
        self._open_faults.extend(answers)

    def fail_next_find(self, *answers: Answer) -> None:
        """The next reads of jobs (the watcher's look-ups) get these answers."""
        self._find_faults.extend(answers)

    def fail_next_getmore(self, *answers: Answer) -> None:
        with self._cond:
            self._read_faults.extend(answers)
            self._cond.notify_all()  # a held getMore takes the fault now

    def set_down(self, down: bool) -> None:
        with self._cond:
            self.down = down
            held, self._held = (self._held, []) if down else ([], self._held)
        for entry in held:
            hangup(entry.request)

    @property
    def head(self) -> dict[str, str]:
        """The token of the newest log entry."""
        with self._cond:
            return token(len(self._log))

    def claim_count(self, type: str) -> int:
        with self._cond:
            return len(self.claims.get(type, []))

    @staticmethod
    def job(type: str, **options: Any) -> dict[str, Any]:
        # A second ago: the store's clock follows the server's hello.localTime, which the
        # handshake gives in whole seconds.
        now = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(seconds=1)
        return codec.new_document(build_new_job(type, {"n": 1}, **options), now)

    # -- the server side ------------------------------------------------------------------
    def _append(self, event: dict[str, Any]) -> int:
        seq = len(self._log) + 1
        self._log.append({"_id": token(seq), **event})
        self._cond.notify_all()
        return seq

    def _answer(self, request: Request) -> bool:
        """Runs on the connection's thread under mockupdb's lock: never blocks."""
        if self.down:
            self.refused += 1
            hangup(request)
            return True
        name = request.command_name or ""
        if name.lower() in ("hello", "ismaster", "endsessions"):
            return False  # the handshake answers
        handler = getattr(self, f"_on_{name}", None)
        if handler is None:
            return False  # left for the test
        try:
            handler(request)
        except Exception as exc:  # a bug in this script: fail the command, visibly
            request.command_err(code=1, errmsg=f"the scripted server failed: {exc!r}")
        return True

    def _on_aggregate(self, request: Request) -> None:
        pipeline = list(request.doc["pipeline"])
        if not pipeline or "$changeStream" not in pipeline[0]:
            # Another read of the store (a count, a grouping): none of the jobs it asks about.
            request.ok(cursor={"id": 0, "ns": NAMESPACE, "firstBatch": []})
            return
        stage = dict(pipeline[0]["$changeStream"])
        self.opens.append(Open(stage, pipeline[1:]))
        fault = self._open_faults.popleft() if self._open_faults else self.refuse_opens
        if fault is not None:
            fault(request)
            return
        with self._cond:
            resume = stage.get("resumeAfter") or stage.get("startAfter")
            if resume is None:
                position = len(self._log)
            else:
                position = seq_of(resume)
                if position < self._history_start:
                    self.refusals.append(HISTORY_LOST)
                    request.command_err(
                        code=HISTORY_LOST,
                        errmsg="Resume of change stream was not possible, as the resume "
                        "point may no longer be in the oplog.",
                    )
                    return
                if position in self._invalidated and "resumeAfter" in stage:
                    self.refusals.append(260)
                    request.command_err(code=260, errmsg="cannot resume past an invalidate")
                    return
            cursor = Cursor(next(self._ids), position)
            self._cursors[cursor.id] = cursor
            batch = self._take(cursor)
        request.ok(cursor=self._cursor_doc(cursor, "firstBatch", batch))

    def _on_getMore(self, request: Request) -> None:
        self.getmores += 1
        with self._cond:
            cursor = self._cursors.get(int(request.doc["getMore"]))
            if cursor is None or cursor.closed:
                request.command_err(code=43, errmsg="cursor id not found")
                return
            if self._read_faults:
                fault = self._read_faults.popleft()
            elif self._pending_for(cursor):
                fault = None
            else:
                wait = float(request.doc.get("maxTimeMS", 1000)) / 1000
                self._held.append(Held(request, cursor, time.monotonic() + wait))
                self._cond.notify_all()
                return
            batch = [] if fault is not None else self._take(cursor)
        if fault is not None:
            fault(request)
        else:
            request.ok(cursor=self._cursor_doc(cursor, "nextBatch", batch))

    def _on_killCursors(self, request: Request) -> None:
        with self._cond:
            ids = [int(i) for i in request.doc.get("cursors", [])]
            for cid in ids:
                self._cursors.pop(cid, None)
        request.ok(cursorsKilled=ids, cursorsNotFound=[], cursorsAlive=[], cursorsUnknown=[])

    def _on_findAndModify(self, request: Request) -> None:
        query = request.doc["query"]
        type = query.get("type")
        with self._cond:
            self.claims.setdefault(str(type), []).append(time.monotonic())
            due = as_utc(query["run_at"]["$lte"])  # (mockupdb decodes naive datetimes)
            match = next(
                (
                    d
                    for d in self.pending.values()
                    if d["type"] == type and d["run_at"] <= due and "_id" not in query
                ),
                None,
            )
            if match is not None:
                del self.pending[match["_id"]]
        if match is None:
            request.ok(value=None, lastErrorObject={"n": 0, "updatedExisting": False})
        else:
            after = claimed_by(request, match)
            request.ok(value=after, lastErrorObject={"n": 1, "updatedExisting": True})

    def _on_update(self, request: Request) -> None:
        # Completions, heartbeats, starts: every fenced write applies.
        n = len(request.doc["updates"])
        request.ok(n=n, nModified=n)

    def _on_insert(self, request: Request) -> None:
        request.ok(n=len(request.doc["documents"]))

    def _on_find(self, request: Request) -> None:
        if request.doc.get("find") != COLLECTION:  # another collection of the store
            request.ok(cursor={"id": 0, "ns": NAMESPACE, "firstBatch": []})
            return
        # The watcher's look-ups and read-backs: the pending jobs the filter names by id.
        self.finds += 1
        if self._find_faults:
            self._find_faults.popleft()(request)
            return
        ids = request.doc.get("filter", {}).get("_id", {})
        wanted = ids.get("$in", []) if isinstance(ids, Mapping) else []
        with self._cond:
            docs = [
                {"_id": d["_id"], "type": d["type"], "run_at": d["run_at"]}
                for i, d in self.pending.items()
                if i in wanted
            ]
        request.ok(cursor={"id": 0, "ns": NAMESPACE, "firstBatch": docs})

    def _on_listIndexes(self, request: Request) -> None:
        existing = [{"v": 2, "key": dict(spec.keys), "name": spec.name} for spec in INDEXES]
        request.ok(cursor={"id": 0, "ns": NAMESPACE, "firstBatch": existing})

    def _on_createIndexes(self, request: Request) -> None:
        request.ok()

    # -- the change-stream cursor ---------------------------------------------------------
    def _pending_for(self, cursor: Cursor) -> bool:
        return len(self._log) > cursor.position

    def _take(self, cursor: Cursor) -> list[dict[str, Any]]:
        """The entries after the cursor's position (up to and including an invalidate,
        which closes the cursor), advancing it."""
        batch: list[dict[str, Any]] = []
        for entry in self._log[cursor.position :]:
            batch.append(entry)
            cursor.position += 1
            if cursor.position in self._invalidated:
                cursor.closed = True
                break
        return batch

    def _cursor_doc(self, cursor: Cursor, key: str, batch: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": 0 if cursor.closed else cursor.id,
            "ns": NAMESPACE,
            key: batch,
            "postBatchResumeToken": token(cursor.position),
        }

    def _answer_held(self) -> None:
        """Answer each held getMore when an event arrives, a fault is scripted, or its
        ``maxTimeMS`` passes (empty, with the latest token)."""
        with self._cond:
            while not self._closed:
                now = time.monotonic()
                ready: list[tuple[Held, Answer | None, list[dict[str, Any]]]] = []
                for entry in list(self._held):
                    if self._read_faults:
                        ready.append((entry, self._read_faults.popleft(), []))
                    elif self._pending_for(entry.cursor) or now >= entry.deadline:
                        ready.append((entry, None, self._take(entry.cursor)))
                    else:
                        continue
                    self._held.remove(entry)
                if ready:
                    self._cond.release()
                    try:
                        for entry, fault, batch in ready:
                            if fault is not None:
                                fault(entry.request)
                            else:
                                doc = self._cursor_doc(entry.cursor, "nextBatch", batch)
                                entry.request.ok(cursor=doc)
                    finally:
                        self._cond.acquire()
                    continue
                deadlines = [entry.deadline for entry in self._held]
                self._cond.wait(max(min(deadlines) - now, 0) if deadlines else None)
