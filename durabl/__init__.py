"""durabl: a small, durable job queue on your application's own database."""

from __future__ import annotations

from durabl.model.abort import AbortSignal, JobAborted, JobContext
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
    SchemaError,
    SchemaTooNewError,
)
from durabl.model.job import (
    FAILURE_KINDS,
    STATUSES,
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
from durabl.model.options import validate_enqueue
from durabl.orchestrator import OrchestrationContext, Orchestrator, StepKeys
from durabl.runtime.globals import (
    create_job_queue,
    get_default_queue,
    global_queue,
    set_global_backend,
)
from durabl.runtime.queue import JobQueue
from durabl.runtime.run import Handler
from durabl.stores.base import Backend
from durabl.stores.memory.backend import DummyBackend, ImmediateBackend, MemoryBackend
from durabl.stores.mongo import MongoJobQueue
from durabl.stores.sqlite import SqliteJobQueue
from durabl.stores.urls import backend_from_url

__version__ = "0.1.0.dev0"

__all__ = [
    "AbortSignal",
    "Backend",
    "backend_from_url",
    "BackendUnavailableError",
    "create_job_queue",
    "DedupeScopeConflictError",
    "DocumentTooLargeError",
    "DummyBackend",
    "DurablError",
    "FAILURE_KINDS",
    "FailureKind",
    "FatalJobError",
    "get_default_queue",
    "global_queue",
    "Handler",
    "ImmediateBackend",
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
    "NondeterminismError",
    "NonRetryable",
    "OrchestrationContext",
    "Orchestrator",
    "QueueHealth",
    "QueueShutdownError",
    "QueueStats",
    "ReapReport",
    "SchemaError",
    "SchemaTooNewError",
    "Seconds",
    "set_global_backend",
    "SqliteJobQueue",
    "StartReaperResult",
    "STATUSES",
    "StepKeys",
    "validate_enqueue",
]
