"""A campaign process: ``python -m tests.chaos.proc worker|producer --url U --history F``.

``worker``: processes the workload's five job types (plain, keyed, limited, scheduled
ticks, orchestrations) on ``--threads`` threads each, with the reaper and the scheduler,
like ``durabl worker``; SIGTERM drains it. Its store object is instrumented: every claim,
renewal and fenced write is appended to the history with its result, as the process saw
it (the store is never asked). Handlers append their start and end. It logs at WARNING
(what an operator of ``durabl worker`` sees) to stderr, each line stamped with the time,
so the runner can count what it logged per fault episode.

``producer``: enqueues ``--jobs`` jobs of the workload's mix at ``--rate`` a second and
appends each acknowledged enqueue (or its error) to the history.
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from durabl import Job, JobContext, JobQueue, Orchestrator, backend_from_url
from durabl.stores.base import Backend
from tests.chaos.history import Recorder

PLAIN, KEYED, LIMITED, TICK, ORCH = "c-plain", "c-keyed", "c-limited", "c-tick", "c-orch"
TYPES = (PLAIN, KEYED, LIMITED, TICK, ORCH)
#: Each concurrency key and its one limit.
LIMITS = {"lim0": 1, "lim1": 1, "lim2": 2}
STEPS = ("reserve", "charge", "notify")
#: Attempts enough that lease losses under repeated faults never exhaust a job: a job that
#: fails here failed for another reason, which the checker reports.
MAX_ATTEMPTS = 25


class Tokens:
    """The claim token of each claim this process saw, by (job id, attempt): a handler gets
    the job, not its token."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_claim: dict[tuple[str, int], str] = {}

    def put(self, job_id: str, attempt: int, token: str) -> None:
        with self._lock:
            self._by_claim[(job_id, attempt)] = token

    def get(self, job_id: str, attempt: int) -> str | None:
        with self._lock:
            return self._by_claim.get((job_id, attempt))


