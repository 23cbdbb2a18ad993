"""Runs the blocks of :mod:`tests.docs.snippets` as a reader would, and cleans up after them.

A :class:`PageRun` is one group of blocks (a block and those that continue it): one
namespace (a module of its own, so pydantic and dataclasses find it), one temporary
working directory on ``sys.path``, and the process-wide state durabl keeps (declared types
and schedules, the global queue, process-wide hooks, tracing) put back as it was when the
run closes. Closing also shuts down every queue the blocks left behind and closes their
stores and clients, as the end of the reader's process would.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import types
import uuid
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

from durabl import JobQueue
from durabl.testing import wait_until
from tests.docs.snippets import ROOT, STORES, Block

#: Seconds a program block may take to be ready (handle SIGTERM), then to exit after it.
PROCESS_TIMEOUT = 60.0
#: Seconds each queue a run leaves behind gets to shut down.
SHUTDOWN_TIMEOUT = 5.0
_SERIAL = itertools.count(1)


@dataclass
class DurablState:
    """The process-wide state of durabl that a block may change, to put it back."""

    declared: dict[str, Any]
    schedules: dict[str, Any]
    global_state: Any
    scoped: bool
    run_hooks: tuple[Any, ...]
    enqueue_hooks: tuple[Any, ...]
    traced: bool
    collectors: set[object]

    @classmethod
    def capture(cls) -> DurablState:
        from durabl import tracing
        from durabl.runtime import globals as global_queue
        from durabl.runtime import hooks, scheduler
        from durabl.runtime.declared import registry

        return cls(
            declared=dict(registry._declared),
            schedules=dict(scheduler._declared),
            global_state=global_queue._state,
            scoped=global_queue._scoped,
            run_hooks=hooks.process_run_hooks.own,
            enqueue_hooks=hooks.process_enqueue_hooks.own,
            traced=tracing.is_instrumented(),
            collectors=_default_collectors(),
        )

    @staticmethod
    def start_clean() -> None:
        """Forget the job types and schedules declared so far in this process (by other
        tests, say), as a reader's process starts with none; :meth:`restore` brings them
        back."""
        from durabl.runtime import scheduler
        from durabl.runtime.declared import registry

        with registry._lock:
            registry._declared = {}
        with scheduler._declared_lock:
            scheduler._declared.clear()

    def restore(self) -> list[JobQueue]:
        """Put the state back; returns the global queue a block built, to shut down."""
        from durabl import tracing
        from durabl.runtime import globals as global_queue
        from durabl.runtime import hooks, scheduler
        from durabl.runtime.declared import registry

        built = global_queue._state.queue
        left = [built] if built is not None and built is not self.global_state.queue else []
        with registry._lock:
            registry._declared = dict(self.declared)
        with scheduler._declared_lock:
            scheduler._declared.clear()
            scheduler._declared.update(self.schedules)
        with global_queue._lock:
            global_queue._state = self.global_state
            global_queue._scoped = self.scoped
        hooks.process_run_hooks.own = self.run_hooks
        hooks.process_enqueue_hooks.own = self.enqueue_hooks
        if tracing.is_instrumented() and not self.traced:
            tracing.uninstrument()
        for collector in _default_collectors() - self.collectors:  # metrics.install(queue)
            sys.modules["prometheus_client"].REGISTRY.unregister(collector)
        return left


def _default_collectors() -> set[object]:
    """What prometheus_client's default registry holds (nothing before its import)."""
    client = sys.modules.get("prometheus_client")
    return set() if client is None else set(client.REGISTRY._collector_to_names)


