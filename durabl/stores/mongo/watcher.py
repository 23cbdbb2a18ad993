"""The change-stream watcher: notifications in, wake-ups out (one thread per queue).

The stream, the look-ups and the clock are injected, so tests drive :class:`Watcher` step
by step against a scripted stream; :func:`durabl.stores.mongo.pushreads.open_watcher`
wires it to a MongoDB collection. The pipeline and the rules it follows are in
:mod:`durabl.stores.mongo.changestream`; what it wakes, and when, is the
:class:`~durabl.stores.mongo.routing.Router`'s.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

from pymongo.errors import PyMongoError
from tenacity import RetryCallState, retry_if_exception

from durabl.model.clock import Clock
from durabl.model.exceptions import DurablError
from durabl.stores.base import PushListener, PushStatus
from durabl.stores.mongo.changestream import (
    THREAD_NAME,
    ChangeStreamInvalidated,
    ChangeStreamLike,
    ErrorKind,
    Lookup,
    NextRunAt,
    OpenStream,
    PushSettings,
    Token,
    Waiting,
    classify,
)
from durabl.stores.mongo.retry import reason as one_line
from durabl.stores.mongo.routing import Router, TimerQueue
from durabl.stores.push import PushState, WatcherThread, close_quietly, reconnecting

logger = logging.getLogger(__name__)


class _Stopped(Exception):
    """The watcher is stopping: end the reconnect loop without falling back."""


class Watcher(PushState):
    """Reads a change stream and wakes the processors it concerns.

    Every dependency is injected, so tests drive it step by step with a fake clock and a
    scripted stream: :meth:`poll_once` is one step (connect, or read one notification, then
    route a batch whose window has passed and fire due timers); :meth:`handle` processes
    one change event. :meth:`start` runs the steps on a thread until :meth:`stop`, until
    the queue shuts down, or until the watcher falls back to polling.
    """

    def __init__(
        self,
        open_stream: OpenStream,
        listener: PushListener,
        *,
        clock: Clock,
        lookup: Lookup,
        next_run_at: NextRunAt,
        waiting: Waiting,
        now: Callable[[], datetime] | None = None,
        settings: PushSettings | None = None,
        sleep: Callable[[float], object] | None = None,
        resumed: Callable[[], Iterable[str]] | None = None,
    ) -> None:
        self.settings = settings or PushSettings()
        self._resumed = resumed
        self._open_stream = open_stream
        self._clock = clock
        self._routes = Router(
            listener,
            self.settings,
            clock=clock,
            now=now or clock.now,
            lookup=lookup,
            next_run_at=next_run_at,
            waiting=waiting,
        )
        # States: idle, connecting, push, reconnecting, fallback, closed.
        thread = WatcherThread(THREAD_NAME, self.run, self.close)
        super().__init__(listener, thread, "the watcher has not started")
        self._sleep: Callable[[float], object] = sleep or self._thread.stopping.wait
        # Stream position.
        self._stream: ChangeStreamLike | None = None
        self._token: Token | None = None
        self._start_after: Token | None = None
        self._last_kind: ErrorKind = "fatal"
        self._idle = False

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> bool:
        """Stop, and join the thread for at most ``timeout`` seconds (the thread closes
        the stream itself; called from an event sink on that thread, it ends right after).
        True when it has ended."""
        return self._thread.stop(timeout)

    def run(self) -> None:
        """The thread: steps until stopped or fallen back, then closes the stream."""
        min_step = self.settings.await_seconds / 4
        try:
            while True:
                started = self._clock.monotonic()
                if not self.poll_once():
                    break
                # A getMore normally waits on the server; never spin if one does not.
                if self._idle and self._clock.monotonic() - started < min_step:
                    self._thread.stopping.wait(min_step)
        except Exception as exc:  # a bug here must never stop pickup: poll instead
            logger.exception("the change-stream watcher failed")
            self._fall_back(f"the watcher failed: {exc!r}", exc)
        finally:
            self.close()

    def close(self) -> None:
        """Close the stream and emit ``changestream-closed`` (once)."""
        if not self._thread.close():
            return
        with self._lock:
            fell_back = self._state == "fallback"
        self._close_stream()
        self._routes.clear()
        if not fell_back:
            self._set_state("closed", "the change stream was closed (shutdown)")
        self._emit("changestream-closed", reason="fallback" if fell_back else "shutdown")

    def status(self) -> PushStatus:
        return self.push_status(timers=len(self.timers), timers_dropped=self.timers.dropped)

    @property
    def resume_token(self) -> Token | None:
        return self._token

    @property
    def timers(self) -> TimerQueue:
        return self._routes.timers

    # -- one step -------------------------------------------------------------------------
    def poll_once(self) -> bool:
        """One step: connect (with backoff) when there is no stream, else read at most one
        notification (one ``getMore`` when none is buffered); then route the batch if its
        window has passed and fire due timers. False once stopped or fallen back."""
        if self._state in ("fallback", "closed") or self._stopping():
            return False
        self._routes.watched.refresh(read_back=self._state == "push")
        if self._stream is None:
            self._idle = False
            if not self._connect():
                return False
        else:
            self._read_one()
        self._routes.flush_if_due()
        self._routes.fire_timers()
        self._wake_resumed()
        return True

    def _wake_resumed(self) -> None:
        """Wake the pollers of the types another process resumed: their jobs changed
        nothing the stream could report."""
        if self._resumed is None:
            return
        try:
            resumed = self._resumed()
        except Exception as exc:  # the next step reads again
            logger.debug("reading the paused types failed: %s", exc)
            return
        for type in sorted(set(resumed) & self._routes.types):
            self._listener.push_due(type, 0)

    def handle(self, event: Mapping[str, Any]) -> None:
        """Take in one change event (already filtered and projected by the server)."""
        op = event.get("operationType")
        if op == "invalidate":
            self._invalidated(event)
            return
        self.notifications += 1
        self._start_after = None  # an event past the start point: resume_after from now on
        self._routes.take(op, event)

    # -- reading --------------------------------------------------------------------------
    def _read_one(self) -> None:
        stream = self._stream
        assert stream is not None
        try:
            event = stream.try_next()
        except PyMongoError as exc:
            self._lost(exc)
            return
        token = stream.resume_token
        if token is not None:
            self._token = token
        self._idle = event is None
        if event is not None:
            self.handle(event)
        elif not stream.alive:
            self._lost(DurablError("the server closed the change stream"))

    def _lost(self, exc: BaseException) -> None:
        """The stream failed: drop it; the next step reconnects."""
        if classify(exc) == "token-lost":
            self._forget_token()
        self._close_stream()
        self._report_error(exc, 0)
        reason = f"reconnecting the change stream after: {one_line(exc)}"
        self._set_state("reconnecting", reason)
        self._listener.push_mode("poll", reason)

    def _invalidated(self, event: Mapping[str, Any]) -> None:
        token = event.get("_id")
        self._start_after = token if isinstance(token, Mapping) else None
        self._token = None
        # The jobs the timers point at were dropped or renamed away with the collection.
        self._routes.clear()
        self._lost(
            ChangeStreamInvalidated(
                "the change stream was invalidated: the jobs collection was dropped or renamed"
            )
        )

    def _forget_token(self) -> None:
        self._token = None
        self._start_after = None

    # -- connecting -----------------------------------------------------------------------
    def _connect(self) -> bool:
        self._connecting("connecting the change stream")
        retrying = reconnecting(
            self.settings,
            give_up=self._give_up,
            retry=retry_if_exception(self._worth_retrying),
            pause=self._sleep,
        )
        try:
            stream, first, fresh = retrying(self._open_once)
        except _Stopped:
            return False
        except Exception as exc:
            if self._stopping():
                return False
            if isinstance(exc, PyMongoError) and self._last_kind != "fatal":
                reason = (
                    f"gave up after {self._attempt} failed attempts to open the change "
                    f"stream: {one_line(exc)}"
                )
            else:
                reason = f"the change stream cannot be opened: {one_line(exc)}"
            self._fall_back(reason, exc)
            return False
        self._stream = stream
        token = stream.resume_token
        if token is not None:
            self._token = token
        self._connected("change stream connected", resumed=not fresh)
        if fresh:
            self._routes.resync()
        if first is not None:
            self.handle(first)
        return True

    def _open_once(self) -> tuple[ChangeStreamLike, Mapping[str, Any] | None, bool]:
        if self._stopping():
            raise _Stopped
        self._attempt += 1
        self._last_kind = "fatal"
        start_after = self._start_after
        resume_after = None if start_after is not None else self._token
        fresh = resume_after is None and start_after is None
        stream: ChangeStreamLike | None = None
        try:
            stream = self._open_stream(resume_after, start_after)
            first = stream.try_next()  # one round trip proves the stream works
        except PyMongoError as exc:
            if stream is not None:
                close_quietly(stream.close, "the change stream", logger)
            kind = classify(exc)
            if kind == "token-lost":
                if fresh:
                    kind = "fatal"  # not about a token: nothing left to drop
                else:
                    self._forget_token()
            self._last_kind = kind
            self._report_error(exc, self._attempt, kind)
            raise
        token = stream.resume_token
        if token is not None:
            self._token = token
        return stream, first, fresh

    def _give_up(self, state: RetryCallState) -> bool:
        return state.attempt_number >= self.settings.max_retries or self._stopping()

    def _worth_retrying(self, exc: BaseException) -> bool:
        return isinstance(exc, PyMongoError) and self._last_kind != "fatal"

    def _fall_back(self, reason: str, error: BaseException | None) -> None:
        self._close_stream()
        self._routes.clear()
        self._set_state("fallback", reason)
        logger.warning("job pickup falls back to polling: %s", reason)
        self._emit("changestream-fallback", error=error, reason=reason)
        self._listener.push_mode("poll", reason)

    def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            close_quietly(stream.close, "the change stream", logger)

    # -- reporting ------------------------------------------------------------------------
    def _report_error(self, exc: BaseException, attempt: int, kind: str | None = None) -> None:
        if kind is None:
            if isinstance(exc, ChangeStreamInvalidated):
                kind = "invalidate"
            elif isinstance(exc, DurablError):
                kind = "resumable"
            else:
                kind = classify(exc)
        logger.warning(
            "change stream error (%s, attempt %d of %d): %s",
            kind,
            attempt,
            self.settings.max_retries,
            one_line(exc),
        )
        self._emit(
            "changestream-error",
            error=exc,
            kind=kind,
            attempt=attempt,
            max_attempts=self.settings.max_retries,
        )
