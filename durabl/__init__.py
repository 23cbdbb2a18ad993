"""durabl: a small, durable job queue on your application's own database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durabl.model.abort import AbortSignal, JobAborted, JobContext
from durabl.model.activity import TypeActivity, total_stats
from durabl.model.clock import Seconds
from durabl.model.exceptions import (
    BackendUnavailableError,
    DedupeScopeConflictError,
    DocumentTooLargeError,
    DurablError,
    FatalJobError,
    JournalTooLarge,
    NondeterminismError,
    NonRetryable,
    QueueShutdownError,
    ScheduleError,
    SchemaError,
    SchemaTooNewError,
)
from durabl.model.job import (
    FAILURE_KINDS,
    STATUSES,
    Attempt,
    FailureKind,
    Job,
    JobEvent,
    JobHandle,
    JobResult,
    JobStatus,
    LogEntry,
    QueueHealth,
    QueueStats,
    ReapReport,
    StartReaperResult,
)
from durabl.model.options import NewJob
from durabl.model.schedule import Schedule
from durabl.model.schema import PayloadIssue, PayloadValidationError
from durabl.model.workers import WorkerInfo
from durabl.runtime.declared import (
    Declaration,
    declared_types,
    get_declaration,
    validate_enqueue,
)
from durabl.runtime.decorator import DeclaredJob
from durabl.runtime.globals import (
    create_job_queue,
    get_default_queue,
    global_queue,
    set_global_backend,
)
from durabl.runtime.hooks import add_enqueue_hook, add_run_hook
from durabl.runtime.queue import JobQueue
from durabl.runtime.run import Handler
from durabl.runtime.scheduler import declare as schedule
from durabl.stores.base import BACKEND_OPERATIONS, Backend

if TYPE_CHECKING:
    from durabl.runtime.decorator import job
else:
    # ``durabl.job`` is the decorator; the name is also the old module ``durabl/job.py``
    # (``from durabl.job import QueueHealth`` still works), so the attribute is that
    # module, made callable as the decorator: importing it can never rebind the name.
    from durabl import job

if TYPE_CHECKING:
    from durabl.cli.args import positive_int_arg, positive_seconds_arg
    from durabl.orchestrator import OrchestrationContext, Orchestrator, StepKeys
    from durabl.stores.memory.backend import DummyBackend, ImmediateBackend, MemoryBackend
    from durabl.stores.mongo import MongoJobQueue
    from durabl.stores.postgres import PostgresJobQueue
    from durabl.stores.sqlite import SqliteJobQueue
    from durabl.stores.urls import backend_from_url

__version__ = "0.1.0.dev0"

__all__ = [
    "AbortSignal",
    "BACKEND_OPERATIONS",
    "Backend",
    "backend_from_url",
    "BackendUnavailableError",
    "create_job_queue",
    "declared_types",
    "DeclaredJob",
    "DedupeScopeConflictError",
    "DocumentTooLargeError",
    "DummyBackend",
    "DurablError",
    "FAILURE_KINDS",
    "FailureKind",
    "FatalJobError",
    "get_declaration",
    "Declaration",
    "get_default_queue",
    "global_queue",
    "Handler",
    "ImmediateBackend",
    "job",
    "Attempt",
    "Job",
    "JobAborted",
    "JobContext",
    "JobEvent",
    "JobHandle",
    "JobQueue",
    "JobResult",
    "JobStatus",
    "JournalTooLarge",
    "LogEntry",
    "MemoryBackend",
    "MongoJobQueue",
    "PostgresJobQueue",
    "NondeterminismError",
    "NonRetryable",
    "OrchestrationContext",
    "PayloadIssue",
    "PayloadValidationError",
    "Orchestrator",
    "positive_int_arg",
    "positive_seconds_arg",
    "QueueHealth",
    "QueueShutdownError",
    "QueueStats",
    "ReapReport",
    "schedule",
    "add_enqueue_hook",
    "add_run_hook",
    "NewJob",
    "Schedule",
    "ScheduleError",
    "SchemaError",
    "SchemaTooNewError",
    "Seconds",
    "set_global_backend",
    "SqliteJobQueue",
    "StartReaperResult",
    "total_stats",
    "TypeActivity",
    "STATUSES",
    "StepKeys",
    "validate_enqueue",
    "WorkerInfo",
]


# The stores (and the orchestrator) load on first use: ``import durabl`` never imports
# pymongo or bson, so an application on SQLite or in memory does not pay for the driver,
# and nothing but what an application touches is imported (see docs/api.md).
_LAZY = {
    "MongoJobQueue": "durabl.stores.mongo",
    "SqliteJobQueue": "durabl.stores.sqlite",
    "PostgresJobQueue": "durabl.stores.postgres",
    "MemoryBackend": "durabl.stores.memory.backend",
    "DummyBackend": "durabl.stores.memory.backend",
    "ImmediateBackend": "durabl.stores.memory.backend",
    "backend_from_url": "durabl.stores.urls",
    "positive_int_arg": "durabl.cli.args",
    "positive_seconds_arg": "durabl.cli.args",
    "OrchestrationContext": "durabl.orchestrator",
    "Orchestrator": "durabl.orchestrator",
    "StepKeys": "durabl.orchestrator",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
