"""Huey on a SQLite file: ``SqliteHuey(filename=path)`` and its consumer with thread workers,
run in this process (``Consumer(huey, workers=N, worker_type="thread")``).

Huey's SQLite storage dequeues with one write transaction that selects the next task and
deletes its row; nothing is written when a task returns ``None`` (``store_none=False``).
Its workers poll each on their own: ``initial_delay`` 0.1 s by default, multiplied by
``backoff`` 1.15 on every empty poll up to ``max_delay`` 10 s (huey/consumer_options.py).
Here every worker polls every ``POLL_INTERVAL`` (initial_delay = max_delay = 0.05 s,
backoff = 1.0), like durabl's ``poll_interval``.

``synchronous``: SqliteStorage only offers ``fsync=True`` (FULL) or ``fsync=False`` (OFF);
left alone (``fsync=None``) the connection keeps SQLite's default. The ``NORMAL`` variant
sets ``PRAGMA synchronous = NORMAL`` on each connection Huey opens, through a subclass of
``SqliteStorage``, to compare like with like.
"""

from __future__ import annotations

import signal
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from peers.common import (
    IN_PROCESS,
    NOOP,
    POLL_INTERVAL,
    Library,
    Measured,
    Processes,
    Recorder,
    Skip,
    child_env,
    file_journal_mode,
    latency_of,
    produce_paced,
    python_c,
    synchronous_name,
    throughput_of,
)

if TYPE_CHECKING:
    from huey import Huey

SHUTDOWN_TIMEOUT = 10.0
DB_FILE = "huey.db"
_SIGNALS = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)


def make_huey(path: Path | str, synchronous: str | None) -> Huey:
    try:
        from huey import SqliteHuey
        from huey.storage import SqliteStorage
    except ImportError as exc:
        raise Skip(f"huey is not installed ({exc}); pip install -e '.[bench]'") from exc
    if synchronous is None:
        return SqliteHuey(name="bench", filename=str(path))
    pragma = f"PRAGMA synchronous = {synchronous}"

    class Storage(SqliteStorage):  # type: ignore[misc]
        def _create_connection(self) -> sqlite3.Connection:
            conn: sqlite3.Connection = super()._create_connection()
            conn.execute(pragma)
            return conn

    return SqliteHuey(name="bench", filename=str(path), storage_class=Storage)


def register(huey: Huey, run: Callable[[float], None]) -> Callable[..., Any]:
    """The no-op task, under a fixed name so that a producer process can enqueue it."""
    task: Callable[..., Any] = huey.task(name=NOOP)(run)
    return task


def produce(path: str, synchronous: str, count: str, rate: str) -> None:
    """The second-process producer (``python -c``): same file, same task name."""
    huey = make_huey(path, synchronous or None)
    task = register(huey, lambda enqueued_at: None)
    produce_paced(int(count), float(rate), task)


@contextmanager
def consumer(huey: Huey, workers: int) -> Iterator[None]:
    """Huey's consumer with thread workers, in this process. ``start()`` installs signal
    handlers (main thread only); the old ones come back afterwards."""
    from huey.consumer import Consumer

    saved = {sig: signal.getsignal(sig) for sig in _SIGNALS}
    running = Consumer(
        huey,
        workers=workers,
        worker_type="thread",
        initial_delay=POLL_INTERVAL,
        backoff=1.0,
        max_delay=POLL_INTERVAL,
        shutdown_timeout=SHUTDOWN_TIMEOUT,
    )
    try:
        running.start()
        yield
    finally:
        running.stop(graceful=True)
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        huey.storage.close()


def _synchronous(huey: Huey) -> str:
    """Read on a connection Huey opened itself (this thread's)."""
    return synchronous_name(huey.storage.sql("PRAGMA synchronous", results=True)[0][0])


class HueyLibrary(Library):
    unit = "thread"
    polling = (
        f"initial_delay=max_delay={POLL_INTERVAL:g}s, backoff=1.0 (defaults 0.1s, x1.15, "
        "10s): each worker thread polls on its own"
    )

    def __init__(self, synchronous: str | None = None) -> None:
        self.synchronous = synchronous
        self.name = "huey" if synchronous is None else f"huey (sync {synchronous})"

    def version(self) -> str:
        try:
            import huey
        except ImportError as exc:
            raise Skip(f"huey is not installed ({exc}); pip install -e '.[bench]'") from exc
        return str(huey.__version__)

    def throughput(self, workdir: Path, jobs: int, workers: int, timeout: float) -> Measured:
        path = workdir / DB_FILE
        huey = make_huey(path, self.synchronous)
        recorder = Recorder(jobs)
        task = register(huey, lambda enqueued_at: recorder.record(0.0, time.time()))
        for _ in range(jobs):
            task(0.0)
        synchronous = _synchronous(huey)
        began = time.time()
        with consumer(huey, workers):
            jobs_per_s, wall = throughput_of(recorder.wait(timeout), jobs, began)
        left = len(huey)  # pending tasks: dequeuing deleted the rows
        if left:
            raise RuntimeError(f"{left} tasks still queued after all handlers ran")
        huey.storage.close()
        return Measured(jobs_per_s, wall, None, None, file_journal_mode(path), synchronous)

    def latency(
        self, workdir: Path, count: int, rate: float, workers: int, producer: str, timeout: float
    ) -> Measured:
        path = workdir / DB_FILE
        huey = make_huey(path, self.synchronous)
        recorder = Recorder(count)
        task = register(huey, lambda enqueued_at: recorder.record(enqueued_at, time.time()))
        synchronous = _synchronous(huey)  # also creates the tables before any producer
        with consumer(huey, workers):
            if producer == IN_PROCESS:
                produce_paced(count, rate, task)
            else:
                with Processes(workdir) as procs:
                    args = (str(path), self.synchronous or "", str(count), str(rate))
                    proc = procs.start(
                        "producer", python_c("huey_peer", "produce", *args), child_env()
                    )
                    procs.finish(proc, timeout)
            p50, p99 = latency_of(recorder.wait(timeout), count)
        return Measured(None, None, p50, p99, file_journal_mode(path), synchronous)