def _job_and_token(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[str, str]:
    job_id = kwargs.get("job_id", args[0] if args else "")
    token = kwargs.get("token", args[1] if len(args) > 1 else "")
    return str(job_id), str(token)


def _status(result: object) -> str:
    return str(getattr(result, "status", result))


def instrument(backend: Backend, rec: Recorder, tokens: Tokens) -> None:
    """Record every claim, renewal and fenced write ``backend`` makes, with its result."""
    claim = backend.claim

    def claim_recorded(type: str, **options: Any) -> Any:
        t0 = time.time()
        handles = claim(type, **options)
        t1 = time.time()
        for handle in handles:
            tokens.put(handle.id, handle.attempts, handle.claim_token)
            rec.write(
                "claim",
                job=handle.id,
                tok=handle.claim_token,
                att=handle.attempts,
                type=type,
                run_at=handle.run_at.timestamp(),
                t0=t0,
                t1=t1,
            )
        return handles

    def fenced(op: str, write: Callable[..., Any]) -> Callable[..., Any]:
        def recorded(*args: Any, **kwargs: Any) -> Any:
            job_id, token = _job_and_token(args, kwargs)
            steps: list[int] = []
            if op == "journal":
                records = kwargs.get("records", args[2] if len(args) > 2 else ())
                steps = [int(r["seq"]) for r in records if r.get("kind") == "step"]
            t0 = time.time()
            try:
                result = write(*args, **kwargs)
            except BaseException:
                event = "beat" if op == "beat" else "write"
                rec.write(event, op=op, job=job_id, tok=token, r="error", t0=t0, t1=time.time())
                raise
            t1 = time.time()
            if op == "beat":
                rec.write("beat", job=job_id, tok=token, r=_status(result), t0=t0, t1=t1)
            else:
                rec.write(
                    "write",
                    op=op,
                    job=job_id,
                    tok=token,
                    r=_status(result),
                    t0=t0,
                    t1=t1,
                    steps=steps,
                )
            return result

        return recorded

    complete_many = backend.complete_many

    def complete_many_recorded(completions: Any) -> Any:
        t0 = time.time()
        try:
            results = complete_many(completions)
        except BaseException:
            t1 = time.time()
            for c in completions:
                rec.write(
                    "write", op="complete", job=c.job_id, tok=c.token, r="error", t0=t0, t1=t1
                )
            raise
        t1 = time.time()
        for c, result in zip(completions, results, strict=False):
            rec.write(
                "write", op="complete", job=c.job_id, tok=c.token, r=_status(result), t0=t0, t1=t1
            )
        return results

    patch: dict[str, Any] = {
        "claim": claim_recorded,
        "complete_many": complete_many_recorded,
        "heartbeat": fenced("beat", backend.heartbeat),
        "complete": fenced("complete", backend.complete),
        "fail": fenced("fail", backend.fail),
        "fail_fatal": fenced("fail-fatal", backend.fail_fatal),
        "release": fenced("release", backend.release),
        "append_journal": fenced("journal", backend.append_journal),
    }
    for name, method in patch.items():
        setattr(backend, name, method)


def worker(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=logging.WARNING,
        stream=sys.stderr,
        format="%(created).3f %(levelname)s %(name)s: %(message)s",
    )
    rec = Recorder(args.history, os.getpid())
    tokens = Tokens()
    backend = backend_from_url(args.url)
    instrument(backend, rec, tokens)
    queue = JobQueue(backend, visibility_timeout=args.visibility_timeout)
    rng = random.Random()

    def started(job: Job[Any]) -> str | None:
        token = tokens.get(job.id, job.attempts)
        data = job.data if isinstance(job.data, dict) else {}
        rec.write(
            "start",
            job=job.id,
            tok=token,
            att=job.attempts,
            type=job.type,
            ckey=data.get("ckey"),
            limit=data.get("limit"),
            t=time.time(),
        )
        return token

    def ended(job: Job[Any], token: str | None, outcome: str) -> None:
        rec.write("end", job=job.id, tok=token, att=job.attempts, outcome=outcome, t=time.time())

    def handler(job: Job[Any], ctx: JobContext) -> None:
        token = started(job)
        long = rng.random() < args.long_share  # spans renewals, and faults catch it
        aborted = ctx.signal.wait(rng.uniform(1.0, 3.0) if long else rng.uniform(0, args.work))
        ended(job, token, "aborted" if aborted else "returned")
        ctx.signal.raise_if_aborted()

    orch = Orchestrator(queue)

    def body(job: Job[Any], octx: Any) -> None:
        token = tokens.get(job.id, job.attempts)
        for name in STEPS:

            def step(keys: Any, signal: Any, name: str = name) -> str:
                t0 = time.time()
                signal.wait(rng.uniform(0, args.work / 2))
                rec.write(
                    "step", job=job.id, tok=token, seq=keys.seq, name=name, t0=t0, t1=time.time()
                )
                return name

            octx.step(name, step)

    def around_orchestration(job: Job[Any], proceed: Callable[[], object]) -> object:
        if job.type != ORCH:  # the other handlers record their own start and end
            return proceed()
        token = started(job)
        try:
            value = proceed()
        except BaseException:
            ended(job, token, "raised")
            raise
        ended(job, token, "returned")
        return value

    queue.add_run_hook(around_orchestration)
    for type in (PLAIN, KEYED, LIMITED, TICK):
        queue.process(type, handler, concurrency=args.threads, poll_interval=0.5)
    orch.define(ORCH, body, concurrency=args.threads, poll_interval=0.5)
    queue.start_reaper(interval=0.5)
    if args.schedule_every:
        queue.schedule(
            TICK, TICK, every=args.schedule_every, catch_up="all", max_attempts=MAX_ATTEMPTS
        )
        queue.start_scheduler()
    queue.install_signal_handlers(timeout=args.shutdown_timeout)
    print("ready", flush=True)
    while queue.draining is None:
        threading.Event().wait(0.05)
    queue.draining.result()
    backend.close()
    print("drained", flush=True)
    return 0


def producer(args: argparse.Namespace) -> int:
    rec = Recorder(args.history, os.getpid())
    queue = JobQueue(backend_from_url(args.url))
    rng = random.Random(args.seed)
    began = time.monotonic()
    for n in range(args.jobs):
        if args.stop_file and os.path.exists(args.stop_file):
            break
        ahead = began + n / args.rate - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)  # paced, so work keeps arriving while the faults happen
        draw = rng.random()
        options: dict[str, Any] = {"max_attempts": MAX_ATTEMPTS}
        data: dict[str, Any] = {"n": n}
        key = None
        if draw < 0.4:
            type = PLAIN
        elif draw < 0.65:
            type = KEYED
            key = f"k{rng.randrange(args.keys)}"
            options.update(dedupe_key=key, dedupe_scope="pending+active")
        elif draw < 0.85:
            type = LIMITED
            ckey = rng.choice(sorted(LIMITS))
            data.update(ckey=ckey, limit=LIMITS[ckey])
            options.update(concurrency_key=ckey, concurrency_limit=LIMITS[ckey])
        else:
            type = ORCH
        t0 = time.time()
        try:
            job_id = queue.enqueue(type, data, **options)
        except Exception as exc:  # an application carries on; the job may exist or not
            rec.write(
                "enqueue-error", type=type, key=key, error=repr(exc)[:200], t0=t0, t1=time.time()
            )
            time.sleep(0.1)
            continue
        rec.write("enqueue", job=job_id, type=type, key=key, t0=t0, t1=time.time())
    rec.write("produced", t=time.time())
    queue.backend.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["worker", "producer"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--history", required=True)
    parser.add_argument("--visibility-timeout", type=float, default=2.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=float, default=0.05, help="most seconds a handler takes")
    parser.add_argument("--long-share", type=float, default=0.1, help="of runs taking 1-3 s")
    parser.add_argument("--schedule-every", type=float, default=0.0)
    parser.add_argument("--shutdown-timeout", type=float, default=1.0)
    parser.add_argument("--jobs", type=int, default=100, help="at most this many")
    parser.add_argument("--stop-file", default="", help="stop producing once this file exists")
    parser.add_argument("--rate", type=float, default=20.0, help="enqueues per second")
    parser.add_argument("--keys", type=int, default=6)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    return worker(args) if args.role == "worker" else producer(args)


if __name__ == "__main__":
    sys.exit(main())
