"""``python -m durabl demo``: a few hundred jobs through a real JobQueue, with live progress.

Three job types show the main behaviours: dedupe keys (``send-email``), priorities and
delays (``resize-image``), retries with backoff, fatal errors and exhausted retries
(``sync-account``), and the reaper bringing back the job of a worker that "crashed".
"""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, TextIO

from durabl.cli.common import connect_timeout
from durabl.model.abort import JobContext
from durabl.model.exceptions import FatalJobError
from durabl.model.job import Job, JobHandle
from durabl.model.reports import JobEvent, QueueStats
from durabl.runtime.queue import JobQueue
from durabl.stores.base import Backend
from durabl.stores.mongo import MongoJobQueue
from durabl.stores.urls import backend_from_url, sqlite_path

#: The store the demo uses unless told otherwise (in-process, nothing to install or run).
DEFAULT_DEMO_URL = "sqlite:///durabl-demo.sqlite3"
DEFAULT_JOBS = 300
DEFAULT_SECONDS = 60.0

TYPES = ("send-email", "resize-image", "sync-account")
VISIBILITY_TIMEOUT = 2.0  # short, so the crashed worker's job comes back within seconds
REAPER_INTERVAL = 0.5
POLL_INTERVAL = 0.1
SHUTDOWN_TIMEOUT = 5.0
TICK = 0.2  # how often the demo checks for the end (and redraws on a terminal)
MONGO_SCHEMES = ("mongodb", "mongodb+srv", "mongomock")


# -- the handlers: tiny real work, interruptible ----------------------------------------------
def _work(ctx: JobContext, seconds: float) -> None:
    ctx.signal.wait(seconds)
    ctx.signal.raise_if_aborted()


def send_email(job: Job[Any], ctx: JobContext) -> None:
    _work(ctx, job.data["ms"] / 1000)
    ctx.log(f"sent the {job.data['template']} email to {job.data['to']}")


def resize_image(job: Job[Any], ctx: JobContext) -> None:
    _work(ctx, job.data["ms"] / 1000)
    ctx.log(f"resized {job.data['image']} to {job.data['width']}px")


def sync_account(job: Job[Any], ctx: JobContext) -> None:
    account, mode = job.data["account"], job.data["mode"]
    if job.attempts > 1:
        ctx.log(f"attempt {job.attempts} of {job.max_attempts}")
    _work(ctx, job.data["ms"] / 1000)
    if mode == "poison":
        raise FatalJobError(f"account {account} was deleted upstream") from LookupError(account)
    if mode == "broken":
        raise ConnectionError(f"the billing API refuses {account} (HTTP 503)")
    if mode == "flaky" and job.attempts <= job.data["fail_times"]:
        raise TimeoutError(f"the billing API timed out for {account}")
    ctx.log(f"synced {account}")


HANDLERS = {"send-email": send_email, "resize-image": resize_image, "sync-account": sync_account}
CONCURRENCY = {"send-email": 4, "resize-image": 2, "sync-account": 3}


