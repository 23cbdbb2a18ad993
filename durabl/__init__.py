"""durabl: a small, durable job queue on your application's own database."""

from __future__ import annotations

from durabl.abort import AbortSignal, JobAborted, JobContext
from durabl.backend import Backend
from durabl.exceptions import (
    BackendUnavailableError,
    DedupeScopeConflictError,
    DocumentTooLargeError,
    DurablError,
    FatalJobError,
    JournalTooLarge,
    NondeterminismError,
    NonRetryable,
    QueueShutdownError,
)
from durabl.globals import create_job_queue, get_default_queue, global_queue, set_global_backend
from durabl.job import Job, JobEvent, JobHandle, JobResult, LogEntry, QueueStats, StartReaperResult
from durabl.memory import DummyBackend, ImmediateBackend, MemoryBackend
from durabl.mongo import MongoJobQueue
from durabl.orchestrator import OrchestrationContext, Orchestrator, StepKeys
from durabl.queue import JobQueue
from durabl.sqlite import SqliteJobQueue
from durabl.urls import backend_from_url

__version__ = "0.1.0.dev0"

__all__ = [
    "AbortSignal",
    "Backend",
    "BackendUnavailableError",
    "DedupeScopeConflictError",
    "DocumentTooLargeError",
    "DummyBackend",
    "DurablError",
    "FatalJobError",
    "ImmediateBackend",
    "Job",
    "JobAborted",
    "JobContext",
    "JobEvent",
    "JobHandle",
    "JobQueue",
    "JobResult",
    "JournalTooLarge",
    "LogEntry",
    "MemoryBackend",
    "MongoJobQueue",
    "NonRetryable",
    "NondeterminismError",
    "OrchestrationContext",
    "Orchestrator",
    "QueueShutdownError",
    "QueueStats",
    "SqliteJobQueue",
    "StartReaperResult",
    "StepKeys",
    "backend_from_url",
    "create_job_queue",
    "get_default_queue",
    "global_queue",
    "set_global_backend",
]
