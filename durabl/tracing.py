"""OpenTelemetry traces for durabl jobs (the ``durabl[otel]`` extra: opentelemetry-api).

``instrument()`` adds two hooks, process-wide (every queue, made before or after) or on one
queue (``instrument(queue)``):

- an enqueue hook: a PRODUCER span ``"{type} publish"`` around the store's write, whose
  W3C trace context (``traceparent``, ``tracestate``, and baggage when the propagator
  carries it) is stored on the job as :attr:`durabl.Job.trace_context`;
- a run hook: a CONSUMER span ``"{type} process"`` around every managed run, whose parent
  is the context stored on the job, so a run on another machine, hours later, joins the
  trace of the request that enqueued it. Each attempt is a span of its own.

Attributes follow OpenTelemetry's messaging conventions: ``messaging.system`` is
``"durabl"``, ``messaging.destination.name`` the job type, ``messaging.message.id`` the job
id, ``messaging.operation.type`` ``send`` or ``process``; a run adds ``durabl.attempt``.
An exception escaping the handler is recorded on the span, whose status is then ERROR.

Spans go to the tracer provider given (else the global one: configure the SDK and an
exporter as your app already does), and contexts travel through the global propagator
(W3C trace context and baggage by default). Nothing here is imported by ``import durabl``;
without ``instrument()`` no hook runs and no job stores a context.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durabl.model.job import Job
from durabl.model.options import MAX_TRACE_CONTEXT_BYTES, NewJob
from durabl.runtime.hooks import add_enqueue_hook, add_run_hook

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer, TracerProvider

    from durabl.runtime.queue import JobQueue

SYSTEM = "durabl"
#: The instrumentation scope the spans are reported under.
SCOPE = "durabl"


class Instrumentation:
    """The tracing hooks added by one :func:`instrument` call; :meth:`uninstrument`
    removes them."""

    def __init__(
        self, tracer: Tracer, queue: JobQueue | None, provider: TracerProvider | None = None
    ) -> None:
        self.queue = queue
        #: The tracer provider given to :func:`instrument` (None: the global one).
        self.provider = provider
        self._tracer = tracer
        self._api = _api()
        if queue is None:
            removers = [add_enqueue_hook(self.enqueue_hook), add_run_hook(self.run_hook)]
        else:
            removers = [
                queue.add_enqueue_hook(self.enqueue_hook),
                queue.add_run_hook(self.run_hook),
            ]
        self._removers: list[Callable[[], None]] = removers

    def enqueue_hook(self, job: NewJob, proceed: Callable[[NewJob], str | None]) -> str | None:
        """The PRODUCER span around storing ``job``, its context stored on the job."""
        attributes = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": job.type,
            "messaging.operation.type": "send",
            "messaging.operation.name": "publish",
        }
        with self._tracer.start_as_current_span(
            f"{job.type} publish", kind=self._api.producer, attributes=attributes
        ) as span:
            carrier: dict[str, str] = {}
            self._api.propagate.inject(carrier)
            headers = fitted(carrier)  # None: nothing to carry (no SDK, or an invalid span)
            job_id = proceed(job if headers is None else job.with_trace_context(headers))
            if job_id is not None:
                span.set_attribute("messaging.message.id", job_id)
            else:  # a dedupe key already covered it: nothing new was stored
                span.set_attribute("durabl.deduplicated", True)
            return job_id

    def run_hook(self, job: Job[Any], proceed: Callable[[], object]) -> object:
        """The CONSUMER span around one run of ``job``, parented to its stored context
        (the run's own thread has none of its own). Written out rather than with
        ``start_as_current_span``: a run is the hot path of a worker."""
        stored = job.trace_context
        parent = None if stored is None else self._api.propagate.extract(stored)
        attributes: dict[str, str | int] = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": job.type,
            "messaging.operation.type": "process",
            "messaging.operation.name": "process",
            "messaging.message.id": job.id,
            "durabl.attempt": job.attempts,
        }
        span = self._tracer.start_span(
            f"{job.type} process", context=parent, kind=self._api.consumer, attributes=attributes
        )
        token = self._api.context.attach(self._api.in_context(span))
        try:
            return proceed()
        except BaseException as exc:
            span.record_exception(exc)
            span.set_status(self._api.error)
            raise
        finally:
            self._api.context.detach(token)
            span.end()

    def uninstrument(self) -> None:
        """Remove these hooks: later enqueues and runs make no spans (idempotent)."""
        global _process_wide
        with _lock:  # first, so a concurrent instrument() never gets this one back
            if _process_wide is self:
                _process_wide = None
            removers, self._removers = self._removers, []
        for remove in removers:
            remove()


@dataclass(frozen=True)
class _Api:
    """The parts of opentelemetry-api the hooks use, looked up once."""

    propagate: Any
    context: Any
    in_context: Any
    error: Any
    producer: Any
    consumer: Any


@functools.cache
def _api() -> _Api:
    from opentelemetry import context, propagate, trace

    kinds = trace.SpanKind
    status = trace.Status(trace.StatusCode.ERROR)
    return _Api(
        propagate, context, trace.set_span_in_context, status, kinds.PRODUCER, kinds.CONSUMER
    )


def fitted(carrier: Mapping[str, str]) -> dict[str, str] | None:
    """The headers a job keeps: every one while they fit in MAX_TRACE_CONTEXT_BYTES, else
    ``traceparent`` and ``tracestate`` first and the rest (baggage) only as room allows,
    so a large baggage never fails an enqueue."""
    kept: dict[str, str] = {}
    room = MAX_TRACE_CONTEXT_BYTES
    first = [k for k in ("traceparent", "tracestate") if k in carrier]
    for key in (*first, *(k for k in carrier if k not in first)):
        value = carrier[key]
        if not isinstance(key, str) or not key or not isinstance(value, str):
            continue
        size = len(key.encode("utf-8", "replace")) + len(value.encode("utf-8", "replace"))
        if size <= room:
            kept[key] = value
            room -= size
    return kept or None


_lock = threading.Lock()
_process_wide: Instrumentation | None = None


def instrument(
    queue: JobQueue | None = None, *, tracer_provider: TracerProvider | None = None
) -> Instrumentation:
    """Trace every enqueue and run: of every queue in this process (``queue`` None; a
    second call returns the instrumentation already in place, and ``ValueError`` if it
    names another provider), or of ``queue`` alone. ``tracer_provider``: where spans go
    (None: OpenTelemetry's global provider)."""
    try:
        from opentelemetry import trace
    except ImportError:
        raise ImportError(
            "durabl.tracing needs opentelemetry-api: pip install 'durabl[otel]'"
        ) from None
    from durabl import __version__

    tracer = trace.get_tracer(SCOPE, __version__, tracer_provider=tracer_provider)
    if queue is not None:
        return Instrumentation(tracer, queue, tracer_provider)
    global _process_wide
    with _lock:
        if _process_wide is None:
            _process_wide = Instrumentation(tracer, None, tracer_provider)
        elif _process_wide.provider is not tracer_provider:
            raise ValueError(
                "durabl.tracing is already instrumented process-wide with another tracer "
                "provider; call durabl.tracing.uninstrument() first"
            )
        return _process_wide


def uninstrument() -> None:
    """Undo the process-wide :func:`instrument` (nothing when it is not in place)."""
    with _lock:
        current = _process_wide
    if current is not None:
        current.uninstrument()


def is_instrumented() -> bool:
    """Whether the process-wide :func:`instrument` is in place."""
    return _process_wide is not None