# -- counting events ----------------------------------------------------------------------------
class EventCounter:
    """The queue's ``on_job_event`` sink: thread-safe tallies of "completed", "retried",
    "exhausted", "fail-fatal", "recovered" (by the reaper), "lease-lost"..."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def __call__(self, event: JobEvent) -> None:
        key, n = event.kind, 1
        if key == "failed":
            key = "exhausted" if event.terminal else "retried"
        elif key == "reaper-recovered":
            key, n = "recovered", event.handled or 0
        with self._lock:
            self._counts[key] += n

    def snapshot(self) -> Counter[str]:
        with self._lock:
            return self._counts.copy()


# -- the workload ----------------------------------------------------------------------------
def workload(total: int) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """(type, data, enqueue options) for ``total`` enqueue calls, the same on every run.

    The first sync-account job is left out: it is the crashed worker's (see ``crash``)."""
    emails, images = total // 2, total // 4
    users = max(emails * 4 // 5, 1)  # a fifth of the emails repeat a user: deduplicated
    for i in range(emails):
        user = i % users
        data = {"to": f"user{user}@example.com", "template": "welcome", "ms": 10 + i % 3 * 10}
        yield "send-email", data, {"dedupe_key": f"welcome:user{user}"}
    for i in range(images):
        width = (320, 640, 1280)[i % 3]
        options: dict[str, Any] = {"priority": i % 3}  # thumbnails first
        if i % 5 == 4:
            options["delay"] = 1.0 + i % 2
        data = {"image": f"img-{i:04d}.jpg", "width": width, "ms": 30 + i % 3 * 10}
        yield "resize-image", data, options
    for i in range(1, total - emails - images):
        mode, fail_times, opts = "ok", 0, {"backoff_delay": 0.2}
        if i % 12 in (2, 5):
            mode, fail_times = "flaky", 1 + (i % 12 == 5)
        elif i % 12 == 7:
            mode = "poison"
        elif i % 12 == 11:
            mode, opts["max_attempts"] = "broken", 2
        data = {"account": f"acct-{i:03d}", "mode": mode, "fail_times": fail_times, "ms": 20}
        yield "sync-account", data, opts


def crash(queue: JobQueue) -> JobHandle[Any]:
    """Enqueue one job and claim it as a worker that then dies: nobody heartbeats or
    completes it, so only the reaper can bring it back (after the visibility timeout)."""
    data = {"account": "acct-000", "mode": "ok", "fail_times": 0, "ms": 20}
    queue.enqueue("sync-account", data, priority=-1)
    handles = queue.backend.claim("sync-account", limit=1, lease_owner="demo-crashed-worker")
    if not handles:
        raise RuntimeError("the demo could not claim the job of its crashed worker")
    return handles[0]


# -- output --------------------------------------------------------------------------------------
class Progress:
    """One line redrawn in place on a terminal; a plain line a second otherwise; or nothing."""

    def __init__(self, out: TextIO, enabled: bool) -> None:
        self.out = out
        self.enabled = enabled
        self.tty = enabled and out.isatty()
        self.every = TICK if self.tty else 1.0
        self._last: float | None = None
        self._width = 0

    def show(
        self, counts: Counter[str], stats: QueueStats, enqueued: int, elapsed: float, *, final: bool
    ) -> None:
        if not self.enabled:
            return
        if not final and self._last is not None and elapsed - self._last < self.every - 0.01:
            return
        self._last = elapsed
        line = progress_line(counts, stats, enqueued, elapsed)
        if not self.tty:
            self.out.write(line + "\n")
        else:  # never wrap: a wrapped line cannot be redrawn with \r
            columns = shutil.get_terminal_size().columns - 1
            if len(line) > columns:
                line = progress_line(counts, stats, enqueued, elapsed, compact=True)[:columns]
            self.out.write("\r" + line.ljust(self._width) + ("\n" if final else ""))
            self._width = len(line)
        self.out.flush()


def progress_line(
    c: Counter[str], stats: QueueStats, enqueued: int, elapsed: float, *, compact: bool = False
) -> str:
    done, retried, fatal, exhausted = c["completed"], c["retried"], c["fail-fatal"], c["exhausted"]
    if compact:
        return (
            f"{elapsed:5.1f}s  enq {enqueued}  done {done}  retry {retried}  fatal {fatal}  "
            f"exh {exhausted}  reaped {c['recovered']}  pend {stats.pending}  act {stats.active}"
        )
    return (
        f"[{elapsed:5.1f}s] enqueued {enqueued}  completed {done}  retried {retried}  "
        f"failed {fatal + exhausted} ({fatal} fatal, {exhausted} exhausted)  "
        f"recovered {c['recovered']}  pending {stats.pending}  active {stats.active}"
    )


COLUMNS = (
    *("type", "pending", "active", "completed", "failed"),
    *("exhausted", "fatal", "stalled", "superseded", "lag (s)"),
)


def _row(name: str, s: QueueStats) -> list[str]:
    kinds = s.failed_by_kind
    counts = [s.pending, s.active, s.completed, s.failed]
    counts += [kinds.get(k, 0) for k in ("retries-exhausted", "fatal", "stalled")]
    return [name, *map(str, counts), str(s.superseded), f"{s.oldest_pending_lag:.1f}"]


def stats_table(per_type: Mapping[str, QueueStats], total: QueueStats) -> str:
    """Per-type stats; "exhausted", "fatal" and "stalled" break down "failed"."""
    rows = [_row(name, s) for name, s in per_type.items()]
    rows.append(_row("total", total))
    widths = [max(len(r[i]) for r in [list(COLUMNS), *rows]) for i in range(len(COLUMNS))]

    def fmt(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        return "  ".join([first, *(c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True))])

    rule = fmt(["-" * w for w in widths])
    return "\n".join([fmt(list(COLUMNS)), rule, *map(fmt, rows[:-1]), rule, fmt(rows[-1])])


def summary(calls: int, stored: int, total: QueueStats, c: Counter[str], elapsed: float) -> str:
    by_kind = total.failed_by_kind
    kinds = [f"{n} {k}" for k in ("fatal", "retries-exhausted", "stalled") if (n := by_kind.get(k))]
    failed = f"{total.failed} failed" + (f" ({', '.join(kinds)})" if kinds else "")
    lost = f", {c['lease-lost']} leases lost" if c["lease-lost"] else ""
    return (
        f"{stored} jobs enqueued, {calls - stored} deduplicated, {total.completed} completed, "
        f"{failed}, {c['retried']} retries, {c['recovered']} recovered by the reaper{lost}, "
        f"in {elapsed:.1f} s"
    )


# -- the run -------------------------------------------------------------------------------
def open_backend(url: str) -> tuple[Backend, str]:
    """The store for ``url``, on a fresh collection for MongoDB URLs (dropped at the end),
    so a run never sees the jobs of an earlier one (mongomock:// is shared in-process)."""
    scheme = url.split("://", 1)[0].lower() if "://" in url else ""
    if scheme in MONGO_SCHEMES:
        name = f"durabl_demo_{uuid.uuid4().hex[:8]}"
        store = backend_from_url(url, collection=name, connect_timeout=connect_timeout())
        return store, f"{url} (collection {name})"
    if scheme == "sqlite":
        path = Path(sqlite_path(url))
        if url == DEFAULT_DEMO_URL:  # the demo's own file: start it afresh each run
            for stale in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
                stale.unlink(missing_ok=True)
        elif path.exists():
            raise ValueError(f"the demo needs a new SQLite file; {path} already exists")
        return backend_from_url(url), f"{url} (file {path.resolve()})"
    return backend_from_url(url), url


def watch(
    queue: JobQueue,
    counter: EventCounter,
    bar: Progress,
    enqueued: int,
    started: float,
    seconds: float,
) -> str:
    """Show progress until every job is terminal ("finished") or time is up ("timeout")."""
    tick = threading.Event()
    while True:
        elapsed = time.monotonic() - started
        stats = queue.get_stats()
        finished = stats.pending == 0 and stats.active == 0
        done = finished or elapsed >= seconds
        bar.show(counter.snapshot(), stats, enqueued, elapsed, final=done)
        if done:
            return "finished" if finished else "timeout"
        tick.wait(TICK)


def run_demo(
    url: str = DEFAULT_DEMO_URL,
    *,
    jobs: int = DEFAULT_JOBS,
    seconds: float = DEFAULT_SECONDS,
    progress: bool = True,
    out: TextIO,
    err: TextIO,
) -> int:
    """Run the demo; 0 when every job ended, 1 when the time limit came first."""
    if jobs < 1 or seconds <= 0:
        raise ValueError("the demo needs jobs >= 1 and a positive time limit")
    backend, where = open_backend(url)
    counter = EventCounter()
    queue = JobQueue(backend, visibility_timeout=VISIBILITY_TIMEOUT, on_job_event=counter)
    started = time.monotonic()
    reached = False  # an unreachable store is waited for once, not again to drop the demo's data
    try:
        queue.startup()
        reached = True
        victim = crash(queue)
        stored = 1 + sum(queue.enqueue(t, d, **o) is not None for t, d, o in workload(jobs))
        header = [
            f"durabl demo on {where}",
            f"  visibility timeout {VISIBILITY_TIMEOUT:g} s, reaper every {REAPER_INTERVAL:g} s, "
            f"time limit {seconds:g} s",
            f"  enqueued {stored} jobs ({jobs - stored} more dropped: dedupe key already taken)",
            f"  a simulated worker claimed sync-account job {victim.id}, then crashed;",
            "  the reaper will hand that job back to the queue once its lease expires",
        ]
        if progress:
            print("\n".join(header), file=out, flush=True)
        for type in TYPES:
            concurrency = CONCURRENCY[type]
            queue.process(
                type, HANDLERS[type], concurrency=concurrency, poll_interval=POLL_INTERVAL
            )
        queue.start_reaper(interval=REAPER_INTERVAL)
        try:
            ending = watch(queue, counter, Progress(out, progress), stored, started, seconds)
        except KeyboardInterrupt:
            ending = "interrupted"
        queue.shutdown(SHUTDOWN_TIMEOUT)
        elapsed = time.monotonic() - started
        per_type = {type: queue.get_stats(type) for type in TYPES}
        total = queue.get_stats()  # the collection is the demo's own: every type is here
        tally = summary(jobs, stored, total, counter.snapshot(), elapsed)
        report = [*([] if progress else header), "", stats_table(per_type, total), "", tally]
        print("\n".join(report), file=out, flush=True)
        if ending == "finished":
            return 0
        why = "interrupted" if ending == "interrupted" else f"time limit of {seconds:g} s reached"
        print(f"durabl demo: {why} with {total.pending + total.active} jobs outstanding", file=err)
        return 130 if ending == "interrupted" else 1
    finally:
        queue.shutdown(SHUTDOWN_TIMEOUT)
        if reached and isinstance(backend, MongoJobQueue):
            with contextlib.suppress(Exception):  # never hide the error that got us here
                backend.drop()
        backend.close()
