"""Where a traced run's time goes: the OpenTelemetry pieces of durabl's CONSUMER span, each
timed alone with ``timeit``, and durabl's whole run hook around a handler that does nothing.

Times, per call, in microseconds (best of ``--repeat`` rounds of ``--number`` calls):

* ``extract``: the stored W3C context read back through the global propagator;
* ``span, recorded`` / ``span, dropped``: an SDK span with durabl's six attributes started
  and ended, under a sampler that records it / drops it (its parent not sampled);
* ``span, recorded, no attributes``: the same without them (what the SDK's checks of
  the attributes cost);
* ``attach + detach``: making the span current around the handler;
* ``run hook, recorded`` / ``dropped`` / ``API only``: ``durabl.tracing``'s run hook with
  its job, end to end, into an SDK provider (spans dropped by the exporter) or into
  OpenTelemetry's no-op provider;
* ``enqueue hook, recorded`` / ``API only``: its enqueue hook (a PRODUCER span, the
  context injected and kept on the job) around a store that does nothing.

Run: ``.venv/bin/python bench/tracing_parts.py [--number N] [--repeat R]`` (needs
``durabl[otel]`` and ``opentelemetry-sdk``: ``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import sys
import timeit
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
for entry in (ROOT, ROOT / "bench"):
    if str(entry) not in sys.path:
        sys.path.insert(0, str(entry))

from metrics_cost import dropping_provider  # noqa: E402

from durabl import Job, JobQueue, MemoryBackend, NewJob  # noqa: E402

SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
NOT_SAMPLED = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00"


def job(traceparent: str | None) -> Job[Any]:
    now = datetime.now(timezone.utc)
    return Job(
        id="0af7651916cd43dd8448eb211c80319c",
        type="noop",
        data={},
        status="active",
        attempts=1,
        max_attempts=3,
        run_at=now,
        created_at=now,
        updated_at=now,
        trace_context=None if traceparent is None else {"traceparent": traceparent},
    )


def new_job() -> NewJob:
    """A checked enqueue request, as a queue hands it to its enqueue hooks."""
    queue = JobQueue(MemoryBackend())
    seen: list[NewJob] = []

    def keep(new: NewJob, proceed: Callable[[NewJob], str | None]) -> str | None:
        seen.append(new)
        return proceed(new)

    queue.add_enqueue_hook(keep)
    queue.enqueue("noop", {})
    return seen[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    try:
        from opentelemetry import context, propagate, trace
    except ImportError:
        print("needs durabl[otel] and opentelemetry-sdk: pip install -e '.[bench]'")
        return 1
    from durabl import tracing

    sdk = dropping_provider()  # parent-based, every trace: a sampled parent's child is recorded
    tracer = sdk.get_tracer("durabl")
    sampled, dropped = (
        propagate.extract({"traceparent": SAMPLED}),
        propagate.extract({"traceparent": NOT_SAMPLED}),
    )
    attributes = {
        "messaging.system": "durabl",
        "messaging.destination.name": "noop",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.message.id": "0af7651916cd43dd8448eb211c80319c",
        "durabl.attempt": 1,
    }
    consumer = trace.SpanKind.CONSUMER
    current = tracer.start_span("current")

    def span(parent: Any, attrs: dict[str, Any] | None) -> Callable[[], None]:
        def once() -> None:
            tracer.start_span("noop process", context=parent, kind=consumer, attributes=attrs).end()

        return once

    def attach() -> None:
        context.detach(context.attach(trace.set_span_in_context(current)))

    def hook(provider: Any, traceparent: str | None) -> Callable[[], object]:
        instrumentation = tracing.Instrumentation(
            trace.get_tracer("durabl", tracer_provider=provider), queue=None, provider=provider
        )
        instrumentation.uninstrument()  # its hooks off every queue: timed here alone
        the_job = job(traceparent)
        return lambda: instrumentation.run_hook(the_job, lambda: None)

    def enqueue(provider: Any) -> Callable[[], object]:
        instrumentation = tracing.Instrumentation(
            trace.get_tracer("durabl", tracer_provider=provider), queue=None, provider=provider
        )
        instrumentation.uninstrument()
        request = new_job()
        return lambda: instrumentation.enqueue_hook(request, lambda stored: "id")

    parts: list[tuple[str, Callable[[], object]]] = [
        ("extract", lambda: propagate.extract({"traceparent": SAMPLED})),
        ("span, recorded", span(sampled, attributes)),
        ("span, recorded, no attributes", span(sampled, None)),
        ("span, dropped", span(dropped, attributes)),
        ("attach + detach", attach),
        ("run hook, recorded", hook(sdk, SAMPLED)),
        ("run hook, dropped", hook(sdk, NOT_SAMPLED)),
        ("run hook, API only", hook(trace.NoOpTracerProvider(), None)),
        ("enqueue hook, recorded", enqueue(sdk)),
        ("enqueue hook, API only", enqueue(trace.NoOpTracerProvider())),
    ]
    print(f"microseconds per call, best of {args.repeat} x {args.number} calls")
    for name, call in parts:
        best = min(timeit.repeat(call, number=args.number, repeat=args.repeat))
        print(f"  {name:<32} {best / args.number * 1e6:6.1f}")
    sdk.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
