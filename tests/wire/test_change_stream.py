"""Push pickup over the wire: the watcher's change stream against a scripted primary.

A queue with ``use_change_streams=True`` runs for real (processors, completer, watcher) on
the real driver; :class:`tests.wire.stream.ChangeStreamServer` answers its claims and plays
the change stream, and each test injects one fault a replica set produces: a ``getMore``
answered with a resumable error or dropped, a non-resumable error, an ``invalidate``, a
resume token the oplog no longer holds, a primary that is gone for a while or for good.
What is checked is what a user relies on: the job is picked up (by push where the stream
can carry it, by a poll otherwise), ``queue.is_healthy()`` says which and why, and nothing
announced is lost across the fault.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Collection, Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from mockupdb import Request

from durabl import Job, JobContext, JobEvent, JobQueue, MongoJobQueue
from durabl.model.options import DEFAULT_POLL_INTERVAL
from durabl.stores.mongo.changestream import THREAD_NAME, claimable_pipeline
from durabl.stores.mongo.retry import RETRY_ATTEMPTS
from durabl.testing import wait_until
from tests.wire.server import COLLECTION, Wire
from tests.wire.stream import (
    HISTORY_LOST,
    RESUMABLE_STREAM_ERRORS,
    UNAUTHORIZED,
    Answer,
    ChangeStreamServer,
    hangup,
    stream_error,
    unanswered,
)

pytestmark = pytest.mark.wire

SAFETY_POLL = 30.0  # far longer than any wait below: only a push explains a quick pickup
PICKUP = 5.0  # generous bound on a pickup (2 shared cores)
AWAIT = 0.2  # each getMore waits this long on the server
SOCKET_TIMEOUT = 3.0  # the client's socketTimeoutMS (tests.wire.server.Wire)


class Rig:
    """A worker queue with push pickup on the wire, and what it ran."""

    def __init__(self, wire: Wire, **settings: Any) -> None:
        self.server = ChangeStreamServer(wire)
        self.store = MongoJobQueue(
            wire.client["durabl"],
            COLLECTION,
            use_change_streams=True,
            safety_poll_interval=SAFETY_POLL,
        )
        base = {
            "max_await": AWAIT,
            "retry_backoff": 0.02,
            "retry_backoff_max": 0.1,
            "open_timeout": 2.0,
            "max_retries": 5,
        }
        self.store.push_settings = dataclasses.replace(
            self.store.push_settings, **{**base, **settings}
        )
        self.events: list[JobEvent] = []
        self.queue = JobQueue(self.store, on_job_event=self.events.append)
        self._ran: dict[str, threading.Event] = {}
        self._lock = threading.Lock()

    def ran(self, job_id: str) -> threading.Event:
        with self._lock:
            return self._ran.setdefault(job_id, threading.Event())

    def handler(self, job: Job[Any], ctx: JobContext) -> None:
        self.ran(job.id).set()

    def start(self, *types: str, fixed: Collection[str] = ()) -> None:
        """Process ``types`` and wait until push is up and the polls that starting causes
        are done: the first type's own poll and the watcher's resync poll, then one own
        poll of each later type (found by the running watcher, which reads back its future
        jobs but need not poll it). Types in ``fixed`` choose their poll interval
        (``SAFETY_POLL``), so a change of pickup mode does not poll them: only the watcher
        wakes them. (A processor's first run is followed by one more poll, as it claimed
        as many as it asked for.) The watcher has read back each type's next future job
        (one ``find`` each) by then."""
        for n, type in enumerate(types):
            interval = SAFETY_POLL if type in fixed else None
            self.queue.process(type, self.handler, poll_interval=interval)
            if n == 0:
                assert wait_until(lambda: self.pickup() == "push", PICKUP), self.reason()
            polls = 2 if n == 0 else 1
            assert wait_until(lambda: self.server.claim_count(type) >= polls, PICKUP)  # noqa: B023
        assert wait_until(lambda: self.server.finds >= len(types), PICKUP)

    def pickup(self) -> str:
        return self.queue.is_healthy().pickup

    def reason(self) -> str:
        return self.queue.is_healthy().reason

    def pushing(self, opens: int = 1) -> bool:
        """Push is up, on the ``opens``-th stream opened."""
        return self.pickup() == "push" and len(self.server.opens) >= opens

    def kinds(self, name: str) -> list[dict[str, Any]]:
        return [dict(e.extra) for e in list(self.events) if e.kind == name]

    def picked_up(self, job_id: str, timeout: float = PICKUP) -> bool:
        return self.ran(job_id).wait(timeout)

    def close(self) -> None:
        self.server.set_down(False)
        self.queue.shutdown(timeout=5)
        self.server.close()


@pytest.fixture
def rig(wire: Wire) -> Iterator[Rig]:
    rig = Rig(wire)
    yield rig
    rig.close()


def test_an_inserted_job_is_pushed_to_its_own_type(rig: Rig) -> None:
    rig.start("email", "sms")
    opened = rig.server.opens[0]
    assert opened.fresh and opened.pipeline == claimable_pipeline()
    assert rig.reason() == "change stream connected"
    assert rig.queue.processors["email"].poll_interval == SAFETY_POLL
    sms_polls = rig.server.claim_count("sms")
    job_id = rig.server.insert("email")
    assert rig.picked_up(job_id)
    assert rig.server.claim_count("sms") == sms_polls, "another type is not woken"


def test_a_retried_job_is_looked_up_and_pushed(rig: Rig) -> None:
    """An update event names the job, not its type: the watcher reads the type back."""
    rig.start("email")
    job_id = rig.server.retried("email")
    assert rig.picked_up(job_id)


def test_a_lookup_that_fails_for_good_polls_every_type(rig: Rig) -> None:
    """The look-up of an updated job fails past the store's retries: the watcher cannot
    tell its type, so every type it processes polls, and the job is still picked up."""
    rig.start("email", "sms", fixed={"email", "sms"})
    sms_polls = rig.server.claim_count("sms")
    rig.server.fail_next_find(*[hangup] * (2 * RETRY_ATTEMPTS))  # pymongo tries each twice
    job_id = rig.server.retried("email")
    assert rig.picked_up(job_id)
    assert wait_until(lambda: rig.server.claim_count("sms") > sms_polls, PICKUP)
    assert rig.pickup() == "push"


@pytest.mark.parametrize(
    "fault",
    [stream_error(code) for code in RESUMABLE_STREAM_ERRORS.values()] + [hangup],
    ids=[*RESUMABLE_STREAM_ERRORS, "connection-dropped"],
)
def test_a_resumable_getmore_error_resumes_after_the_last_token(rig: Rig, fault: Answer) -> None:
    """The driver resumes by itself (one new aggregate with ``resumeAfter``); the job
    written while the getMore failed is replayed and pushed: nothing lost, push stays up."""
    rig.start("email", fixed={"email"})
    rig.server.insert("audit")  # a type this process does not run: only the token moves
    assert wait_until(lambda: rig.queue.is_healthy().details["notifications"] == 1, PICKUP)
    last_token = rig.server.head
    written: list[str] = []

    def fails_while_a_job_is_written(request: Request) -> object:
        written.append(rig.server.insert("email"))
        return fault(request)

    rig.server.fail_next_getmore(fails_while_a_job_is_written)
    assert wait_until(lambda: written and rig.ran(written[0]).is_set(), PICKUP)
    resumed = rig.server.opens[1]
    assert resumed.resume_after == last_token and resumed.start_after is None
    assert resumed.pipeline == claimable_pipeline()
    assert rig.pickup() == "push"
    assert rig.kinds("changestream-error") == [], "the driver's resume is invisible"


def test_a_getmore_that_never_returns_is_resumed_after_the_socket_timeout(rig: Rig) -> None:
    """A partition: the getMore is never answered. The client's socketTimeoutMS (3 s here)
    ends it, pymongo resumes from the last token, and the job written meanwhile is
    replayed and pushed."""
    rig.start("email", fixed={"email"})
    last_token = rig.server.head
    written: list[str] = []

    def swallowed_while_a_job_is_written(request: Request) -> object:
        written.append(rig.server.insert("email"))
        return unanswered(request)

    rig.server.fail_next_getmore(swallowed_while_a_job_is_written)
    assert wait_until(lambda: written and rig.ran(written[0]).is_set(), SOCKET_TIMEOUT + PICKUP)
    assert rig.server.opens[-1].resume_after == last_token
    assert rig.pickup() == "push"


def test_a_resume_that_fails_too_polls_meanwhile_then_resumes_from_the_token(
    wire: Wire,
) -> None:
    """The driver's one resume fails and so does the watcher's next open: pickup is "poll",
    with the reason, processors on the default interval poll again at once (and find a job
    no event announced); once the stream reopens from the last token, a job written during
    the outage is replayed and pushed."""
    rig = Rig(wire, max_retries=50, open_timeout=0.5)
    try:
        rig.start("email", "sms", fixed={"sms"})
        processor = rig.queue.processors["email"]
        last_token = rig.server.head
        hidden = rig.server.unannounced("email")
        rig.server.refuse_opens = stream_error(RESUMABLE_STREAM_ERRORS["HostUnreachable"])
        rig.server.fail_next_getmore(stream_error(RESUMABLE_STREAM_ERRORS["HostUnreachable"]))
        assert wait_until(lambda: rig.pickup() == "poll", PICKUP)
        assert rig.reason().startswith("reconnecting the change stream after: error 6")
        assert processor.poll_interval == DEFAULT_POLL_INTERVAL
        assert rig.picked_up(hidden), "polling goes on while the stream is down"
        during = rig.server.insert("sms")  # sms polls every 30 s: only a push finds it
        assert not rig.ran(during).is_set()
        rig.server.refuse_opens = None
        assert wait_until(lambda: rig.pickup() == "push", PICKUP), rig.reason()
        assert rig.picked_up(during), "replayed from the token"
        assert rig.server.opens[-1].resume_after == last_token
        assert all(o.resume_after == last_token for o in rig.server.opens[1:])
        assert processor.poll_interval == SAFETY_POLL
        errors = rig.kinds("changestream-error")
        assert errors and {e["kind"] for e in errors} == {"resumable"}
        assert rig.kinds("changestream-connected")[-1]["resumed"] is True
        assert rig.queue.is_healthy().details["reconnects"] == 1
    finally:
        rig.close()


def test_a_non_resumable_getmore_error_reopens_from_the_token(rig: Rig) -> None:
    """The driver does not resume after an error without the resumable label (it closes
    the stream); the watcher reopens it from the last token, and push goes on."""
    rig.start("email", fixed={"email"})
    last_token = rig.server.head
    rig.server.fail_next_getmore(stream_error(UNAUTHORIZED, resumable=False))
    assert wait_until(lambda: rig.pushing(opens=2), PICKUP), rig.reason()
    assert rig.server.opens[1].resume_after == last_token
    assert [e["kind"] for e in rig.kinds("changestream-error")] == ["fatal"]
    job_id = rig.server.insert("email")
    assert rig.picked_up(job_id)


def test_a_non_resumable_error_on_reopening_falls_back_to_polling_at_once(rig: Rig) -> None:
    rig.start("email")
    processor = rig.queue.processors["email"]
    hidden = rig.server.unannounced("email")
    rig.server.refuse_opens = stream_error(UNAUTHORIZED, resumable=False)
    rig.server.fail_next_getmore(stream_error(UNAUTHORIZED, resumable=False))
    assert wait_until(lambda: rig.kinds("changestream-fallback"), PICKUP), rig.reason()
    assert rig.pickup() == "poll"
    assert rig.reason().startswith("the change stream cannot be opened: error 13")
    assert processor.poll_interval == DEFAULT_POLL_INTERVAL
    assert rig.picked_up(hidden), "jobs are still picked up, by polling"
    assert len(rig.server.opens) == 2, "one try: retrying cannot fix a missing privilege"
    assert rig.kinds("changestream-closed") == [{"reason": "fallback"}]


def test_an_invalidate_restarts_the_stream_after_it(rig: Rig) -> None:
    """The jobs collection was dropped: the stream reopens with ``startAfter`` the
    invalidate's token (``resumeAfter`` cannot pass it), timers of vanished jobs are
    dropped, and a job written to the new collection is pushed."""
    rig.start("email", fixed={"email"})
    later = datetime.now(timezone.utc) + timedelta(hours=1)
    rig.server.insert("email", run_at=later)  # a timer for a job the drop takes away
    assert wait_until(lambda: rig.queue.is_healthy().details["timers"] == 1, PICKUP)
    dropped = rig.server.invalidate()
    assert wait_until(lambda: rig.pushing(opens=2), PICKUP), rig.reason()
    reopened = rig.server.opens[1]
    assert reopened.start_after == dropped and reopened.resume_after is None
    assert rig.queue.is_healthy().details["timers"] == 0
    assert [e["kind"] for e in rig.kinds("changestream-error")] == ["invalidate"]
    job_id = rig.server.insert("email")
    assert rig.picked_up(job_id)


@pytest.mark.parametrize("where", ["driver-resume", "watcher-reopen"])
def test_a_lost_resume_point_starts_afresh_and_polls_every_type_once(rig: Rig, where: str) -> None:
    """``ChangeStreamHistoryLost`` on resuming: the oplog no longer holds the token, so the
    events since are gone. The watcher opens a stream from now (no token) and wakes every
    type it processes once, which finds the job written in the gap."""
    rig.start("email", "sms", fixed={"email", "sms"})  # woken only by the watcher
    missed = rig.server.unannounced("email")
    rig.server.forget_history()
    unavailable = stream_error(RESUMABLE_STREAM_ERRORS["HostUnreachable"])
    if where == "watcher-reopen":  # the driver's resume fails (and its one retry of it)
        rig.server.fail_next_open(unavailable, unavailable)
    rig.server.fail_next_getmore(unavailable)
    assert rig.picked_up(missed), "the resync poll finds the job written in the gap"
    fresh = rig.server.opens[-1]
    assert fresh.fresh, "no token: the stream starts from now"
    assert rig.server.refusals == [HISTORY_LOST]
    assert wait_until(lambda: rig.pickup() == "push", PICKUP), rig.reason()
    errors = [(e["kind"], e["attempt"]) for e in rig.kinds("changestream-error")]
    if where == "watcher-reopen":
        assert errors == [("resumable", 0), ("token-lost", 1)]
    else:
        assert errors == [("token-lost", 0)]
    assert rig.kinds("changestream-connected")[-1]["resumed"] is False

    def polls_since(type: str) -> int:
        return len([c for c in rig.server.claims[type] if c >= fresh.at])

    assert wait_until(lambda: polls_since("email") and polls_since("sms"), PICKUP)
    assert polls_since("sms") == 1, "every type polls once"
    job_id = rig.server.insert("sms")
    assert rig.picked_up(job_id), "and push goes on on the new stream"


def test_a_server_gone_for_a_while_polls_with_a_reason_then_push_resumes(wire: Wire) -> None:
    """The primary stops answering anything (``hello`` included): pickup is "poll" with a
    short reason, default-interval processors return to the normal interval; when it
    comes back the stream resumes from the last token and push is up again."""
    rig = Rig(wire, max_retries=100)
    try:
        rig.start("email", "sms", fixed={"sms"})
        processor = rig.queue.processors["email"]
        last_token = rig.server.head
        rig.server.set_down(True)
        assert wait_until(lambda: rig.pickup() == "poll", PICKUP)
        reason = rig.reason()
        assert reason.startswith("reconnecting the change stream after: ")
        assert "Topology Description" not in reason and len(reason) < 300, reason
        assert processor.poll_interval == DEFAULT_POLL_INTERVAL
        opens = len(rig.server.opens)
        rig.server.set_down(False)
        assert wait_until(lambda: rig.pickup() == "push", PICKUP), rig.reason()
        assert len(rig.server.opens) > opens
        assert rig.server.opens[-1].resume_after == last_token
        assert processor.poll_interval == SAFETY_POLL
        job_id = rig.server.insert("sms")
        assert rig.picked_up(job_id)
        assert not rig.kinds("changestream-fallback")
    finally:
        rig.close()


def test_a_stream_that_cannot_reopen_falls_back_after_its_budget(wire: Wire) -> None:
    """Every reopen fails (resumably): after ``max_retries`` attempts the watcher falls
    back to polling for good, says so once, and jobs are still picked up."""
    rig = Rig(wire, max_retries=3, open_timeout=0.3)
    try:
        rig.start("email")
        processor = rig.queue.processors["email"]
        hidden = rig.server.unannounced("email")
        rig.server.refuse_opens = stream_error(RESUMABLE_STREAM_ERRORS["ShutdownInProgress"])
        rig.server.fail_next_getmore(stream_error(RESUMABLE_STREAM_ERRORS["ShutdownInProgress"]))
        assert wait_until(lambda: rig.kinds("changestream-fallback"), PICKUP), rig.reason()
        assert rig.pickup() == "poll"
        reason = rig.reason()
        assert reason.startswith("gave up after 3 failed attempts to open the change stream")
        assert "full error" not in reason and len(reason) < 300, reason
        assert processor.poll_interval == DEFAULT_POLL_INTERVAL
        assert rig.picked_up(hidden)
        # A read error, then three attempts (in each, pymongo repeats the aggregate, a
        # retryable read, until open_timeout runs out).
        assert [e["attempt"] for e in rig.kinds("changestream-error")] == [0, 1, 2, 3]
        opens = len(rig.server.opens)
        rig.server.refuse_opens = None
        later = rig.server.unannounced("email")
        processor.poll_soon()  # (the next poll, without waiting out its 5 s)
        assert rig.picked_up(later)
        assert len(rig.server.opens) == opens, "a fallback lasts for the life of the queue"
    finally:
        rig.close()


def test_shutdown_ends_the_watcher_while_its_getmore_waits(rig: Rig) -> None:
    rig.start("email")
    assert wait_until(lambda: rig.server.getmores > 0, PICKUP)
    rig.queue.shutdown(timeout=5)
    assert rig.kinds("changestream-closed") == [{"reason": "shutdown"}]
    assert not [t for t in threading.enumerate() if t.name == THREAD_NAME]


def test_shutdown_while_the_primary_is_gone_ends_the_watcher_within_open_timeout(
    wire: Wire,
) -> None:
    rig = Rig(wire, max_retries=100, open_timeout=0.5)
    try:
        rig.start("email", fixed={"email"})
        rig.server.set_down(True)
        assert wait_until(lambda: rig.pickup() == "poll", PICKUP)
        started = time.monotonic()
        rig.queue.shutdown(timeout=5)
        assert time.monotonic() - started < 3.0
        assert rig.kinds("changestream-closed") == [{"reason": "shutdown"}]
        assert not [t for t in threading.enumerate() if t.name == THREAD_NAME]
    finally:
        rig.close()