class PageRun:
    """One group of blocks, run in order in one namespace and working directory."""

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="durabl-snippet-"))
        self.module = types.ModuleType(f"durabl_snippet_{next(_SERIAL)}")
        self.namespace: dict[str, Any] = self.module.__dict__
        self.next = 0  # index in the group of the next block to run
        self._state = DurablState.capture()
        self._state.start_clean()  # as in the reader's own process: nothing declared yet
        self._bytecode = sys.dont_write_bytecode
        self._imported: list[str] = []
        self._databases: list[str] = []  # MongoDB databases handed to the blocks
        self._schemas: list[str] = []
        self._queues: weakref.WeakSet[JobQueue] = weakref.WeakSet()
        sys.modules[self.module.__name__] = self.module
        sys.path.insert(0, str(self.workdir))
        sys.dont_write_bytecode = True  # a file block rewritten within a second is re-read

    # -- running -------------------------------------------------------------------------

    def run(self, block: Block) -> None:
        """Run ``block`` as its markers say (a skipped one is not run)."""
        self.next += 1
        if block.skip is not None:
            return
        importlib.invalidate_caches()  # files an earlier block or given code wrote
        with self._environment(block), self._tracking_queues():
            if "django" in block.needs:
                self._run_django(block)
            elif block.process:
                self._run_process(block)
            elif block.file is not None:
                self._run_file(block)
            else:
                self._run_code(block)

    def _run_code(self, block: Block) -> None:
        before = dict(self.namespace)
        for given in block.given:
            exec(compile(given, f"<given of {block.id}>", "exec"), self.namespace)
        exec(compile(block.source(), str(block.page), "exec"), self.namespace)
        for name, value in list(self.namespace.items()):
            if (
                name.startswith("test")
                and inspect.isfunction(value)
                and before.get(name) is not value
            ):
                with contextlib.ExitStack() as finalizers:
                    value(**self._arguments(block, value, finalizers))

    def _arguments(
        self, block: Block, function: Any, finalizers: contextlib.ExitStack
    ) -> dict[str, Any]:
        """The fixtures a test function (or a fixture) asks for: ``tmp_path``,
        ``monkeypatch``, or a ``@pytest.fixture`` of the namespace (a generator one is
        finished after the test)."""
        arguments: dict[str, Any] = {}
        for name in inspect.signature(function).parameters:
            if name == "tmp_path":
                arguments[name] = Path(tempfile.mkdtemp(dir=self.workdir))
            elif name == "monkeypatch":
                arguments[name] = finalizers.enter_context(pytest.MonkeyPatch.context())
            elif type(self.namespace.get(name)).__name__ == "FixtureFunctionDefinition":
                fixture = self.namespace[name].__wrapped__
                value = fixture(**self._arguments(block, fixture, finalizers))
                if inspect.isgenerator(value):
                    finalizers.callback(next, value, None)
                    value = next(value)
                arguments[name] = value
            else:
                raise AssertionError(f"{block.id}: {function.__name__} asks for {name!r}")
        return arguments

    def _write_file(self, block: Block) -> str:
        """Write a file block to its path; returns its module's name."""
        assert block.file is not None and block.file.endswith(".py"), block.id
        assert not block.given, f"{block.id}: a file block takes no given code"
        path = self.workdir / block.file
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block.code, encoding="utf-8")
        return block.file[: -len(".py")].replace("/", ".")

    def _run_file(self, block: Block) -> None:
        name = self._write_file(block)
        sys.modules.pop(name, None)
        importlib.invalidate_caches()
        importlib.import_module(name)
        self._imported.append(name)

    def _run_django(self, block: Block) -> None:
        """A block of a Django project, in a process of its own (tests.docs.django_driver):
        Django set up in the working directory, its database migrated, then the block."""
        assert not block.process, f"{block.id}: a Django block is not a program"
        module = None if block.file is None else self._write_file(block)
        spec = self.workdir / f"snippet_{block.line}.json"
        fields = {"id": block.id, "page": str(block.page), "source": block.source()}
        spec.write_text(json.dumps({**fields, "given": block.given, "module": module}))
        path = [str(self.workdir), str(ROOT), os.environ.get("PYTHONPATH", "")]
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.docs.django_project",
            "PYTHONPATH": os.pathsep.join(filter(None, path)),
        }
        result = subprocess.run(
            [sys.executable, "-m", "tests.docs.django_driver", str(spec)],
            check=False,
            cwd=self.workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=PROCESS_TIMEOUT,
        )
        assert result.returncode == 0, (
            f"{block.id}: exit status {result.returncode}:\n{result.stdout}"
        )

    def _run_process(self, block: Block) -> None:
        """A program that runs until stopped: wait until it handles SIGTERM (and printed
        what the marker says), send SIGTERM, expect exit status 0."""
        assert not block.given, f"{block.id}: a program block takes no given code"
        script = self.workdir / (block.file or f"snippet_{block.line}.py")
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(block.code, encoding="utf-8")
        path = os.pathsep.join(filter(None, [str(self.workdir), os.environ.get("PYTHONPATH")]))
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}
        process = subprocess.Popen(
            [sys.executable, str(script)],
            cwd=self.workdir,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        output: list[str] = []
        reader = threading.Thread(target=lambda: output.extend(process.stdout or ()), daemon=True)
        reader.start()

        def ready() -> bool:
            printed = block.prints is None or block.prints in "".join(output)
            return process.poll() is not None or (printed and _handles_sigterm(process.pid))

        try:
            if not wait_until(ready, timeout=PROCESS_TIMEOUT) or process.poll() is not None:
                what = "did not get ready" if process.poll() is None else "exited"
                pytest.fail(f"{block.id}: the program {what} before SIGTERM:\n{''.join(output)}")
            process.send_signal(signal.SIGTERM)
            status = process.wait(timeout=PROCESS_TIMEOUT)
        finally:
            if process.poll() is None:
                process.kill()
            process.wait()
            reader.join(timeout=PROCESS_TIMEOUT)
            if process.stdout is not None:
                process.stdout.close()
        assert status == 0, f"{block.id}: exit status {status} after SIGTERM:\n{''.join(output)}"

    # -- the environment of one block ----------------------------------------------------

    @contextlib.contextmanager
    def _tracking_queues(self) -> Iterator[None]:
        """Remember every JobQueue made while a block runs, to shut it down at the end
        (also one the block no longer names: a variable reassigned, a function's local)."""
        original = JobQueue.__init__
        queues = self._queues

        @functools.wraps(original)
        def init(queue: JobQueue, *args: Any, **kwargs: Any) -> None:
            original(queue, *args, **kwargs)
            queues.add(queue)

        JobQueue.__init__ = init  # type: ignore[method-assign,assignment]
        try:
            yield
        finally:
            JobQueue.__init__ = original  # type: ignore[method-assign]

    @contextlib.contextmanager
    def _environment(self, block: Block) -> Iterator[None]:
        """The working directory, and DURABL_URL/MONGO_URL set by ``needs`` or unset; the
        environment is put back afterwards (given code may set a variable the block reads)."""
        saved = dict(os.environ)
        cwd = os.getcwd()
        for name in ("DURABL_URL", "MONGO_URL"):
            os.environ.pop(name, None)
        for store in filter(STORES.__contains__, block.needs):
            os.environ.update(self._mongo() if store == "mongodb" else self._postgres())
        os.chdir(self.workdir)
        try:
            yield
        finally:
            os.chdir(cwd)
            for name in set(os.environ) - set(saved):
                del os.environ[name]
            os.environ.update(saved)

    def _mongo(self) -> dict[str, str]:
        from tests.conftest import require_mongo

        url = require_mongo()
        parts = urlsplit(url)
        database = f"snippet_{uuid.uuid4().hex[:8]}"
        self._databases.append(database)
        return {"MONGO_URL": url, "DURABL_URL": urlunsplit(parts._replace(path="/" + database))}

    def _postgres(self) -> dict[str, str]:
        import psycopg
        from psycopg import sql

        from tests.conftest import require_postgres

        url = require_postgres()
        schema = f"snippet_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        self._schemas.append(schema)
        option = "options=" + quote(f"-csearch_path={schema}")
        return {"DURABL_URL": url + ("&" if "?" in url else "?") + option}

    # -- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Stop what the blocks left running, put durabl's state back, drop what they made."""
        scopes = [self.namespace] + [
            vars(sys.modules[name]) for name in self._imported if name in sys.modules
        ]
        objects = [value for scope in scopes for value in list(scope.values())]
        queues = list({id(q): q for q in [*self._queues, *self._state.restore()]}.values())
        for queue in queues:
            queue.shutdown(timeout=SHUTDOWN_TIMEOUT)
        resources = {id(value): value for value in [q.backend for q in queues] + objects}
        for store in list(resources.values()):
            if type(store).__name__ == "MongoJobQueue":  # the client it was given
                resources[id(store.db.client)] = store.db.client
        for resource in resources.values():
            if _is_closable(resource):
                resource.close()
        sys.dont_write_bytecode = self._bytecode
        with contextlib.suppress(ValueError):
            sys.path.remove(str(self.workdir))
        for name, module in list(sys.modules.items()):
            origins = [getattr(module, "__file__", None) or "", *getattr(module, "__path__", [])]
            if module is self.module or any(o.startswith(str(self.workdir)) for o in origins):
                del sys.modules[name]
        self._drop_databases()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def _drop_databases(self) -> None:
        # Only the databases this run named: the server is shared with other tests, and
        # under xdist with other workers, whose databases appear and go meanwhile.
        if self._databases:
            from pymongo import MongoClient

            from tests.conftest import require_mongo

            client: MongoClient[dict[str, Any]]
            with MongoClient(require_mongo()) as client:
                for name in self._databases:
                    client.drop_database(name)
        if self._schemas:
            import psycopg
            from psycopg import sql

            from tests.conftest import postgres_url

            drop = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
            with psycopg.connect(postgres_url(), autocommit=True) as conn:
                for schema in self._schemas:
                    conn.execute(drop.format(sql.Identifier(schema)))


_CLIENTS = {"MongoClient": "pymongo", "ConnectionPool": "psycopg_pool", "Connection": "psycopg"}


def _is_closable(value: object) -> bool:
    """A store, a MongoDB client or a PostgreSQL pool or connection a block left open.
    (Looked up on the class: a pymongo ``Database`` answers any attribute name.)"""
    kind = type(value)
    if kind.__module__.startswith("durabl.stores."):
        return hasattr(kind, "close")
    return _CLIENTS.get(kind.__name__) == kind.__module__.split(".")[0]


def _handles_sigterm(pid: int) -> bool:
    """Whether process ``pid`` has a handler for SIGTERM (Linux: ``SigCgt`` in /proc)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next(line for line in status.splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) >> (signal.SIGTERM - 1) & 1)
