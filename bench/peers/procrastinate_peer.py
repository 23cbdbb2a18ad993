"""Procrastinate on PostgreSQL, with the settings its docs recommend for throughput.

* ``PsycopgConnector``: psycopg 3 with an ``AsyncConnectionPool`` of ``workers + 2``
  connections (``min_size = max_size``: one per concurrent job, plus the fetch and the
  status writes), in the measurement's own schema (``search_path``);
* the **async** worker (``App.run_worker_async``) with ``concurrency=workers`` and an
  ``async def`` no-op task: Procrastinate's docs say not to use ``concurrency`` with
  synchronous tasks (they would run in threads through ``sync_to_async``);
* ``listen_notify=True`` (the default): a standalone connection LISTENs, and the schema's
  trigger NOTIFYs each deferred job; ``fetch_job_polling_interval`` stays at its default
  (5 s), the safety net; ``delete_jobs`` stays ``None`` (rows are kept, as durabl keeps
  them).

Each fetch is Procrastinate's ``procrastinate_fetch_job_v2`` function (a
``FOR UPDATE SKIP LOCKED`` claim, one job per call), each finish
``procrastinate_finish_job_v1``. Throughput runs the worker with ``wait=False``, which
returns once the backlog is drained. The latency producer (``produce``) is another process
that defers one job per call with the synchronous API.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from peers.common import (
    NOOP,
    Library,
    Measured,
    Processes,
    Recorder,
    Skip,
    child_env,
    latency_of,
    produce_paced,
    python_c,
    throughput_of,
    wait_until,
)
from peers.pg import POSTGRES_URL, connect, search_path_options, throwaway_schema

STARTUP_TIMEOUT = 30.0


def _app(schema: str, pool_size: int) -> Any:
    try:
        import procrastinate
    except ImportError as exc:
        raise Skip(f"procrastinate is not installed ({exc}); pip install -e '.[bench]'") from exc
    connector = procrastinate.PsycopgConnector(
        conninfo=POSTGRES_URL,
        kwargs={"options": search_path_options(schema)},
        min_size=pool_size,
        max_size=pool_size,
    )
    return procrastinate.App(connector=connector)


def _define(app: Any, record: Callable[[float, float], None]) -> Any:
    @app.task(name=NOOP)  # type: ignore[untyped-decorator,unused-ignore]
    async def noop(t: float = 0.0) -> None:
        record(t, time.time())

    return noop


def produce(schema: str, count: str, rate: str) -> None:
    """The second-process producer (``python -c``): ``task.defer(t=...)``, one
    transaction (and NOTIFY) per job, on the synchronous connector."""
    app = _app(schema, 1)
    noop = _define(app, lambda t, started: None)
    with app.open():
        produce_paced(int(count), float(rate), lambda t: noop.defer(t=t))


def _listening() -> bool:
    with connect() as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE query ILIKE 'LISTEN%procrastinate%'"
        ).fetchone()
    return int(row[0]) > 0


class Procrastinate(Library):
    name = "procrastinate"
    unit = "thread"  # async tasks: "workers" is the worker's concurrency
    polling = (
        "async worker, concurrency=workers, async no-op task; pool of workers+2 "
        "connections; listen_notify=True, fetch_job_polling_interval=5 (default)"
    )

    def version(self) -> str:
        try:
            import procrastinate  # noqa: F401
        except ImportError as exc:
            raise Skip(f"procrastinate is not installed ({exc}); pip install '.[bench]'") from exc
        connect().close()
        return version("procrastinate")

    def throughput(self, workdir: Path, jobs: int, workers: int, timeout: float) -> Measured:
        recorder = Recorder(jobs)
        with throwaway_schema("procrastinate") as schema:
            app = _app(schema, workers + 2)
            noop = _define(app, recorder.record)
            began = 0.0

            async def run() -> None:
                nonlocal began
                async with app.open_async():
                    await app.schema_manager.apply_schema_async()
                    await noop.batch_defer_async(*({"t": 0.0} for _ in range(jobs)))
                    began = time.time()
                    await asyncio.wait_for(
                        app.run_worker_async(
                            concurrency=workers, wait=False, install_signal_handlers=False
                        ),
                        timeout,
                    )

            asyncio.run(run())
            jobs_per_s, wall = throughput_of(recorder.wait(0), jobs, began)
        return Measured(jobs_per_s, wall, None, None, "", "")

    def latency(
        self, workdir: Path, count: int, rate: float, workers: int, producer: str, timeout: float
    ) -> Measured:
        recorder = Recorder(count)
        with throwaway_schema("procrastinate") as schema:
            app = _app(schema, workers + 2)
            _define(app, recorder.record)
            worker = _BackgroundWorker(
                lambda: app.run_worker_async(concurrency=workers, install_signal_handlers=False),
                app,
            )
            worker.start()
            try:
                wait_until(_listening, STARTUP_TIMEOUT, "procrastinate worker listening")
                with Processes(workdir) as procs:
                    proc = procs.start(
                        "producer",
                        python_c("procrastinate_peer", "produce", schema, str(count), str(rate)),
                        child_env(),
                    )
                    procs.finish(proc, timeout)
                p50, p99 = latency_of(recorder.wait(timeout), count)
            finally:
                worker.stop()
        return Measured(None, None, p50, p99, "", "")


class _BackgroundWorker:
    """A Procrastinate worker on an event loop of its own thread; ``stop`` cancels it,
    which Procrastinate turns into a graceful shutdown."""

    def __init__(self, run: Callable[[], Awaitable[None]], app: Any) -> None:
        self._run = run
        self._app = app
        self._loop = asyncio.new_event_loop()
        self._task: asyncio.Task[None] | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, name="procrastinate", daemon=True)
        self.error: BaseException | None = None

    def _main(self) -> None:
        async def body() -> None:
            async with self._app.open_async():
                await self._app.schema_manager.apply_schema_async()
                await self._run()

        self._task = self._loop.create_task(body())
        self._ready.set()
        try:
            self._loop.run_until_complete(self._task)
        except asyncio.CancelledError:
            pass
        except BaseException as exc:
            self.error = exc
        finally:
            self._loop.close()

    def start(self) -> None:
        self._thread.start()
        self._ready.wait(STARTUP_TIMEOUT)

    def stop(self) -> None:
        if self._task is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(STARTUP_TIMEOUT)
