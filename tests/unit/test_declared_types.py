"""``@durabl.job``: the process-wide registry, the decorator's checks, ``.enqueue`` on the
default queue, ``process_declared``, and the old ``durabl.job`` module still importing."""

from __future__ import annotations

import importlib
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

import durabl
from durabl import DeclaredJob, Job, JobContext, MemoryBackend, global_queue
from durabl.runtime.declared import registry


@pytest.fixture
def declared() -> Iterator[list[str]]:
    names: list[str] = []
    yield names
    for name in names:
        registry.remove(name)


def handle(job: Job[Any], ctx: JobContext) -> str:
    return f"handled {job.id}"


def test_declaring_needs_no_queue_and_starts_nothing(declared: list[str]) -> None:
    declared.append("u-welcome")
    welcome = durabl.job("u-welcome", concurrency=4, max_attempts=5)(handle)
    assert isinstance(welcome, DeclaredJob)
    assert welcome.type == "u-welcome"
    assert (getattr(welcome, "__name__", None), getattr(welcome, "__wrapped__", None)) == (
        "handle",
        handle,
    )
    assert "u-welcome" in durabl.declared_types()
    assert welcome.declaration.concurrency == 4
    assert welcome.declaration.options.defaults == {"max_attempts": 5}


def test_the_declared_function_is_still_the_handler(declared: list[str]) -> None:
    declared.append("u-call")
    welcome = durabl.job("u-call")(handle)
    job: Any = type("FakeJob", (), {"id": "j1"})()
    assert welcome(job, None) == "handled j1"  # type: ignore[arg-type]


def test_the_same_function_declared_again_is_kept_another_one_raises(
    declared: list[str],
) -> None:
    declared.append("u-twice")
    durabl.job("u-twice")(handle)
    durabl.job("u-twice", concurrency=2)(handle)  # a module imported again
    assert registry.get("u-twice") is not None
    with pytest.raises(ValueError, match=r"already declared by .*handle"):
        durabl.job("u-twice")(lambda job, ctx: None)


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [
        ({"concurrency": 0}, ValueError, "concurrency"),
        ({"poll_interval": 0}, ValueError, "poll_interval"),
        ({"max_attempts": 0}, ValueError, "max_attempts"),
        ({"dedupe_scope": "everything"}, ValueError, "dedupe_scope"),
        ({"backoff": "linear"}, ValueError, "backoff"),
        ({"on_dead_letter": "alert"}, TypeError, "on_dead_letter"),
        ({"schema": type("NotAModel", (), {})}, TypeError, "schema="),
        ({"concurrency_key": 5}, TypeError, "concurrency_key"),
        ({"concurrency_limit": 0}, ValueError, "concurrency_limit"),
        ({"rate_limit": (0, 60)}, ValueError, "rate_limit"),
        ({"rate_limit": (10, -1)}, ValueError, "rate_limit"),
    ],
)
def test_a_bad_option_raises_at_the_decorator(
    options: dict[str, Any], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        durabl.job("u-bad", **options)
    assert "u-bad" not in durabl.declared_types()


def test_decorating_something_not_callable_raises() -> None:
    with pytest.raises(TypeError, match="callable"):
        durabl.job("u-not-callable")(42)  # type: ignore[arg-type]


def test_enqueue_goes_to_the_default_queue_with_the_declared_defaults(
    declared: list[str],
) -> None:
    declared.append("u-enqueue")
    welcome = durabl.job("u-enqueue", max_attempts=5, priority=3)(handle)
    with global_queue(MemoryBackend()) as queue:
        job = queue.get_job(welcome.enqueue({"user": "u1"}, priority=-1) or "")
    assert job is not None
    assert (job.type, job.data, job.max_attempts, job.priority) == (
        "u-enqueue",
        {"user": "u1"},
        5,
        -1,
    )


def test_process_declared_starts_the_declared_types(declared: list[str]) -> None:
    declared += ["u-a", "u-b"]
    durabl.job("u-a", concurrency=2)(handle)
    durabl.job("u-b")(handle)
    queue = durabl.JobQueue(MemoryBackend(), immediate=True)  # immediate: no threads
    with pytest.raises(ValueError, match="'u-missing'"):
        queue.process_declared(["u-a", "u-missing"])
    assert queue.processors == {}
    assert queue.process_declared(["u-b", "u-a"]) == ["u-a", "u-b"]
    assert set(queue.processors) == {"u-a", "u-b"}
    assert queue.processors["u-a"].concurrency == 2


def test_durabl_job_is_the_decorator_and_no_module_can_replace_it(declared: list[str]) -> None:
    from durabl.runtime.decorator import job

    assert durabl.job is job
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("durabl.job")
    declared.append("u-module")
    assert isinstance(durabl.job("u-module")(handle), DeclaredJob)


def run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    return done.stdout.strip()


def test_import_durabl_and_declaring_without_a_schema_load_no_pydantic() -> None:
    code = (
        "import sys, durabl\n"
        "durabl.job('t')(lambda job, ctx: None)\n"
        "print('pydantic' in sys.modules)\n"
    )
    assert run(code) == "False"
