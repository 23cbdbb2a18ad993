"""durabl: a small, durable job queue on your application's own database."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from durabl.cli.args import positive_int_arg, positive_seconds_arg
    from durabl.cli.exits import ExitDeadline
    from durabl.model.abort import AbortSignal, Handler, JobAborted, JobContext
    from durabl.model.activity import TypeActivity, total_stats
    from durabl.model.attempts import Attempt
    from durabl.model.bulk import Child
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
        PreparedStatementsError,
        QueueShutdownError,
        ScheduleError,
        SchemaError,
        SchemaTooNewError,
        StoreNotFoundError,
        WaitTimeout,
    )
    from durabl.model.job import (
        FAILURE_KINDS,
        STATUSES,
        TERMINAL_STATUSES,
        FailureKind,
        Job,
        JobHandle,
        JobResult,
        JobStatus,
        LogEntry,
    )
    from durabl.model.options import NewJob
    from durabl.model.reports import (
        EVENT_KINDS,
        JobEvent,
        QueueHealth,
        QueueStats,
        ReapReport,
        StartReaperResult,
    )
    from durabl.model.rules import INDEXED_ORDERS, JOB_ORDER_FIELDS, served_by_index
    from durabl.model.schedule import Schedule
    from durabl.model.schema import PayloadIssue, PayloadValidationError
    from durabl.model.signals import WAIT_FOREVER, Signal
    from durabl.model.subscriptions import Subscription
    from durabl.model.workers import WorkerInfo
    from durabl.orchestrator import OrchestrationContext, Orchestrator, StepKeys
    from durabl.runtime.declared import (
        Declaration,
        declared_types,
        get_declaration,
        validate_enqueue,
    )
    from durabl.runtime.decorator import DeclaredJob, job
    from durabl.runtime.globals import (
        create_job_queue,
        get_default_queue,
        global_queue,
        set_global_backend,
    )
    from durabl.runtime.handler import Snooze
    from durabl.runtime.hooks import add_enqueue_hook, add_run_hook
    from durabl.runtime.queue import JobQueue
    from durabl.runtime.scheduler import declare as schedule
    from durabl.stores.base import BACKEND_OPERATIONS, Backend
    from durabl.stores.memory.backend import MemoryBackend
    from durabl.stores.memory.doubles import DummyBackend, ImmediateBackend
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
    "Child",
    "create_job_queue",
    "declared_types",
    "DeclaredJob",
    "DedupeScopeConflictError",
    "DocumentTooLargeError",
    "DummyBackend",
    "DurablError",
    "ExitDeadline",
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
    "INDEXED_ORDERS",
    "JOB_ORDER_FIELDS",
    "served_by_index",
    "Schedule",
    "ScheduleError",
    "SchemaError",
    "SchemaTooNewError",
    "PreparedStatementsError",
    "Seconds",
    "set_global_backend",
    "Snooze",
    "SqliteJobQueue",
    "StartReaperResult",
    "StoreNotFoundError",
    "Signal",
    "Subscription",
    "total_stats",
    "TypeActivity",
    "STATUSES",
    "StepKeys",
    "TERMINAL_STATUSES",
    "EVENT_KINDS",
    "validate_enqueue",
    "WaitTimeout",
    "WAIT_FOREVER",
    "WorkerInfo",
]


# Every public name loads on first use (PEP 562): ``import durabl`` imports none of the
# runtime, no store and no driver, so an application pays only for what it touches, a
# SQLite or in-memory application never loads pymongo or bson, and declaring job types
# (``@durabl.job``) loads no queue (see "Import cost" in docs/api.md). The table says
# where each name lives; ``name: "module:attribute"`` where the two names differ.
# (``durabl.job`` is the decorator, a plain function: there is no ``durabl.job`` module.)
_HOMES: dict[str, tuple[str, ...]] = {
    "durabl.cli.args": ("positive_int_arg", "positive_seconds_arg"),
    "durabl.cli.exits": ("ExitDeadline",),
    "durabl.model.abort": ("AbortSignal", "Handler", "JobAborted", "JobContext"),
    "durabl.model.activity": ("TypeActivity", "total_stats"),
    "durabl.model.attempts": ("Attempt",),
    "durabl.model.bulk": ("Child",),
    "durabl.model.clock": ("Seconds",),
    "durabl.model.exceptions": (
        "BackendUnavailableError",
        "DedupeScopeConflictError",
        "DocumentTooLargeError",
        "DurablError",
        "FatalJobError",
        "JournalTooLarge",
        "NondeterminismError",
        "NonRetryable",
        "QueueShutdownError",
        "ScheduleError",
        "SchemaError",
        "PreparedStatementsError",
        "SchemaTooNewError",
        "StoreNotFoundError",
        "WaitTimeout",
    ),
    "durabl.model.job": (
        "FAILURE_KINDS",
        "STATUSES",
        "TERMINAL_STATUSES",
        "FailureKind",
        "Job",
        "JobHandle",
        "JobResult",
        "JobStatus",
        "LogEntry",
    ),
    "durabl.model.options": ("NewJob",),
    "durabl.model.reports": (
        "EVENT_KINDS",
        "JobEvent",
        "QueueHealth",
        "QueueStats",
        "ReapReport",
        "StartReaperResult",
    ),
    "durabl.model.rules": ("INDEXED_ORDERS", "JOB_ORDER_FIELDS", "served_by_index"),
    "durabl.model.schedule": ("Schedule",),
    "durabl.model.schema": ("PayloadIssue", "PayloadValidationError"),
    "durabl.model.signals": ("Signal", "WAIT_FOREVER"),
    "durabl.model.subscriptions": ("Subscription",),
    "durabl.model.workers": ("WorkerInfo",),
    "durabl.orchestrator": ("OrchestrationContext", "Orchestrator", "StepKeys"),
    "durabl.runtime.declared": (
        "Declaration",
        "declared_types",
        "get_declaration",
        "validate_enqueue",
    ),
    "durabl.runtime.decorator": ("DeclaredJob", "job"),
    "durabl.runtime.globals": (
        "create_job_queue",
        "get_default_queue",
        "global_queue",
        "set_global_backend",
    ),
    "durabl.runtime.handler": ("Snooze",),
    "durabl.runtime.hooks": ("add_enqueue_hook", "add_run_hook"),
    "durabl.runtime.queue": ("JobQueue",),
    "durabl.runtime.scheduler": ("schedule:declare",),
    "durabl.stores.base": ("BACKEND_OPERATIONS", "Backend"),
    "durabl.stores.memory.backend": ("MemoryBackend",),
    "durabl.stores.memory.doubles": ("DummyBackend", "ImmediateBackend"),
    "durabl.stores.mongo": ("MongoJobQueue",),
    "durabl.stores.postgres": ("PostgresJobQueue",),
    "durabl.stores.sqlite": ("SqliteJobQueue",),
    "durabl.stores.urls": ("backend_from_url",),
}
_LAZY: dict[str, tuple[str, str]] = {
    public: (module, attribute or public)
    for module, names in _HOMES.items()
    for public, _, attribute in (entry.partition(":") for entry in names)
}


def __getattr__(name: str) -> Any:
    home = _LAZY.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module, attribute = home
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
